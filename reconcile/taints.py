"""Pool isolation on the nodes: nodes that match a pool's selector but lack its taints are reported (stored on the
Node row and logged) and, when the pool says so, tainted. Nodes outside every pool are never touched."""

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


def reconcile_taints() -> dict:
    pools = list(Pool.objects.order_by("slug"))
    reported, applied = [], []
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
            resources.add_node_taints(node.name, missing)
            log.warning("node %s of pool %s lacked taints %s: applied", node.name, pool.slug, missing)
            applied.append(node.name)
            missing = []
        elif missing:
            log.warning("node %s of pool %s lacks taints %s", node.name, pool.slug, missing)
            reported.append(node.name)
        with transaction.atomic():
            Node.objects.filter(name=node.name).update(missing_taints=missing)
    return {"reported": reported, "applied": applied}
