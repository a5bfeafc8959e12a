"""Writes to saved job templates (services, STYLE.md conventions 1): save under a name, delete; both audited
(environment values redacted, like every audit snapshot)."""

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from pools.models import Pool
from portal import audit
from portal.models import Team

from .models import JobTemplate
from .specs import JobSpec


@transaction.atomic
def save_template(*, team: Team, pool: Pool | None, name: str, spec: JobSpec, user) -> JobTemplate:
    """Save `spec` as the team's template `name`, replacing the one of that name. Only members may save."""
    if not Team.objects.visible_to(user).filter(pk=team.pk).exists():
        raise ValidationError({"team": _("You are not a member of %(team)s.") % {"team": team.name}})
    name = name.strip()
    if not name:
        raise ValidationError({"name": _("Give the template a name.")})
    before = audit.snapshot(JobTemplate.objects.filter(team=team, name=name).first())
    template, created = JobTemplate.objects.update_or_create(
        team=team, name=name, defaults={"pool": pool, "spec": spec.as_model_fields(), "created_by": user}
    )
    action = "jobtemplate.create" if created else "jobtemplate.update"
    audit.record(actor=user, action=action, instance=template, before=before, after=audit.snapshot(template))
    return template


@transaction.atomic
def delete_template(*, template: JobTemplate, user) -> None:
    if not JobTemplate.objects.visible_to(user).filter(pk=template.pk).exists():
        raise ValidationError(_("You may not delete this template."))
    before, pk = audit.snapshot(template), template.pk
    template.delete()
    template.pk = pk
    audit.record(actor=user, action="jobtemplate.delete", instance=template, before=before, after=None)
