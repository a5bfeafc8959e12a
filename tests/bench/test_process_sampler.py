"""The benchmarks' CPU sampler counts the children a process starts after the sampling began, as PostgreSQL starts a
backend per connection (bench/harness.py, `ProcessSampler.watch_children_of`): all their CPU, from zero, under the
parent's label; a process started with a niceness keeps its pid (bench/pipeline.py, `niced`), and a thread reniced
changes only itself (`renice_this_thread`)."""

import os
import subprocess
import sys
import threading
import time

import psutil

from bench.harness import ProcessSampler
from bench.pipeline import niced, renice_this_thread

# A parent that, once told (a line on stdin), starts a child burning about 0.6 s of CPU, then waits for it.
PARENT = """
import subprocess, sys
sys.stdin.readline()
burn = "import time\\nend = time.process_time() + 0.6\\nwhile time.process_time() < end: pass\\ntime.sleep(30)"
subprocess.Popen([sys.executable, "-c", burn]).wait()
"""


def test_a_child_started_after_the_sampling_began_counts_from_zero_under_its_parents_label():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdin=subprocess.PIPE, text=True)
    sampler = ProcessSampler(interval=0.05)
    try:
        sampler.watch_children_of("backends", parent.pid)
        sampler.start()
        time.sleep(0.2)
        assert sampler.cpu_seconds().get("backends", 0.0) == 0.0  # no child yet
        parent.stdin.write("go\n")
        parent.stdin.flush()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and sampler.cpu_seconds().get("backends", 0.0) < 0.55:
            time.sleep(0.1)
        # The child's burn began before its first sample: it counts all the same, and only the child's CPU counts.
        assert 0.55 <= sampler.cpu_seconds()["backends"] < 1.5
    finally:
        sampler.finish()
        for child in psutil.Process(parent.pid).children():
            child.kill()
        parent.kill()
        parent.wait()


def test_a_niced_command_runs_at_that_niceness_under_its_own_pid():
    assert niced(["true"], 0) == ["true"]
    process = subprocess.Popen(niced([sys.executable, "-c", "import time; time.sleep(30)"], 7))
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "python" not in psutil.Process(process.pid).name():
            time.sleep(0.02)  # `nice` execs the command: same pid, the command's name once it has
        assert "python" in psutil.Process(process.pid).name()
        assert psutil.Process(process.pid).nice() == 7
    finally:
        process.kill()
        process.wait()


def test_a_thread_reniced_changes_only_itself():
    before = os.getpriority(os.PRIO_PROCESS, 0)
    wanted = before + 3 if before <= 16 else before - 3  # niceness goes up to 19; down needs root (this suite's)
    seen = {}

    def run():
        renice_this_thread(wanted)
        seen["inside"] = os.getpriority(os.PRIO_PROCESS, 0)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen["inside"] == wanted
    assert os.getpriority(os.PRIO_PROCESS, 0) == before
