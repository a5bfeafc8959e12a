"""What every benchmark shares: the machine's load around the run, the summary printed last, the keys its figures
quote, the small statistics, and the choice between a cluster of its own and one already running.

Every benchmark makes a `Run` as it starts and ends with `run.finish(summary)`, which prints the JSON summary as the
last line, with beside the benchmark's own figures:
- ``cores``: the number of CPUs the machine has;
- ``load_average``: the 1-, 5- and 15-minute load at the start and at the end of the run;
- ``beside``: the heavy programs already running when it started that it did not start (a control plane, Kueue,
  KWOK, a Celery worker, gunicorn, a test session, another benchmark): an idle development cluster a test session
  left behind takes a fifth of a core without lifting the load above the cores;
- ``noisy``: true when the 1-minute load at the start exceeded the cores, or when anything ran beside it — the
  figures then measure the machine's other work as much as the code (issue 30: nothing else runs during a measured
  run).

Every benchmark also declares ``SUMMARY_KEYS``: the keys of its summary that its figures in the README (and
docs/) quote, each with the type it holds (dotted paths into nested objects, ``*`` for every key of an object).
The smoke tests (tests/bench/) run each benchmark at its smallest size and check that its summary holds them, and
that every summary key the documents quote is declared, so a change that breaks a benchmark or its figures fails
`make test`.

A benchmark that starts a local cluster takes ``--shared-cluster``: it then runs on the cluster already up in its
``--state-dir`` (starting it when it is not), adds its own nodes to it and leaves it running, so that the smoke
tests start one cluster for all of them. Figures from such a run are not comparable with a cluster of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
STATE_ROOT = REPO_ROOT / ".state"

# Types for SUMMARY_KEYS: a figure that is always there, and one a run may leave out (None) when nothing was
# measured (e.g. a p99 over no samples).
NUMBER = (int, float)
NUMBER_OR_NONE = (int, float, type(None))
# What `Run.finish` adds to every summary.
HARNESS_KEYS = {
    "benchmark": str,
    "cores": int,
    "load_average.start": list,
    "load_average.end": list,
    "beside": list,
    "noisy": bool,
}
# Programs whose running beside a benchmark makes it noisy (PostgreSQL and Redis, which every run uses, are not).
BESIDE_PROGRAMS = frozenset(
    {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
        "kueue",
        "hydra",
        "prometheus",
        "celery",
        "gunicorn",
        "pytest",
    }
)


def programs_beside() -> list[str]:
    """The `BESIDE_PROGRAMS` (and other benchmarks) running now, but for this process and the ones it started, as
    "name (pid N)": what a run's figures would share the machine with. A cluster a benchmark reuses (``--reuse``,
    ``--shared-cluster``) runs beside it: its figures are not those of a quiet machine either. So is the test session
    that runs a benchmark's smoke test."""
    import psutil

    me = psutil.Process()
    ours = {me.pid, *(child.pid for child in me.children(recursive=True))}
    found = []
    for process in psutil.process_iter(["pid", "name", "cmdline"]):
        if process.info["pid"] in ours:
            continue
        words = process.info["cmdline"] or [process.info["name"] or ""]
        names = {Path(word).name for word in words[:3]}
        program = next((name for name in sorted(names) if name in BESIDE_PROGRAMS), None) or next(
            (Path(word).name for word in words[:3] if word.startswith("bench/") or "/bench/" in word), None
        )
        if program is not None:
            found.append(f"{program} (pid {process.info['pid']})")
    return found


