"""Which pool a node belongs to: the first pool (by slug) whose selector matches its labels. The sync files nodes
by it and the taint reconciler (reconcile/taints.py) checks each pool's nodes by it."""

from .models import Pool


def pool_for(labels: dict, pools: list[Pool]) -> Pool | None:
    """The first pool (by slug) whose selector matches; pools should not overlap, and slug order makes it stable."""
    for pool in pools:
        if pool.matches(labels):
            return pool
    return None
