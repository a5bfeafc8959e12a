"""Helpers for tests of failures: a Redis of the test's own that can be stopped and started again, Celery pointed at
a real broker (instead of running tasks eagerly), PostgreSQL made unreachable for this process, and this process's
PostgreSQL backend ended as a restart or an administrator would."""

import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path

import psycopg2
import pytest
import redis
from django.db import connection

from portal.celery import app as celery_app


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ThrowawayRedis:
    """redis-server on a loopback port of its own, in a directory of its own; stop() and start() keep the port."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed (scripts/services.sh installs it)")
        self.process = subprocess.Popen(  # noqa: S603 - a fixed binary with our own arguments
            [binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.directory)]
            + ["--save", "", "--appendonly", "no", "--logfile", str(self.directory / "redis.log")],
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        deadline = time.monotonic() + 10
        while True:
            try:
                if client.ping():
                    return
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)

    def messages(self, queue: str) -> list[dict]:
        """The task messages waiting in `queue`: {"task": name, "args": repr of the arguments}."""
        import json

        raw = self.client().lrange(queue, 0, -1)
        return [{"task": m["headers"]["task"], "args": m["headers"]["argsrepr"]} for m in (json.loads(r) for r in raw)]


@pytest.fixture
def throwaway_redis(tmp_path):
    server = ThrowawayRedis(tmp_path)
    yield server
    server.stop()


def _forget_broker_connections() -> None:
    """Drop every broker connection and producer pool, the app's and kombu's global ones (kombu keeps a pool per
    broker URL process-wide: a closed one would be handed out again for the URL the tests switch back to)."""
    from kombu import pools

    if celery_app._pool is not None:
        celery_app._pool.force_close_all()
    celery_app._pool = None
    with contextlib.suppress(KeyError):
        celery_app.__dict__["amqp"]._producer_pool = None
    pools.reset()


@contextlib.contextmanager
def celery_broker(url: str):
    """Tasks are published to the broker at `url` (as in production) instead of running eagerly."""
    saved = {key: celery_app.conf[key] for key in ("broker_url", "task_always_eager")}
    celery_app.conf["broker_url"] = url
    celery_app.conf["task_always_eager"] = False
    _forget_broker_connections()
    try:
        yield
    finally:
        celery_app.conf.update(saved)
        _forget_broker_connections()


@contextlib.contextmanager
def database_down():
    """PostgreSQL refuses this process's connections (as while it restarts) until the block ends."""
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict["HOST"] = "127.0.0.1"
    connection.settings_dict["PORT"] = str(free_port())  # nothing listens there
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.update(saved)


def backend_pid() -> int:
    """The PostgreSQL backend serving this process's connection."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def end_backend(pid: int) -> None:
    """What a restart or an administrator does to an idle connection, from another one (waiting until it is gone)."""
    other = psycopg2.connect(**connection.get_connection_params())
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s, 10000)", [pid])
            assert cursor.fetchone()[0] is True
    finally:
        other.close()
