"""A benchmark says what ran beside it (bench/harness.py, `programs_beside`): a heavy program it did not start makes
its run noisy whatever the load (issue 30: nothing else runs during a measured run), and what it started itself
does not."""

import subprocess
import sys
import time

import psutil

from bench.harness import Run, programs_beside

SLEEPER = "import time; time.sleep(60)"


def _orphan(argv: list[str]) -> int:
    """Start `argv` as nobody's child (its parent exits at once), as a cluster's processes run; its pid."""
    quiet = "stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL"
    starter = f"import subprocess; print(subprocess.Popen({argv!r}, start_new_session=True, {quiet}).pid)"
    return int(subprocess.run([sys.executable, "-c", starter], capture_output=True, text=True, check=True).stdout)


def test_another_benchmark_running_beside_makes_the_run_noisy_and_its_own_children_do_not(tmp_path):
    (tmp_path / "bench").mkdir()
    for name in ("other_benchmark.py", "started_by_me.py"):
        (tmp_path / "bench" / name).write_text(SLEEPER)
    other = _orphan([sys.executable, str(tmp_path / "bench" / "other_benchmark.py")])
    mine = subprocess.Popen([sys.executable, str(tmp_path / "bench" / "started_by_me.py")])
    try:
        for _ in range(50):  # the orphan's command line is there once it has exec'd
            if any("other_benchmark.py" in word for word in psutil.Process(other).cmdline()):
                break
            time.sleep(0.1)
        beside = programs_beside()
        assert f"other_benchmark.py (pid {other})" in beside
        assert not any(f"(pid {mine.pid})" in entry for entry in beside)
        run = Run("test", sample_seconds=60)
        summary = run.finish({})
        assert summary["noisy"] is True and f"other_benchmark.py (pid {other})" in summary["beside"]
    finally:
        psutil.Process(other).kill()
        mine.kill()
        mine.wait()
