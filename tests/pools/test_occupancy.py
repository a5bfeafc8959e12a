"""Occupancy and fragmentation computed in SQL agree with the arithmetic they promise."""

import random

import pytest
from django.utils import timezone

from jobs.models import Pod
from pools.occupancy import JOB_SIZES, pool_occupancy
from tests.factories import NodeFactory, PoolFactory

pytestmark = pytest.mark.django_db


def place(node, gpus, *, phase="Running", scheduled=True):
    return Pod.objects.create(
        uid=f"{node.name}-{Pod.objects.count()}",
        namespace="team-x",
        name=f"p{Pod.objects.count()}",
        node_name=node.name if scheduled else "",
        pool=node.pool,
        gpus=gpus,
        phase=phase,
        scheduled=scheduled,
        created_at=timezone.now(),
    )


def test_fragmentation_of_a_pool_with_scattered_single_gpu_jobs():
    pool = PoolFactory()
    nodes = [NodeFactory(pool=pool, name=f"n{i}") for i in range(3)]
    for used, node in zip((7, 5, 0), nodes, strict=True):
        for _ in range(used):
            place(node, 1)
    occupancy = pool_occupancy()[pool.pk]
    assert (occupancy.live_gpus, occupancy.allocated, occupancy.free) == (24, 12, 12)
    assert occupancy.fits == {1: 12, 2: 5, 4: 2, 8: 1}  # free 1, 3, 8
    assert occupancy.largest_free_block == 8
    assert occupancy.stranded_by_size == {1: 0, 2: 2, 4: 4, 8: 4}


def test_finished_pending_and_not_ready_do_not_count():
    pool = PoolFactory()
    ready = NodeFactory(pool=pool, name="ready")
    not_ready = NodeFactory(pool=pool, name="down", ready=False)
    cordoned = NodeFactory(pool=pool, name="cordoned", unschedulable=True)
    place(ready, 4, phase="Succeeded")
    place(ready, 2, phase="Pending", scheduled=False)
    place(ready, 2, phase="Pending")  # bound, containers starting: holds its GPUs
    occupancy = pool_occupancy()[pool.pk]
    assert (occupancy.nodes_ready, occupancy.nodes_not_ready) == (2, 1)
    assert occupancy.live_gpus == 16  # ready nodes only: the NotReady one is paid for but not there
    assert occupancy.allocated == 2
    assert occupancy.free == 6  # the cordoned node's GPUs are not free for new work
    assert not_ready.pk and cordoned.pk


@pytest.mark.parametrize("seed", range(5))
def test_sql_matches_the_python_arithmetic_on_random_pools(seed):
    rng = random.Random(seed)
    pool = PoolFactory()
    free = []
    for i in range(rng.randint(1, 12)):
        node = NodeFactory(pool=pool, name=f"r{seed}-{i}")
        used = 0
        while used < 8 and rng.random() < 0.7:
            gpus = rng.choice([1, 1, 2, 4])
            if used + gpus > 8:
                break
            place(node, gpus)
            used += gpus
        free.append(8 - used)
    occupancy = pool_occupancy([pool.pk])[pool.pk]
    assert occupancy.free == sum(free)
    for size in JOB_SIZES:
        assert occupancy.fits[size] == sum(f // size for f in free)
        assert occupancy.stranded(size) == sum(f % size for f in free)
