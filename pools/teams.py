"""Writes to teams. They live here, above `portal` (which holds the Team model), because a team is a ClusterQueue
and a LocalQueue in Kueue: creating, renaming or deleting one changes the Kueue projection, which `reconcile.kueue`
is told of in the same call. The API, Django admin and commands all call these; each write is audited in its
transaction."""

import copy

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import ProtectedError
from django.utils.translation import gettext as _

from billing.models import Budget
from identity.models import GroupRule
from jobs.models import JobTemplate
from portal import audit
from portal.models import Membership, Team
from teamdata.models import TeamSecret, TeamVolume

from . import fixed, projection
from .choices import QuotaRequestState
from .models import NamespaceLimits, Quota, QuotaRequest


@transaction.atomic
def save_team(*, team: Team, changes: dict | None = None, user=None) -> Team:
    """Create `team` (no pk) or change its name, description or settings; its slug is fixed once it exists. A change
    is applied to the team's row as locked and read here: `changes` (field name -> value) when given (the API's
    PATCH, Django admin's changed fields), so a field it does not name keeps what another change committed meanwhile;
    without it every field of `team`."""
    # NO KEY: a change of its columns, not its key; jobs and quotas of the team go on being added meanwhile.
    stored = Team.objects.select_for_update(no_key=True).filter(pk=team.pk).first() if team.pk else None
    before = audit.snapshot(stored) if stored else None
    if stored is not None:
        if changes is None:
            changes = {f.attname: getattr(team, f.attname) for f in Team._meta.concrete_fields if not f.primary_key}
        team = copy.copy(stored)
        for name, value in changes.items():
            setattr(team, name, value)
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


def _still_held(team: Team) -> list[str]:
    """What `team` still holds that its deletion would take with it, unaudited (the database's CASCADE): each is
    removed through its own audited service first. Its jobs, reservations and invoices protect it anyway."""
    counted = [
        (_("quotas"), Quota.objects.filter(team=team)),
        (_("namespace limits"), NamespaceLimits.objects.filter(team=team)),
        (_("volumes"), TeamVolume.objects.filter(team=team)),
        (_("secrets"), TeamSecret.objects.filter(team=team)),
        (_("group rules"), GroupRule.objects.filter(team=team)),
        (_("a budget"), Budget.objects.filter(team=team)),
        (_("members"), Membership.objects.filter(team=team)),
        (_("pending quota requests"), QuotaRequest.objects.filter(team=team, state=QuotaRequestState.PENDING)),
        (_("job templates"), JobTemplate.objects.filter(team=team)),
    ]
    return [f"{what} ({count})" for what, rows in counted if (count := rows.count())]


def refusal(team: Team) -> str | None:
    """Why `team` may not be deleted yet (what it still holds), or None. Django admin shows it before asking."""
    held = _still_held(team)
    if not held:
        return None
    return _(
        "%(team)s still has %(held)s: remove each first (each is removed and audited on its own; decide or "
        "withdraw pending requests). Deleting a team does not delete its namespace %(namespace)s in the cluster "
        "nor the data in it."
    ) % {"team": team.name, "held": ", ".join(held), "namespace": team.namespace}


@transaction.atomic
def delete_team(*, team: Team, user=None) -> None:
    """Delete a team that holds nothing any more. Jobs, reservations and invoices are history and contracts; quotas,
    limits, volumes, secrets, group rules, a budget, members, pending requests and templates would go with it
    unaudited: each is removed on its own first, or the deletion is refused saying which remain.

    The team's namespace, and the claims and Secrets in it, stay in the cluster: the portal never deletes a team's
    data (a team made later with the same slug would find them there)."""
    # FOR UPDATE: a quota, member or volume being added to it meanwhile (a key-share lock on the row) waits for the
    # decision, and one already added is seen below.
    team = Team.objects.select_for_update().get(pk=team.pk)
    refused = refusal(team)
    if refused is not None:
        raise ValidationError(refused)
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
