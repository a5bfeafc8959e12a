"""The reservation invariants: contract never exceeded at any moment, sane periods and quantities."""

import threading
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from pools import services
from pools.choices import PoolKind
from pools.models import Reservation
from portal.models import AuditEntry
from tests.factories import PoolFactory, ReservationFactory, TeamFactory


@pytest.fixture
def pool(db):
    return PoolFactory(slug="a800", contracted_gpus=16)


def reserve(pool, team, gpus, start_day, end_day, **kwargs):
    base = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    return services.create_reservation(
        team=team,
        pool=pool,
        gpus=gpus,
        starts_at=base + timedelta(days=start_day),
        ends_at=base + timedelta(days=end_day),
        **kwargs,
    )


def test_reservation_takes_the_pools_price_and_is_audited(pool, team, platform_admin):
    reservation = reserve(pool, team, 8, 0, 30, user=platform_admin)
    assert reservation.monthly_price_per_gpu == pool.monthly_price_per_gpu
    entry = AuditEntry.objects.get(action="reservation.create")
    assert entry.actor == platform_admin
    assert entry.after["gpus"] == 8


def test_reservations_up_to_the_contract_are_accepted(pool, team, other_team):
    reserve(pool, team, 10, 0, 30)
    reserve(pool, other_team, 6, 0, 30)
    assert Reservation.objects.filter(pool=pool).count() == 2


def test_exceeding_the_contract_at_any_moment_is_refused(pool, team, other_team):
    reserve(pool, team, 10, 0, 30)
    with pytest.raises(ValidationError) as error:
        reserve(pool, other_team, 7, 29, 60)  # overlaps only on day 29
    assert "at most 6 more" in str(error.value)
    assert Reservation.objects.filter(pool=pool).count() == 1


def test_back_to_back_reservations_may_each_use_the_whole_contract(pool, team, other_team):
    reserve(pool, team, 16, 0, 30)
    reserve(pool, other_team, 16, 30, 60)
    assert Reservation.objects.filter(pool=pool).count() == 2


def test_peak_is_measured_not_the_sum_of_all_overlaps(pool, team, other_team):
    # 8 GPUs on days 0-10 and 8 on days 20-30 never overlap each other: a third of 8 over 0-30 fits.
    reserve(pool, team, 8, 0, 10)
    reserve(pool, team, 8, 20, 30)
    reserve(pool, other_team, 8, 0, 30)
    with pytest.raises(ValidationError):
        reserve(pool, other_team, 1, 5, 6)


def test_reservation_must_end_after_it_starts(pool, team):
    with pytest.raises(ValidationError) as error:
        reserve(pool, team, 1, 10, 10)
    assert "ends_at" in error.value.message_dict


def test_only_reserved_pools_take_reservations(db, team):
    elastic = PoolFactory(kind=PoolKind.ELASTIC, contracted_gpus=None)
    with pytest.raises(ValidationError) as error:
        reserve(elastic, team, 1, 0, 1)
    assert "pool" in error.value.message_dict


def test_zero_gpus_is_refused(pool, team):
    with pytest.raises(ValidationError) as error:
        reserve(pool, team, 0, 0, 1)
    assert "gpus" in error.value.message_dict


def test_database_refuses_what_bypasses_the_service(pool, team):
    now = timezone.now()
    with pytest.raises(IntegrityError), transaction.atomic():
        ReservationFactory(pool=pool, team=team, gpus=0)
    with pytest.raises(IntegrityError), transaction.atomic():
        ReservationFactory(pool=pool, team=team, starts_at=now, ends_at=now - timedelta(hours=1))


def test_extending_a_reservation_is_checked_against_the_contract(pool, team, other_team):
    first = reserve(pool, team, 10, 0, 30)
    reserve(pool, other_team, 7, 30, 60)
    reserve(pool, other_team, 6, 0, 30)
    with pytest.raises(ValidationError):
        services.end_reservation(reservation=first, ends_at=first.ends_at + timedelta(days=1))
    shorter = services.end_reservation(reservation=first, ends_at=first.ends_at - timedelta(days=5))
    assert shorter.ends_at == first.ends_at - timedelta(days=5)


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_requests_for_the_last_gpus_cannot_both_win():
    """Two real database connections ask at once for the pool's last 8 GPUs: exactly one gets them."""
    pool = PoolFactory(slug="contended", contracted_gpus=16)
    teams = [TeamFactory(slug="first"), TeamFactory(slug="second"), TeamFactory(slug="third")]
    reserve(pool, teams[0], 8, 0, 30)

    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def ask(team):
        try:
            barrier.wait(timeout=10)
            reserve(pool, team, 8, 0, 30)
            outcomes.append("won")
        except ValidationError:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=ask, args=(team,)) for team in teams[1:]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(outcomes) == ["refused", "won"]
    assert sum(Reservation.objects.filter(pool=pool).values_list("gpus", flat=True)) == 16
