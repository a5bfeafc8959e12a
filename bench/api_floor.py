"""The API benchmark's floors and its in-process measure of CPU time per request (bench/api.py).

A floor is the least any server must spend on the same answer: the same page of 50 jobs read with ONE SQL query
(the page, its count and each job's borrowed GPUs, the rule of `jobs.selectors.borrowed_gpus`, all in one statement)
and serialised to the same JSON with the standard library; for a quota change, one UPDATE and one audit INSERT in one
transaction, and the changed row as JSON. No Django, no DRF: psycopg2 on a connection of its own.

How CPU time is compared, like with like: both paths run in this one process, one after the other in alternating
blocks (floor, real, floor, real, ...), each block timed with `time.process_time()` (this process's CPU, user +
system; PostgreSQL's own CPU is in neither) and `time.perf_counter()`. The real path is the production WSGI
application (`portal.wsgi.application`: the middleware chain of a token request, portal/token_lane.py, token
authentication, DRF, its JSON renderer) called with the environ gunicorn would give it; what gunicorn itself spends
parsing HTTP and writing the answer is in neither path, so the ratio is the portal's own cost over the floor's. The
median block of each is reported, and their ratio. Before timing, the floor's answer is checked against the API's
(parsed JSON, equal but for the quota's Kueue and namespace state, which the floor does not read): a floor that
answered less would flatter the ratio.

`profile(...)` runs the real path under cProfile and prints the functions that cost most (``--profile``).
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from collections.abc import Callable

# The page of jobs GET /api/v1/jobs/?state=<state> answers (newest first), its count, and each job's borrowed GPUs:
# a job holding quota in a reserved pool borrows what its team's jobs there hold beyond the team's active
# reservations, filled by priority (highest first), then admission time (earliest first, unknown last), then id.
JOBS_PAGE_SQL = """
WITH page AS (
    SELECT j.id, j.name, t.slug AS team, p.slug AS pool, u.username AS submitted_by, j.image, j.gpus,
           j.cpu_millicores, j.memory_mib, j.placement, j.priority, j.state, j.state_changed_at, j.created_at,
           j.started_at, j.finished_at, j.node_name, j.pending_reason, ap.slug AS admitted_pool, j.preemptions,
           j.nodes, j.total_gpus, j.notify, j.team_id,
           CASE WHEN j.state IN ('admitted', 'pending', 'running') THEN coalesce(j.admitted_pool_id, j.pool_id) END
               AS quota_pool_id,
           count(*) OVER () AS total
    FROM jobs_job j
    JOIN portal_team t ON t.id = j.team_id
    JOIN pools_pool p ON p.id = j.pool_id
    JOIN portal_user u ON u.id = j.submitted_by_id
    LEFT JOIN pools_pool ap ON ap.id = j.admitted_pool_id
    WHERE j.state = %(state)s
    ORDER BY j.created_at DESC, j.id DESC
    LIMIT %(limit)s OFFSET %(offset)s
),
held AS (
    SELECT h.id, h.team_id, h.quota_pool_id, h.total_gpus,
           sum(h.total_gpus) OVER (
               PARTITION BY h.team_id, h.quota_pool_id
               ORDER BY h.priority DESC, w.admitted_at IS NULL, w.admitted_at, h.id
           ) AS filled
    FROM (
        SELECT j.id, j.team_id, coalesce(j.admitted_pool_id, j.pool_id) AS quota_pool_id, j.total_gpus, j.priority
        FROM jobs_job j
        WHERE j.state IN ('admitted', 'pending', 'running')
    ) h
    JOIN pools_pool hp ON hp.id = h.quota_pool_id AND hp.kind = 'reserved'
    LEFT JOIN LATERAL (
        SELECT max(w.admitted_at) AS admitted_at FROM jobs_workload w WHERE w.job_id = h.id AND NOT w.finished
    ) w ON true
    WHERE (h.team_id, h.quota_pool_id) IN (SELECT team_id, quota_pool_id FROM page)
),
reserved AS (
    SELECT r.team_id, r.pool_id, sum(r.gpus) AS gpus
    FROM pools_reservation r
    WHERE r.starts_at <= now() AND r.ends_at > now()
      AND (r.team_id, r.pool_id) IN (SELECT team_id, quota_pool_id FROM page)
    GROUP BY r.team_id, r.pool_id
)
SELECT page.id, page.name, page.team, page.pool, page.submitted_by, page.image, page.gpus, page.cpu_millicores,
       page.memory_mib, page.placement, page.priority, page.state, page.state_changed_at, page.created_at,
       page.started_at, page.finished_at, page.node_name, page.pending_reason, page.admitted_pool, page.preemptions,
       page.nodes, page.total_gpus, page.notify,
       coalesce(least(held.total_gpus, greatest(held.filled - coalesce(reserved.gpus, 0), 0)), 0) AS borrowed_gpus,
       page.total
