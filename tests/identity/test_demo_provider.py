"""`make dev`'s demo OpenID Connect provider (devcluster.hydra.dev_up, a real ory/hydra) starts again after a stop on
the database the start before left behind, as a second `make dev` or one from a fresh clone does: hydra encrypts its
signing keys with a secret new on each start, and refused the keys of the start before (its discovery answering 500)
until the database was made anew on each start."""

import json
import os
import secrets
import time
import urllib.request

from devcluster import hydra as hydra_module
from tests.identity.conftest import database_server_url


def _wait_gone(pids: list[int], timeout: float = 15.0) -> None:
    """Until the processes `dev_up` started from this one (its children here: `make dev` runs it in a process that
    exits) have exited, reaping them."""
    deadline = time.monotonic() + timeout
    running = set(pids)
    while running:
        for pid in list(running):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                running.discard(pid)
        assert time.monotonic() < deadline, f"still running: {sorted(running)}"
        time.sleep(0.1)


def _database_settings(base_url: str, database: str) -> list[str]:
    """The settings made for `database` itself (ALTER DATABASE ... SET)."""
    connection = hydra_module._server(base_url)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT setconfig FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase"
                " WHERE d.datname = %s AND s.setrole = 0",
                [database],
            )
            row = cursor.fetchone()
    finally:
        connection.close()
    return list(row[0]) if row else []


def test_the_demo_provider_starts_again_on_the_database_a_start_before_left(tmp_path):
    base_url = database_server_url()
    database = f"rsv_hydra_dev_{os.getpid()}_{secrets.token_hex(3)}"
    issuers = []
    try:
        for _start in range(2):
            hydra_module.dev_up(
                tmp_path, database_base_url=base_url, portal_url="http://127.0.0.1:8000", database=database
            )
            state = json.loads(hydra_module._state_file(tmp_path).read_text())
            with urllib.request.urlopen(f"{state['issuer']}.well-known/openid-configuration", timeout=10) as answer:
                assert answer.status == 200
                assert json.load(answer)["issuer"] == state["issuer"]
            issuers.append(state["issuer"])
            assert _database_settings(base_url, database) == ["synchronous_commit=off"]
            stopped = hydra_module.dev_down(tmp_path)
            assert sorted(stopped) == sorted(state["pids"])
            _wait_gone(stopped)
    finally:
        hydra_module.dev_down(tmp_path)
        hydra_module.drop_database(base_url, database)
    assert len(issuers) == 2
