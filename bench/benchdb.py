"""The database a benchmark fills: `<DATABASE_URL's name>_<suffix>` on the same server, created when missing, so
that a benchmark never touches the development data."""

import os
from urllib.parse import urlsplit, urlunsplit

DEFAULT_URL = "postgres://reservoir:reservoir@127.0.0.1:5432/reservoir"


def bench_database(suffix: str, *, fresh: bool = False) -> str:
    """Create (if missing) and return the URL of the benchmark database `<name>_<suffix>`; with `fresh`, drop it
    first (closing its connections), so that the run starts from empty tables."""
    import psycopg2

    parts = urlsplit(os.environ.get("DATABASE_URL", DEFAULT_URL))
    name = f"{parts.path.lstrip('/')}_{suffix}"
    # Connect to the server's maintenance database: the one DATABASE_URL names need not exist.
    connection = psycopg2.connect(urlunsplit(parts._replace(path="/postgres")))
    connection.autocommit = True
    with connection.cursor() as cursor:
        if fresh:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        if cursor.fetchone() is None:
            cursor.execute(f'CREATE DATABASE "{name}"')
    connection.close()
    return urlunsplit(parts._replace(path=f"/{name}"))
