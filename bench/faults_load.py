"""The fault benchmark's load (bench/faults.py): bursts of submissions through the API at a steady rate, every
CANCEL_EVERY-th accepted job cancelled a moment later, and every answer noted."""

from __future__ import annotations

import http.client
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from bench.pipeline import KWOK_DELAY

TEAM = "faults"
POOL = "reserved-a800"
CANCEL_EVERY = 4


@dataclass
class Outcome:
    kind: str  # submit | cancel
    name: str
    status: int  # 0: no answer (connection refused, reset, timeout)
    job_id: int | None = None
    error: str = ""
    retry_after: bool = False  # an error answered with a Retry-After header


@dataclass
class Burst:
    fault: str
    outcomes: list[Outcome] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, outcome: Outcome) -> None:
        with self.lock:
            self.outcomes.append(outcome)


class Api:
    def __init__(self, port: int, token: str):
        self.port = port
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def post(self, path: str, body: dict | None = None) -> tuple[int, dict]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request("POST", path, json.dumps(body or {}), self.headers)
            response = connection.getresponse()
            raw = response.read()
            try:
                data = json.loads(raw)
            except ValueError:
                data = {"non_json": raw[:200].decode(errors="replace")}
            if response.getheader("Retry-After"):
                data["_retry_after"] = response.getheader("Retry-After")
            return response.status, data
        finally:
            connection.close()


def run_burst(api: Api, burst: Burst, *, duration: float, rate: float, runs_for: str) -> None:
    """Submissions at `rate` per second for `duration` s; every CANCEL_EVERY-th accepted job is cancelled 1.5 s
    after it was accepted. Each request runs in its own thread, so a slow answer delays no other."""
    pool = ThreadPoolExecutor(max_workers=32)
    accepted = 0
    accepted_lock = threading.Lock()

    def cancel(job_id: int, name: str) -> None:
        time.sleep(1.5)
        try:
            status, data = api.post(f"/api/v1/jobs/{job_id}/cancel/")
            burst.add(Outcome("cancel", name, status, job_id, retry_after="_retry_after" in data))
        except OSError as error:
            burst.add(Outcome("cancel", name, 0, job_id, type(error).__name__))

    def submit(index: int) -> None:
        nonlocal accepted
        name = f"{burst.fault}-{index:03d}"
        body = {
            "team": TEAM,
            "pool": POOL,
            "name": name,
            "image": "registry.example.com/bench/faults:1",
            "gpus": 1,
            "pod_annotations": {KWOK_DELAY: runs_for},
        }
        try:
            status, data = api.post("/api/v1/jobs/", body)
        except OSError as error:
            burst.add(Outcome("submit", name, 0, None, type(error).__name__))
            return
        job_id = data.get("id") if 200 <= status < 300 else None
        error = "" if job_id else json.dumps(data)[:200]
        burst.add(Outcome("submit", name, status, job_id, error, retry_after="_retry_after" in data))
        if job_id:
            with accepted_lock:
                accepted += 1
                if accepted % CANCEL_EVERY == 0:
                    pool.submit(cancel, job_id, name)

    started = time.monotonic()
    for index in range(int(duration * rate)):
        delay = started + index / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        pool.submit(submit, index)
    pool.shutdown(wait=True)
