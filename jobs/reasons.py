"""Why work waits, in plain words, and what would make it fit.

The scheduler explains an unschedulable pod in one line ("0/9 nodes are available: 2 Insufficient nvidia.com/gpu,
7 node(s) had untolerated taint {workload: inference}. preemption: ..."). `plain_reason` turns the counted causes
into a sentence a researcher understands. `fit_hint` compares what the work needs with the pool's occupancy right
now: it fits now (the scheduler will retry), it would fit with soft placement in a spill pool, or the largest free
block is too small. Quota waits get their own words: the portal holds the job, not the scheduler.
"""

import re

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from pools.occupancy import Occupancy

from .choices import Placement

_CAUSE = re.compile(r"^(\d+)\s+(.*)$")


def _cause_in_words(count: int, text: str) -> str:
    lowered = text.lower()
    if "insufficient nvidia.com/gpu" in lowered:
        return ngettext("%(n)d node lacks enough free GPUs", "%(n)d nodes lack enough free GPUs", count) % {"n": count}
    if "insufficient cpu" in lowered:
        return ngettext("%(n)d node lacks free CPU", "%(n)d nodes lack free CPU", count) % {"n": count}
    if "insufficient memory" in lowered:
        return ngettext("%(n)d node lacks free memory", "%(n)d nodes lack free memory", count) % {"n": count}
    if "untolerated taint" in lowered:
        return ngettext(
            "%(n)d node is kept for other workloads (taint)", "%(n)d nodes are kept for other workloads (taint)", count
        ) % {"n": count}
    if "node affinity" in lowered or "node selector" in lowered:
        return ngettext("%(n)d node is outside the job's pools", "%(n)d nodes are outside the job's pools", count) % {
            "n": count
        }
    if "unschedulable" in lowered:
        return ngettext("%(n)d node is cordoned", "%(n)d nodes are cordoned", count) % {"n": count}
    if "not ready" in lowered or "notready" in lowered:
        return ngettext("%(n)d node is not ready", "%(n)d nodes are not ready", count) % {"n": count}
    return f"{count} {text}"


def plain_reason(message: str) -> str:
    """The scheduler's PodScheduled=False message in plain words (the raw text when it has another shape)."""
    if not message:
        return _("waiting to be scheduled")
    head = message.split(". preemption:")[0].strip().rstrip(".")
    if ":" not in head:
        return message
    summary, causes = head.split(":", 1)
    parts = []
    for cause in causes.split(","):
        match = _CAUSE.match(cause.strip())
        if match:
            parts.append(_cause_in_words(int(match.group(1)), match.group(2)))
    if not parts:
        return message
    total = re.search(r"/(\d+)", summary)
    lead = (
        ngettext("No node can take it (%(n)d node checked)", "No node can take it (%(n)d nodes checked)", int(total[1]))
        % {"n": int(total[1])}
        if total
        else _("No node can take it")
    )
    return f"{lead}: " + "; ".join(parts) + "."


def quota_reason(*, in_use: int, quota: int, gpus: int, position: int) -> str:
    return _(
        "Over team quota: %(in_use)d of %(quota)d GPUs in use, this job needs %(gpus)d more; queued at position %(k)d."
    ) % {"in_use": in_use, "quota": quota, "gpus": gpus, "k": position}


def quota_hint(*, in_use: int, quota: int, gpus: int) -> str:
    if gpus > quota:
        return _("over team quota: it can never fit in %(quota)d GPUs") % {"quota": quota}
    needed = in_use + gpus - quota
    if needed <= 0:
        return _("admitted as soon as the jobs ahead of it are")
    return ngettext(
        "over team quota: starts when %(n)d GPU of the team's quota is freed",
        "over team quota: starts when %(n)d GPUs of the team's quota are freed",
        needed,
    ) % {"n": needed}


def fit_hint(
    *, gpus: int, occupancy: Occupancy | None, placement: str = "", spill: list[tuple[str, Occupancy]] = ()
) -> str:
    """What would make `gpus` GPUs fit in the pool now, given its occupancy and that of its spill pools."""
    if occupancy is None:
        return ""
    if occupancy.largest_free_block >= gpus:
        return _("fits now: a node has %(n)d free GPUs (the scheduler retries by itself)") % {
            "n": occupancy.largest_free_block
        }
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
