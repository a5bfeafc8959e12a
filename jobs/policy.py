"""Who may submit what, beyond the spec itself: high priority, and how much work a team may have waiting.

`check_submission` is called by the submission service inside its transaction, so the form, the API, resubmission
and the demo all meet the same rules:
- high priority can preempt other work, so only team leads, members of teams a platform admin allows
  (`Team.allow_high_priority`) and platform admins may choose it;
- a team may have at most `settings.MAX_WAITING_JOBS_PER_TEAM` jobs that are neither running nor finished. The
  team's row is locked while they are counted, so concurrent submissions cannot both take the last place.
"""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from portal.choices import Role
from portal.models import Team

from .choices import FINAL_STATES, JobState, Priority
from .models import Job
from .specs import JobSpec

# States in which a job neither runs nor is finished: it waits for quota, admission or a node.
NOT_WAITING_STATES = frozenset({JobState.RUNNING, *FINAL_STATES})


def may_use_high_priority(*, user, team: Team) -> bool:
    if user.is_admin or team.allow_high_priority:
        return True
    return team.has_member(user, roles=[Role.LEAD])


def waiting_jobs(team: Team) -> int:
    return Job.objects.filter(team=team).exclude(state__in=NOT_WAITING_STATES).count()


def submission_errors(*, team: Team, user, spec: JobSpec) -> dict[str, str]:
    """What the submitter's role or the team's waiting work does not allow of `spec`, by field; none: {}. Read
    without a lock: the submit preview says it before anything is submitted (`check_submission` decides)."""
    errors = {}
    if spec.priority >= Priority.HIGH and not may_use_high_priority(user=user, team=team):
        errors["priority"] = _(
            "High priority can preempt other work: only team leads, and members of teams a platform admin allows, "
            "may use it in %(team)s."
        ) % {"team": team.name}
    limit = settings.MAX_WAITING_JOBS_PER_TEAM
    waiting = waiting_jobs(team)
    if waiting >= limit:
        errors["team"] = _(
            "%(team)s already has %(n)d jobs waiting to run (at most %(max)d): wait for some to start, or cancel some."
        ) % {"team": team.name, "n": waiting, "max": limit}
    return errors


def check_submission(*, team: Team, user, spec: JobSpec) -> None:
    """Refuse a submission the submitter's role or the team's waiting work does not allow (ValidationError). The
    team's row is locked first, so that concurrent submissions count each other's waiting jobs."""
    Team.objects.select_for_update().filter(pk=team.pk).values_list("pk", flat=True).first()
    errors = submission_errors(team=team, user=user, spec=spec)
    if errors:
        raise ValidationError(errors)
