"""Reads that must agree with each other: several queries answered from one snapshot of the database.

PostgreSQL's default isolation (READ COMMITTED, which Django keeps) gives each statement its own snapshot: a reader
that asks a job's queue in one query and the GPUs its team holds in the next may see a job in neither (still queued
for the first, already admitted for the second) and conclude what never was. `one_snapshot()` runs the block in one
REPEATABLE READ transaction: every query in it sees the database as of its first one. Read-only work only: a
transaction at this level that writes may fail with a serialisation error where READ COMMITTED would not.
"""

from contextlib import contextmanager

from django.db import connections, transaction


@contextmanager
def one_snapshot(using: str = "default"):
    """Run the block's queries on one snapshot. Inside a transaction already (a caller's, or a test's), the block
    reads in that transaction, whose level was chosen when it began: the caller's choice stands."""
    connection = connections[using]
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic(using=using):
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield
