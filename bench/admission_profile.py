"""Where a job's time goes in the admission benchmark's portal phase (bench/admission.py), stage by stage, from
timestamps the run has anyway or takes cheaply:

- `PublishTimer`: the submit service's publication of its outbox message (`portal.outbox.publish_now`, run on commit
  inside the submit call), timed in the submitting thread;
- `TaskEvents`: the Celery workers' own task events (the benchmark starts them with ``-E``): when each submit task
  started and ended, on the worker's clock (this machine's);
- the observer (bench/observer.py): when the job's Workload was admitted, its Job unsuspended and its pod ran;
- the database marks (bench/pipeline.py): when the sync wrote the job Running.

`breakdown` turns them into the stages of one job, each a spread over the first wave's jobs (p50, p99):
``submit_call`` (the submit service, the outbox publication included), of which ``outbox_publish``;
``queue_wait`` (published → the task starts); ``task`` (the task: its reads, the namespace and LocalQueue checks,
the create call, the job marked created); ``kueue_admission`` (the task's end → the Workload admitted);
``pod_start`` (admitted → the pod Running), of which ``unsuspend`` (admitted → Kueue's unsuspending of the Job
seen); ``sync_running`` (the pod Running → the job Running in the database).
The floor's counterparts (`floor_breakdown`): ``create_call``, ``kueue_admission`` from its end, ``pod_start``,
``unsuspend``.
What the portal adds is its submit call, the queue wait, the task beyond a create call, and the sync.
`tasks_by_second` lists every submit task of the phase by the second it started in (how many, their mean and longest
run), which tells the tasks of the submissions' burst from those after it.
"""

from __future__ import annotations

import ast
import threading
from dataclasses import dataclass

from bench.harness import rounded, spread


class PublishTimer:
    """Times `portal.outbox.publish_now` per thread: `take()` gives the (start, end) of the current thread's last
    publication (and forgets it)."""

    def __init__(self):
        import time

        from portal import outbox

        self._local = threading.local()
        original = outbox.publish_now

        def timed(message) -> bool:
            started = time.time()
            try:
                return original(message)
            finally:
                self._local.last = (started, time.time())

        outbox.publish_now = timed

    def take(self) -> tuple[float, float] | None:
        last = getattr(self._local, "last", None)
        self._local.last = None
        return last


class TaskEvents:
    """The submit tasks' events (received, started, succeeded, failed) as the Celery workers send them, captured in
    a thread of this process: `by_job()` gives, per job id, the (started, ended) of its last run."""

    TASK = "jobs.submit_job"

    def __init__(self, celery_app):
        self.app = celery_app
        self.tasks: dict[str, dict] = {}  # task uuid -> what its events said
        self.lock = threading.Lock()
        self.receiver = None
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="celery-events", daemon=True)

    def start(self) -> None:
        self.thread.start()
        self.ready.wait(30)

    def _on_event(self, event: dict) -> None:
        kind = event.get("type", "")
        with self.lock:
            task = self.tasks.setdefault(event.get("uuid", ""), {})
            if kind == "task-received":
                if event.get("name") != self.TASK:
                    return
                try:
                    args = ast.literal_eval(event.get("args") or "()")
                except (SyntaxError, ValueError):
                    args = ()
                task["job_id"] = args[0] if args else None
            elif kind == "task-started":
                task["started"] = event["timestamp"]
            elif kind in ("task-succeeded", "task-failed", "task-retried"):
                task["ended"] = event["timestamp"]
                task["outcome"] = kind

    def _run(self) -> None:
        with self.app.connection_for_read() as connection:
            self.receiver = self.app.events.Receiver(connection, handlers={"*": self._on_event})
            self.ready.set()
            self.receiver.capture(limit=None, timeout=None, wakeup=False)

    def stop(self) -> None:
        if self.receiver is not None:
            self.receiver.should_stop = True
        self.thread.join(timeout=10)

    def by_job(self) -> dict[int, tuple[float, float]]:
        runs: dict[int, tuple[float, float]] = {}
        with self.lock:
            for task in self.tasks.values():
                if task.get("job_id") is None or "started" not in task or "ended" not in task:
                    continue
                previous = runs.get(task["job_id"])
                if previous is None or task["started"] > previous[0]:
                    runs[task["job_id"]] = (task["started"], task["ended"])
        return runs


