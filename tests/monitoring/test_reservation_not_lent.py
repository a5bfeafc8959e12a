"""The money alert of lending (issue 12): a reservation idle, not lent, while other teams' jobs wait in its pool."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.choices import JobState
from monitoring import services
from monitoring.choices import AlertKind, AlertState
from monitoring.evaluators import reservation_not_lent
from monitoring.models import Alert
from pools import services as pool_services
from pools.choices import Lending
from tests.factories import JobFactory, PoolFactory, ReservationFactory

KIND = AlertKind.RESERVATION_NOT_LENT
NOW = timezone.now().replace(microsecond=0)


@pytest.fixture
def pool(db):
    return PoolFactory(slug="a800", name="A800", contracted_gpus=16)


@pytest.fixture
def reservation(team, pool):
    """Alpha reserves 8 GPUs and lends none; its one running job uses 2 of them."""
    reservation = ReservationFactory(team=team, pool=pool, gpus=8)
    pool_services.set_lending(reservation=reservation, lending=Lending.NONE)
    JobFactory(team=team, pool=pool, gpus=2, state=JobState.RUNNING)
    return reservation


def _observed(team):
    return {o.subject_key: o for o in reservation_not_lent(NOW) if o.team_id == team.pk}


def test_idle_gpus_held_back_are_the_value_and_others_waiting_the_gate(team, other_team, pool, reservation):
    [observation] = _observed(team).values()
    assert observation.subject_key == "reservation:alpha/a800"
    assert str(observation.subject) == "reservation of team Alpha in pool A800"
    assert observation.value == 6.0  # 8 reserved, 2 used, none lent
    assert observation.gate is False  # nobody else waits

    JobFactory(team=team, pool=pool, gpus=4, state=JobState.QUEUED)
    assert _observed(team)["reservation:alpha/a800"].gate is False  # its own queued job is not "others"

    JobFactory(team=other_team, pool=pool, gpus=4, state=JobState.QUEUED)
    assert _observed(team)["reservation:alpha/a800"].gate is True


@pytest.mark.parametrize(
    ("lending", "protected", "held_back"),
    [(Lending.NONE, 0, 6.0), (Lending.IDLE, 0, 0.0), (Lending.PROTECT, 5, 3.0), (Lending.PROTECT, 1, 0.0)],
)
def test_what_the_setting_lends_is_not_held_back(team, pool, reservation, lending, protected, held_back):
    # 6 idle GPUs; protecting 5 of 8 lends 3 of them, so 3 stay idle and unlent; protecting 1 lends 7 ≥ 6 idle.
    pool_services.set_lending(reservation=reservation, lending=lending, protected_gpus=protected)
    assert _observed(team)["reservation:alpha/a800"].value == held_back


@pytest.mark.django_db(transaction=True)
def test_the_alert_fires_after_ten_minutes_and_resolves_once_the_lead_lends(team, other_team, lead):
    pool = PoolFactory(slug="a800", name="A800", contracted_gpus=16)
    reservation = ReservationFactory(team=team, pool=pool, gpus=8)
    pool_services.set_lending(reservation=reservation, lending=Lending.NONE)
    JobFactory(team=other_team, pool=pool, gpus=4, state=JobState.QUEUED)

    services.evaluate_alerts(now=NOW)
    alert = Alert.objects.get(kind=KIND)
    assert (alert.state, alert.value, alert.team_id, alert.pool_id) == (AlertState.PENDING, 8.0, team.pk, pool.pk)
    services.evaluate_alerts(now=NOW + timedelta(minutes=10))
    alert.refresh_from_db()
    assert alert.state == AlertState.FIRING
    assert "reserved GPUs idle and not lent while other teams' jobs wait 8 GPUs" in alert.summary

    pool_services.set_lending(reservation=reservation, lending=Lending.IDLE, user=lead)
    services.evaluate_alerts(now=NOW + timedelta(minutes=11))
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED
