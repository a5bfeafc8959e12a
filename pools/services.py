"""Writes to pools, nodes, reservations and quotas. Every caller (views, API, admin, tasks, commands) uses these.

The contract invariant — a pool's reservations never add up to more than its contracted GPUs at any moment — is
checked here under `SELECT ... FOR UPDATE` on the pool row: two requests for the last GPUs of a pool queue on the
lock, and the second sees the first's reservation.
"""

import copy
from datetime import datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _

from billing import usage as billing_usage
from cluster.facts import NodeFacts
from cluster.kueue import MAX_FLAVORS_PER_GROUP
from portal import audit
from portal.models import Team
from portal.retry import retry_on_conflict

from . import fixed, history, projection, quota_floor, selectors
from .choices import Lending, QuotaRequestState
from .isolation import pool_for
from .models import LendingChange, NamespaceLimits, Node, Pool, Quota, QuotaRequest, Reservation
from .peaks import Period, peak_from_now, peak_gpus


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
    exceeded at any moment of the period. The team's quota there is raised to cover its reservations (`_cover`).
    """
    Team.objects.select_for_update(no_key=True).filter(pk=team.pk).first()  # the team before the pool, as set_quota
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
    billing_usage.mark_reservation_days_stale(after=(reservation.starts_at, reservation.ends_at))
    audit.record(
        actor=user, action="reservation.create", instance=reservation, before=None, after=audit.snapshot(reservation)
    )
    if not _cover(team=team, pool=pool, user=user):  # (a quota raised was reprojected with it)
        projection.kueue_changed()
    return reservation


def _cover(*, team: Team, pool: Pool, user) -> bool:
    """A quota is the reservation plus any extra: one below the team's reservations from now on is raised (audited);
    else Kueue would give the reservation while submission and the ResourceQuota held the team to the quota."""
    reserved = peak_from_now(Reservation.objects.filter(team=team, pool=pool), now=timezone.now())
    if reserved <= (Quota.objects.filter(team=team, pool=pool).values_list("max_gpus", flat=True).first() or 0):
        return False
    set_quota(team=team, pool=pool, max_gpus=reserved, user=user)
    return True


@transaction.atomic
def end_reservation(*, reservation: Reservation, ends_at: datetime, user=None) -> Reservation:
    """Move a reservation's end earlier or later (later is checked against the contract, and the quota covers it)."""
    Team.objects.select_for_update(no_key=True).filter(pk=reservation.team_id).first()
    pool = Pool.objects.select_for_update().get(pk=reservation.pool_id)
    reservation = Reservation.objects.select_for_update().get(pk=reservation.pk)
    before = audit.snapshot(reservation)
    period_before = (reservation.starts_at, reservation.ends_at)
    reservation.ends_at = ends_at
    reservation.full_clean()
    _check_contract(pool=pool, reservation=reservation)
    reservation.save(update_fields=["ends_at"])
    billing_usage.mark_reservation_days_stale(before=period_before, after=(reservation.starts_at, ends_at))
    audit.record(
        actor=user,
        action="reservation.change_end",
        instance=reservation,
        before=before,
        after=audit.snapshot(reservation),
    )
    if not _cover(team=reservation.team, pool=pool, user=user):
        projection.kueue_changed()
    return reservation


@transaction.atomic
def delete_reservation(*, reservation: Reservation, user=None) -> None:
    """Delete a reservation (a platform admin's correction: it should never have been made) and its lending changes.
    The days they covered are metered again, so a closed month gets an adjustment on the next invoice."""
    reservation = Reservation.objects.select_for_update().get(pk=reservation.pk)
    before = audit.snapshot(reservation)
    changes = list(reservation.lending_changes.values_list("effective_from", flat=True))
    for effective_from in changes:
        billing_usage.mark_lending_days_stale(effective_from=effective_from, reservation_ends_at=reservation.ends_at)
    billing_usage.mark_reservation_days_stale(before=(reservation.starts_at, reservation.ends_at))
    pk = reservation.pk
    reservation.delete()
    reservation.pk = pk
    audit.record(actor=user, action="reservation.delete", instance=reservation, before=before, after=None)
    projection.kueue_changed()


def can_set_lending(user, reservation: Reservation) -> bool:
    """A lead of the reservation's team, or a platform admin."""
    return Team.objects.led_by(user).filter(pk=reservation.team_id).exists()


