"""The portal's PostgreSQL backend (portal/database/base.py): a kept connection is checked before each request
without a round trip while the server has said nothing on it, and with Django's `SELECT 1` otherwise — a connection
the server ended is still replaced before a request uses it."""

import pytest
from django.db import connection, connections, transaction
from django.db.backends.postgresql import base as postgresql

from portal.database.base import DatabaseWrapper
from tests.faultkit import backend_pid, end_backend

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def round_trips(monkeypatch):
    """Django's own check (a `SELECT 1`), counted."""
    asked = []
    own = postgresql.DatabaseWrapper.is_usable

    def counted(self):
        asked.append(self)
        return own(self)

    monkeypatch.setattr(postgresql.DatabaseWrapper, "is_usable", counted)
    return asked


def test_the_portal_uses_its_backend():
    assert isinstance(connections["default"], DatabaseWrapper)


def test_an_idle_connection_is_usable_without_a_round_trip(round_trips):
    backend_pid()
    assert connection.is_usable()
    assert round_trips == []


def test_a_connection_the_server_ended_is_unusable_and_replaced_before_the_next_request(round_trips):
    first = backend_pid()
    end_backend(first)
    assert not connection.is_usable()
    assert len(round_trips) == 1  # the socket had something to say: Django's check decided
    # What Django does at the start of each request with CONN_HEALTH_CHECKS.
    connection.close_if_unusable_or_obsolete()
    connection.close_if_health_check_failed()
    assert backend_pid() != first


def test_a_connection_in_a_transaction_is_asked(round_trips):
    with transaction.atomic():
        backend_pid()
        assert connection.is_usable()
    assert len(round_trips) == 1


def test_a_closed_connection_is_unusable(round_trips):
    backend_pid()
    connection.connection.close()
    assert not connection.is_usable()
    connection.close()
