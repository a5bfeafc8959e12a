"""Retrying a whole transaction that PostgreSQL aborted to break a deadlock or a serialization conflict.

PostgreSQL resolves a lock cycle by failing one of the transactions in it (SQLSTATE 40P01 deadlock detected, 40001
serialization failure) and expects the client to run that transaction again: nothing of it was written. Such an
error is not the database being unreachable, so it must never reach a user as a 503. Only an outermost transaction
can be retried; inside a caller's, the error goes to the caller."""

import functools
import logging
import random
import time

from django.db import OperationalError, connection

log = logging.getLogger(__name__)

RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})


def is_retryable_conflict(error: BaseException) -> bool:
    cause = error.__cause__ if isinstance(error, OperationalError) else None
    return getattr(cause, "pgcode", None) in RETRYABLE_SQLSTATES


def retry_on_conflict(function=None, *, attempts: int = 4):
    """Run the decorated function (which opens its own transaction) again when PostgreSQL aborted it for a deadlock
    or a serialization conflict, after a short random pause, up to `attempts` times in all."""

    def decorate(wrapped):
        @functools.wraps(wrapped)
        def run(*args, **kwargs):
            for attempt in range(1, attempts + 1):
                try:
                    return wrapped(*args, **kwargs)
                except OperationalError as error:
                    if connection.in_atomic_block or attempt == attempts or not is_retryable_conflict(error):
                        raise
                    log.warning("%s: %s; running it again (attempt %d)", wrapped.__qualname__, error, attempt + 1)
                    time.sleep(random.uniform(0.05, 0.2) * attempt)  # noqa: S311 - jitter, not cryptography
            raise AssertionError("unreachable")

        return run

    return decorate(function) if function is not None else decorate