@transaction.atomic
def set_lending(*, reservation: Reservation, lending: str, protected_gpus: int = 0, user=None, at=None) -> Reservation:
    """Choose what `reservation` lends: none, its idle GPUs, or its idle GPUs but `protected_gpus` (lending
    `protect`). Takes effect at once (`at`, default now): a `LendingChange` row from that moment (metering reads
    them), the ClusterQueue's lendingLimit reprojected, the change audited. Only a lead of the team or an admin may
    (`user` None: the system itself)."""
    if user is not None and not can_set_lending(user, reservation):
        raise ValidationError(_("Only a lead of the team or a platform admin may change what its reservation lends."))
    if lending not in Lending.values:
        raise ValidationError({"lending": _("Choose one of: %(choices)s.") % {"choices": ", ".join(Lending.values)}})
    reservation = Reservation.objects.select_for_update().get(pk=reservation.pk)
    if not isinstance(protected_gpus, int) or isinstance(protected_gpus, bool) or protected_gpus < 0:
        raise ValidationError({"protected_gpus": _("Protected GPUs must be a whole number, zero or more.")})
    if lending != Lending.PROTECT:
        protected_gpus = 0
    elif not 0 < protected_gpus <= reservation.gpus:
        raise ValidationError(
            {"protected_gpus": _("Protect between 1 and the reservation's %(gpus)d GPUs.") % {"gpus": reservation.gpus}}
        )
    if (reservation.lending, reservation.protected_gpus) == (lending, protected_gpus):
        return reservation
    before = audit.snapshot(reservation)
    reservation.lending, reservation.protected_gpus = lending, protected_gpus
    reservation.save(update_fields=["lending", "protected_gpus"])
    change = LendingChange.objects.create(
        reservation=reservation,
        lending=lending,
        protected_gpus=protected_gpus,
        effective_from=at or timezone.now(),
        changed_by=user,
    )
    # Marked as for any write of a reservation, whatever field it changes (metering reads the lending changes, not
    # these fields), and the change's days from its moment on.
    period = (reservation.starts_at, reservation.ends_at)
    billing_usage.mark_reservation_days_stale(before=period, after=period)
    billing_usage.mark_lending_days_stale(effective_from=change.effective_from, reservation_ends_at=reservation.ends_at)
    audit.record(
        actor=user,
        action="reservation.set_lending",
        instance=reservation,
        before=before,
        after=audit.snapshot(reservation),
    )
    projection.kueue_changed()
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
def delete_quota(*, quota: Quota, user=None) -> None:
    """Remove a team's quota in a pool (Django admin): audited, and the namespace and Kueue reconciled at once, as
    any quota change. Refused where a quota of 0 would be (`quota_floor.deletion_refusal`): while the team reserves
    GPUs there from now on, or its jobs hold GPUs there."""
    Team.objects.select_for_update(no_key=True).filter(pk=quota.team_id).first()
    quota = Quota.objects.select_for_update(of=("self",)).select_related("team", "pool").get(pk=quota.pk)
    if (refused := quota_floor.deletion_refusal(quota)) is not None:
        raise ValidationError(refused)
    before, pk = audit.snapshot(quota), quota.pk
    quota.delete()
    quota.pk = pk
    audit.record(actor=user, action="quota.delete", instance=quota, before=before, after=None)
    projection.namespace_changed(quota.team)
    projection.kueue_changed()


@retry_on_conflict
@transaction.atomic
def set_quota(*, team: Team, pool: Pool, max_gpus: int, user=None) -> Quota:
    """Set how many GPUs of `pool` `team` may use at once. It may not be below the team's reservation there now."""
    if not isinstance(max_gpus, int) or isinstance(max_gpus, bool) or max_gpus < 0:
        raise ValidationError({"max_gpus": _("GPUs must be a whole number, zero or more.")})
    # One quota change of a team at a time: two admins setting a quota that does not exist yet would otherwise
    # both insert it. (NO KEY UPDATE leaves inserts of rows that reference the team, such as jobs, unblocked.)
    Team.objects.select_for_update(no_key=True).filter(pk=team.pk).first()
    # OF self: Quota's default ordering joins the team and the pool, whose rows FOR UPDATE would lock as well (and
    # with them every job insert of the team or into the pool, their foreign keys' checks).
    quota = Quota.objects.select_for_update(of=("self",)).filter(team=team, pool=pool).first()
    if quota is not None:
        quota.team, quota.pool = team, pool  # what the audit entry's text names, without reading them again
    before = audit.snapshot(quota)
    in_use = quota_floor.check(team=team, pool=pool, max_gpus=max_gpus)  # its reservations and its jobs' GPUs
    if quota is None:
        quota = Quota(team=team, pool=pool, max_gpus=max_gpus)
        quota.full_clean()
    else:
        quota.max_gpus = max_gpus
        # The row's team and pool are the locked row's own: only what changes is validated again. Its one check
        # constraint (GPUs not negative) was checked above; validating it again would cost a query in a savepoint.
        quota.full_clean(exclude=["team", "pool"], validate_constraints=False)
    quota.save()
    audit.record(actor=user, action="quota.set", instance=quota, before=before, after=audit.snapshot(quota))
    # What the quota API answers with, known here and not read again: the namespace's state as this change left it,
    # and the GPUs in use (`gpus_in_use_of`) as read under the lock.
    quota.changed_namespace_state = projection.namespace_changed(team)
    projection.kueue_changed()
    quota.gpus_in_use = in_use
    return quota


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
    projection.namespace_changed(team)
    projection.kueue_changed()
    audit.record(
        actor=user, action="namespace_limits.set", instance=limits, before=before, after=audit.snapshot(limits)
    )
    return limits


