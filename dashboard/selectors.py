"""Reads for the pages that gather several apps: the home overview and a lead's team page."""

from django.db.models import Count

from portal.models import Membership, Team


def teams_for_overview(user):
    """The user's teams with their member counts, and the user's role in each (None for admin-only access)."""
    teams = Team.objects.visible_to(user).annotate(member_count=Count("memberships", distinct=True)).order_by("name")
    roles = dict(Membership.objects.of(user).values_list("team_id", "role"))
    return [(team, roles.get(team.id)) for team in teams]


def team_usage(team: Team, *, now) -> dict:
    """A lead's view of one team: per pool its quota, reservation, GPUs in use and queued now, and the month's
    metered reserved and used GPU-hours; then its members. A fixed number of queries."""
    from decimal import Decimal

    from django.db.models import Sum

    from billing.models import DailyUsage
    from billing.periods import month_of
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
    jobs = Job.objects.filter(team=team)
    in_use = {pool_id: gpus for (_team, pool_id), gpus in jobs.gpus_in_use().items()}
    queued = dict(
        jobs.filter(state=JobState.QUEUED)
        .values("pool_id")
        .annotate(total=Sum("total_gpus"))
        .values_list("pool_id", "total")
        .order_by()
    )
    month = {
        row["pool_id"]: {**row, "used": row["in_reservation"] + row["overage"] + row["spill"]}
        for row in DailyUsage.objects.filter(team=team).month_sums(month_of(now), by=("pool_id",), through=now.date())
    }
    pool_ids = set(quotas) | set(reserved) | set(in_use) | set(queued) | set(month)
    hour = Decimal(3600)
    rows = []
    for pool in Pool.objects.filter(pk__in=pool_ids).order_by("name"):
        quota = quotas.get(pool.pk, 0)
        using = in_use.get(pool.pk, 0)
        metered = month.get(pool.pk, {})
        month_reserved = (metered.get("reserved") or Decimal(0)) / hour
        month_inside = (metered.get("in_reservation") or Decimal(0)) / hour
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
