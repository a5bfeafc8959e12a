"""Reads for the pages that gather several apps: the home overview and a lead's team page."""

from django.db.models import Count

from portal.models import Membership, Team


def teams_for_overview(user):
    """The user's teams with their member counts, and the user's role in each (None for admin-only access)."""
    teams = Team.objects.visible_to(user).annotate(member_count=Count("memberships", distinct=True)).order_by("name")
    roles = dict(Membership.objects.filter(user=user).values_list("team_id", "role"))
    return [(team, roles.get(team.id)) for team in teams]


def team_usage(team: Team, *, now) -> dict:
    """A lead's view of one team: per pool its quota, reservation, GPUs in use and queued now, and the month's
    metered reserved and used GPU-hours; then its members. A fixed number of queries."""
    from decimal import Decimal

    from django.db.models import F, Sum

    from billing.models import DailyUsage
    from jobs.choices import JobState
    from jobs.models import Job
    from pools.models import Pool, Quota, Reservation

    quotas = dict(Quota.objects.filter(team=team).values_list("pool_id", "max_gpus"))
    reserved = dict(
        Reservation.objects.filter(team=team)
        .active_at(now)
        .values("pool_id")
        .annotate(total=Sum("gpus"))
        .values_list("pool_id", "total")
    )
    jobs = Job.objects.filter(team=team).values("pool_id").order_by()
    in_use = dict(jobs.holding_quota().annotate(total=Sum("total_gpus")).values_list("pool_id", "total"))
    queued = dict(jobs.filter(state=JobState.QUEUED).annotate(total=Sum("total_gpus")).values_list("pool_id", "total"))
    month = {
        row["pool_id"]: row
        for row in DailyUsage.objects.filter(team=team, day__gte=now.date().replace(day=1), day__lte=now.date())
        .values("pool_id")
        .annotate(
            reserved=Sum("reserved_gpu_seconds"),
            inside=Sum("in_reservation_gpu_seconds"),
            used=Sum(F("in_reservation_gpu_seconds") + F("overage_gpu_seconds") + F("spill_gpu_seconds")),
        )
    }
    pool_ids = set(quotas) | set(reserved) | set(in_use) | set(queued) | set(month)
    hour = Decimal(3600)
    rows = []
    for pool in Pool.objects.filter(pk__in=pool_ids).order_by("name"):
        quota = quotas.get(pool.pk, 0)
        using = in_use.get(pool.pk, 0)
        metered = month.get(pool.pk, {})
        month_reserved = (metered.get("reserved") or Decimal(0)) / hour
        month_inside = (metered.get("inside") or Decimal(0)) / hour
        rows.append(
            {
                "pool": pool,
                "quota": quota,
                "reserved_now": reserved.get(pool.pk, 0),
                "in_use": using,
                "queued": queued.get(pool.pk, 0),
                "quota_percent": min(round(100 * using / quota), 100) if quota else 0,
                "month_reserved_hours": month_reserved.quantize(Decimal("0.1")),
                "month_used_hours": ((metered.get("used") or Decimal(0)) / hour).quantize(Decimal("0.1")),
                "month_reservation_percent": round(100 * month_inside / month_reserved) if month_reserved else None,
            }
        )
    members = list(Membership.objects.filter(team=team).select_related("user").order_by("role", "user__username"))
    return {"pools": rows, "members": members}
