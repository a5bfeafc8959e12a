"""Reads for the job pages: the list, a job's timeline and placement, the pending queue (the submit outlook is
`jobs.outlook`).

Visibility comes from `Job.objects.visible_to(user)` and `Team.objects.visible_to(user)`: a job outside the
user's teams is never fetched for its details. The pending queue shows every team's waiting work (PRODUCT.md:
researchers see the pending queue), but another team's rows carry only pool, GPUs and wait, with a reason that
says nothing of the team ("waiting for its team's quota", "waiting for a node"): no team name, job name, image,
command, quota, usage or queue position. Each page runs a fixed number of queries whatever the number of jobs and pods.
"""

import functools
from dataclasses import dataclass, field
from datetime import datetime

from django.core.paginator import Paginator
from django.db import connection
from django.db.models import F, OuterRef, Subquery, Window
from django.db.models.functions import RowNumber
from django.utils import timezone
from django.utils.translation import gettext as _

from pools.lending import TeamUse, available_to, pool_lending, team_uses
from pools.models import Node, Pool, Quota
from pools.occupancy import Occupancy, gang_fit, pool_occupancy
from pools.selectors import spill_targets
from portal.models import Membership, Team, User

from . import reasons
from .choices import JobState, Placement
from .models import Job, JobEvent, JobTemplate, Pod, Workload
from .settling import observed_state

PENDING_PAGE_SIZE = 50


def jobs_for_list(user):
    """The jobs `user` may see, newest first, with what a list row shows."""
    return (
        Job.objects.visible_to(user)
        .select_related("team", "pool", "submitted_by")
        .only(
            "id",
            "name",
            "gpus",
            "nodes",
            "state",
            "state_changed_at",
            "created_at",
            "started_at",
            "finished_at",
            "node_name",
            "admitted_pool",
            "team__name",
            "team__slug",
            "pool__name",
            "pool__slug",
            "submitted_by__username",
        )
        .order_by("-created_at", "-id")
    )


def users_of_visible_teams(user):
    """Who may appear as a submitter to `user`: the members of the teams they see (everyone for an admin)."""
    if user.is_authenticated and user.is_admin:
        return User.objects.order_by("username")
    return User.objects.filter(pk__in=Membership.objects.visible_to(user).values("user")).order_by("username")


def job_page_for(user, job_id: int) -> Job:
    """One visible job with its team and pool (Job.DoesNotExist when outside the user's scope)."""
    return Job.objects.visible_to(user).select_related("team", "pool", "submitted_by").get(pk=job_id)


@dataclass
class TimelineStep:
    state: str
    label: str
    at: datetime
    message: str
    after_seconds: int | None


def waiting_reason(job: Job) -> str:
    """Why a queued or pending job waits, in the viewer's language, worded from its newest Workload and pods the
    way the sync settles its state (`settling.observed_state`); "" when it does not wait."""
    if job.state not in (JobState.QUEUED, JobState.PENDING, JobState.ADMITTED):
        return ""
    workload = Workload.objects.filter(job=job, finished=False).order_by("-created_at", "-id").first()
    if workload is None:
        return job.pending_reason
    said = str(observed_state(job, workload)[2])
    if job.state == JobState.QUEUED and workload.message:
        waits = reclaim_waits([(job.team_id, job.pool_id, job.total_gpus, workload.message)])
        if (job.team_id, job.pool_id) in waits:
            said = f"{said}\n{reasons.reclaim_reason(waits[(job.team_id, job.pool_id)])}"
    return said


def timeline(job: Job) -> tuple[list[TimelineStep], list[JobEvent]]:
    """The state changes of `job` with the time spent before each, and every recorded event (notes too)."""
    events = list(JobEvent.objects.filter(job=job).select_related("actor").order_by("at", "id"))
    labels = dict(JobState.choices)
    steps: list[TimelineStep] = []
    for event in events:
        if not event.to_state:
            continue
        after = int((event.at - steps[-1].at).total_seconds()) if steps else None
        steps.append(TimelineStep(event.to_state, labels[event.to_state], event.at, event.in_words, after))
    return steps, events


