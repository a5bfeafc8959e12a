"""Kueue refuses a ClusterQueue whose resource group lists more than 64 flavors (`cluster.kueue.MAX_FLAVORS_PER_GROUP`;
the CRD's `flavors` has maxItems 64), and every pool is a flavor of every team's ClusterQueue. A 65th pool used to be
saved without a word: from then on the apiserver refused every team's ClusterQueue at each reconcile, so a new team got
no queue and no quota, reservation or boundary change of any team reached Kueue.

`save_pool` now refuses the 65th pool, saying why. Pure: pools saved through the service, the projection read and
rendered; no cluster."""

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from cluster import kueue as render
from pools import projection, services
from pools.choices import PoolKind
from pools.models import Pool
from tests.factories import TeamFactory


def _rack(index: int) -> Pool:
    return Pool(
        slug=f"rack-{index:02d}",
        name=f"Rack {index:02d}",
        kind=PoolKind.ELASTIC,
        gpu_model="NVIDIA-L40S",
        node_selector={"rack": f"r{index:02d}"},
        max_nodes=2,
        gpus_per_node=8,
    )


@pytest.mark.django_db
def test_the_projection_never_renders_a_cluster_queue_kueue_refuses():
    team = TeamFactory(slug="llm")
    for index in range(render.MAX_FLAVORS_PER_GROUP):  # positive control: the 64th pool is saved
        services.save_pool(pool=_rack(index))
    assert Pool.objects.count() == render.MAX_FLAVORS_PER_GROUP

    with pytest.raises(ValidationError, match="There are already 64 pools, the most Kueue takes"):
        services.save_pool(pool=_rack(render.MAX_FLAVORS_PER_GROUP))
    assert Pool.objects.count() == render.MAX_FLAVORS_PER_GROUP

    services.set_quota(team=team, pool=Pool.objects.get(slug="rack-00"), max_gpus=8)
    pools, teams = projection.desired_specs(timezone.now())
    queues = [manifest for manifest in render.render_projection(pools, teams) if manifest["kind"] == "ClusterQueue"]
    assert queues
    for manifest in queues:
        for group in manifest["spec"]["resourceGroups"]:
            assert len(group["flavors"]) <= render.MAX_FLAVORS_PER_GROUP, (
                f"{manifest['metadata']['name']} lists {len(group['flavors'])} flavors: Kueue refuses it"
            )


@pytest.mark.django_db
def test_a_pool_changed_when_there_are_64_is_saved():
    """The limit counts new pools only: one of the 64 still changes."""
    for index in range(render.MAX_FLAVORS_PER_GROUP):
        services.save_pool(pool=_rack(index))
    services.save_pool(pool=Pool.objects.get(slug="rack-00"), changes={"max_nodes": 3})
    assert Pool.objects.get(slug="rack-00").max_nodes == 3
