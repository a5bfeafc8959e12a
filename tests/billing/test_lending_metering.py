"""Lending in the metering SQL against the reference implementation, over random pods, reservations and lending
changes (hypothesis).

Three teams share two reserved pools whose contracts are small enough that overage must often be borrowed; the
reservations change their lending setting (none / idle / protect N) and the pools their contract at random moments,
sometimes several at the same instant. Per team, pool and day the SQL equals the reference to the last digit, and
per pool and day (so per moment: days are sums of moments) Σ lent = Σ borrowed and borrowed + unreserved = overage.
"""

from collections import defaultdict
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from billing import metering, services
from billing.models import DailyUsage
from billing.periods import month_bounds
from pools.choices import Lending, PoolKind
from pools.models import ContractChange, LendingChange
from tests.billing import reference
from tests.factories import PoolFactory, ReservationFactory, TeamFactory, UsageIntervalFactory

MONTH = date(2026, 2, 1)
MONTH_START, MONTH_END = month_bounds(MONTH)
TEAMS, POOLS = 3, 3  # pools 0 and 1 reserved, 2 elastic
CONTRACTED = (4, 7)  # reservations may exceed them here: the unreserved GPUs are then 0
# Everything happens within a few days around the month's start, mostly on whole hours, so that pods, reservations
# and lending changes overlap and coincide often (borrowing needs several teams at once).
ORIGIN = MONTH_START - timedelta(days=1)
SPAN_HOURS = 2 * 24


def moments():
    hourly = st.integers(0, SPAN_HOURS).map(lambda h: ORIGIN + timedelta(hours=h))
    precise = st.tuples(st.integers(0, SPAN_HOURS * 3600), st.integers(0, 999_999)).map(
        lambda t: ORIGIN + timedelta(seconds=t[0], microseconds=t[1])
    )
    return st.one_of(hourly, hourly, precise)


@st.composite
def pods(draw):
    started = draw(moments())
    ended = draw(st.one_of(st.none(), st.integers(0, 48).map(lambda h: started + timedelta(hours=h)), moments()))
    ended = ended if ended is None or ended >= started else started
    pool = draw(st.sampled_from([0, 0, 1, 1, 2]))
    return draw(st.integers(0, TEAMS - 1)), pool, draw(st.integers(1, 8)), started, ended


@st.composite
def holds(draw):
    starts = draw(moments())
    ends = starts + timedelta(hours=draw(st.integers(6, 72)))
    return draw(st.integers(0, TEAMS - 1)), draw(st.integers(0, 1)), draw(st.integers(3, 6)), starts, ends


@st.composite
def lending_changes(draw):
    lending = draw(st.sampled_from(Lending.values))
    protected = draw(st.integers(1, 6)) if lending == Lending.PROTECT else 0
    return draw(st.integers(0, 3)), draw(moments()), lending, protected


def contract_changes():
    return st.lists(st.tuples(st.integers(0, 1), moments(), st.integers(0, 9)), max_size=4)


@pytest.fixture
def world(db):
    teams = [TeamFactory() for _ in range(TEAMS)]
    pools = [
        PoolFactory(kind=PoolKind.RESERVED, contracted_gpus=CONTRACTED[0]),
        PoolFactory(kind=PoolKind.RESERVED, contracted_gpus=CONTRACTED[1]),
        PoolFactory(kind=PoolKind.ELASTIC, contracted_gpus=None, hourly_price_per_gpu=Decimal("2.4567")),
    ]
    return teams, pools


