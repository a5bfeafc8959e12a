"""Every benchmark at its smoke size: the smallest that runs its whole path (seconds each where it can), and a run
helper that checks the summary it prints last. Used by the smoke tests beside this module."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from bench.harness import REPO_ROOT, STATE_ROOT, last_json_line, summary_problems

# The cluster the cluster benchmarks share in a test run: started by bench/cluster_up.py's smoke run, apart from the
# tests' own cluster (.state/devcluster-test).
SMOKE_STATE_DIR = STATE_ROOT / "devcluster-bench-smoke"
ON_SHARED = ["--shared-cluster", "--state-dir", str(SMOKE_STATE_DIR)]

SMOKE_ARGS = {
    "ui": "--teams 3 --pools 4 --nodes 8 --pods 40 --pending-pods 4 --jobs 50 --queued 5 --requests 2 --warmup 1",
    "api": "--clients 2 --jobs 50 --teams 2 --duration 0.5 --warmup 0.2 --workers 1 --threads 2 --cpu-requests 3 "
    "--cpu-rounds 1",
    "metering": "--teams 3 --pools 3 --intervals 300 --repeat 1",
    "quote": "--teams 3 --pending 30 --running 10 --history 20 --repeat 2",
    # Starts the shared cluster and leaves it up (--keep) for the others.
    "cluster_up": f"--nodes 2 --keep --state-dir {SMOKE_STATE_DIR}",
    "cluster_idle": "--nodes 2 --settle-seconds 1 --idle-seconds 2",
    "sync": "--nodes 9 --pods 40 --repeat 1 --lag-samples 5 --relists 1 --churn 2",
    "admission": "--nodes 4 --teams 2 --jobs 6 --run-seconds 2 --workers 1 --worker-threads 2 --submitters 2 "
    "--timeout 240",
    "exchange": "--day-seconds 12 --reserved-nodes 1 --elastic-nodes 1 --drain-timeout 90",
    "spend": "--teams-per-shape 1",
    "faults": "--burst 4 --rate 1 --fault-at 1 --runs-for 1s --outage 1 --converge-timeout 90",
    "quote_replay": "--jobs 8 --run-scale 0.05 --reserved-nodes 2 --elastic-nodes 1 --warm-up-history 12 "
    "--drain-timeout 120",
}
ON_SHARED_CLUSTER = {"cluster_idle", "sync", "admission", "exchange", "faults", "quote_replay"}


def smoke_args(name: str) -> list[str]:
    return SMOKE_ARGS[name].split() + (ON_SHARED if name in ON_SHARED_CLUSTER else [])


def benchmark_names() -> list[str]:
    """Every script of bench/ that is a benchmark (a `main()` run when the file is run)."""
    names = []
    for path in sorted((REPO_ROOT / "bench").glob("*.py")):
        text = path.read_text()
        if "\ndef main(" in text and '\nif __name__ == "__main__":' in text:
            names.append(path.stem)
    return names


def _exited(process: subprocess.Popen, timeout: float) -> bool:
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


def _read(file) -> str:
    file.seek(0)
    return file.read()


def _tail(text: str, lines: int = 80) -> str:
    return "\n".join(text.splitlines()[-lines:])


def run_benchmark(name: str, env: dict, *, timeout: float = 600) -> dict:
    """Run `python bench/<name>.py` at its smoke size; fail with its output's tail unless it exits 0 and its last
    line is a summary holding the keys it declares (SUMMARY_KEYS) with their types. Returns the summary.

    Its output goes to files, and what is awaited is the benchmark's own exit, never the end of its output: a process
    it started and left running (as a fault benchmark whose teardown failed once left its Redis) keeps its output open,
    and waiting for that output to end waited for ever. On a timeout the benchmark is interrupted (SIGINT to its
    process group: its `finally` blocks stop what it started), then killed."""
    command = [sys.executable, str(REPO_ROOT / "bench" / f"{name}.py"), *smoke_args(name)]
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(  # noqa: S603 - our own benchmark
            command, cwd=REPO_ROOT, env=env, stdout=out, stderr=err, text=True, start_new_session=True
        )
        timed_out = not _exited(process, timeout)
        if timed_out:
            os.killpg(process.pid, signal.SIGINT)
            if not _exited(process, 90):
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        stdout, stderr = _read(out), _read(err)
    if timed_out:
        pytest.fail(f"{' '.join(command)} did not finish in {timeout:.0f}s\n{_tail(stderr)}\n{_tail(stdout, 5)}")
    seconds = time.monotonic() - started
    print(f"[bench smoke] {name}: {seconds:.0f}s")
    if process.returncode != 0:
        pytest.fail(f"{' '.join(command)} exited {process.returncode}\n{_tail(stderr)}\n{_tail(stdout, 5)}")
    try:
        summary = last_json_line(stdout)
    except ValueError as error:
        pytest.fail(f"{name}: the last line printed is not a JSON summary ({error})\n{_tail(stdout, 5)}")
    module = importlib.import_module(f"bench.{name}")
    problems = summary_problems(summary, module.SUMMARY_KEYS)
    assert not problems, f"{name}'s summary: {problems}\n{stdout.splitlines()[-1][:3000]}"
    assert summary["benchmark"] == name or name == "cluster_up"
    return summary
