"""A transaction PostgreSQL aborted to break a deadlock runs again; any other database error does not."""

import pytest
from django.db import OperationalError

from portal.retry import retry_on_conflict


class PgError(Exception):
    def __init__(self, pgcode):
        super().__init__(f"pgcode {pgcode}")
        self.pgcode = pgcode


def failing(pgcode, times, calls):
    @retry_on_conflict(attempts=3)
    def write():
        calls.append(1)
        if len(calls) <= times:
            raise OperationalError("deadlock detected") from PgError(pgcode)
        return "written"

    return write


@pytest.mark.parametrize("pgcode", ["40P01", "40001"])
def test_a_deadlock_or_serialization_failure_is_run_again(pgcode):
    calls = []
    assert failing(pgcode, 2, calls)() == "written"
    assert len(calls) == 3


def test_it_gives_up_after_its_attempts():
    calls = []
    with pytest.raises(OperationalError):
        failing("40P01", 5, calls)()
    assert len(calls) == 3


def test_other_database_errors_are_not_retried():
    calls = []
    with pytest.raises(OperationalError):
        failing("08006", 1, calls)()  # connection failure: the outage handling answers 503
    assert len(calls) == 1


@pytest.mark.django_db
def test_inside_a_callers_transaction_the_error_goes_to_the_caller():
    from django.db import transaction

    calls = []
    with pytest.raises(OperationalError), transaction.atomic():
        failing("40P01", 1, calls)()
    assert len(calls) == 1