@dataclass
class PodPlacement:
    node_name: str
    pool: Pool | None
    pod_name: str
    pod_phase: str


def placement_of(job: Job) -> PodPlacement:
    """Where the job's newest pod is (or was last seen): node, the node's pool and the pod."""
    pod = Pod.objects.filter(job=job).order_by("-created_at").values("name", "node_name", "phase").first() or {}
    node_name = pod.get("node_name") or job.node_name
    node = Node.objects.select_related("pool").filter(name=node_name).first() if node_name else None
    return PodPlacement(
        node_name=node_name,
        pool=node.pool if node else None,
        pod_name=pod.get("name", ""),
        pod_phase=pod.get("phase", ""),
    )


@dataclass
class GangPods:
    """A job's pods as the sync last saw them, by completion index (node rank), and how many of its `nodes` run."""

    nodes: int
    pods: list[dict]

    @property
    def running(self) -> int:
        return sum(1 for pod in self.pods if pod["phase"] == "Running")

    @property
    def done(self) -> int:
        return sum(1 for pod in self.pods if pod["phase"] == "Succeeded")


def pods_of(job: Job) -> GangPods:
    """One query: the job's Pod rows (index, name, node, phase, start, finish, restarts), by index then creation."""
    rows = (
        Pod.objects.filter(job=job)
        .order_by(F("completion_index").asc(nulls_last=True), "created_at", "id")
        .values("completion_index", "name", "node_name", "phase", "bound_at", "finished_at", "restarts")
    )
    return GangPods(nodes=job.nodes, pods=list(rows))


# --- the pending queue -------------------------------------------------------------------------------------------


@dataclass
class PendingRow:
    kind: str  # "pod" (in the cluster, unschedulable) or "queued" (waiting for Kueue to admit it against quota)
    since: datetime
    visible: bool
    team_name: str
    pool: Pool | None
    gpus: int
    reason: str
    hint: str = ""
    job_id: int | None = None
    job_name: str = ""
    pod_name: str = ""
    position: int | None = None
    wait_seconds: int = 0
    team_pool: tuple[int, int] | None = None


@dataclass
class PendingOverview:
    page: object
    pods: int
    queued: int
    gpus_waiting: int
    pools: list[Pool] = field(default_factory=list)


def _keep_to_what_anyone_may_see(row: PendingRow) -> None:
    """A row of a team the viewer cannot see keeps its kind, pool, GPUs and wait, and a reason that says nothing
    of the team: however the reason was worded (the team's quota and usage, its queue, its volumes), it is
    replaced here, where the rows are built for display."""
    row.reason = _("waiting for its team's quota") if row.kind == "queued" else _("waiting for a node")
    row.hint = ""
    row.position = None
    row.team_pool = None
    row.job_id, row.job_name, row.pod_name, row.team_name = None, "", "", ""


def pending_overview(user, *, pool: Pool | None = None, page_number=1, now=None) -> PendingOverview:
    """Every unschedulable pod and every queued job, longest wait first, with reasons and hints for one page."""
    now = now or timezone.now()
    visible = dict(Team.objects.visible_to(user).values_list("id", "name"))
    pools = {p.pk: p for p in Pool.objects.order_by("name")}
    spill = spill_targets()
    occupancy = pool_occupancy()

    pods = Pod.objects.filter(phase="Pending", scheduled=False)
    if pool is not None:
        pods = pods.filter(pool=pool)
    pod_rows = list(
        pods.values_list("team_id", "pool_id", "job_id", "gpus", "created_at", "pending_reason", "name").order_by()
    )
    # Kueue's order within a team's ClusterQueue (one per team, all its pools): priority, then submission time. Over
    # all the team's queued jobs, whatever pool the page shows (a filter in the query would number only its rows).
    queued_rows = list(
        Job.objects.filter(state=JobState.QUEUED)
        .with_waiting_since()
        .annotate(
            position=Window(
                RowNumber(),
                partition_by=[F("team_id")],
                order_by=[F("priority").desc(), "created_at", "id"],
            ),
            kueue_said=Subquery(
                Workload.objects.filter(job=OuterRef("pk"), finished=False)
                .order_by("-created_at", "-id")
                .values("message")[:1]
            ),
        )
        .values_list("id", "team_id", "pool_id", "total_gpus", "waiting_since", "position", "kueue_said")
    )
    if pool is not None:
        queued_rows = [row for row in queued_rows if row[2] == pool.pk]
    quotas = {(t, p): q for t, p, q in Quota.objects.values_list("team_id", "pool_id", "max_gpus")}

    rows: list[PendingRow] = []
    for team_id, pool_id, job_id, gpus, created_at, message, pod_name in pod_rows:
        shown = team_id in visible
        rows.append(
            PendingRow(
                kind="pod",
                since=created_at,
                visible=shown,
                team_name=visible.get(team_id, ""),
                pool=pools.get(pool_id),
                gpus=gpus,
                reason=message,
                job_id=job_id if shown else None,
                pod_name=pod_name if shown else "",
            )
        )
    for job_id, team_id, pool_id, gpus, waiting_since, position, kueue_said in queued_rows:
        shown = team_id in visible
        rows.append(
            PendingRow(
                kind="queued",
                since=waiting_since,
                visible=shown,
                team_name=visible.get(team_id, ""),
                pool=pools.get(pool_id),
                gpus=gpus,
                reason=kueue_said or "",
                job_id=job_id if shown else None,
                position=position,
                team_pool=(team_id, pool_id),
            )
        )
    rows.sort(key=lambda row: row.since)
    page = Paginator(rows, PENDING_PAGE_SIZE).get_page(page_number)

    shown_jobs = Job.objects.filter(pk__in=[row.job_id for row in page if row.job_id]).only(
        "id", "name", "placement", "spilled", "nodes", "gpus"
    )
    jobs = {job.pk: (job.name, job.placement, job.spilled) for job in shown_jobs}
    gangs = {job.pk: (job.nodes, job.gpus) for job in shown_jobs if job.nodes > 1}
    # Reasons are worded here, in the viewer's language, from what Kueue and the scheduler said (the job row keeps
    # the words of the sync process, in the default language).
    pool_names = {each.slug: each.name for each in pools.values()}
    reclaims = reclaim_waits(
        [(*row.team_pool, row.gpus, row.reason) for row in page if row.kind == "queued" and row.visible]
    )
    # Over every queued job, not only this page's: the same queries whichever rows the page shows.
    room = quota_room([row.team_pool for row in rows if row.kind == "queued"], quotas=quotas, pools=pools)
    for row in page:
        row.wait_seconds = max(int((now - row.since).total_seconds()), 0)
        name, placement, spilled = jobs.get(row.job_id, ("", "", False))
        row.job_name = name
        if row.kind == "queued":
            team_pool = row.team_pool
            used, available = room[team_pool]
            row.reason = reasons.kueue_reason(row.reason, pool_names)
            row.hint = reasons.quota_hint(
                in_use=used, quota=quotas.get(team_pool, 0), gpus=row.gpus, position=row.position, available=available
            )
            if team_pool in reclaims:
                row.hint = reasons.reclaim_hint(reclaims[team_pool])
        else:
            message, row.reason = row.reason, reasons.plain_reason(row.reason)
            if row.pool is not None:
                effective = Placement.SOFT if spilled else (placement or Placement.SOFT)
                spill_occupancy = [
                    (pools[target].name, occupancy.get(target, Occupancy(pool_id=target)))
                    for target in spill.get(row.pool.pk, [])
                ]
                row.hint = reasons.fit_hint(
                    gpus=row.gpus,
                    occupancy=occupancy.get(row.pool.pk, Occupancy(pool_id=row.pool.pk)),
                    placement=effective,
                    spill=spill_occupancy,
                    message=message,
                )
        if row.job_id in gangs and row.pool is not None:
            nodes, gpus = gangs[row.job_id]
            fit = gang_fit(occupancy.get(row.pool.pk, Occupancy(pool_id=row.pool.pk)), nodes=nodes, gpus=gpus)
            # A gang's pod waits for the gang (one pod per node), not for any node: the gang's fit replaces its own.
            quota_part = row.hint if row.kind == "queued" else ""
            row.hint = "; ".join(part for part in (reasons.gang_hint(fit), quota_part) if part)
    for row in page:
        if not row.visible:
            _keep_to_what_anyone_may_see(row)
    return PendingOverview(
        page=page,
        pods=len(pod_rows),
        queued=len(queued_rows),
        gpus_waiting=sum(row.gpus for row in rows),
        pools=list(pools.values()),
    )


