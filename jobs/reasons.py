"""Why work waits, in plain words, and what would make it fit.

The scheduler explains an unschedulable pod in one line ("0/9 nodes are available: 2 Insufficient nvidia.com/gpu, 7
node(s) had untolerated taint(s). no new claims to deallocate, preemption: 0/9 nodes are available: 9 Preemption is
not helpful for scheduling."). `plain_reason` keeps the first sentence (the rest is about preemption, which the
portal's priority classes never ask of the scheduler) and turns its counted causes into one whole sentence; a cause of
a shape not known here is not guessed at: the whole message follows, verbatim, on its own line. `fit_hint` compares
what the work needs with the pool's occupancy right now: it fits now (the scheduler will retry; only when the
scheduler names no cause but GPUs, else what holds it), it would fit with soft placement in a spill pool, or the
largest free block is too small. Quota waits are Kueue's: `kueue_reason` reads the reasons Kueue joins into its
QuotaReserved message ("couldn't assign flavors to pod set main: flavor elastic doesn't match node affinity,
insufficient unused quota for nvidia.com/gpu in flavor a800, 2 more needed") and says them with pool names; flavors
the job's placement excludes are left out. A message of another shape is shown as it is, as what the cluster says.
"""

import re
from datetime import date, datetime

from django.utils.formats import date_format
from django.utils.translation import gettext as _
from django.utils.translation import ngettext, pgettext

from pools.occupancy import GangFit, Occupancy

from .choices import Placement
from .specs import max_grace_seconds

_CAUSE = re.compile(r"^(\d+)\s+(.*)$")
_SCHEDULER_HEAD = re.compile(r"^\d+/(?P<total>\d+) nodes are available(?::\s*(?P<causes>.*))?$", re.DOTALL)


# The scheduler's counted causes this module puts into words, first match wins (a not-ready node is also a tainted
# one: the specific taints come before the general "untolerated taint").
_KNOWN_CAUSES = [
    "insufficient nvidia.com/gpu",
    "insufficient cpu",
    "insufficient memory",
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/unschedulable",
    "untolerated taint",
    "anti-affinity",
    "node affinity/selector",
    "node selector",
    "unschedulable",
    "not ready",
    "too many pods",
]


def _cause_words(needle: str, count: int) -> str:
    """The sentence piece for one known cause (each spelled out so makemessages finds it)."""
    if needle == "insufficient nvidia.com/gpu":
        text = ngettext("%(n)d node lacks enough free GPUs", "%(n)d nodes lack enough free GPUs", count)
    elif needle == "insufficient cpu":
        text = ngettext("%(n)d node lacks free CPU", "%(n)d nodes lack free CPU", count)
    elif needle == "insufficient memory":
        text = ngettext("%(n)d node lacks free memory", "%(n)d nodes lack free memory", count)
    elif needle in ("node.kubernetes.io/not-ready", "not ready"):
        text = ngettext("%(n)d node is not ready", "%(n)d nodes are not ready", count)
    elif needle == "node.kubernetes.io/unreachable":
        text = ngettext("%(n)d node is unreachable", "%(n)d nodes are unreachable", count)
    elif needle in ("node.kubernetes.io/unschedulable", "unschedulable"):
        text = ngettext("%(n)d node is cordoned", "%(n)d nodes are cordoned", count)
    elif needle == "untolerated taint":
        text = ngettext(
            "%(n)d node is kept for other workloads (taint)", "%(n)d nodes are kept for other workloads (taint)", count
        )
    elif needle == "anti-affinity":
        text = ngettext(
            "%(n)d node already runs a pod it must not share a node with",
            "%(n)d nodes already run a pod it must not share a node with",
            count,
        )
    elif needle in ("node affinity/selector", "node selector"):
        text = ngettext("%(n)d node is outside the job's pools", "%(n)d nodes are outside the job's pools", count)
    else:
        text = ngettext(
            "%(n)d node already runs as many pods as it may", "%(n)d nodes already run as many pods as they may", count
        )
    return text % {"n": count}


def _scheduler_head(message: str) -> str:
    """The scheduler's first sentence: "0/9 nodes are available: 2 Insufficient nvidia.com/gpu, 7 node(s) had
    untolerated taint(s)". What follows it ("no new claims to deallocate", "preemption: ... Preemption is not
    helpful for scheduling") is about preemption, which the portal's priority classes never ask of the scheduler."""
    return re.split(r"\.\s|\.$|,\s*preemption:", message.strip(), maxsplit=1)[0].strip()


