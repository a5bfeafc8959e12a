"""A small billing world: one reserved pool, one elastic pool, team Alpha holding 4 GPUs of the reserved pool."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from pools.choices import PoolKind
from tests.factories import PoolFactory, ReservationFactory, UsageIntervalFactory


def at(day: int, hour: int = 0, minute: int = 0, *, month: int = 3, year: int = 2026) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


@pytest.fixture
def reserved_pool(db):
    return PoolFactory(
        slug="a800",
        name="A800 reserved",
        kind=PoolKind.RESERVED,
        contracted_gpus=16,
        monthly_price_per_gpu=Decimal("9800.00"),
        hourly_price_per_gpu=Decimal("18.0000"),
    )


@pytest.fixture
def elastic_pool(db):
    return PoolFactory(
        slug="spot",
        name="Spot",
        kind=PoolKind.ELASTIC,
        contracted_gpus=None,
        monthly_price_per_gpu=Decimal("0"),
        hourly_price_per_gpu=Decimal("6.5000"),
    )


@pytest.fixture
def reservation(team, reserved_pool):
    """4 GPUs over all of March 2026 at 9,800.00 per GPU-month."""
    return ReservationFactory(
        team=team,
        pool=reserved_pool,
        gpus=4,
        starts_at=at(1),
        ends_at=at(1, month=4),
        monthly_price_per_gpu=Decimal("9800.00"),
    )


@pytest.fixture
def pod(team, reserved_pool):
    def make(start, end, gpus=1, pool=None, for_team=None):
        return UsageIntervalFactory(
            team=for_team or team, pool=pool or reserved_pool, gpus=gpus, started_at=start, ended_at=end
        )

    return make