def quota_room(
    team_pools,
    *,
    quotas: dict[tuple[int, int], int],
    now=None,
    pools: dict | None = None,
    uses: dict | None = None,
    lending: dict | None = None,
) -> dict[tuple[int, int], tuple[int, int]]:
    """Per (team id, pool id) of `team_pools`: (GPUs the team uses in the pool, GPUs it can still be admitted on
    there), from the numbers Kueue admits by (`pools.lending`: GPUs in use where Kueue admitted them, reservations,
    lending, the cohort's free GPUs). Kueue's "N more needed" for a job of G GPUs is G minus the second figure, so
    the pending page's reason and hint say the same N. Four queries at most (three when `pools`, the Pool rows by id,
    are passed, one when `uses`, `pools.lending.team_uses` of these pools, is too, none when `lending`, their
    `pool_lending`, is too), none for no pairs."""
    team_pools = set(team_pools)
    if not team_pools:
        return {}
    pool_ids = sorted({pool_id for _team, pool_id in team_pools})
    uses = team_uses(pool_ids, now=now) if uses is None else uses
    loaded = [pools[pool_id] for pool_id in pool_ids] if pools is not None and set(pool_ids) <= pools.keys() else None
    if lending is None:
        lending = pool_lending(pool_ids, pools=loaded, now=now, uses=uses)
    room = {}
    for team_id, pool_id in team_pools:
        use = uses.get(pool_id, {}).get(team_id) or TeamUse(team_id=team_id)
        cohort_free = lending[pool_id].borrowable if pool_id in lending else 0
        room[(team_id, pool_id)] = (
            use.used,
            available_to(use, quota=quotas.get((team_id, pool_id), 0), cohort_free=cohort_free),
        )
    return room


def templates_for(user):
    return JobTemplate.objects.visible_to(user).select_related("team", "pool").order_by("team__name", "name")


# Each held job's GPUs above its team's reservation in a reserved pool: a running sum over the team's jobs in the pool
# (highest priority first, then earliest admitted, unknown last, then id) less the team's active reservations there.
_BORROWED_SQL = """
WITH held AS NOT MATERIALIZED ({held}),
asked AS (SELECT DISTINCT team_id, quota_pool FROM held WHERE id {ids}),
filled AS (
    SELECT held.id, held.total_gpus,
           sum(held.total_gpus) OVER (
               PARTITION BY held.team_id, held.quota_pool
               ORDER BY held.priority DESC, admission.at ASC NULLS LAST, held.id
           ) - coalesce(reserved.gpus, 0) AS above
    FROM held
    JOIN asked ON asked.team_id = held.team_id AND asked.quota_pool = held.quota_pool
    JOIN pools_pool pool ON pool.id = held.quota_pool AND pool.kind = %s
    LEFT JOIN LATERAL (
        SELECT max(w.admitted_at) AS at FROM jobs_workload w WHERE w.job_id = held.id AND NOT w.finished
    ) admission ON true
    LEFT JOIN (
        SELECT team_id, pool_id, sum(gpus) AS gpus FROM pools_reservation
        WHERE starts_at <= %s AND ends_at > %s GROUP BY team_id, pool_id
    ) reserved ON reserved.team_id = held.team_id AND reserved.pool_id = held.quota_pool
)
SELECT id, least(total_gpus, above) AS gpus FROM filled WHERE above > 0{only}
"""