def _scheduler_causes(message: str) -> tuple[int, list[tuple[int, str | None, str]]] | None:
    """The scheduler's message read: how many nodes it checked and each counted cause as (count, the known cause it
    is, or None, its text); None for a message of another shape."""
    head = _SCHEDULER_HEAD.match(_scheduler_head(message))
    if not head or not head["causes"]:
        return None
    causes = []
    for cause in head["causes"].split(", "):
        match = _CAUSE.match(cause.strip())
        needle = None
        if match:
            needle = next((each for each in _KNOWN_CAUSES if each in match[2].lower()), None)
        causes.append((int(match[1]) if match else 0, needle, cause.strip()))
    return int(head["total"]), causes


def plain_reason(message: str) -> str:
    """The scheduler's PodScheduled=False message in whole sentences. Causes of a shape not known here are not
    guessed at: the message is then shown verbatim, on its own line, as what the cluster says."""
    if not message:
        return _("Waiting to be scheduled.")
    said = _("The cluster says: %(message)s") % {"message": message}
    parsed = _scheduler_causes(message)
    if parsed is None:
        return said
    total, causes = parsed
    parts = [_cause_words(needle, count) for count, needle, _text in causes if needle is not None]
    if not parts:
        return said
    sentence = ngettext(
        "No node can take it now (%(n)d node checked): %(causes)s.",
        "No node can take it now (%(n)d nodes checked): %(causes)s.",
        total,
    ) % {"n": total, "causes": pgettext("between causes", "; ").join(parts)}
    unknown = any(needle is None for _count, needle, _text in causes)
    return f"{sentence}\n{said}" if unknown else sentence


_UNUSED = re.compile(
    r"insufficient unused quota for (?P<resource>\S+) in flavor (?P<flavor>[^\s,]+), (?P<more>\S+) more needed"
)
_MAXIMUM = re.compile(
    r"insufficient quota for (?P<resource>\S+) in flavor (?P<flavor>[^\s,]+), .*?current podset request "
    r"\((?P<request>[^)]*)\) > maximum capacity \((?P<maximum>[^)]*)\)"
)
_NO_AFFINITY = re.compile(r"flavor (?P<flavor>[^\s,]+) doesn't match node affinity")
_PREEMPTING = re.compile(r"Pending the preemption of (?P<n>\d+) workload")
# The portal's own AdmissionCheck holding a job (reconcile/budget.py `BudgetStatus.held_message`). Its amounts are
# not read: billing figures are for a team's leads and admins, and these words reach every member (below).
_BUDGET = re.compile(r"budget for (?P<month>[A-Z][a-z]+) reached\b")
_INACTIVE = re.compile(r"ClusterQueue (?P<queue>\S+) (is inactive|not found)")


def _resource(name: str) -> str:
    words = {"nvidia.com/gpu": _("GPUs"), "cpu": _("CPU"), "memory": _("memory")}
    return words.get(name, name)


def kueue_reason(message: str, pool_names: dict[str, str] | None = None) -> str:
    """Kueue's word on why a workload is not admitted, as whole sentences (see the module docstring)."""
    pool_names = pool_names or {}

    def pool(flavor: str) -> str:
        return pool_names.get(flavor, flavor)

    if not message:
        return _("Waiting for Kueue to admit it against the team's quota.")
    sentences = []
    for match in _MAXIMUM.finditer(message):
        sentences.append(
            _("It needs %(request)s %(resource)s in %(pool)s, more than the team may ever use there (%(maximum)s).")
            % {
                "request": match["request"],
                "resource": _resource(match["resource"]),
                "pool": pool(match["flavor"]),
                "maximum": match["maximum"],
            }
        )
    for match in _UNUSED.finditer(message):
        sentences.append(
            _(
                "Waiting for its team's quota in %(pool)s: %(more)s more %(resource)s needed than the team's "
                "reservation and what it may borrow leave free now."
            )
            % {"pool": pool(match["flavor"]), "more": match["more"], "resource": _resource(match["resource"])}
        )
    preempting = _PREEMPTING.search(message)
    if preempting:
        sentences.append(
            ngettext(
                "Kueue is preempting %(n)d job to make room for it.",
                "Kueue is preempting %(n)d jobs to make room for it.",
                int(preempting["n"]),
            )
            % {"n": int(preempting["n"])}
        )
    budget = _BUDGET.search(message)
    if budget:
        # Without the spend and the cap the cluster's message names: these words are stored as the job's pending
        # reason and shown to whoever sees the job (its page, the jobs API, the pending view), researchers
        # included, who see no money anywhere else. The team's leads read the figures on its billing page.
        month = datetime.strptime(budget["month"], "%B").month
        sentences.append(
            _(
                "Held by the team's budget: the variable spend of %(month)s has reached the team's cap. It starts "
                "when an admin raises the cap or lets it pass, or next month; the team's leads see the figures on "
                "its billing page."
            )
            % {"month": date_format(date(2000, month, 1), "F")}
        )
    inactive = _INACTIVE.search(message)
    if inactive:
        sentences.append(_("The team's queue in the cluster is not ready yet; the portal sets it up within a minute."))
    if "Exceeded the PodsReady timeout" in message:
        sentences.append(_("Its pods did not all start in time: it gave its GPUs back and waits again."))
    if not sentences and _NO_AFFINITY.search(message) and not _UNUSED.search(message):
        sentences.append(_("No pool the team has quota in matches the job's placement."))
    if not sentences:
        return _("The cluster says: %(message)s") % {"message": message}
    return " ".join(sentences)


