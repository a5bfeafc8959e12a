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
    if quota is None:
        quota = Quota(team=team, pool=pool, max_gpus=max_gpus)
    else:
        quota.max_gpus = max_gpus
    quota.full_clean()
    quota.save()
    audit.record(actor=user, action="quota.set", instance=quota, before=before, after=audit.snapshot(quota))
    namespaces.mark_changed(team)
    return quota


@transaction.atomic
def set_namespace_limits(*, team: Team, user=None, **values) -> NamespaceLimits:
    """Create or update the team namespace's limits; unknown field names are an error."""
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
