"""The days the services mark stale are the days the database triggers of migrations 0003 and 0006 marked.

The oracle is the triggers themselves: each test puts them back, as they were, marking into a table of their own
(`trigger_staleday`), then writes through the services and compares, after every write, the days the services
marked (`StaleDay`) with the days the triggers marked for the same rows. Interval writes come as the sync makes
them (opened, closed, moved to another pool or team, re-sized, replayed, vanished) and as an admin deletes them;
reservations are made, moved, lend and are deleted; and through Django admin, which deletes through the services.
"""

from datetime import date, timedelta
from importlib import import_module

import pytest
from django.db import connection, transaction
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing import stale_days, usage
from billing.models import StaleDay, UsageInterval
from pools import services as pool_services
from pools.choices import Lending
from pools.models import Reservation
from portal.models import AuditEntry
from tests.factories import PoolFactory, TeamFactory


@pytest.fixture
def triggers(db):
    """The stale-day triggers as migrations 0003 and 0006 made them, marking into `trigger_staleday`. Returns a
    check: the days both marked since the last check must be the same (and some, when `some`)."""
    stale_sql = import_module("billing.migrations.0003_triggers").STALE_DAYS
    lending_sql = import_module("billing.migrations.0006_daily_usage_lending").LENDING_CHANGES_MARK_STALE_DAYS
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE trigger_staleday (day date PRIMARY KEY)")
        cursor.execute(stale_sql.replace("billing_staleday", "trigger_staleday"))  # fails if 0008 left them
        cursor.execute(lending_sql)

    def check(*, some: bool | None = None) -> list:
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM trigger_staleday RETURNING day")
            by_triggers = sorted(row[0] for row in cursor.fetchall())
        by_services = sorted(StaleDay.objects.values_list("day", flat=True))
        StaleDay.objects.all().delete()
        assert by_services == by_triggers
        if some is not None:
            assert bool(by_services) == some
        return by_services

    return check


@pytest.fixture
def now(db):
    return usage.transaction_now()  # what both the triggers and the services take as now


def interval(uid, *, team, pool, started_at, ended_at=None, gpus=1, node="gpu-node-1", job=None):
    return UsageInterval(
        pod_uid=uid,
        namespace="team-x",
        pod_name=uid,
        team=team,
        pool=pool,
        node_name=node,
        job=job,
        gpus=gpus,
        started_at=started_at,
        ended_at=ended_at,
    )


def test_interval_writes_mark_the_days_the_triggers_marked(triggers, now, team, other_team):
    pool, other_pool = PoolFactory(), PoolFactory()
    ago = now - timedelta(days=40, hours=3)

    def record(*rows, some=None):
        usage.record_usage(intervals=list(rows))
        return triggers(some=some)

    # made: closed, open (to today), open from a later moment (its own day), zero-length, unattributed
    assert len(record(interval("closed", team=team, pool=pool, started_at=ago, ended_at=ago + timedelta(days=2)))) == 3
    record(interval("open", team=team, pool=pool, started_at=ago), some=True)
    assert record(interval("later", team=team, pool=pool, started_at=now + timedelta(days=3))) == [
        (now + timedelta(days=3)).date()
    ]
    record(interval("zero", team=team, pool=pool, started_at=ago, ended_at=ago), some=True)
    record(interval("nobody's", team=None, pool=pool, started_at=ago + timedelta(days=5)), some=True)
    # replayed as they are: nothing
    record(interval("closed", team=team, pool=pool, started_at=ago, ended_at=ago + timedelta(days=2)), some=False)
    record(interval("open", team=team, pool=pool, started_at=ago), some=False)
    # an open interval's node or job changes: no figure changes, nothing marked
    record(interval("open", team=team, pool=pool, started_at=ago, node="gpu-node-2"), some=False)
    # attributed later, moved to another pool, re-sized, started earlier: what it covered and what it covers
    record(interval("nobody's", team=other_team, pool=pool, started_at=ago + timedelta(days=5)), some=True)
    record(interval("open", team=team, pool=other_pool, started_at=ago, node="gpu-node-2"), some=True)
    record(interval("open", team=team, pool=other_pool, started_at=ago, gpus=4, node="gpu-node-2"), some=True)
    record(interval("later", team=team, pool=pool, started_at=now - timedelta(days=1)), some=True)
    # closed: only from its end to today; a closed interval cannot move again
    closed = record(
        interval("open", team=team, pool=other_pool, started_at=ago, gpus=4, ended_at=ago + timedelta(days=30))
    )
    assert closed[0] == (ago + timedelta(days=30)).date()
    record(interval("open", team=team, pool=other_pool, started_at=ago, gpus=4, ended_at=ago), some=False)
    # several in one call, some new, some changed, some not
    record(
        interval("later", team=team, pool=pool, started_at=now - timedelta(days=1), ended_at=now),
        interval("fresh", team=team, pool=pool, started_at=ago - timedelta(days=100), ended_at=ago),
        interval("closed", team=team, pool=pool, started_at=ago, ended_at=ago + timedelta(days=2)),
        some=True,
    )


def test_vanished_and_deleted_intervals_mark_the_days_the_triggers_marked(triggers, now, team, platform_admin):
    pool = PoolFactory()
    ago = now - timedelta(days=9, hours=5)
    usage.record_usage(
        intervals=[
            interval("gone", team=team, pool=pool, started_at=ago),
            interval("gone-later", team=team, pool=pool, started_at=now + timedelta(days=2)),
            interval("here", team=team, pool=pool, started_at=ago),
            interval("done", team=team, pool=pool, started_at=ago, ended_at=ago + timedelta(days=1)),
        ]
    )
    triggers(some=True)
    # a relist that no longer sees an open pod: it ends at the relist
    assert usage.close_usage_of_vanished_pods(present_pod_uids={"here", "gone-later"}, at=now - timedelta(days=2)) == 1
    triggers(some=True)
    assert usage.close_usage_of_vanished_pods(present_pod_uids={"here", "gone-later"}, at=now) == 0
    triggers(some=False)
    # an admin deletes a closed and an open interval
    usage.delete_usage(intervals=UsageInterval.objects.filter(pod_uid__in=["done", "here"]), user=platform_admin)
    triggers(some=True)
    assert sorted(UsageInterval.objects.values_list("pod_uid", flat=True)) == ["gone", "gone-later"]


def test_reservation_and_lending_writes_mark_the_days_the_triggers_marked(triggers, now, team, lead):
    pool = PoolFactory(contracted_gpus=16)
    reservation = pool_services.create_reservation(
        team=team, pool=pool, gpus=4, starts_at=now - timedelta(days=20), ends_at=now + timedelta(days=10)
    )
    assert len(triggers()) == 31
    reservation = pool_services.end_reservation(reservation=reservation, ends_at=now - timedelta(days=2))
    triggers(some=True)
    reservation = pool_services.end_reservation(reservation=reservation, ends_at=now + timedelta(days=40))
    triggers(some=True)
    # lending from now, from a past moment, from a later moment, from after the reservation's end
    for lending, protected, at in [
        (Lending.NONE, 0, None),
        (Lending.PROTECT, 2, now - timedelta(days=15)),
        (Lending.IDLE, 0, now + timedelta(days=5)),
        (Lending.NONE, 0, now + timedelta(days=60)),
    ]:
        pool_services.set_lending(reservation=reservation, lending=lending, protected_gpus=protected, user=lead, at=at)
        triggers(some=True)
    pool_services.set_lending(reservation=reservation, lending=Lending.NONE, user=lead)  # unchanged: not written
    triggers(some=False)
    future = pool_services.create_reservation(
        team=team, pool=pool, gpus=2, starts_at=now + timedelta(days=50), ends_at=now + timedelta(days=80)
    )
    pool_services.set_lending(reservation=future, lending=Lending.NONE, user=lead)
    triggers(some=True)
    # deleted with its lending changes
    pool_services.delete_reservation(reservation=reservation)
    pool_services.delete_reservation(reservation=future)
    triggers(some=True)


STEPS = st.lists(
    st.tuples(
        st.sampled_from(["record", "record", "record", "vanish", "delete"]),
        st.integers(0, 3),  # pod
        st.sampled_from([None, 0, 1]),  # team
        st.integers(0, 1),  # pool
        st.integers(1, 3),  # GPUs
        st.integers(-60 * 24, 10 * 24),  # start, in hours from now
        st.one_of(st.none(), st.integers(0, 40 * 24)),  # hours until its end (None: open)
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_any_sequence_of_interval_writes_marks_the_days_the_triggers_marked(triggers, now, steps):
    with transaction.atomic():
        teams, pools = [TeamFactory(), TeamFactory()], [PoolFactory(), PoolFactory()]
        for action, pod, team, pool, gpus, start_hours, hours in steps:
            started_at = now + timedelta(hours=start_hours, minutes=pod)
            ended_at = None if hours is None else started_at + timedelta(hours=hours)
            if action == "record":
                row = interval(
                    f"pod-{pod}",
                    team=None if team is None else teams[team],
                    pool=pools[pool],
                    gpus=gpus,
                    started_at=started_at,
                    ended_at=ended_at,
                )
                usage.record_usage(intervals=[row])
            elif action == "vanish":  # a relist (at the latest start of an open interval, or now) without this pod
                open_since = UsageInterval.objects.filter(ended_at=None).values_list("started_at", flat=True)
                usage.close_usage_of_vanished_pods(present_pod_uids={f"pod-{pod}"}, at=max([now, *open_since]))
            else:
                usage.delete_usage(intervals=UsageInterval.objects.filter(pod_uid=f"pod-{pod}"))
            triggers()
        transaction.set_rollback(True)


def test_overlapping_day_ranges_expand_to_each_day_once():
    def day(n):
        return date(2026, 3, n)

    assert stale_days.expand([(day(5), day(7)), (day(1), day(2)), (day(6), day(9)), (day(9), day(9))]) == [
        day(1), day(2), day(5), day(6), day(7), day(8), day(9)
    ]  # fmt: skip
    assert stale_days.expand([]) == []


def test_admin_deletes_go_through_the_services(triggers, now, client, platform_admin, team):
    pool = PoolFactory(contracted_gpus=16)
    usage.record_usage(intervals=[interval("bogus", team=team, pool=pool, started_at=now - timedelta(days=3))])
    reservation = pool_services.create_reservation(
        team=team, pool=pool, gpus=4, starts_at=now - timedelta(days=5), ends_at=now + timedelta(days=5)
    )
    pool_services.set_lending(reservation=reservation, lending=Lending.NONE, at=now - timedelta(days=1))
    triggers(some=True)
    client.force_login(platform_admin)
    assert client.get(reverse("admin:billing_usageinterval_add")).status_code == 403  # usage comes from pods only
    bogus = UsageInterval.objects.get(pod_uid="bogus")
    response = client.post(reverse("admin:billing_usageinterval_delete", args=[bogus.pk]), {"post": "yes"})
    assert response.status_code == 302 and not UsageInterval.objects.exists()
    assert len(triggers()) == 4
    response = client.post(reverse("admin:pools_reservation_delete", args=[reservation.pk]), {"post": "yes"})
    assert response.status_code == 302 and not Reservation.objects.exists()
    assert len(triggers()) == 11
    assert set(AuditEntry.objects.filter(actor=platform_admin).values_list("action", flat=True)) == {
        "billing.delete_usage",
        "reservation.delete",
    }