def quota_hint(*, in_use: int, quota: int, gpus: int, available: int, position: int | None = None) -> str:
    """What would let a queued job in: GPUs freed, or the jobs ahead of it admitted first. `available` is what the
    team can still be admitted on in the pool (`pools.lending.available_to`, the figure Kueue's "N more needed" is
    counted from): the GPUs to free are `gpus − available`, the same N as Kueue's reason. They are "of the team's
    quota" when the quota is what binds, else of its reservation or of what it may borrow (the cohort's GPUs,
    whoever holds them)."""
    if gpus > quota:
        return _("over team quota: it can never fit in %(quota)d GPUs") % {"quota": quota}
    by_quota = in_use + gpus - quota
    needed = gpus - available
    if needed > 0 and needed == by_quota:
        return ngettext(
            "starts when %(n)d GPU of the team's quota is freed",
            "starts when %(n)d GPUs of the team's quota are freed",
            needed,
        ) % {"n": needed}
    if needed > 0:
        return ngettext(
            "starts when %(n)d GPU of the team's reservation or of what it may borrow is freed",
            "starts when %(n)d GPUs of the team's reservation or of what it may borrow are freed",
            needed,
        ) % {"n": needed}
    if position and position > 1:
        return ngettext(
            "the team's quota has room; %(n)d job of the team is ahead of it",
            "the team's quota has room; %(n)d jobs of the team are ahead of it",
            position - 1,
        ) % {"n": position - 1}
    return _("the team's quota and the pool have room now: Kueue admits it at its next pass")


def eviction_reason(
    *, reason: str, message: str, preemptor_job_id: int | None, preemptor_same_team: bool, preemptor_team: str
) -> str:
    """Why an admitted job was sent back to the queue, and for whom (Kueue's Evicted/Preempted condition)."""
    if reason == "Preempted":
        if "reclamation within the cohort" in message:
            who = (
                _("%(team)s reclaimed GPUs of its reservation") % {"team": preemptor_team}
                if preemptor_team and not preemptor_same_team
                else _("the owner of the GPUs it borrowed reclaimed them")
            )
            return _("Preempted: %(who)s; requeued.") % {"who": who}
        if preemptor_same_team and preemptor_job_id:
            return _("Preempted for job #%(id)d of the same team, which has a higher priority; requeued.") % {
                "id": preemptor_job_id
            }
        return _("Preempted for a job with a higher priority; requeued.")
    if reason == "PodsReadyTimeout" or "PodsReady timeout" in message:
        return _("Its pods did not all start in time: it gave its GPUs back and was requeued.")
    if reason == "ClusterQueueStopped":
        return _("The team's queue was stopped: requeued.")
    if message:
        return _("Sent back to the queue by Kueue (%(reason)s): %(message)s") % {"reason": reason, "message": message}
    return _("Sent back to the queue by Kueue.")


# Causes that rule a node out before its free GPUs are looked at: a node outside the pod's pools (their node
# affinity, another pool's taint) or one the occupancy counts no free GPUs on (not ready, unreachable, cordoned).
_BEFORE_GPUS = {
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/unschedulable",
    "untolerated taint",
    "node affinity/selector",
    "node selector",
    "unschedulable",
    "not ready",
}


def _held_by(message: str) -> list[str] | None:
    """What holds a pod on a node with GPUs free, in words, by the scheduler's `message`: [] when nothing but GPUs
    (a message older than the GPUs freed since, or none yet); None when it names a cause not known here (a missing
    volume...). Nodes ruled out before their GPUs are looked at hold it only when no node got as far: otherwise they
    are the nodes of other pools, which every message of a cluster with several pools names."""
    if not message:
        return []
    parsed = _scheduler_causes(message)
    if parsed is None:
        return None
    causes = [(count, needle) for count, needle, _text in parsed[1] if needle != "insufficient nvidia.com/gpu"]
    if any(needle is None for _count, needle in causes):
        return None
    held = [(count, needle) for count, needle in causes if needle not in _BEFORE_GPUS]
    if not held and len(causes) == len(parsed[1]):  # no node got as far as its GPUs: no node of its pools fits
        held = causes
    return [_cause_words(needle, count) for count, needle in held]


