"""Capacity, allocated and free describe the same live GPUs: pods still bound to a NotReady node are counted apart
(`held_not_ready`). They counted as allocated while the node's GPUs were left out of live capacity: the pool card
read "Live capacity 8 GPUs · Allocated 12 GPUs (150 % of live) · Free 4 GPUs" and its meter overflowed."""

import pytest
from django.utils import timezone

from jobs.models import Pod
from pools.occupancy import pool_occupancy
from pools.selectors import pool_cards
from tests.factories import NodeFactory, PoolFactory, UserFactory

pytestmark = pytest.mark.django_db


def _run_on(node, gpus, name):
    Pod.objects.create(
        uid=f"uid-{name}",
        namespace="team-x",
        name=name,
        node_name=node.name,
        pool=node.pool,
        gpus=gpus,
        phase="Running",
        scheduled=True,
        created_at=timezone.now(),
    )


def test_pods_on_a_not_ready_node_do_not_make_allocated_exceed_live_capacity():
    pool = PoolFactory(slug="p", name="P", contracted_gpus=16)
    up = NodeFactory(pool=pool, name="up")  # Ready, 8 GPUs
    _run_on(up, 4, "fine")
    down = NodeFactory(pool=pool, name="down", ready=False)  # lost: its pods still reported Running
    _run_on(down, 8, "stuck")
    occupancy = pool_occupancy([pool.pk])[pool.pk]
    assert occupancy.live_gpus == 8 and occupancy.free == 4
    # Capacity / allocated / free of the same (live) GPUs: allocated + free never exceeds live capacity.
    [card], _key = pool_cards(UserFactory(), pools=[pool])
    assert card.allocated_percent == 50, card.allocated_percent
    assert (occupancy.allocated, occupancy.free, occupancy.held_not_ready) == (4, 4, 8), occupancy


def test_the_pool_card_and_the_api_say_what_nodes_that_are_not_ready_hold(admin_client):
    pool = PoolFactory(slug="p", name="P", contracted_gpus=16)
    _run_on(NodeFactory(pool=pool, name="up"), 4, "fine")
    _run_on(NodeFactory(pool=pool, name="down", ready=False), 8, "stuck")
    [row] = [row for row in admin_client.get("/api/v1/pools/occupancy/").json() if row["pool"] == "p"]
    assert (row["live_gpus"], row["allocated"], row["free"], row["held_not_ready"]) == (8, 4, 4, 8)
    page = admin_client.get("/pools/").content.decode()
    assert "and 8 GPUs on NotReady nodes" in page