def logger(prefix: str) -> Callable[[str], None]:
    """A `log(message)` that writes ``[prefix HH:MM:SS] message`` to stderr (stdout is the summary's)."""

    def log(message: str) -> None:
        print(f"[{prefix} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    return log


class Run:
    """One run of a benchmark: notes the load and the cores as it starts, samples the 1-minute load every
    `sample_seconds` while it runs, and prints the summary last (`finish`)."""

    def __init__(self, benchmark: str, *, sample_seconds: float = 10.0):
        self.benchmark = benchmark
        self.cores = os.cpu_count() or 1
        self.load_at_start = os.getloadavg()
        self.beside = programs_beside()
        self.load_samples = [self.load_at_start[0]]
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, args=(sample_seconds,), daemon=True)
        self._sampler.start()

    def _sample(self, every: float) -> None:
        while not self._stop.wait(every):
            self.load_samples.append(os.getloadavg()[0])

    @property
    def noisy(self) -> bool:
        return self.load_at_start[0] > self.cores or bool(self.beside)

    def load_spread(self) -> dict[str, float]:
        """The 1-minute load sampled through the run: min, mean and max."""
        samples = self.load_samples
        return {
            "min": round(min(samples), 1),
            "mean": round(sum(samples) / len(samples), 1),
            "max": round(max(samples), 1),
        }

    def finish(self, summary: dict) -> dict:
        """Add the machine's figures to `summary` and print it as one JSON line, the last thing printed."""
        self._stop.set()
        completed = {
            "benchmark": self.benchmark,
            **summary,
            "cores": self.cores,
            "load_average": {
                "start": [round(value, 2) for value in self.load_at_start],
                "end": [round(value, 2) for value in os.getloadavg()],
            },
            "beside": self.beside,
            "noisy": self.noisy,
        }
        sys.stderr.flush()
        print(json.dumps(completed, default=str), flush=True)
        return completed


# === Statistics ====================================================================================================