def fit_hint(
    *,
    gpus: int,
    occupancy: Occupancy | None,
    placement: str = "",
    spill: list[tuple[str, Occupancy]] = (),
    message: str = "",
) -> str:
    """What would make `gpus` GPUs fit in the pool now, given its occupancy and that of its spill pools. A node with
    the GPUs free "fits now" only when the scheduler's `message` names nothing else that holds the pod (its CPU, its
    memory, a volume...): else the hint says what does, as the reason beside it."""
    if occupancy is None:
        return ""
    if occupancy.largest_free_block >= gpus:
        held = _held_by(message)
        free = {"n": occupancy.largest_free_block}
        if held is None:
            return _("a node has %(n)d free GPUs, but the pod is held by what the cluster says") % free
        if held:
            causes = pgettext("between causes", "; ").join(held)
            return _("a node has %(n)d free GPUs, but the pod is held: %(causes)s") % {**free, "causes": causes}
        return _("fits now: a node has %(n)d free GPUs (the scheduler retries by itself)") % free
    if placement != Placement.SOFT:
        for name, other in spill:
            if other.largest_free_block >= gpus:
                return _("fits now with soft placement (in %(pool)s)") % {"pool": name}
    hint = ngettext(
        "largest free block is %(n)d GPU", "largest free block is %(n)d GPUs", occupancy.largest_free_block
    ) % {"n": occupancy.largest_free_block}
    if occupancy.free >= gpus:
        hint += "; " + ngettext(
            "%(n)d GPU free in all, spread over nodes", "%(n)d GPUs free in all, spread over nodes", occupancy.free
        ) % {"n": occupancy.free}
    return hint


def gang_reason(*, running: int, nodes: int, message: str = "") -> str:
    """An admitted multi-node job some of whose pods do not run yet: how many run, and why the others wait."""
    head = ngettext(
        "%(running)d of the job's %(nodes)d pods runs; the others wait to start.",
        "%(running)d of the job's %(nodes)d pods run; the others wait to start.",
        running,
    ) % {"running": running, "nodes": nodes}
    return f"{head} {plain_reason(message)}" if message else head


def gang_hint(fit: GangFit) -> str:
    """Whether a job of N nodes × G GPUs fits the pool now: "needs 4 nodes with 8 free GPUs; 2 have"."""
    needs = ngettext(
        "needs %(nodes)d node with %(gpus)d free GPUs", "needs %(nodes)d nodes with %(gpus)d free GPUs", fit.nodes
    ) % {"nodes": fit.nodes, "gpus": fit.gpus}
    if fit.fits:
        return _("%(needs)s: fits now (%(have)d have)") % {"needs": needs, "have": fit.nodes_with_room}
    return _("%(needs)s; %(have)d have") % {"needs": needs, "have": fit.nodes_with_room}


def borrowed_note(gpus: int) -> str:
    """What a job on borrowed GPUs is told (job page, list and API); "" for a job that borrows none."""
    if not gpus:
        return ""
    return ngettext(
        "On %(n)d borrowed GPU — may be preempted when the owner needs it back.",
        "On %(n)d borrowed GPUs — may be preempted when the owner needs them back.",
        gpus,
    ) % {"n": gpus}


def waits_on_preemption(message: str) -> bool:
    """Whether Kueue's message says it admits the workload once it has preempted others."""
    return bool(_PREEMPTING.search(message))


def reclaim_hint(seconds: int) -> str:
    """The pending view's word for a lender's job whose GPUs are lent out: Kueue preempts the borrowers, whose pods
    stop within their grace period, and the portal caps every grace period (`specs.max_grace_seconds`)."""
    cap = max_grace_seconds()
    if seconds:
        return _("waiting for lent GPUs to be reclaimed (≈ %(n)d s; grace periods are capped at %(cap)d s)") % {
            "n": seconds,
            "cap": cap,
        }
    return _("waiting for lent GPUs to be reclaimed (grace periods are capped at %(cap)d s)") % {"cap": cap}


def reclaim_reason(seconds: int) -> str:
    """The same, as a sentence of the job page."""
    cap = max_grace_seconds()
    if seconds:
        return _(
            "Waiting for lent GPUs to be reclaimed: Kueue preempts the jobs that borrowed them (≈ %(n)d s, their "
            "grace period; the portal caps grace periods at %(cap)d s)."
        ) % {"n": seconds, "cap": cap}
    return _(
        "Waiting for lent GPUs to be reclaimed: Kueue preempts the jobs that borrowed them, whose grace period the "
        "portal caps at %(cap)d s."
    ) % {"cap": cap}
