"""Writes of recorded usage: the GPU pods' intervals the cluster sync reports, and the days they make stale.

The money path, from the watch to the invoice: `reconcile/sync.py` turns each GPU pod it sees into an interval
(`usage_interval`) and hands it to `record_usage`, which upserts it by pod UID and, in the same transaction, marks
the UTC days the write changes stale (`StaleDay`; which days: `billing.stale_days`). The periodic
`billing.services.refresh_usage` meters those days again (`billing.metering`) into the daily rollups and rebuilds
the draft invoices from them; a day of a closed month metered again becomes an adjustment on the next invoice.

Every write of what metering reads marks its days here: intervals (`record_usage`, `close_usage_of_vanished_pods`,
`delete_usage`), reservations and their lending changes (`pools.services` calls `mark_reservation_days_stale` and
`mark_lending_days_stale`). No other code writes `UsageInterval` rows (tests/billing/test_usage_writers.py checks).
These writes take no billing lock (`billing.services._lock`): what they do to billing is add stale days, which the
next refresh meters. They hold the row locks of the marks they write until they commit, and the refresh and the
month close leave held marks alone, so a day is never taken off the list before what made it stale is visible.
"""

from datetime import datetime

from django.db import connection, transaction

from cluster.facts import PodFacts
from portal import audit

from . import stale_days
from .models import StaleDay, UsageInterval

INTERVAL_FIELDS = ("team_id", "pool_id", "node_name", "job_id", "gpus", "started_at", "ended_at")
INTERVAL_BATCH = 1000


def usage_interval(
    pod: PodFacts, *, team_id: int | None, pool_id: int | None, job_id: int | None, ended_at: datetime | None = None
) -> UsageInterval | None:
    """The interval a pod implies (not saved): [bound to its node, its containers finished) — or `ended_at` when
    the pod is known gone — holding its GPUs in `pool_id`, the pool of its node. None when nothing is metered:
    no GPUs, not bound yet, or a node outside every pool."""
    if pod.gpus <= 0 or not pod.scheduled or pod.bound_at is None or pool_id is None:
        return None
    end = ended_at or pod.finished_at
    if end is not None and end < pod.bound_at:
        end = pod.bound_at
    return UsageInterval(
        pod_uid=pod.uid,
        namespace=pod.namespace,
        pod_name=pod.name,
        team_id=team_id,
        pool_id=pool_id,
        node_name=pod.node_name,
        job_id=job_id,
        gpus=pod.gpus,
        started_at=pod.bound_at,
        ended_at=end,
    )


def _stored_intervals(pod_uids: list[str], *, lock: bool = False) -> dict[str, dict]:
    rows = UsageInterval.objects.filter(pod_uid__in=pod_uids)
    if lock:
        rows = rows.select_for_update().order_by("pod_uid")
    return {
        uid: dict(zip(INTERVAL_FIELDS, values, strict=True))
        for uid, *values in rows.values_list("pod_uid", *INTERVAL_FIELDS)
    }


def _to_write(intervals: list[UsageInterval], stored: dict[str, dict]) -> list[UsageInterval]:
    """The intervals that differ from their stored row, leaving out pods whose stored interval is closed."""
    return [
        row
        for row in intervals
        if (before := stored.get(row.pod_uid)) is None
        or (before["ended_at"] is None and before != {f: getattr(row, f) for f in INTERVAL_FIELDS})
    ]


def _terms(values) -> stale_days.IntervalTerms:
    """The metered terms of an interval, from a stored row's values or a `UsageInterval`."""
    get = values.get if isinstance(values, dict) else lambda name: getattr(values, name)
    return stale_days.IntervalTerms(*(get(name) for name in stale_days.TERMS))


@transaction.atomic(savepoint=False)  # within a caller's transaction: no savepoint per call
def record_usage(*, intervals: list[UsageInterval]) -> int:
    """Upsert `intervals` by pod UID, writing only the new or changed ones; returns how many were written.

    Guarantees: one row per pod, whoever sees it how often (a relist, a replayed watch, a restarted sync): GPU time
    is never counted twice. An interval that was closed stays closed at its first end: a replayed event cannot
    reopen or move it. The days a write changes are marked stale in this same transaction (`billing.stale_days`:
    a closed interval marks only the days from its old to its new end), so the next `refresh_usage` meters them
    again. The rows about to change are read again under a row lock, so what they covered is what they really
    covered, also with another writer at work."""
    if not intervals:
        return 0
    candidates = _to_write(intervals, _stored_intervals([row.pod_uid for row in intervals]))
    if not candidates:
        return 0
    stored = _stored_intervals([row.pod_uid for row in candidates], lock=True)
    changed = _to_write(candidates, stored)
    if changed:
        UsageInterval.objects.bulk_create(
            changed,
            batch_size=INTERVAL_BATCH,
            update_conflicts=True,
            unique_fields=["pod_uid"],
            update_fields=[f.removesuffix("_id") for f in INTERVAL_FIELDS],
        )
        now = transaction_now()
        mark_days_stale(
            ranges=[
                days
                for row in changed
                for days in stale_days.interval_change(
                    _terms(stored[row.pod_uid]) if row.pod_uid in stored else None, _terms(row), now=now
                )
            ]
        )
    return len(changed)


