"""The budget's hard stop: the portal is the controller of its own Kueue AdmissionCheck, `reservoir-budget`.

A team with a budget has the check on its ClusterQueue for the flavors that cost by the hour (elastic and shared
pools: `cluster.kueue`, `admissionChecksStrategy.onFlavors`), so every Workload Kueue reserves quota for there — a
portal job or a Job sent to the team's LocalQueue around the portal — waits until this controller answers:

- the team's month has not reached its cap (or an admin lifted the budget for the job): `Ready`, and Kueue admits;
- it has: `Retry`, with the message "budget for November reached: ¥X of ¥Y" and `requeueAfterSeconds`
  (REQUEUE_AFTER_SECONDS). Kueue gives the quota back and resets the check to Pending with a message of its own; while
  the Workload waits for its requeue the controller puts its message back, so the Workload keeps saying why it
  waits. After the delay Kueue reserves quota again and asks again: raising the cap, a new month or a lift lets it in.

Before the cap is reached, jobs inside the reservation (reserved flavors) never meet the check. Once it is, the
projection puts the check on the reserved flavors too, and a Workload there passes at once while the team's GPUs in
that flavor stay within its reservation; one that would run beyond it (overage) is held. Workloads already admitted
are left running: the stop holds new spend, it does not evict.

Each round lists the Workloads once and writes only those whose answer changes, each with the resourceVersion it
read (a Workload Kueue wrote meanwhile is left for the next round). It runs every few seconds (billing/beat.py) and
at once after a budget changes (`billing.services`, through the outbox); the spend it compares comes from metering,
every few minutes, so a team can pass its cap by a few minutes of spend.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from billing.budget import BudgetStatus, budget_statuses, lifted_job_ids
from cluster import kueue_objects
from cluster.kueue import BUDGET_CHECK_NAME, PoolFlavorSpec, TeamQueueSpec, budget_flavors, cluster_queue_name
from cluster.labels import GPU_RESOURCE
from pools.models import Pool
from portal.models import Team

log = logging.getLogger(__name__)

REQUEUE_AFTER_SECONDS = 60
JOB_NAME = re.compile(r"rsv-(\d+)")  # jobs.models.job_name_for


def _timestamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(workload: dict) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (workload.get("status") or {}).get("conditions") or []}


def _portal_job_id(workload: dict) -> int | None:
    for owner in workload["metadata"].get("ownerReferences") or []:
        if owner.get("kind") == "Job" and (match := JOB_NAME.fullmatch(owner.get("name", ""))):
            return int(match[1])
    return None


def decide(*, state: str, message: str, quota_reserved: bool, finished: bool, hold: BudgetStatus | None):
    """What the check of one Workload should become: (state, message) to write, or None to leave it. `hold` is the
    team's budget status when the stop holds this Workload, else None."""
    if finished or state in ("Ready", "Rejected"):
        return None  # admitted (or refused) already: the stop never evicts
    if hold is None:
        return ("Ready", "within budget") if quota_reserved and state == "Pending" else None
    wanted = hold.held_message()
    if quota_reserved:
        return None if state == "Retry" and message == wanted else ("Retry", wanted)
    # Waiting for its requeue: keep saying why.
    return None if message == wanted else (state, wanted)


def _gpus_by_flavor(workload: dict) -> dict[str, int]:
    """The GPUs Kueue reserved for the Workload, per flavor (from its admission)."""
    from kubernetes.utils import parse_quantity

    found: dict[str, int] = {}
    for assignment in ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        flavor = (assignment.get("flavors") or {}).get(GPU_RESOURCE)
        usage = (assignment.get("resourceUsage") or {}).get(GPU_RESOURCE)
        if flavor and usage is not None:
            found[flavor] = found.get(flavor, 0) + int(parse_quantity(usage))
    return found


