"""The fault benchmark stops what it started even when a process will not stop (no cluster, no database): once,
Celery beat outlasted the 30 s wait after its TERM, the teardown raised KeyError before stopping the rest, and the
Redis left running held the benchmark's output open, so the smoke test waiting for it hung the whole suite."""

import os
import sys
import time

import psutil
import pytest

from bench import faults
from bench.faults_services import Portal, Redis
from tests.clusterkit import wait_for


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def runs_sleep(pid: int) -> bool:
    try:
        return any(child.name() == "sleep" for child in psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:  # a `sleep 0.1` that ended meanwhile
        return False


def test_a_process_that_ignores_term_is_killed_and_the_rest_still_stopped(tmp_path):
    portal = Portal(dict(os.environ), tmp_path)
    portal.commands = {
        "stubborn": ["bash", "-c", "trap '' TERM; while :; do sleep 0.1; done"],
        "meek": ["sleep", "600"],
    }
    portal.start("stubborn")
    portal.start("meek")
    # The supervisors have started what they supervise, and bash has set its trap (it then runs `sleep`).
    wait_for(
        lambda: all(runs_sleep(supervisor.pid) for supervisor in portal.processes.values()),
        interval=0.05,
        what="the supervised commands",
    )
    processes = [
        process
        for supervisor in portal.processes.values()
        for process in [psutil.Process(supervisor.pid), *psutil.Process(supervisor.pid).children(recursive=True)]
    ]
    assert len(processes) >= 4
    began = time.monotonic()
    portal.stop_all(timeout=1)
    assert portal.processes == {}
    assert all(gone(process.pid) for process in processes)
    assert time.monotonic() - began < 10


def test_a_command_gets_one_term_from_its_supervisor(tmp_path):
    """TERM goes to the supervisor, which passes it on once. A command slow to stop (its handler takes half a second)
    would otherwise get a second TERM inside its handler, as Celery beat did and deadlocked."""
    terms, ready = tmp_path / "terms", tmp_path / "ready"
    handler = (
        "import signal, sys, time\n"
        f"def stop(*_):\n    open({str(terms)!r}, 'a').write('TERM\\n'); time.sleep(0.5); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        f"open({str(ready)!r}, 'w').close()\n"
        "while True:\n    time.sleep(0.05)\n"
    )
    portal = Portal(dict(os.environ), tmp_path)
    portal.commands = {"slow": [sys.executable, "-c", handler]}
    portal.start("slow")
    wait_for(ready.exists, interval=0.05, what="Python's TERM handler")
    portal.stop_all(timeout=10)
    assert terms.read_text() == "TERM\n"


def test_every_teardown_step_runs_and_the_first_error_is_raised_after(capsys):
    ran = []

    def fails(what):
        def step():
            ran.append(what)
            raise RuntimeError(what)

        return step

    with pytest.raises(RuntimeError, match="portal"):
        faults.run_all([("the portal", fails("portal")), ("Redis", lambda: ran.append("redis")), ("PG", fails("pg"))])
    assert ran == ["portal", "redis", "pg"]
    captured = capsys.readouterr()
    assert "stopping the portal failed" in captured.err + captured.out


def test_redis_never_holds_the_benchmarks_own_output(tmp_path):
    redis = Redis(tmp_path)
    redis.start()
    try:
        pid = redis.process.pid
        assert [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in (0, 1, 2)] == ["/dev/null"] * 3
    finally:
        redis.stop()
