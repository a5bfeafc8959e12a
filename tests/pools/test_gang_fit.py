"""Unit tests of the pure gang fit: a job of N nodes × G GPUs fits now when N nodes each have G free GPUs."""

import pytest
from django.utils import translation

from jobs.reasons import gang_hint, gang_reason
from pools.occupancy import Occupancy, gang_fit, nodes_with_free


def occupancy(*node_free: int) -> Occupancy:
    return Occupancy(pool_id=1, free=sum(node_free), node_free=tuple(sorted(node_free, reverse=True)))


@pytest.mark.parametrize(
    ("node_free", "gpus", "expected"),
    [
        ((8, 8, 8), 8, 3),
        ((8, 8, 4), 8, 2),
        ((8, 8, 4), 4, 3),
        ((3, 2), 1, 2),
        ((3, 2), 4, 0),
        ((), 1, 0),
    ],
)
def test_nodes_with_free_counts_nodes_with_at_least_that_many_free_gpus(node_free, gpus, expected):
    assert nodes_with_free(node_free, gpus) == expected


def test_a_gang_fits_only_when_enough_nodes_each_have_its_gpus():
    three_free = occupancy(8, 8, 8, 2)
    assert gang_fit(three_free, nodes=3, gpus=8).fits
    fit = gang_fit(occupancy(8, 8, 6, 6), nodes=3, gpus=8)
    assert not fit.fits
    assert (fit.nodes_with_room, fit.nodes_missing) == (2, 1)
    # 28 GPUs are free in all, more than 3 × 8 = 24, and it still does not fit: they are spread over nodes.
    assert occupancy(8, 8, 6, 6).free >= 24


def test_the_gang_hint_says_what_it_needs_and_how_many_nodes_have_it(compiled_translations):
    with translation.override("en"):
        assert gang_hint(gang_fit(occupancy(8, 8, 4), nodes=4, gpus=8)) == "needs 4 nodes with 8 free GPUs; 2 have"
        assert gang_hint(gang_fit(occupancy(8, 8, 8), nodes=3, gpus=8)) == (
            "needs 3 nodes with 8 free GPUs: fits now (3 have)"
        )
    with translation.override("zh-hans"):
        hint = gang_hint(gang_fit(occupancy(8, 8, 4), nodes=4, gpus=8))
        assert hint == "需要 4 个各有 8 块空闲 GPU 的节点；现有 2 个"


def test_a_half_started_gang_says_how_many_pods_run_and_why_the_others_wait(compiled_translations):
    message = "0/9 nodes are available: 1 node(s) were unschedulable, 8 node(s) had untolerated taint(s)."
    with translation.override("en"):
        text = gang_reason(running=2, nodes=3, message=message)
        assert text.startswith("2 of the job's 3 pods run; the others wait to start. ")
        assert "1 node is cordoned" in text
        assert gang_reason(running=1, nodes=3) == "1 of the job's 3 pods runs; the others wait to start."
    with translation.override("zh-hans"):
        assert gang_reason(running=2, nodes=3).startswith("任务的 3 个 Pod 中有 2 个在运行")