@functools.cache
def _held_jobs_sql() -> tuple[str, tuple]:
    """The jobs holding quota (`JobQuerySet.in_use`, the one rule) as SQL: compiled once, it never changes."""
    held = Job.objects.in_use().order_by().values("id", "team_id", "quota_pool", "total_gpus", "priority")
    return held.query.sql_with_params()


def borrowed_gpus(jobs) -> dict[int, int]:
    """GPUs each of `jobs` (jobs or ids) holds above its team's reservation in a reserved pool: borrowed GPUs (the
    pool's unreserved ones or another team's lent ones), which Kueue takes back when a lender's job needs them. Jobs
    not holding quota, or inside the reservation, are not in the answer.

    Kueue counts borrowing per team and pool, not per job: a team whose admitted jobs there hold more than its
    reservation borrows the excess. Which of its jobs hold the excess is the portal's reading of Kueue's own
    preemption order (it takes first the lowest priority, then the most recently admitted): the team's jobs in the
    pool, by priority (highest first) and admission time (earliest first, unknown last), fill the reservation; the
    ones beyond it are on borrowed GPUs (a job straddling the line borrows part of its GPUs). One query, whatever the
    number of jobs (none when no job given holds quota): the database fills each reservation, and answers only for
    the jobs asked."""
    ids = [job if isinstance(job, int) else job.pk for job in jobs if isinstance(job, int) or job.quota_pool_id]
    if not ids:
        return {}
    sql, params = borrowed_gpus_sql("= ANY(%s)", [ids])
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return dict(cursor.fetchall())


def borrowed_gpus_sql(ids: str, ids_params: list, *, only_those: bool = True) -> tuple[str, list]:
    """`borrowed_gpus` as one SELECT of (id, gpus) and its parameters, for the jobs whose id meets `ids` (`= ANY(%s)`
    with the ids in `ids_params`, or a subquery of a statement it is part of, jobs/api/listing.py). Without
    `only_those`, it answers for every job of their teams in their pools, and the statement picks its own (a join on
    the id plans better there than a second test of `ids` on every held job)."""
    from pools.choices import PoolKind

    held_sql, held_params = _held_jobs_sql()
    now = timezone.now()
    only, only_params = (f" AND id {ids}", ids_params) if only_those else ("", [])
    return (
        _BORROWED_SQL.format(held=held_sql, ids=ids, only=only),
        [*held_params, *ids_params, PoolKind.RESERVED.value, now, now, *only_params],
    )


def reclaim_waits(waiting: list[tuple[int, int, int, str]]) -> dict[tuple[int, int], int]:
    """Which queued jobs wait for lent GPUs to be reclaimed. `waiting` holds (team, pool, GPUs, Kueue's message) of
    queued jobs; a job waits for a reclaim when Kueue admits it by preempting ("Pending the preemption of N
    workload(s)") and it fits in its team's reservation in the pool with what the team already holds there (so
    the GPUs it needs are its own, lent out). Answers, per such (team, pool), about how long the reclaim takes: the
    longest grace period of the other teams' jobs on borrowed GPUs in the pool (their pods stop within it; 0 when
    none is known). Five queries at most, none when no job waits on a preemption."""
    candidates = [(t, p, g) for t, p, g, message in waiting if message and reasons.waits_on_preemption(message)]
    if not candidates:
        return {}
    uses = team_uses(list({p for _, p, _ in candidates}))
    reclaiming = set()
    for team_id, pool_id, gpus in candidates:
        use = uses.get(pool_id, {}).get(team_id)
        if use is not None and use.reserved and use.used + gpus <= use.reserved:
            reclaiming.add((team_id, pool_id))
    if not reclaiming:
        return {}
    running = list(
        Job.objects.in_use(pools={p for _, p in reclaiming}).only(
            "id", "team", "pool", "admitted_pool", "state", "termination_grace_seconds"
        )
    )
    borrowed = borrowed_gpus(running)
    waits = {}
    for team_id, pool_id in reclaiming:
        graces = [
            job.termination_grace_seconds
            for job in running
            if job.pk in borrowed and job.quota_pool_id == pool_id and job.team_id != team_id
        ]
        waits[(team_id, pool_id)] = max(graces, default=0)
    return waits
