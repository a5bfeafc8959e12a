"""The pending page's "What would make it fit" (`jobs.reasons.fit_hint`) agrees with the reason beside it. Users saw
a pod the scheduler could not place for lack of CPU (or for a missing volume) told "fits now: a node has 8 free GPUs
(the scheduler retries by itself)" beside "No node can take it now (1 node checked): 1 node lacks free CPU": the
hint looked at free GPUs alone, and retrying changes nothing."""

import pytest

from jobs.choices import JobState
from jobs.reasons import fit_hint
from jobs.selectors import pending_overview
from pools.occupancy import Occupancy
from tests.factories import JobFactory, NodeFactory, PodFactory, PoolFactory, QuotaFactory

EIGHT_FREE = Occupancy(pool_id=1, nodes_ready=1, live_gpus=8, free=8, largest_free_block=8)


@pytest.mark.django_db
def test_a_pod_short_of_cpu_is_not_told_it_fits_now(team, researcher):
    pool = PoolFactory(slug="p", name="P")
    NodeFactory(pool=pool, name="only")  # 8 free GPUs
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    job = JobFactory(team=team, pool=pool, state=JobState.PENDING, gpus=2, admitted_pool=pool)
    PodFactory(
        name="short-of-cpu",
        team=team,
        pool=pool,
        job=job,
        gpus=2,
        pending_reason="0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
        "1 No preemption victims found for incoming pod.",
    )
    [row] = [row for row in pending_overview(researcher).page if row.kind == "pod"]
    assert "lacks free CPU" in row.reason
    assert row.hint == "a node has 8 free GPUs, but the pod is held: 1 node lacks free CPU"


@pytest.mark.parametrize(
    "message, hint",
    [
        ("0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient memory.", "1 node lacks free CPU; 1 node lacks"),
        ("0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules.", "must not share a node"),
        # No node got as far as its GPUs: the nodes of its pools are not among those looked at.
        ("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.", "outside the job's pools"),
    ],
)
def test_a_pod_held_by_another_cause_is_told_what_holds_it(message, hint):
    said = fit_hint(gpus=2, occupancy=EIGHT_FREE, message=message)
    assert said.startswith("a node has 8 free GPUs, but the pod is held: ") and hint in said, said


def test_a_pod_held_by_a_cause_not_known_here_is_sent_to_what_the_cluster_says():
    said = fit_hint(gpus=2, occupancy=EIGHT_FREE, message='persistentvolumeclaim "data" not found')
    assert said == "a node has 8 free GPUs, but the pod is held by what the cluster says"


@pytest.mark.parametrize(
    "message",
    [
        "",  # the scheduler has not looked at it yet
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",  # said before the GPUs were freed
        # The other pools' nodes (their taints, their labels) are in every message of a cluster of several pools.
        "0/3 nodes are available: 2 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint {workload: spare}.",
        "0/9 nodes are available: 1 Insufficient nvidia.com/gpu, 8 node(s) didn't match Pod's node affinity/selector.",
    ],
)
def test_a_pod_held_by_gpus_alone_still_fits_now(message):
    """Positive control: with nothing but GPUs named (or no message yet), free GPUs on a node do make it fit."""
    said = fit_hint(gpus=2, occupancy=EIGHT_FREE, message=message)
    assert said == "fits now: a node has 8 free GPUs (the scheduler retries by itself)"
