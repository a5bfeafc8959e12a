"""The database a benchmark fills: `<DATABASE_URL's name>_<suffix>` on the same server, so that a benchmark never
touches the development data, and always migrated to the code's latest migrations.

A new database is copied from a template, `<name>_benchtemplate`, which is migrated first (a no-op of a second or
two when nothing changed): migrating an empty database takes tens of seconds, a copy a fraction of one. An existing
database is migrated in place. One benchmark at a time does this on a server (an advisory lock), so that no
connection is open on the template while it is copied."""

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

DEFAULT_URL = "postgres://reservoir:reservoir@127.0.0.1:5432/reservoir"
REPO_ROOT = Path(__file__).resolve().parent.parent
# First key of the advisory lock held while the template is migrated and copied (second key: 0).
TEMPLATE_LOCK = 7_340_101


def _migrate(url: str) -> None:
    env = dict(os.environ, DATABASE_URL=url, DJANGO_SETTINGS_MODULE="portal.settings.dev")
    env.setdefault("DJANGO_SECRET_KEY", "bench-only")
    subprocess.run(  # noqa: S603 - our own management command
        [sys.executable, "manage.py", "migrate", "-v0", "--noinput"], cwd=REPO_ROOT, env=env, check=True
    )


def bench_database(suffix: str, *, fresh: bool = False) -> str:
    """Create (if missing) and return the URL of the migrated benchmark database `<name>_<suffix>`; with `fresh`,
    drop it first (closing its connections), so that the run starts from empty tables."""
    import psycopg2

    parts = urlsplit(os.environ.get("DATABASE_URL", DEFAULT_URL))
    base = parts.path.lstrip("/")
    name, template = f"{base}_{suffix}", f"{base}_benchtemplate"

    def url(database: str) -> str:
        return urlunsplit(parts._replace(path=f"/{database}"))

    # Connect to the server's maintenance database: the one DATABASE_URL names need not exist.
    connection = psycopg2.connect(url("postgres"))
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s, 0)", [TEMPLATE_LOCK])

            def exists(database: str) -> bool:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database])
                return cursor.fetchone() is not None

            if fresh:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            if exists(name):
                _migrate(url(name))
            else:
                if not exists(template):
                    cursor.execute(f'CREATE DATABASE "{template}"')
                _migrate(url(template))
                cursor.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    finally:
        connection.close()  # the advisory lock goes with the session
    return url(name)