def _nominal_gpus(cluster_queue: dict | None) -> dict[str, int]:
    """The team's GPUs per flavor in its ClusterQueue: its reservation there (nominal quota)."""
    from kubernetes.utils import parse_quantity

    nominal: dict[str, int] = {}
    for group in ((cluster_queue or {}).get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                if resource["name"] == GPU_RESOURCE:
                    nominal[flavor["name"]] = int(parse_quantity(resource["nominalQuota"]))
    return nominal


def _checked_flavors(cluster_queue: dict | None) -> set[str]:
    strategy = ((cluster_queue or {}).get("spec") or {}).get("admissionChecksStrategy") or {}
    return {
        f
        for rule in strategy.get("admissionChecks") or []
        if rule["name"] == BUDGET_CHECK_NAME
        for f in rule.get("onFlavors") or []
    }


def _projection_behind(statuses: dict, queues: dict[str, dict], teams: dict[int, str]) -> bool:
    """Whether a team's ClusterQueue does not yet check the flavors its budget says (`cluster.kueue.budget_flavors`:
    the hourly-priced pools, every pool once reached): the projection is then reconciled in this round. Compared with
    what the projection renders, so a queue that already holds it is never behind (with no reserved pool, reaching
    the budget checks no flavor more)."""
    pools = [
        PoolFlavorSpec(slug=slug, kind=kind, node_selector={})
        for slug, kind in Pool.objects.values_list("slug", "kind")
    ]
    for team_id, status in statuses.items():
        queue = queues.get(cluster_queue_name(teams[team_id]))
        if queue is None:
            continue
        spec = TeamQueueSpec(
            slug=teams[team_id],
            namespace="",
            cpu_millicores=0,
            memory_mib=0,
            budget_checked=True,
            budget_reached=status.reached,
        )
        if _checked_flavors(queue) != set(budget_flavors(spec, pools)):
            return True
    return False


def check_budgets(now: datetime | None = None) -> dict[str, int]:
    """One round of the controller; returns how many checks it set Ready, held (Retry), re-worded and left.

    Once a team's budget is reached, the projection puts the check on its reserved flavors too (`cluster.kueue`
    `budget_flavors`); a Workload Kueue reserved quota for there passes at once when the team's GPUs reserved in that
    flavor, its own included, stay within the team's reservation (the nominal quota): it spends nothing variable. One
    that would borrow beyond it (overage) is held like a spilling one."""
    from . import kueue

    now = now or timezone.now()
    admission_check = kueue_objects.read_kueue_object("AdmissionCheck", BUDGET_CHECK_NAME)
    if admission_check is not None and not kueue_objects.admission_check_active(admission_check):
        kueue_objects.mark_admission_check_active(BUDGET_CHECK_NAME, at=_timestamp(now))
    statuses = budget_statuses(now=now)
    slugs = dict(Team.objects.filter(pk__in=statuses).values_list("pk", "slug"))
    teams = {f"{settings.TEAM_NAMESPACE_PREFIX}{slug}": team_id for team_id, slug in slugs.items()}
    queues = {q["metadata"]["name"]: q for q in kueue_objects.list_kueue_objects("ClusterQueue")}
    counts = {"ready": 0, "held": 0, "reworded": 0, "left": 0, "conflicts": 0, "projected": 0}
    if _projection_behind(statuses, queues, slugs):
        kueue.reconcile()
        counts["projected"] = 1
        queues = {q["metadata"]["name"]: q for q in kueue_objects.list_kueue_objects("ClusterQueue")}
    lifted = lifted_job_ids(now=now)
    workloads = kueue_objects.list_workloads()
    # GPUs Kueue holds per (namespace, flavor) for quota-holding, unfinished Workloads: what a reserved-flavor
    # Workload is compared with against the team's reservation.
    held_gpus: dict[tuple[str, str], int] = {}
    for workload in workloads:
        conditions = _conditions(workload)
        if conditions.get("QuotaReserved") == "True" and conditions.get("Finished") != "True":
            for flavor, gpus in _gpus_by_flavor(workload).items():
                key = (workload["metadata"]["namespace"], flavor)
                held_gpus[key] = held_gpus.get(key, 0) + gpus
    for workload in workloads:
        ours = next(
            (c for c in (workload.get("status") or {}).get("admissionChecks") or [] if c["name"] == BUDGET_CHECK_NAME),
            None,
        )
        if ours is None:
            continue
        namespace = workload["metadata"]["namespace"]
        team_id = teams.get(namespace)
        status = statuses.get(team_id)
        holds = status is not None and status.reached and _portal_job_id(workload) not in lifted
        conditions = _conditions(workload)
        quota_reserved = conditions.get("QuotaReserved") == "True"
        if holds and quota_reserved:
            nominal = _nominal_gpus(queues.get(cluster_queue_name(slugs[team_id])))
            flavors = _gpus_by_flavor(workload)
            holds = not flavors or any(held_gpus.get((namespace, f), 0) > nominal.get(f, 0) for f in flavors)
        decision = decide(
            state=ours.get("state", "Pending"),
            message=ours.get("message", ""),
            quota_reserved=quota_reserved,
            finished=conditions.get("Finished") == "True",
            hold=status if holds else None,
        )
        if decision is None:
            counts["left"] += 1
            continue
        state, message = decision
        check = {
            "name": BUDGET_CHECK_NAME,
            "state": state,
            "message": message,
            "lastTransitionTime": ours.get("lastTransitionTime") if state == ours.get("state") else _timestamp(now),
        }
        if state == "Retry":
            check["requeueAfterSeconds"] = REQUEUE_AFTER_SECONDS
        elif ours.get("requeueAfterSeconds") is not None:
            check["requeueAfterSeconds"] = ours["requeueAfterSeconds"]
        if not kueue_objects.set_workload_check_state(workload, check):
            counts["conflicts"] += 1
            continue
        if state == "Retry":  # its quota goes back: the Workloads after it are compared without it
            for flavor, gpus in _gpus_by_flavor(workload).items():
                held_gpus[(namespace, flavor)] = held_gpus.get((namespace, flavor), 0) - gpus
        key = {"Ready": "ready", "Retry": "held"}.get(state, "reworded")
        counts[key] += 1
        log.info("budget check: %s/%s %s: %s", namespace, workload["metadata"]["name"], state, message)
    return counts