FROM page
LEFT JOIN held ON held.id = page.id
LEFT JOIN reserved ON reserved.team_id = held.team_id AND reserved.pool_id = held.quota_pool_id
ORDER BY page.created_at DESC, page.id DESC
"""

JOB_FIELDS = [
    "id",
    "name",
    "team",
    "pool",
    "submitted_by",
    "image",
    "gpus",
    "cpu_millicores",
    "memory_mib",
    "placement",
    "priority",
    "state",
    "state_changed_at",
    "created_at",
    "started_at",
    "finished_at",
    "node_name",
    "pending_reason",
    "admitted_pool",
    "preemptions",
    "nodes",
    "total_gpus",
    "notify",
]

# One UPDATE (the old value read in the same statement) and one audit row, as `pools.services.set_quota` records it.
QUOTA_UPDATE_SQL = """
UPDATE pools_quota q SET max_gpus = %(max_gpus)s, updated_at = now()
FROM (SELECT id, max_gpus, updated_at FROM pools_quota WHERE id = %(id)s FOR UPDATE) old, portal_team t, pools_pool p
WHERE q.id = old.id AND t.id = q.team_id AND p.id = q.pool_id
RETURNING q.id, q.team_id, q.pool_id, t.slug, p.slug, t.name, p.name, old.max_gpus, old.updated_at, q.max_gpus,
          q.updated_at
"""
AUDIT_INSERT_SQL = """
INSERT INTO portal_auditentry (actor_id, actor_username, action, object_type, object_id, object_repr, before, after, at)
VALUES (%s, %s, 'quota.set', 'pools.quota', %s, %s, %s, %s, now())
"""


def iso(moment) -> str | None:
    """A datetime as DRF writes it (ISO 8601, UTC as Z)."""
    if moment is None:
        return None
    text = moment.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def borrowed_words(gpus: int) -> str:
    if not gpus:
        return ""
    if gpus == 1:
        return "On 1 borrowed GPU — may be preempted when the owner needs it back."
    return f"On {gpus} borrowed GPUs — may be preempted when the owner needs them back."


def floor_connection(database_url: str):
    import psycopg2

    connection = psycopg2.connect(database_url)
    with connection.cursor() as cursor:
        cursor.execute("SET TIME ZONE 'UTC'")
    connection.commit()
    return connection


def floor_jobs_page(connection, *, state: str, base_url: str, page_size: int = 50) -> bytes:
    """GET /api/v1/jobs/?state=<state>, first page, as the floor answers it: one query, json.dumps."""
    with connection.cursor() as cursor:
        cursor.execute(JOBS_PAGE_SQL, {"state": state, "limit": page_size, "offset": 0})
        rows = cursor.fetchall()
    connection.commit()
    results = []
    total = 0
    for row in rows:
        job = dict(zip(JOB_FIELDS, row, strict=False))
        for name in ("state_changed_at", "created_at", "started_at", "finished_at"):
            job[name] = iso(job[name])
        job["borrowed_gpus"] = row[-2]
        job["borrowed_note"] = borrowed_words(row[-2])
        job["expected_start"] = None  # a running job has no start-time quote (the page is of running jobs)
        total = row[-1]
        results.append(job)
    page = {
        "count": total,
        "next": f"{base_url}?page=2&state={state}" if total > page_size else None,
        "previous": None,
        "results": results,
    }
    return json.dumps(page, ensure_ascii=False, separators=(",", ":")).encode()


def floor_quota_update(connection, *, quota_id: int, max_gpus: int, actor_id: int, actor_username: str) -> bytes:
    """PATCH /api/v1/quotas/<id>/ as the floor does it: one UPDATE, one audit INSERT, one commit, the row as JSON."""
    with connection.cursor() as cursor:
        cursor.execute(QUOTA_UPDATE_SQL, {"id": quota_id, "max_gpus": max_gpus})
        quota_id, team_id, pool_id, team, pool, team_name, pool_name, old_gpus, old_at, new_gpus, new_at = (
            cursor.fetchone()
        )
        before = {"id": quota_id, "team": team_id, "pool": pool_id, "max_gpus": old_gpus, "updated_at": iso(old_at)}
        after = {**before, "max_gpus": new_gpus, "updated_at": iso(new_at)}
        cursor.execute(
            AUDIT_INSERT_SQL,
            [
                actor_id,
                actor_username,
                str(quota_id),
                f"{team_name} · {new_gpus} GPUs of {pool_name}",
                json.dumps(before),
                json.dumps(after),
            ],
        )
    connection.commit()
    answer = {"id": quota_id, "team": team, "pool": pool, "max_gpus": new_gpus, "updated_at": iso(new_at)}
    return json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode()


class WsgiCaller:
    """Calls a WSGI application in this process with the environ gunicorn builds for a request to 127.0.0.1:<port>;
    returns (status code, body)."""

    def __init__(self, application, *, port: int, headers: dict[str, str]):
        self.application = application
        self.port = port
        self.headers = {f"HTTP_{name.upper().replace('-', '_')}": value for name, value in headers.items()}

    def __call__(self, method: str, path: str, query: str = "", body: bytes = b"") -> tuple[int, bytes]:
        environ = {
            "REQUEST_METHOD": method,
            "SCRIPT_NAME": "",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": str(self.port),
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "HTTP_HOST": f"127.0.0.1:{self.port}",
            "CONTENT_LENGTH": str(len(body)),
            "CONTENT_TYPE": "application/json" if body else "",
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
            **self.headers,
        }
        answer: dict = {}

        def start_response(status, headers, exc_info=None):
            answer["status"] = int(status.split()[0])

        result = self.application(environ, start_response)
        try:
            body_out = b"".join(result)
        finally:
            if hasattr(result, "close"):
                result.close()
        return answer["status"], body_out


def _block(request: Callable[[int], None], count: int, offset: int) -> tuple[float, float]:
    """CPU and wall milliseconds per request over `count` calls of `request(i)`."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for index in range(count):
        request(offset + index)
    return (time.process_time() - cpu0) * 1000 / count, (time.perf_counter() - wall0) * 1000 / count


