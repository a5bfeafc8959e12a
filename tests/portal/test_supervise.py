"""scripts/supervise.sh, which `make dev` runs every long-lived process under: a process that exits is started
again (the Celery worker exits on kombu's unrecoverable error after a Redis restart), and TERM stops both."""

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "supervise.sh"


def _wait(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_an_exiting_process_is_started_again_and_term_stops_everything(tmp_path):
    runs = tmp_path / "runs"
    command = f"echo run >> {runs}; sleep 0.2; exit 3"
    supervisor = subprocess.Popen(
        ["bash", str(SCRIPT), "demo", "sh", "-c", command],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait(lambda: runs.exists() and runs.read_text().count("run") >= 2)
    finally:
        supervisor.send_signal(signal.SIGTERM)
        output = supervisor.communicate(timeout=10)[0].decode()
    assert "[supervise] demo exited with status 3; starting it again in 1 s" in output
    assert supervisor.returncode == 0


def test_term_to_the_supervisor_stops_the_running_process(tmp_path):
    supervisor = subprocess.Popen(["bash", str(SCRIPT), "sleeper", "sleep", "300"], start_new_session=True)
    _wait(lambda: any(p.name() == "sleep" for p in psutil.Process(supervisor.pid).children()))
    child = next(p for p in psutil.Process(supervisor.pid).children() if p.name() == "sleep")
    os.kill(supervisor.pid, signal.SIGTERM)
    supervisor.wait(timeout=10)
    _wait(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE)
