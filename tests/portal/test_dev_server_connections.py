"""`make dev`'s web server closes its database connection after each request.

Django's development server serves each request in a thread of its own, so a connection kept for reuse
(CONN_MAX_AGE) is never reused: it stays open until Python's cyclic collector frees the dead thread's objects. A
burst of requests against `make dev` once held every connection PostgreSQL allows, and the workers, the sync and
the pages then answered 503 ("remaining connection slots are reserved"). scripts/dev.sh starts the web server with
DATABASE_CONN_MAX_AGE=0; this test starts it as that line says and counts the server's connections afterwards."""

import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = 12

pytestmark = pytest.mark.django_db(transaction=True)


def _web_command(port: int) -> list[str]:
    """The `start web ...` line of scripts/dev.sh, with its variables filled in."""
    text = (ROOT / "scripts" / "dev.sh").read_text(encoding="utf-8")
    line = re.search(r"^start web (.+)$", text, re.M).group(1)
    line = line.replace("$PY", sys.executable).replace("$PORT", str(port))
    return shlex.split(line)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _database_connections(process: psutil.Process, port: int) -> int:
    held = 0
    for each in [process, *process.children(recursive=True)]:
        held += sum(1 for c in each.net_connections(kind="tcp") if c.raddr and c.raddr.port == port)
    return held


def test_the_dev_web_server_keeps_no_connection_after_its_requests():
    database = connection.settings_dict
    port = _free_port()
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_CONN_MAX_AGE", "DATABASE_URL")}
    env.update(
        DJANGO_SETTINGS_MODULE="portal.settings.dev",
        DATABASE_URL=(
            f"postgres://{database['USER']}:{database['PASSWORD']}@{database['HOST']}:{database['PORT']}/"
            f"{database['NAME']}"
        ),
    )
    server = psutil.Popen(_web_command(port), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except requests.ConnectionError:
                assert server.poll() is None, "the web server exited"
                assert time.monotonic() < deadline, "the web server did not answer within 60 s"
                time.sleep(0.2)
        database_port = int(database["PORT"] or 5432)
        for _ in range(REQUESTS):
            # readyz asks PostgreSQL (and Redis, which may not be there: its answer is not what is tested)
            answer = requests.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
            assert answer.json()["checks"]["database"] == "ok", answer.text
        # The last request's connection is closed when its response is, a moment after the client has read it.
        deadline = time.monotonic() + 3
        while (held := _database_connections(server, database_port)) > 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert held == 0, f"{held} connections to PostgreSQL still open after {REQUESTS} requests"
    finally:
        server.terminate()
        server.wait(10)