@transaction.atomic(savepoint=False)  # within a caller's transaction: no savepoint per call
def close_usage_of_vanished_pods(*, present_pod_uids: set[str], at: datetime) -> int:
    """After a full list of pods: the open intervals of pods not in it vanished while nobody watched; they end at
    `at`, the earliest moment that can be known. Returns how many were closed; the days between now and `at` are
    marked stale.

    Pods of portal Jobs never get here with an open interval: they carry the usage finalizer until their end is
    recorded (reconcile/sync.py). What remains are pods of other owners (and pods made before the finalizer existed),
    whose end the portal cannot know from any record that outlives them."""
    vanished = (
        UsageInterval.objects.select_for_update()
        .filter(ended_at__isnull=True)
        .exclude(pod_uid__in=present_pod_uids)
        .order_by("pk")
        .values_list("pk", *stale_days.TERMS)
    )
    closing = {pk: stale_days.IntervalTerms(*terms) for pk, *terms in vanished}
    if not closing:
        return 0
    UsageInterval.objects.filter(pk__in=closing).update(ended_at=at)
    now = transaction_now()
    mark_days_stale(
        ranges=[
            days
            for before in closing.values()
            for days in stale_days.interval_change(before, before._replace(ended_at=at), now=now)
        ]
    )
    return len(closing)


@transaction.atomic
def delete_usage(*, intervals, user=None) -> int:
    """Delete the usage intervals of the queryset `intervals` (a platform admin's correction: the pod should not have
    been metered); marks the days they covered stale and audits each. Returns how many were deleted. A day of a
    closed month metered again becomes an adjustment on the next invoice."""
    rows = list(UsageInterval.objects.select_for_update().filter(pk__in=intervals.values("pk")).order_by("pk"))
    if not rows:
        return 0
    now = transaction_now()
    UsageInterval.objects.filter(pk__in=[row.pk for row in rows]).delete()
    mark_days_stale(ranges=[days for row in rows for days in stale_days.interval_change(_terms(row), None, now=now)])
    for row in rows:
        audit.record(actor=user, action="billing.delete_usage", instance=row, before=audit.snapshot(row), after=None)
    return len(rows)


# --- stale days: what reservations and lending changes mark (pools.services calls these) ---------------------------


def transaction_now() -> datetime:
    """The database's time for the current transaction (PostgreSQL's `now()`): one moment for all its writes."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


# Marks a day, or locks its mark when it is there already. `DO NOTHING` would leave an existing mark unlocked, and a
# refresh could then take it and meter the day before this transaction's rows are visible to it (READ COMMITTED:
# each statement sees what was committed when it began), losing them from billing for good. `DO UPDATE` locks
# the existing row until this transaction ends, even though `WHERE false` writes nothing, and waits for the
# refresh instead if the refresh holds the mark: once the refresh commits its delete, the insert goes ahead and
# marks the day anew. The refresh and the close skip the marks a writer holds (`billing.services._take_marks`).
# The days come in order, so two writers marking the same days lock them in the same order.
_MARK_DAYS = f"""
INSERT INTO {StaleDay._meta.db_table} (day) SELECT unnest(%s::date[]) AS day ORDER BY day
ON CONFLICT (day) DO UPDATE SET day = EXCLUDED.day WHERE false
"""


def mark_days_stale(*, ranges: list[stale_days.DayRange]) -> None:
    """Mark every day of `ranges` stale (`StaleDay`, once per day) in the caller's transaction, holding each mark's
    row lock until that transaction ends (see `_MARK_DAYS`)."""
    days = stale_days.expand(ranges)
    if not days:
        return
    with connection.cursor() as cursor:
        cursor.execute(_MARK_DAYS, [days])


def mark_reservation_days_stale(
    *, before: tuple[datetime, datetime] | None = None, after: tuple[datetime, datetime] | None = None
) -> None:
    """A reservation was made (`after`), changed (both) or deleted (`before`), each side as (starts_at, ends_at):
    mark the days it covered and covers, in the caller's transaction."""
    mark_days_stale(ranges=stale_days.reservation_change(before, after))


def mark_lending_days_stale(*, effective_from: datetime, reservation_ends_at: datetime) -> None:
    """A lending change from `effective_from` of a reservation ending at `reservation_ends_at` was made or deleted:
    mark the days it changes, up to now, in the caller's transaction."""
    mark_days_stale(
        ranges=stale_days.lending_change(
            effective_from=effective_from, reservation_ends_at=reservation_ends_at, now=transaction_now()
        )
    )
