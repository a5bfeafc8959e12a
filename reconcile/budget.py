"""The budget's hard stop: the portal is the controller of its own Kueue AdmissionCheck, `reservoir-budget`.

A team with a budget has the check on its ClusterQueue for the flavors that cost by the hour (elastic and shared
pools: `cluster.kueue`, `admissionChecksStrategy.onFlavors`), so every Workload Kueue reserves quota for there — a
portal job or a Job sent to the team's LocalQueue around the portal — waits until this controller answers:

- the team's month has not reached its cap (or an admin lifted the budget for the job): `Ready`, and Kueue admits;
- it has: `Retry`, with the message "budget for November reached: ¥X of ¥Y" and `requeueAfterSeconds`
  (REQUEUE_AFTER_SECONDS). Kueue gives the quota back and resets the check to Pending with a message of its own; while
  the Workload waits for its requeue the controller puts its message back, so the Workload keeps saying why it
  waits. After the delay Kueue reserves quota again and asks again: raising the cap, a new month or a lift lets it in.

Jobs inside the reservation (reserved flavors) never meet the check, and workloads already admitted are left
running: the stop holds new spend, it does not evict. Overage (borrowing beyond the reservation inside a reserved
pool) is not held: the check only knows flavors.

Each round lists the Workloads once and writes only those whose answer changes, each with the resourceVersion it
read (a Workload Kueue wrote meanwhile is left for the next round). It runs every few seconds (billing/beat.py) and
at once after a budget changes (`billing.services`, through the outbox); the spend it compares comes from metering,
every few minutes, so a team can pass its cap by a few minutes of spend.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime

from django.utils import timezone

from billing.budget import BudgetStatus, budget_statuses, lifted_job_ids
from cluster import kueue_objects
from cluster.kueue import BUDGET_CHECK_NAME
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


def check_budgets(now: datetime | None = None) -> dict[str, int]:
    """One round of the controller; returns how many checks it set Ready, held (Retry), re-worded and left."""
    now = now or timezone.now()
    admission_check = kueue_objects.read_kueue_object("AdmissionCheck", BUDGET_CHECK_NAME)
    if admission_check is not None and not kueue_objects.admission_check_active(admission_check):
        kueue_objects.mark_admission_check_active(BUDGET_CHECK_NAME, at=_timestamp(now))
    statuses = budget_statuses(now=now)
    teams = {team.namespace: team.pk for team in Team.objects.filter(pk__in=statuses)}
    lifted = lifted_job_ids(now=now)
    counts = {"ready": 0, "held": 0, "reworded": 0, "left": 0, "conflicts": 0}
    for workload in kueue_objects.list_workloads():
        ours = next(
            (c for c in (workload.get("status") or {}).get("admissionChecks") or [] if c["name"] == BUDGET_CHECK_NAME),
            None,
        )
        if ours is None:
            continue
        status = statuses.get(teams.get(workload["metadata"]["namespace"]))
        holds = status is not None and status.reached and _portal_job_id(workload) not in lifted
        conditions = _conditions(workload)
        decision = decide(
            state=ours.get("state", "Pending"),
            message=ours.get("message", ""),
            quota_reserved=conditions.get("QuotaReserved") == "True",
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
        key = {"Ready": "ready", "Retry": "held"}.get(state, "reworded")
        counts[key] += 1
        log.info(
            "budget check: %s/%s %s: %s",
            workload["metadata"]["namespace"],
            workload["metadata"]["name"],
            state,
            message,
        )
    return counts