def _pool_snapshot(pool: Pool) -> dict:
    data = audit.snapshot(pool)
    data["spill_pools"] = sorted(pool.spill_pools.values_list("slug", flat=True)) if pool.pk else []
    return data


@transaction.atomic
def save_pool(*, pool: Pool, changes: dict | None = None, spill_pools: list[Pool] | None = None, user=None) -> Pool:
    """Create `pool` (no pk) or change it; `spill_pools`, when given, replaces the pools it may spill into.

    A change is applied to the pool's row as locked and read here: `changes` (field name -> value) when given (the API's
    PATCH, Django admin's changed fields), so a field it does not name keeps what another change committed meanwhile;
    without it every field of `pool`. A reserved pool's contract may not drop below what its reservations hold at
    their peak from now on; a new pool beyond the 64 Kueue takes is refused (`_check_pool_count`)."""
    previous = Pool.objects.select_for_update().filter(pk=pool.pk).first() if pool.pk else None
    before = _pool_snapshot(previous) if previous else None
    if previous is not None:
        if changes is None:
            changes = {f.attname: getattr(pool, f.attname) for f in Pool._meta.concrete_fields if not f.primary_key}
        pool = copy.copy(previous)
        for name, value in changes.items():
            setattr(pool, name, value)
        fixed.check_pool(stored=previous, pool=pool)
    else:
        _check_pool_count()
    pool.full_clean()
    if spill_pools is not None and any(other.pk == pool.pk for other in spill_pools if pool.pk):
        raise ValidationError({"spill_pools": _("A pool cannot spill into itself.")})
    if previous is not None and pool.is_reserved and pool.contracted_gpus is not None:
        peak = peak_from_now(Reservation.objects.filter(pool=pool), now=timezone.now())
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
    if pool.is_reserved and pool.contracted_gpus is not None:
        history.record_contract(pool=pool, previous=previous, user=user)
    history.record_prices(pool=pool, previous=previous, user=user)
    if spill_pools is not None:
        pool.spill_pools.set(spill_pools)
    reassign_nodes()
    audit.record(
        actor=user,
        action="pool.update" if previous else "pool.create",
        instance=pool,
        before=before,
        after=_pool_snapshot(pool),
    )
    projection.kueue_changed()
    return pool


def _check_pool_count() -> None:
    """Every pool is a flavor of every team's ClusterQueue, and Kueue refuses a queue of more than 64 flavors: a pool
    beyond them is refused (else no team's queue would reach Kueue any more). The pools' rows are locked first, so
    two pools made at once are counted one after the other."""
    list(Pool.objects.select_for_update().values_list("pk", flat=True))
    if Pool.objects.count() >= MAX_FLAVORS_PER_GROUP:
        raise ValidationError(
            _(
                "There are already %(max)d pools, the most Kueue takes: each pool is a flavor of every team's queue, "
                "and Kueue refuses a queue of more flavors. Delete a pool first."
            )
            % {"max": MAX_FLAVORS_PER_GROUP}
        )


@transaction.atomic
def delete_pool(*, pool: Pool, user=None) -> None:
    """Delete a pool nothing refers to (jobs and reservations are history and contracts: never lost silently)."""
    from django.db.models import ProtectedError

    before = _pool_snapshot(pool)
    pk = pool.pk
    if (refused := selectors.delete_refusal(pool)) is not None:
        raise ValidationError(refused)
    try:
        with transaction.atomic():
            pool.delete()
    except ProtectedError:
        raise ValidationError(
            _("%(pool)s has jobs or reservations and cannot be deleted.") % {"pool": pool.name}
        ) from None
    pool.pk = pk
    reassign_nodes()
    audit.record(actor=user, action="pool.delete", instance=pool, before=before, after=None)
    projection.kueue_changed()


