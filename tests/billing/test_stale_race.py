"""A late interval written while a refresh or a month close meters its day is metered again afterwards.

The sync records an interval and marks its days stale in one transaction (`billing.usage`); the refresh and the
month close take the marks and meter those days (`billing.services`). Each test runs the sync on a connection of
its own, holding its transaction open while the main connection meters the same day, as two processes would.
"""

import threading
import time

import pytest
from django.db import connection, transaction

from billing import services, usage
from billing.choices import LineKind
from billing.models import DailyUsage, Invoice, StaleDay, UsageInterval
from billing.money import hours
from tests.billing.conftest import at

pytestmark = pytest.mark.django_db(transaction=True)

DAY = at(2).date()  # a past, complete day of March
NOW = at(16, 12)


def late_interval(team, pool, start, end, *, gpus=2) -> UsageInterval:
    return UsageInterval(
        pod_uid=f"late-{start:%m%d%H}",
        namespace=team.namespace,
        pod_name="late",
        team=team,
        pool=pool,
        node_name="gpu-node-1",
        gpus=gpus,
        started_at=start,
        ended_at=end,
    )


class SyncHoldingItsTransaction:
    """The sync, on its own connection: records `interval` (which marks its days stale), then keeps its transaction
    open until `commit()` (or 10 s), as a sync batch does while it writes the rest of its rows."""

    def __init__(self, interval: UsageInterval):
        self.interval = interval
        self.recorded = threading.Event()
        self.go_on = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run)

    def _run(self):
        try:
            with transaction.atomic():
                usage.record_usage(intervals=[self.interval])
                self.recorded.set()
                self.go_on.wait(timeout=10)
        except BaseException as error:  # noqa: BLE001 - the test asserts on it
            self.errors.append(error)
        finally:
            self.recorded.set()
            connection.close()

    def start(self):
        self.thread.start()
        return self

    def commit(self):
        self.go_on.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()
        assert self.errors == []


def gpu_hours_used(team, day) -> tuple:
    row = DailyUsage.objects.get(team=team, day=day)
    return hours(row.in_reservation_gpu_seconds), hours(row.overage_gpu_seconds)


def test_a_late_interval_recorded_while_the_refresh_meters_its_marked_day_is_metered_next_time(
    team, reservation, pod, reserved_pool
):
    pod(at(2, 10), at(2, 12), gpus=1)  # 2 GPU-hours in the reservation
    services.refresh_usage(now=NOW)
    assert gpu_hours_used(team, DAY) == (2, 0)
    usage.mark_days_stale(ranges=[(DAY, DAY)])  # marked already, by an earlier write (committed)

    sync = SyncHoldingItsTransaction(late_interval(team, reserved_pool, at(2, 14), at(2, 16))).start()
    assert sync.recorded.wait(timeout=10)
    services.refresh_usage(now=NOW)  # meters the day without the interval it cannot see yet
    sync.commit()

    assert StaleDay.objects.filter(day=DAY).exists()  # the mark the sync's transaction held survived
    services.refresh_usage(now=NOW)
    assert gpu_hours_used(team, DAY) == (6, 0)  # 2 + 2 GPUs × 2 h


def test_a_late_interval_recorded_while_the_month_closes_becomes_an_adjustment(team, reserved_pool, pod):
    february_day = at(10, month=2).date()
    pod(at(10, 10, month=2), at(10, 12, month=2), gpus=1)  # 2 GPU-hours of overage (no reservation) × 18 = 36.00
    services.refresh_usage(now=at(2, month=3))
    usage.mark_days_stale(ranges=[(february_day, february_day)])

    late = late_interval(team, reserved_pool, at(10, 14, month=2), at(10, 16, month=2))  # 4 GPU-hours = 72.00
    sync = SyncHoldingItsTransaction(late).start()
    assert sync.recorded.wait(timeout=10)
    services.close_month(month=at(1, month=2).date(), now=at(2, month=3))
    sync.commit()

    february = Invoice.objects.get(team=team, month=at(1, month=2).date())
    assert february.is_closed and str(february.total) == "36.00"
    services.refresh_usage(now=at(3, month=3))
    adjustments = Invoice.objects.get(team=team, month=at(1).date()).lines.filter(kind=LineKind.ADJUSTMENT)
    assert [(line.adjusts_month, str(line.amount)) for line in adjustments] == [(at(1, month=2).date(), "72.00")]


def test_a_sync_marking_a_day_the_refresh_has_taken_waits_for_it_and_marks_the_day_again(
    team, reservation, pod, reserved_pool, monkeypatch
):
    pod(at(2, 10), at(2, 12), gpus=1)
    services.refresh_usage(now=NOW)
    usage.mark_days_stale(ranges=[(DAY, DAY)])
    real_recompute = services.recompute_days
    syncs = []

    def recompute_days(**kwargs):
        if not syncs:  # the refresh has taken the day's mark: the sync records a late interval for it now
            sync = SyncHoldingItsTransaction(late_interval(team, reserved_pool, at(2, 14), at(2, 16)))
            sync.go_on.set()  # commits as soon as it has recorded
            syncs.append(sync.start())
            time.sleep(0.5)  # long enough for it to reach the mark
        return real_recompute(**kwargs)

    monkeypatch.setattr(services, "recompute_days", recompute_days)
    services.refresh_usage(now=NOW)
    monkeypatch.setattr(services, "recompute_days", real_recompute)
    syncs[0].commit()

    assert StaleDay.objects.filter(day=DAY).exists()
    services.refresh_usage(now=NOW)
    assert gpu_hours_used(team, DAY) == (6, 0)
