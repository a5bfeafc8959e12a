"""The least a team's quota in a pool may be: the GPUs its reservations there hold from now on, at their peak (a quota
is "its reservation, plus any extra"), and the GPUs its jobs hold there now. `services.set_quota` refuses a quota
below it; `services.delete_quota` refuses to delete a quota above zero's floor, since a deleted quota counts as 0 in
the namespace's ResourceQuota while Kueue would still admit the reservation (or the jobs hold their GPUs)."""

from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.translation import gettext as _

from portal.models import Team

from .models import Pool, Quota, Reservation
from .peaks import peak_from_now


def check(*, team: Team, pool: Pool, max_gpus: int) -> int:
    """Refuse `max_gpus` below the team's reservations in the pool from now on (one that starts in an hour counts
    too) or below the GPUs its jobs hold there (`check_jobs_fit`). Returns the GPUs those jobs hold."""
    reserved = peak_from_now(Reservation.objects.filter(team=team, pool=pool), now=timezone.now())
    if max_gpus < reserved:
        message = _(
            "%(team)s reserves up to %(reserved)d GPUs of %(pool)s from now on; the quota must be at least that."
        )
        raise ValidationError({"max_gpus": message % {"team": team.name, "reserved": reserved, "pool": pool.name}})
    return check_jobs_fit(team=team, pool=pool, max_gpus=max_gpus)


def check_jobs_fit(*, team: Team, pool: Pool, max_gpus: int) -> int:
    """Refuse a quota below the GPUs the team's jobs hold in the pool now (`JobQuerySet.in_use`: the jobs Kueue
    admitted there, whatever their home pool), naming those jobs. Returns the GPUs they hold.

    Kueue admits independently of this lock, so a job admitted meanwhile can still push usage above the new quota
    until it finishes; Kueue then admits nothing more until usage is below it."""
    from jobs.models import Job

    jobs = list(
        Job.objects.filter(team=team)
        .in_use(pools=[pool])
        .order_by("-total_gpus", "id")
        .values_list("id", "name", "total_gpus", "state")
    )
    in_use = sum(gpus for _id, _name, gpus, _state in jobs)
    if max_gpus >= in_use:
        return in_use
    listed = ", ".join(f"#{job_id} {name} ({gpus} GPUs, {state})" for job_id, name, gpus, state in jobs[:20])
    if len(jobs) > 20:
        listed += _(" and %(more)d more") % {"more": len(jobs) - 20}
    raise ValidationError(
        {
            "max_gpus": _(
                "%(team)s's jobs use %(in_use)d GPUs of %(pool)s now, more than %(asked)d: %(jobs)s. "
                "Cancel some of them or wait for them to finish first."
            )
            % {"team": team.name, "in_use": in_use, "pool": pool.name, "asked": max_gpus, "jobs": listed}
        }
    )


def deletion_refusal(quota: Quota) -> str | None:
    """Why `quota` may not be deleted (what a quota of 0 would be refused for), or None. Django admin shows it before
    asking."""
    try:
        check(team=quota.team, pool=quota.pool, max_gpus=0)
    except ValidationError as error:
        return _("%(team)s's quota in %(pool)s cannot be deleted: %(why)s") % {
            "team": quota.team.name,
            "pool": quota.pool.name,
            "why": " ".join(error.messages),
        }
    return None
