"""Writes to pools, reservations and quotas. Every caller (views, API, admin, tasks, commands) uses these.

The contract invariant — a pool's reservations never add up to more than its contracted GPUs at any moment — is
checked here under `SELECT ... FOR UPDATE` on the pool row: two requests for the last GPUs of a pool queue on the
lock, and the second sees the first's reservation.
"""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from portal import audit
from portal.models import Team

from . import namespaces
from .models import NamespaceLimits, Pool, Quota, Reservation


@dataclass(frozen=True)
class Period:
    starts_at: datetime
    ends_at: datetime
    gpus: int


def peak_gpus(periods: list[Period], *, within_start: datetime, within_end: datetime) -> int:
    """The largest sum of `gpus` held at one moment by `periods`, looking only inside [within_start, within_end).

    Periods are half-open: one that ends at the moment another starts does not overlap it.
    """
    events: list[tuple[datetime, int]] = []
    for period in periods:
        start = max(period.starts_at, within_start)
        end = min(period.ends_at, within_end)
        if start < end:
            events.append((start, period.gpus))
            events.append((end, -period.gpus))
    # At equal times, releases (-) sort before acquisitions (+), which is what half-open intervals mean.
    events.sort(key=lambda event: (event[0], event[1]))
    peak = held = 0
    for _moment, delta in events:
        held += delta
        peak = max(peak, held)
    return peak


@transaction.atomic
def create_reservation(
    *,
    team: Team,
    pool: Pool,
    gpus: int,
    starts_at: datetime,
    ends_at: datetime,
    monthly_price_per_gpu: Decimal | None = None,
    user=None,
) -> Reservation:
    """Reserve `gpus` GPUs of `pool` for `team` over [starts_at, ends_at), at the pool's price unless given.

    Raises ValidationError when the pool is not reserved, the period is empty, or the pool's contract would be
    exceeded at any moment of the period.
    """
    pool = Pool.objects.select_for_update().get(pk=pool.pk)
    reservation = Reservation(
        team=team,
        pool=pool,
        gpus=gpus,
        starts_at=starts_at,
        ends_at=ends_at,
        monthly_price_per_gpu=pool.monthly_price_per_gpu if monthly_price_per_gpu is None else monthly_price_per_gpu,
        created_by=user if user is not None and user.is_authenticated else None,
    )
    reservation.full_clean()
    _check_contract(pool=pool, reservation=reservation)
    reservation.save()
    audit.record(
        actor=user, action="reservation.create", instance=reservation, before=None, after=audit.snapshot(reservation)
    )
    return reservation


@transaction.atomic
def end_reservation(*, reservation: Reservation, ends_at: datetime, user=None) -> Reservation:
    """Move a reservation's end earlier or later (later is checked against the contract)."""
    pool = Pool.objects.select_for_update().get(pk=reservation.pool_id)
    reservation = Reservation.objects.select_for_update().get(pk=reservation.pk)
    before = audit.snapshot(reservation)
    reservation.ends_at = ends_at
    reservation.full_clean()
    _check_contract(pool=pool, reservation=reservation)
    reservation.save(update_fields=["ends_at"])
    audit.record(
        actor=user,
        action="reservation.change_end",
        instance=reservation,
        before=before,
        after=audit.snapshot(reservation),
    )
    return reservation


def _check_contract(*, pool: Pool, reservation: Reservation) -> None:
    others = (
        Reservation.objects.filter(pool=pool)
        .overlapping(reservation.starts_at, reservation.ends_at)
        .exclude(pk=reservation.pk)
        .values_list("starts_at", "ends_at", "gpus")
    )
    periods = [Period(*row) for row in others]
    periods.append(Period(reservation.starts_at, reservation.ends_at, reservation.gpus))
    peak = peak_gpus(periods, within_start=reservation.starts_at, within_end=reservation.ends_at)
    contracted = pool.contracted_gpus or 0
    if peak > contracted:
        already = peak - reservation.gpus
        raise ValidationError(
            {
                "gpus": _(
                    "Pool %(pool)s has %(contracted)d contracted GPUs and up to %(already)d are already reserved in "
                    "this period: at most %(left)d more can be reserved, not %(asked)d."
                )
                % {
                    "pool": pool.name,
                    "contracted": contracted,
                    "already": already,
                    "left": max(contracted - already, 0),
                    "asked": reservation.gpus,
                }
            }
        )