def percentile(values: list[float], fraction: float) -> float | None:
    """The nearest-rank percentile of `values` (None when there are none)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(fraction * (len(ordered) - 1)))))]


def rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(float(value), digits)


def spread(values: list[float], tail: float = 0.99) -> dict:
    """p50, the `tail` percentile (named p99 for 0.99, p95 for 0.95), max and the number of samples."""
    return {
        "p50": rounded(percentile(values, 0.5)),
        f"p{round(tail * 100)}": rounded(percentile(values, tail)),
        "max": rounded(max(values) if values else None),
        "samples": len(values),
    }


# === Small helpers =================================================================================================


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate, *, timeout: float, what: str, interval: float = 0.2):
    """Call `predicate` until it returns something true (exceptions count as not yet); that value is returned."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except Exception:  # noqa: BLE001 - not there yet
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class ProcessSampler:
    """Samples the CPU time and resident memory of labelled processes every `interval` seconds: CPU seconds per
    label over the run, peak RSS per label."""

    def __init__(self, interval: float = 0.2):
        import psutil

        self.psutil = psutil
        self.interval = interval
        self.watched: dict[str, list] = {}  # label -> [psutil.Process, ...]
        self.parents: dict[str, object] = {}  # label -> psutil.Process whose children join the label as they come
        self.from_zero: set[int] = set()  # children started after the sampler: all their CPU counts
        self.began = time.time()
        self.cpu: dict[int, tuple[str, float, float]] = {}  # pid -> (label, first seen, last seen)
        self.peak_rss: dict[str, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.started = False

    def watch(self, label: str, pid: int) -> None:
        with contextlib.suppress(self.psutil.Error):
            self.watched.setdefault(label, []).append(self.psutil.Process(pid))

    def watch_children_of(self, label: str, pid: int) -> None:
        """Watch, at every sample, the children `pid` has then, as `label`: PostgreSQL's backends come and go with
        their connections. A child started after the sampler counts from zero; what a child spends between its last
        sample and its exit is missed, so the figure is a lower bound."""
        with contextlib.suppress(self.psutil.Error):
            self.parents[label] = self.psutil.Process(pid)

    def _discover(self) -> None:
        for label, parent in list(self.parents.items()):
            try:
                children = parent.children()
            except self.psutil.Error:
                continue
            known = {process.pid for process in self.watched.get(label, [])}
            for child in children:
                with contextlib.suppress(self.psutil.Error):
                    if child.pid not in known:
                        if child.create_time() >= self.began:
                            self.from_zero.add(child.pid)
                        self.watched.setdefault(label, []).append(child)

    def start(self) -> None:
        self.began = time.time()
        self.started = True
        self.thread.start()

    def _sample(self) -> None:
        self._discover()
        for label, processes in list(self.watched.items()):
            rss = 0
            for process in processes:
                try:
                    times = process.cpu_times()
                    total = times.user + times.system
                    rss += process.memory_info().rss
                except self.psutil.Error:
                    continue
                baseline = 0.0 if process.pid in self.from_zero else total
                first = self.cpu.get(process.pid, (label, baseline, total))[1]
                self.cpu[process.pid] = (label, first, total)
            self.peak_rss[label] = max(self.peak_rss.get(label, 0), rss)

    def _run(self) -> None:
        while not self.stop.is_set():
            self._sample()
            self.stop.wait(self.interval)

    def finish(self) -> None:
        self.stop.set()
        if self.started:
            self.thread.join(timeout=10)

    def cpu_seconds(self) -> dict[str, float]:
        result: dict[str, float] = {}
        for label, first, last in self.cpu.values():
            result[label] = result.get(label, 0.0) + last - first
        return {label: round(value, 1) for label, value in sorted(result.items())}


# === The cluster: one of its own, or one already running ==========================================================


def add_cluster_arguments(parser: argparse.ArgumentParser, state_name: str) -> None:
    """--state-dir (default .state/<state_name>), --keep and --shared-cluster."""
    parser.add_argument("--state-dir", type=Path, default=STATE_ROOT / state_name, help="the cluster's state directory")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    parser.add_argument(
        "--shared-cluster",
        action="store_true",
        help="run on the cluster already up in --state-dir (started if it is not), add this benchmark's nodes and "
        "leave it running (the smoke tests run every benchmark on one cluster; figures are then not comparable)",
    )


def start_cluster(args, topology=None, *, scale_nodes: int | None = None, log=None, **cluster_options):
    """The benchmark's cluster in ``args.state_dir`` with `topology` (the demo topology by default, scaled to
    `scale_nodes`): started afresh (a fresh etcd, the same cluster every run) — or, with ``args.shared_cluster``,
    the one running there with the topology's missing nodes added (started when it is not up)."""
    from devcluster import build, launcher

    build.ensure_built(log)
    cluster = launcher.Cluster(args.state_dir, progress=log, **cluster_options)
    if not args.shared_cluster:
        cluster.down()
    cluster.up(topology, scale_nodes=scale_nodes)
    return cluster


def stop_cluster(args, cluster) -> None:
    """Stop the cluster `start_cluster` gave, unless it is shared or --keep asks to leave it."""
    if cluster is not None and not args.keep and not args.shared_cluster:
        cluster.down()


# === The keys a summary must hold ==================================================================================


def lookup(summary, path: str) -> list:
    """The values at dotted `path` in `summary` (``*`` stands for every key of an object); [] when absent."""
    values = [summary]
    for part in path.split("."):
        found = []
        for value in values:
            if not isinstance(value, dict):
                continue
            if part == "*":
                found.extend(value.values())
            elif part in value:
                found.append(value[part])
        values = found
    return values


def summary_problems(summary: dict, keys: dict) -> list[str]:
    """What `summary` lacks of `keys` ({dotted path: type or tuple of types}), or holds with another type."""
    problems = []
    for path, wanted in {**HARNESS_KEYS, **keys}.items():
        values = lookup(summary, path)
        if not values:
            problems.append(f"{path}: missing")
            continue
        allowed = wanted if isinstance(wanted, tuple) else (wanted,)
        for value in values:
            if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
                names = "/".join("None" if kind is type(None) else kind.__name__ for kind in allowed)
                problems.append(f"{path}: {type(value).__name__} {value!r:.60}, wanted {names}")
                break
    return problems


def last_json_line(output: str) -> dict:
    """The summary: the last line of a benchmark's standard output, parsed."""
    lines = [line for line in output.splitlines() if line.strip()]
    if not lines:
        raise ValueError("the benchmark printed nothing")
    return json.loads(lines[-1])
