"""The admission benchmark's observer: a process of its own that watches Kueue's Workloads and the portal's Jobs
and pods and notes when it sees each change (the millisecond clock of this machine), so that the benchmark can tell
the cluster's moments from the sync's. It writes what it saw to a JSON file when it gets SIGTERM.

Usage (bench/admission.py starts it): ``python bench/observer.py KUBECONFIG OUT``.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))


def _epoch(text: str | None) -> float | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


def observe(kubeconfig: str, out: Path) -> None:
    """Watch Workloads and the portal's pods until SIGTERM, then write what was seen (and when) to `out`."""
    import functools

    from kubernetes import client, config

    from cluster.watch import ListWatch, run_forever

    api = config.new_client_from_config(config_file=kubeconfig)
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    stop = threading.Event()
    workloads: dict[str, dict] = {}
    pods: dict[str, dict] = {}
    jobs: dict[str, dict] = {}  # portal job id -> when its Job was first seen, and seen unsuspended
    lock = threading.Lock()

    def on_workload(kind: str, obj: dict) -> None:
        now = time.time()
        metadata = obj.get("metadata") or {}
        owner = next((ref["name"] for ref in metadata.get("ownerReferences") or [] if ref.get("kind") == "Job"), "")
        with lock:
            seen = workloads.setdefault(
                metadata.get("uid", ""),
                {
                    "job": owner,
                    "namespace": metadata.get("namespace", ""),
                    "created": _epoch(metadata.get("creationTimestamp")),
                    "first_seen": now,
                },
            )
            for condition in (obj.get("status") or {}).get("conditions") or []:
                kind_ = condition.get("type")
                wanted = kind_ in ("QuotaReserved", "Admitted", "Finished") and kind_ not in seen
                if wanted and condition.get("status") == "True":
                    seen[kind_] = [_epoch(condition.get("lastTransitionTime")), now]

    def entry(table: dict[str, dict], obj: dict, now: float) -> dict | None:
        """The portal job's entry in `table` (made when first seen), or None for an object without the job label."""
        job_id = ((obj.get("metadata") or {}).get("labels") or {}).get("reservoir.io/job-id")
        return table.setdefault(job_id, {"first_seen": now}) if job_id else None

    def on_pod(kind: str, obj: dict) -> None:
        now = time.time()
        with lock:
            seen = entry(pods, obj, now)
            if seen is None:
                return
            if (obj.get("spec") or {}).get("nodeName") and "bound" not in seen:
                seen["bound"] = now
            if (obj.get("status") or {}).get("phase") == "Running" and "running" not in seen:
                seen["running"] = now

    def on_job(kind: str, obj: dict) -> None:
        now = time.time()
        with lock:
            seen = entry(jobs, obj, now)
            if seen is not None and (obj.get("spec") or {}).get("suspend") is False and "unsuspended" not in seen:
                seen["unsuspended"] = now

    def relisted(handler):
        def on_relist(items: list[dict], version: str) -> None:
            for item in items:
                handler("ADDED", item)

        return on_relist

    watches = [
        ListWatch(
            name="workloads",
            list_call=functools.partial(custom.list_cluster_custom_object, "kueue.x-k8s.io", "v1beta2", "workloads"),
            on_relist=relisted(on_workload),
            on_event=on_workload,
            stop=stop,
        ),
        ListWatch(
            name="pods",
            list_call=core.list_pod_for_all_namespaces,
            list_kwargs={"label_selector": "app.kubernetes.io/managed-by=reservoir"},
            on_relist=relisted(on_pod),
            on_event=on_pod,
            stop=stop,
        ),
        ListWatch(
            name="jobs",
            list_call=client.BatchV1Api(api).list_job_for_all_namespaces,
            list_kwargs={"label_selector": "app.kubernetes.io/managed-by=reservoir"},
            on_relist=relisted(on_job),
            on_event=on_job,
            stop=stop,
        ),
    ]
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    run_forever(watches, versions={})
    while not stop.is_set():
        stop.wait(0.5)
    for watch in watches:
        watch.close()
    with lock:
        out.write_text(json.dumps({"workloads": workloads, "pods": pods, "jobs": jobs}))


def start(env: dict, out: Path):
    """The observer as a process of its own, writing to `out` once stopped (SIGTERM)."""
    import subprocess

    return subprocess.Popen(  # noqa: S603 - this script
        [sys.executable, __file__, env["KUBECONFIG"], str(out)], cwd=REPO_ROOT, env=env
    )


if __name__ == "__main__":
    observe(sys.argv[1], Path(sys.argv[2]))