def compare(*, floor: Callable[[int], None], real: Callable[[int], None], requests: int, rounds: int) -> dict:
    """Floor and real path in alternating blocks of `requests` calls, `rounds` times, after one warm-up block each:
    per-request CPU and wall time of the median block of each, and the CPU ratio real / floor."""
    _block(floor, max(1, requests // 4), 0)
    _block(real, max(1, requests // 4), 0)
    floor_blocks, real_blocks = [], []
    for round_index in range(rounds):
        floor_blocks.append(_block(floor, requests, (round_index + 1) * requests))
        real_blocks.append(_block(real, requests, (round_index + 1) * requests))
    floor_cpu = statistics.median(cpu for cpu, _ in floor_blocks)
    real_cpu = statistics.median(cpu for cpu, _ in real_blocks)
    return {
        "floor_cpu_ms": round(floor_cpu, 3),
        "real_cpu_ms": round(real_cpu, 3),
        "cpu_ratio": round(real_cpu / floor_cpu, 2) if floor_cpu > 0 else None,
        "floor_wall_ms": round(statistics.median(wall for _, wall in floor_blocks), 3),
        "real_wall_ms": round(statistics.median(wall for _, wall in real_blocks), 3),
        "floor_cpu_ms_blocks": [round(cpu, 3) for cpu, _ in floor_blocks],
        "real_cpu_ms_blocks": [round(cpu, 3) for cpu, _ in real_blocks],
        "requests_per_block": requests,
        "rounds": rounds,
    }


def profile(real: Callable[[int], None], *, requests: int, label: str, top: int = 40) -> None:
    """The real path under cProfile timed by this process's CPU (the figure the ratio compares; a wait on PostgreSQL
    costs none), `requests` calls; the `top` functions by cumulative and by own time to stderr."""
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    for index in range(requests):
        real(index)
    profiler.disable()
    for order in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats(order).print_stats(top)
        print(f"--- CPU profile of {label}, {requests} requests, by {order} ---\n{out.getvalue()}", file=sys.stderr)