STAGES = (
    "submit_call",
    "outbox_publish",
    "queue_wait",
    "task",
    "kueue_admission",
    "pod_start",
    "unsuspend",
    "sync_running",
)
# Stages inside another (the outbox publication inside the submit call, Kueue unsuspending the Job inside the pod's
# start): not counted again in the shares of the median.
INNER_STAGES = ("outbox_publish", "unsuspend")


def _ms(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else (end - start) * 1000


def breakdown(*, wave: list, seen: dict, task_runs: dict[int, tuple[float, float]], running_db: dict) -> dict:
    """Each stage's spread (ms) over the jobs of `wave` (the submissions of the first wave, with `publish` set),
    and each stage's share of the median job's submit → Running, and every submit task by the second it started in
    (`tasks_by_second`)."""
    samples: dict[str, list[float]] = {stage: [] for stage in STAGES}
    admitted_at = _admitted_by_job(seen)
    for submission in wave:
        job = str(submission.job_id)
        publish = getattr(submission, "publish", None)
        task = task_runs.get(submission.job_id)
        admitted = admitted_at.get(submission.job_id)
        running = seen["pods"].get(job, {}).get("running")
        unsuspended = seen.get("jobs", {}).get(job, {}).get("unsuspended")
        values = {
            "submit_call": _ms(submission.started, submission.finished),
            "outbox_publish": _ms(*publish) if publish else None,
            "queue_wait": _ms(publish[1], task[0]) if publish and task else None,
            "task": _ms(*task) if task else None,
            "kueue_admission": _ms(task[1], admitted) if task else None,
            "pod_start": _ms(admitted, running),
            "unsuspend": _ms(admitted, unsuspended),
            "sync_running": _ms(running, running_db.get(job)),
        }
        for stage, value in values.items():
            if value is not None:
                samples[stage].append(value)
    spreads = {stage: spread(values) for stage, values in samples.items()}
    medians = {stage: spreads[stage]["p50"] or 0.0 for stage in STAGES if stage not in INNER_STAGES}
    total = sum(medians.values())
    return {
        "stages_ms": spreads,
        "share_of_median_percent": {
            stage: rounded(100 * value / total) if total else None for stage, value in medians.items()
        },
        "tasks_by_second": tasks_by_second(task_runs),
    }


def tasks_by_second(task_runs: dict[int, tuple[float, float]], seconds: int = 20) -> list[dict]:
    """Every submit task of the phase (not only the first wave's) by the second it started in, counted from the
    first one's start, for the first `seconds` seconds: how many started, and their mean and longest run (ms). The
    tasks of the submissions' burst against those after it (issue 30: in two runs the tasks started while 300 jobs
    were being submitted took 0.5–1.7 s on average, those after 0.3–0.9 s). Pure."""
    if not task_runs:
        return []
    first = min(started for started, _ended in task_runs.values())
    buckets: list[list[float]] = [[] for _ in range(seconds)]
    for started, ended in task_runs.values():
        second = int(started - first)
        if second < seconds:
            buckets[second].append((ended - started) * 1000)
    return [
        {
            "second": second,
            "started": len(runs),
            "mean_ms": rounded(sum(runs) / len(runs)) if runs else None,
            "max_ms": rounded(max(runs)) if runs else None,
        }
        for second, runs in enumerate(buckets)
    ]


def floor_breakdown(*, wave: list, seen: dict) -> dict:
    """The floor's counterparts: its create call, Kueue's admission and the pod's start (ms spreads)."""
    samples: dict[str, list[float]] = {"create_call": [], "kueue_admission": [], "pod_start": [], "unsuspend": []}
    admitted_at = _admitted_by_job(seen)
    for submission in wave:
        job = str(submission.job_id)
        admitted = admitted_at.get(submission.job_id)
        running = seen["pods"].get(job, {}).get("running")
        unsuspended = seen.get("jobs", {}).get(job, {}).get("unsuspended")
        for stage, value in (
            ("create_call", _ms(submission.started, submission.finished)),
            ("kueue_admission", _ms(submission.finished, admitted)),
            ("pod_start", _ms(admitted, running)),
            ("unsuspend", _ms(admitted, unsuspended)),
        ):
            if value is not None:
                samples[stage].append(value)
    return {stage: spread(values) for stage, values in samples.items()}


def _admitted_by_job(seen: dict) -> dict[int, float]:
    """Job id -> when the observer saw its Workload admitted."""
    admitted = {}
    for workload in seen["workloads"].values():
        name = workload.get("job", "")
        if name.startswith("rsv-") and name[4:].isdigit() and "Admitted" in workload:
            admitted[int(name[4:])] = workload["Admitted"][1]
    return admitted


def _metrics_lines(*prefixes: str) -> str:
    """The lines of the apiserver's /metrics that start with one of `prefixes`."""
    from cluster import client

    response = client.core().api_client.call_api(
        "/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False, _request_timeout=30
    )[0]
    try:
        text = response.data.decode()
    finally:
        response.release_conn()
    return "\n".join(line for line in text.splitlines() if line.startswith(prefixes))


def _request_kind(labels: dict) -> str:
    resource = labels.get("resource") or labels.get("group") or "?"
    if labels.get("subresource"):
        resource += "/" + labels["subresource"]
    return f"{labels.get('verb', '?')} {resource}"


# The requests whose time in the apiserver each phase reports (mean milliseconds): the Job's creation, Kueue's
# unsuspending it, the Job controller's pod and its status writes.
LATENCY_KINDS = ("POST jobs", "PATCH jobs", "PUT jobs/status", "POST pods", "POST workloads")


@dataclass(frozen=True)
class ApiserverReading:
    """What the apiserver had served so far (its /metrics), read at a phase's start and end: requests by verb and
    resource (``"PATCH pods"``, ``"PUT workloads/status"``; watches count when they open, not per event), the seconds
    it took serving those of LATENCY_KINDS, and the seconds requests waited in its priority-and-fairness queues by
    priority level."""

    requests: dict[str, int]
    seconds: dict[str, float]
    queued: dict[str, float]


def apiserver_reading() -> ApiserverReading:
    """The apiserver's counters now: `apiserver_request_total`, `apiserver_request_duration_seconds` (its sums) and
    `apiserver_flowcontrol_request_wait_duration_seconds` (its sums)."""
    from prometheus_client.parser import text_string_to_metric_families

    counted = _metrics_lines(
        "apiserver_request_total{",
        "apiserver_request_duration_seconds_sum{",
        "apiserver_flowcontrol_request_wait_duration_seconds_sum{",
    )
    reading = ApiserverReading(requests={}, seconds={}, queued={})
    for family in text_string_to_metric_families(counted):
        for sample in family.samples:
            if sample.name == "apiserver_request_total":
                key = _request_kind(sample.labels)
                reading.requests[key] = reading.requests.get(key, 0) + int(sample.value)
            elif sample.name == "apiserver_request_duration_seconds_sum":
                key = _request_kind(sample.labels)
                if key in LATENCY_KINDS:
                    reading.seconds[key] = reading.seconds.get(key, 0.0) + sample.value
            elif sample.name == "apiserver_flowcontrol_request_wait_duration_seconds_sum":
                key = sample.labels.get("priority_level", "?")
                reading.queued[key] = reading.queued.get(key, 0.0) + sample.value
    return reading


def apiserver_latency(before: ApiserverReading, after: ApiserverReading) -> dict[str, float]:
    """Over a phase: the mean milliseconds the apiserver took per request of each of LATENCY_KINDS, and the seconds
    requests waited in its priority-and-fairness queues by priority level (those that waited at all)."""
    latency = {}
    for kind in LATENCY_KINDS:
        count = after.requests.get(kind, 0) - before.requests.get(kind, 0)
        seconds = after.seconds.get(kind, 0.0) - before.seconds.get(kind, 0.0)
        if count > 0:
            latency[f"{kind} ms"] = round(1000 * seconds / count, 1)
    for level, value in after.queued.items():
        waited = value - before.queued.get(level, 0.0)
        if waited > 0.0005:
            latency[f"queued {level} s"] = round(waited, 3)
    return latency


def requests_since(before: ApiserverReading, after: ApiserverReading, *, top: int = 15) -> dict[str, int]:
    """The `top` kinds of request most made between two readings, most first."""
    made = {key: count - before.requests.get(key, 0) for key, count in after.requests.items()}
    ranked = sorted(((count, key) for key, count in made.items() if count > 0), reverse=True)[:top]
    return {key: count for count, key in ranked}
