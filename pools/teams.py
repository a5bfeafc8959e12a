"""Writes to teams. They live here, above `portal` (which holds the Team model), because a team is a ClusterQueue
and a LocalQueue in Kueue: creating, renaming or deleting one changes the Kueue projection, which `reconcile.kueue`
is told of in the same call. The API, Django admin and commands all call these; each write is audited in its
transaction."""

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import ProtectedError
from django.utils.translation import gettext as _

from portal import audit
from portal.models import Team

from . import fixed, projection


@transaction.atomic
def save_team(*, team: Team, user=None) -> Team:
    """Create `team` (no pk) or save its changed name, description or settings. Its slug is fixed once it exists."""
    stored = Team.objects.filter(pk=team.pk).first() if team.pk else None
    before = audit.snapshot(stored) if stored else None
    if stored is not None:
        fixed.check_team(stored=stored, team=team)
    team.full_clean()
    team.save()
    audit.record(
        actor=user,
        action="team.update" if before else "team.create",
        instance=team,
        before=before,
        after=audit.snapshot(team),
    )
    projection.kueue_changed()
    return team


@transaction.atomic
def delete_team(*, team: Team, user=None) -> None:
    """Delete a team that has no jobs or reservations (they are history and contracts: never lost silently)."""
    before = audit.snapshot(team)
    pk = team.pk
    try:
        with transaction.atomic():
            team.delete()
    except ProtectedError:
        raise ValidationError(
            _("%(team)s has jobs or reservations and cannot be deleted.") % {"team": team.name}
        ) from None
    team.pk = pk
    audit.record(actor=user, action="team.delete", instance=team, before=before, after=None)
    projection.kueue_changed()