# --- quota requests: a lead asks, an admin decides ------------------------------------------------------------


def can_request_quota_change(user, team: Team) -> bool:
    """A lead of `team`, or a platform admin."""
    return Team.objects.led_by(user).filter(pk=team.pk).exists()


def _lock_quota_request(quota_request: QuotaRequest) -> QuotaRequest:
    """Lock the team (as set_quota does, so the order is always team, then request, then quota) and the request."""
    Team.objects.select_for_update(no_key=True).filter(pk=quota_request.team_id).first()
    return QuotaRequest.objects.select_for_update(of=("self",)).select_related("team", "pool").get(pk=quota_request.pk)


@transaction.atomic
def request_quota_change(*, team: Team, pool: Pool, max_gpus: int, reason: str, user) -> QuotaRequest:
    """Ask for `team`'s quota in `pool` to become `max_gpus`, saying why. Only a lead of the team or an admin may.

    Refused with a ValidationError when the caller does not lead the team, the quota is already `max_gpus`, or a
    request for the same team and pool is still pending (withdraw it or wait for the decision)."""
    from django.db import IntegrityError

    if not can_request_quota_change(user, team):
        raise ValidationError(
            {"team": _("Only a lead of %(team)s can request a change of its quota.") % {"team": team.name}}
        )
    if not isinstance(max_gpus, int) or isinstance(max_gpus, bool) or max_gpus < 0:
        raise ValidationError({"max_gpus": _("GPUs must be a whole number, zero or more.")})
    Team.objects.select_for_update(no_key=True).filter(pk=team.pk).first()
    current = Quota.objects.filter(team=team, pool=pool).values_list("max_gpus", flat=True).first() or 0
    if max_gpus == current:
        raise ValidationError(
            {
                "max_gpus": _("%(team)s's quota in %(pool)s is already %(gpus)d GPUs.")
                % {"team": team.name, "pool": pool.name, "gpus": current}
            }
        )
    pending = QuotaRequest.objects.pending().filter(team=team, pool=pool).first()
    if pending is not None:
        raise ValidationError({"pool": _pending_message(pending)})
    quota_request = QuotaRequest(
        team=team,
        pool=pool,
        max_gpus=max_gpus,
        previous_max_gpus=current,
        reason=(reason or "").strip(),
        requested_by=user if user is not None and user.is_authenticated else None,
    )
    quota_request.full_clean(validate_constraints=False)
    try:
        with transaction.atomic():
            quota_request.save()
    except IntegrityError:  # the partial unique constraint, should a path ever skip the team lock
        raise ValidationError({"pool": _("A request for this team and pool is already pending.")}) from None
    audit.record(
        actor=user,
        action="quota_request.create",
        instance=quota_request,
        before=None,
        after=audit.snapshot(quota_request),
    )
    return quota_request


def _pending_message(pending: QuotaRequest) -> str:
    return _(
        "A request to change %(team)s's quota in %(pool)s to %(gpus)d GPUs is already pending (asked on %(day)s). "
        "Withdraw it first, or wait for an admin's decision."
    ) % {
        "team": pending.team.name,
        "pool": pending.pool.name,
        "gpus": pending.max_gpus,
        "day": date_format(pending.created_at, "SHORT_DATE_FORMAT"),
    }


def _decide(*, quota_request: QuotaRequest, state: str, user, note: str, action: str) -> QuotaRequest:
    before = audit.snapshot(quota_request)
    quota_request.transition_to(state, user=user, note=(note or "").strip())
    quota_request.save(update_fields=["state", "decided_by", "decided_at", "decision_note"])
    audit.record(actor=user, action=action, instance=quota_request, before=before, after=audit.snapshot(quota_request))
    return quota_request


def _require_admin(user, message: str) -> None:
    if not (user is not None and user.is_authenticated and user.is_admin):
        raise ValidationError(message)


