"""Pool isolation on the nodes: nodes that match a pool's selector but lack its taints are reported (stored on the
Node row and logged) and, when the pool says so, tainted. Nodes outside every pool are never touched.

A node carries one taint per key and effect, and the portal only adds taints (it never takes one off): a node that
has the pool's key and effect with another value (e.g. a node moved from the inference pool keeps
`workload=inference`) cannot be tainted. It is reported as conflicting, the missing taint naming the node's own one
(`conflicting`), until an admin takes that taint off."""

import logging

from django.db import transaction

from cluster import resources
from pools.isolation import pool_for
from pools.models import Node, Pool

log = logging.getLogger(__name__)


def _has(taints: list[dict], wanted: dict) -> bool:
    effect = wanted.get("effect", "NoSchedule")
    return any(
        t.get("key") == wanted["key"]
        and (t.get("value") or "") == (wanted.get("value") or "")
        and t.get("effect") == effect
        for t in taints
    )


def _with_conflict(taints: list[dict], missing: dict) -> dict:
    """`missing`, naming the node's taint of the same key and effect that stands in its way (when there is one)."""
    for taint in taints:
        if taint.get("key") == missing["key"] and taint.get("effect") == missing["effect"]:
            return {**missing, "conflicting": {k: taint.get(k) or "" for k in ("key", "value", "effect")}}
    return missing


def reconcile_taints() -> dict:
    pools = list(Pool.objects.order_by("slug"))
    reported, applied, conflicting = [], [], []
    for node in resources.list_nodes():
        pool = pool_for(node.labels, pools)
        if pool is None:
            continue
        current = list(node.taints)
        missing = [
            {"key": t["key"], "value": t.get("value", ""), "effect": t.get("effect", "NoSchedule")}
            for t in pool.taints
            if not _has(current, t)
        ]
        if missing and pool.apply_taints:
            added = resources.add_node_taints(node.name, missing)
            missing = [t for t in missing if t not in added]
            if missing:
                log.warning(
                    "node %s of pool %s: added %s, taints in the way of %s", node.name, pool.slug, added, missing
                )
                conflicting.append(node.name)
            else:
                log.warning("node %s of pool %s lacked taints %s: applied", node.name, pool.slug, added)
                applied.append(node.name)
        elif missing:
            log.warning("node %s of pool %s lacks taints %s", node.name, pool.slug, missing)
            reported.append(node.name)
        with transaction.atomic():
            Node.objects.filter(name=node.name).update(missing_taints=[_with_conflict(current, t) for t in missing])
    return {"reported": reported, "applied": applied, "conflicting": conflicting}
