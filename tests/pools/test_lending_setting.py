"""A reservation's lending setting: chosen by the team's leads (or an admin), validated, audited, and kept as a
history that metering reads at any moment."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

from pools import history, services
from pools.choices import Lending, lendable_gpus, lendable_gpus_sql
from pools.models import LendingChange
from portal.models import AuditEntry
from tests.factories import PoolFactory, ReservationFactory


@pytest.fixture
def reservation(team):
    return ReservationFactory(team=team, pool=PoolFactory(slug="a800"), gpus=8)


@pytest.mark.parametrize(
    ("lending", "protected", "lendable"),
    [(Lending.NONE, 0, 0), (Lending.IDLE, 0, 8), (Lending.PROTECT, 3, 5), (Lending.PROTECT, 8, 0)],
)
def test_lendable_gpus(lending, protected, lendable):
    assert lendable_gpus(gpus=8, lending=lending, protected_gpus=protected) == lendable


def test_a_new_reservation_lends_its_idle_gpus_and_keeps_none_protected(reservation):
    assert (reservation.lending, reservation.protected_gpus, reservation.lendable_gpus) == (Lending.IDLE, 0, 8)


def test_a_lead_keeps_gpus_protected_and_the_change_is_audited_and_kept(reservation, lead):
    at = timezone.now()
    services.set_lending(reservation=reservation, lending=Lending.PROTECT, protected_gpus=3, user=lead, at=at)
    reservation.refresh_from_db()
    assert (reservation.lending, reservation.protected_gpus, reservation.lendable_gpus) == (Lending.PROTECT, 3, 5)
    entry = AuditEntry.objects.get(action="reservation.set_lending")
    assert entry.actor == lead
    assert (entry.before["lending"], entry.after["lending"], entry.after["protected_gpus"]) == ("idle", "protect", 3)
    change = LendingChange.objects.get()
    assert (change.lending, change.protected_gpus, change.effective_from, change.changed_by) == ("protect", 3, at, lead)


def test_setting_what_is_already_set_writes_nothing(reservation, lead):
    services.set_lending(reservation=reservation, lending=Lending.IDLE, user=lead)
    assert not LendingChange.objects.exists() and not AuditEntry.objects.exists()


def test_a_researcher_may_not_change_it(reservation, researcher):
    with pytest.raises(ValidationError, match="Only a lead"):
        services.set_lending(reservation=reservation, lending=Lending.NONE, user=researcher)
    reservation.refresh_from_db()
    assert reservation.lending == Lending.IDLE and not LendingChange.objects.exists()


@pytest.mark.parametrize(
    ("lending", "protected", "field"),
    [("lots", 0, "lending"), (Lending.PROTECT, 0, "protected_gpus"), (Lending.PROTECT, 9, "protected_gpus")],
)
def test_bad_settings_are_refused_with_the_field_named(reservation, lead, lending, protected, field):
    with pytest.raises(ValidationError) as error:
        services.set_lending(reservation=reservation, lending=lending, protected_gpus=protected, user=lead)
    assert field in error.value.message_dict
    assert not LendingChange.objects.exists()


def test_protected_gpus_are_dropped_when_lending_none_or_all(reservation, lead):
    services.set_lending(reservation=reservation, lending=Lending.NONE, protected_gpus=4, user=lead)
    reservation.refresh_from_db()
    assert (reservation.lending, reservation.protected_gpus) == (Lending.NONE, 0)


def test_the_setting_at_a_moment_is_the_latest_change_at_or_before_it(reservation, lead):
    start = timezone.now()
    services.set_lending(reservation=reservation, lending=Lending.NONE, user=lead, at=start + timedelta(hours=1))
    services.set_lending(
        reservation=reservation, lending=Lending.PROTECT, protected_gpus=2, user=lead, at=start + timedelta(hours=2)
    )
    changes = list(reservation.lending_changes.all())
    assert history.lending_at(changes, start) == (Lending.IDLE, 0)  # before any change: the default
    assert history.lending_at(changes, start + timedelta(hours=1)) == (Lending.NONE, 0)
    assert history.lending_at(changes, start + timedelta(minutes=150)) == (Lending.PROTECT, 2)


@pytest.mark.parametrize("gpus", [0, 1, 4, 8])
@pytest.mark.parametrize("protected", [0, 1, 3, 8, 9])
@pytest.mark.parametrize("lending", Lending.values)
def test_the_sql_lendable_gpus_agree_with_the_python_rule(db, gpus, protected, lending):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT " + lendable_gpus_sql(gpus="g", lending="l", protected_gpus="p") + " FROM (SELECT %s AS g, %s AS l,"
            " %s AS p) setting",
            [gpus, lending, protected],
        )
        assert cursor.fetchone()[0] == lendable_gpus(gpus=gpus, lending=lending, protected_gpus=protected)