@transaction.atomic
def approve_quota_request(*, request: QuotaRequest, user, note: str = "") -> QuotaRequest:
    """Approve a pending request: the team's quota becomes the requested GPUs (through `set_quota`, audited) in the
    same transaction. When set_quota refuses (e.g. below the team's reservation or its running jobs), nothing
    changes: the approval fails with set_quota's message and the request stays pending."""
    _require_admin(user, _("Only a platform admin can approve a quota request."))
    quota_request = _lock_quota_request(request)
    quota_request.check_transition(QuotaRequestState.APPROVED)  # before set_quota: a decided request stays so
    current = Quota.objects.filter(team=quota_request.team, pool=quota_request.pool).values_list("max_gpus", flat=True)
    if (current.first() or 0) != quota_request.previous_max_gpus:
        # approving would silently undo the change made since the lead asked
        raise ValidationError(
            _(
                "The quota changed since this request was made (%(then)d GPUs then, %(now)d now): reject it, and the "
                "lead may ask again."
            )
            % {"then": quota_request.previous_max_gpus, "now": current.first() or 0}
        )
    try:
        set_quota(team=quota_request.team, pool=quota_request.pool, max_gpus=quota_request.max_gpus, user=user)
    except ValidationError as error:
        raise ValidationError(error.messages) from None
    return _decide(
        quota_request=quota_request,
        state=QuotaRequestState.APPROVED,
        user=user,
        note=note,
        action="quota_request.approve",
    )


@transaction.atomic
def reject_quota_request(*, request: QuotaRequest, user, note: str = "") -> QuotaRequest:
    """Reject a pending request; the quota stays as it is. The note tells the lead why."""
    _require_admin(user, _("Only a platform admin can reject a quota request."))
    quota_request = _lock_quota_request(request)
    return _decide(
        quota_request=quota_request,
        state=QuotaRequestState.REJECTED,
        user=user,
        note=note,
        action="quota_request.reject",
    )


@transaction.atomic
def withdraw_quota_request(*, request: QuotaRequest, user) -> QuotaRequest:
    """The lead who asked takes a pending request back (so they can ask for something else)."""
    quota_request = _lock_quota_request(request)
    if user is None or not user.is_authenticated or quota_request.requested_by_id != user.pk:
        raise ValidationError(_("Only the lead who made a request can withdraw it."))
    return _decide(
        quota_request=quota_request,
        state=QuotaRequestState.WITHDRAWN,
        user=user,
        note="",
        action="quota_request.withdraw",
    )


# --- nodes, as the cluster sync sees them -------------------------------------------------------------------------

NODE_FIELDS = ("pool", "labels", "taints", "gpu_capacity", "gpu_allocatable", "ready", "unschedulable", "last_seen_at")
NODE_BATCH = 1000


@transaction.atomic(savepoint=False)  # within a caller's transaction: no savepoint per call
def record_nodes(*, nodes: list[NodeFacts], complete: bool = False) -> dict[str, int | None]:
    """Record what the cluster says of `nodes`: one row per node, upserted by name, in the first pool (by slug)
    whose selector matches its labels. With `complete` (`nodes` is a full list) the rows of nodes missing from it
    are deleted. Returns node name -> pool id of the nodes recorded.

    Seeing a node twice writes the same row again; `missing_taints` is left to `reconcile.taints`."""
    pools = list(Pool.objects.order_by("slug"))
    now = timezone.now()
    rows = [
        Node(
            name=facts.name,
            pool=pool_for(facts.labels, pools),
            labels=dict(facts.labels),
            taints=list(facts.taints),
            gpu_capacity=facts.gpu_capacity,
            gpu_allocatable=facts.gpu_allocatable,
            ready=facts.ready,
            unschedulable=facts.unschedulable,
            last_seen_at=now,
        )
        for facts in nodes
    ]
    Node.objects.bulk_create(
        rows, batch_size=NODE_BATCH, update_conflicts=True, unique_fields=["name"], update_fields=NODE_FIELDS
    )
    if complete:
        Node.objects.exclude(name__in=[row.name for row in rows]).delete()
    return {row.name: row.pool_id for row in rows}


def reassign_nodes() -> int:
    """Pools changed: put every node row in the pool its recorded labels now select, at once (the sync records a
    node again only when the node changes). Returns how many rows moved."""
    pools = list(Pool.objects.order_by("slug"))
    moved = []
    for node in Node.objects.only("pk", "labels", "pool_id"):
        pool = pool_for(node.labels, pools)
        pool_id = pool.pk if pool else None
        if node.pool_id != pool_id:
            node.pool_id = pool_id
            moved.append(node)
    Node.objects.bulk_update(moved, ["pool"], batch_size=NODE_BATCH)
    return len(moved)


def remove_node(*, name: str) -> None:
    """The node left the cluster: its row goes (pods and usage keep the node's name)."""
    Node.objects.filter(name=name).delete()