def load(world, pod_rows, hold_rows, change_rows, contract_rows=()):
    teams, pools = world
    pods_, holds_, changes_, reservations = [], [], [], []
    for team, pool, gpus, started, ended in pod_rows:
        UsageIntervalFactory(team=teams[team], pool=pools[pool], gpus=gpus, started_at=started, ended_at=ended)
        pods_.append(reference.Pod(teams[team].pk, pools[pool].pk, gpus, started, ended))
    for team, pool, gpus, starts, ends in hold_rows:
        reservations.append(
            ReservationFactory(team=teams[team], pool=pools[pool], gpus=gpus, starts_at=starts, ends_at=ends)
        )
        holds_.append(reference.Held(teams[team].pk, pools[pool].pk, gpus, starts, ends, Decimal("9800.00")))
    for hold, at, lending, protected in change_rows:
        if hold < len(reservations):
            LendingChange.objects.create(
                reservation=reservations[hold], lending=lending, protected_gpus=protected, effective_from=at
            )
            changes_.append(reference.LendingSetting(hold, at, lending, protected))
    contracted = {pools[0].pk: CONTRACTED[0], pools[1].pk: CONTRACTED[1]}
    for pool, at, gpus in contract_rows:
        ContractChange.objects.create(pool=pools[pool], contracted_gpus=gpus, effective_from=at)
        if isinstance(contracted[pools[pool].pk], int):
            contracted[pools[pool].pk] = []
        contracted[pools[pool].pk].append((at, gpus))
    return pods_, holds_, changes_, contracted


def lending_figures(rows) -> dict:
    return {
        (row.team_id, row.pool_id): (row.lent, row.borrowed, row.unreserved)
        for row in rows
        if any((row.lent, row.borrowed, row.unreserved))
    }


NOW = st.one_of(
    st.just(MONTH_END + timedelta(days=3)),
    st.integers(1, 86400).map(lambda s: MONTH_START + timedelta(seconds=s)),
)
EXAMPLES = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@EXAMPLES
@given(
    pod_rows=st.lists(pods(), min_size=3, max_size=14),
    hold_rows=st.lists(holds(), min_size=2, max_size=4),
    change_rows=st.lists(lending_changes(), max_size=5),
    contract_rows=contract_changes(),
    now=NOW,
)
def test_month_lending_equals_reference_and_lent_equals_borrowed(
    world, pod_rows, hold_rows, change_rows, contract_rows, now
):
    with transaction.atomic():
        teams, pools = world
        pods_, holds_, changes_, contracted = load(world, pod_rows, hold_rows, change_rows, contract_rows)
        until = min(MONTH_END, now)
        rows = metering.meter(start=MONTH_START, end=until, now=now)
        expected = reference.meter_lending(pods_, holds_, changes_, contracted, contracted, MONTH_START, until, now)
        assert lending_figures(rows) == expected
        event(f"borrowing: {any(row.borrowed for row in rows)}, lenders: {len({r.team_id for r in rows if r.lent})}")
        lent, borrowed = defaultdict(Decimal), defaultdict(Decimal)
        for row in rows:
            assert row.borrowed + row.unreserved == row.overage
            lent[row.pool_id] += row.lent
            borrowed[row.pool_id] += row.borrowed
        assert lent == borrowed
        assert all(not row.lent and not row.borrowed for row in rows if row.pool_id == pools[2].pk)
        transaction.set_rollback(True)


@EXAMPLES
@given(
    pod_rows=st.lists(pods(), min_size=3, max_size=12),
    hold_rows=st.lists(holds(), min_size=2, max_size=4),
    change_rows=st.lists(lending_changes(), max_size=5),
    contract_rows=contract_changes(),
    now=NOW,
)
def test_daily_rollups_carry_lending_exactly(world, pod_rows, hold_rows, change_rows, contract_rows, now):
    with transaction.atomic():
        pods_, holds_, changes_, contracted = load(world, pod_rows, hold_rows, change_rows, contract_rows)
        until = min(MONTH_END, now)
        services.recompute_days(days=[MONTH + timedelta(days=offset) for offset in range(28)], now=now)
        per_pool_day = defaultdict(lambda: [Decimal(0), Decimal(0)])
        for row in DailyUsage.objects.all():
            assert row.borrowed_gpu_seconds + row.unreserved_gpu_seconds == row.overage_gpu_seconds
            per_pool_day[(row.pool_id, row.day)][0] += row.lent_gpu_seconds
            per_pool_day[(row.pool_id, row.day)][1] += row.borrowed_gpu_seconds
        assert all(lent == borrowed for lent, borrowed in per_pool_day.values())
        month = {
            key: (row["lent"], row["borrowed"], row["unreserved"])
            for key, row in services.month_usage_seconds(month=MONTH).items()
            if any((row["lent"], row["borrowed"], row["unreserved"]))
        }
        assert month == reference.meter_lending(
            pods_, holds_, changes_, contracted, contracted, MONTH_START, until, now
        )
        transaction.set_rollback(True)