@transaction.atomic
def set_quota(*, team: Team, pool: Pool, max_gpus: int, user=None) -> Quota:
    """Set how many GPUs of `pool` `team` may use at once. It may not be below the team's reservation there now."""
    from django.utils import timezone

    if not isinstance(max_gpus, int) or isinstance(max_gpus, bool) or max_gpus < 0:
        raise ValidationError({"max_gpus": _("GPUs must be a whole number, zero or more.")})
    # One quota change of a team at a time: two admins setting a quota that does not exist yet would otherwise
    # both insert it. (NO KEY UPDATE leaves inserts of rows that reference the team, such as jobs, unblocked.)
    Team.objects.select_for_update(no_key=True).filter(pk=team.pk).first()
    quota = Quota.objects.select_for_update().filter(team=team, pool=pool).first()
    before = audit.snapshot(quota)
    reserved_now = sum(
        Reservation.objects.filter(team=team, pool=pool).active_at(timezone.now()).values_list("gpus", flat=True)
    )
    if max_gpus < reserved_now:
        raise ValidationError(
            {
                "max_gpus": _(
                    "%(team)s reserves %(reserved)d GPUs of %(pool)s right now; the quota must be at least that."
                )
                % {"team": team.name, "reserved": reserved_now, "pool": pool.name}
            }
        )
    _check_jobs_fit(team=team, pool=pool, max_gpus=max_gpus)
    if quota is None:
        quota = Quota(team=team, pool=pool, max_gpus=max_gpus)
    else:
        quota.max_gpus = max_gpus
    quota.full_clean()
    quota.save()
    audit.record(actor=user, action="quota.set", instance=quota, before=before, after=audit.snapshot(quota))
    namespaces.mark_changed(team)
    return quota


def _check_jobs_fit(*, team: Team, pool: Pool, max_gpus: int) -> None:
    """Refuse a quota below the GPUs the team's admitted jobs hold in the pool now, naming those jobs.

    The caller holds the Quota row lock, which admission takes too, so no job is admitted meanwhile."""
    from jobs.choices import ADMITTED_STATES
    from jobs.models import Job

    jobs = list(
        Job.objects.filter(team=team, pool=pool, state__in=ADMITTED_STATES)
        .order_by("-gpus", "id")
        .values_list("id", "name", "gpus", "state")
    )
    in_use = sum(gpus for _id, _name, gpus, _state in jobs)
    if max_gpus >= in_use:
        return
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


@transaction.atomic
def set_namespace_limits(*, team: Team, user=None, **values) -> NamespaceLimits:
    """Create or update the team namespace's limits; unknown field names are an error."""
    Team.objects.select_for_update(no_key=True).filter(pk=team.pk).first()
    limits = NamespaceLimits.objects.select_for_update().filter(team=team).first()
    before = audit.snapshot(limits)
    if limits is None:
        limits = NamespaceLimits(team=team)
    field_names = {f.name for f in NamespaceLimits._meta.concrete_fields} - {"id", "team", "updated_at"}
    unknown = set(values) - field_names
    if unknown:
        raise ValidationError(_("Unknown namespace limits: %(names)s.") % {"names": ", ".join(sorted(unknown))})
    for name, value in values.items():
        setattr(limits, name, value)
    limits.full_clean()
    limits.save()
    namespaces.mark_changed(team)
    audit.record(
        actor=user, action="namespace_limits.set", instance=limits, before=before, after=audit.snapshot(limits)
    )
    return limits


def _pool_snapshot(pool: Pool) -> dict:
    data = audit.snapshot(pool)
    data["spill_pools"] = sorted(pool.spill_pools.values_list("slug", flat=True)) if pool.pk else []
    return data


@transaction.atomic
def save_pool(*, pool: Pool, spill_pools: list[Pool] | None = None, user=None) -> Pool:
    """Create `pool` (no pk) or save its changes; `spill_pools`, when given, replaces the pools it may spill into.

    A reserved pool's contract may not drop below what its reservations hold at their peak from now on."""
    previous = Pool.objects.select_for_update().filter(pk=pool.pk).first() if pool.pk else None
    before = _pool_snapshot(previous) if previous else None
    pool.full_clean()
    if spill_pools is not None and any(other.pk == pool.pk for other in spill_pools if pool.pk):
        raise ValidationError({"spill_pools": _("A pool cannot spill into itself.")})
    if previous is not None and pool.is_reserved and pool.contracted_gpus is not None:
        from django.utils import timezone

        now = timezone.now()
        rows = Reservation.objects.filter(pool=pool, ends_at__gt=now).values_list("starts_at", "ends_at", "gpus")
        peak = peak_gpus(
            [Period(*row) for row in rows], within_start=now, within_end=datetime.max.replace(tzinfo=now.tzinfo)
        )
        if pool.contracted_gpus < peak:
            raise ValidationError(
                {
                    "contracted_gpus": _(
                        "Reservations hold up to %(peak)d GPUs of %(pool)s from now on: the contract cannot be smaller."
                    )
                    % {"peak": peak, "pool": pool.name}
                }
            )
    pool.save()
    if spill_pools is not None:
        pool.spill_pools.set(spill_pools)
    audit.record(
        actor=user,
        action="pool.update" if previous else "pool.create",
        instance=pool,
        before=before,
        after=_pool_snapshot(pool),
    )
    return pool


@transaction.atomic
def delete_pool(*, pool: Pool, user=None) -> None:
    """Delete a pool nothing refers to (jobs and reservations are history and contracts: never lost silently)."""
    from django.db.models import ProtectedError

    before = _pool_snapshot(pool)
    pk = pool.pk
    try:
        with transaction.atomic():
            pool.delete()
    except ProtectedError:
        raise ValidationError(
            _("%(pool)s has jobs or reservations and cannot be deleted.") % {"pool": pool.name}
        ) from None
    pool.pk = pk
    audit.record(actor=user, action="pool.delete", instance=pool, before=before, after=None)
