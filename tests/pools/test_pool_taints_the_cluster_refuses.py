"""A pool's taints are validated as the cluster takes them. Before, an admin saw:

- a non-text key (`{"key": 5}`): a 500 from the pool API and Django admin instead of a field error;
- a non-text value (`{"key": "gpu", "value": 1}`): the pool saved, then the number written into the ResourceFlavor's
  tolerations, every job's tolerations and the node taint patch, all refused by the apiserver (Kueue stopped admitting,
  every team's ClusterQueue names the flavor);
- two taints with the same key and effect: the pool saved, then refused on every node (a node carries one taint per key
  and effect), and the taint reconcile stopped at the first node of that pool, every round.

Each is now a ValidationError from `save_pool` (the API and Django admin both save through it): a 400, never a 500."""

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from pools import services
from pools.choices import PoolKind
from pools.models import Pool


def _pool(taints):
    return Pool(
        slug="training",
        name="Training",
        kind=PoolKind.RESERVED,
        gpu_model="NVIDIA-A800-SXM4-80GB",
        node_selector={"node-role": "training"},
        taints=taints,
        contracted_gpus=8,
        max_nodes=1,
    )


REFUSED = [
    pytest.param([{"key": 5, "value": "x", "effect": "NoSchedule"}], "key and value are text", id="key-not-text"),
    pytest.param([{"key": "gpu", "value": 1, "effect": "NoSchedule"}], "key and value are text", id="value-not-text"),
    pytest.param(
        [
            {"key": "workload", "value": "training", "effect": "NoSchedule"},
            {"key": "workload", "value": "batch", "effect": "NoSchedule"},
        ],
        "Two taints have the key workload and the effect NoSchedule",
        id="same-key-and-effect-twice",
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("taints", "message"), REFUSED)
def test_a_pool_taint_the_cluster_would_refuse_is_a_validation_error(taints, message):
    with pytest.raises(ValidationError, match=message) as refused:
        services.save_pool(pool=_pool(taints))
    assert "taints" in refused.value.message_dict
    assert not Pool.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("taints", "message"), REFUSED)
def test_the_pool_api_answers_a_field_error_not_a_500(platform_admin, taints, message):
    client = APIClient()
    client.force_login(platform_admin)
    body = {"slug": "training", "name": "Training", "kind": "elastic", "gpu_model": "L40S"}
    body |= {"node_selector": {"node-role": "training"}, "taints": taints}

    answer = client.post("/api/v1/pools/", body, format="json")

    assert answer.status_code == 400, answer.content
    assert message in str(answer.json()["taints"])


@pytest.mark.django_db
def test_one_key_with_two_effects_is_two_taints_and_saves():
    """Positive control: the same key with another effect is another taint a node can carry; text values save."""
    taints = [
        {"key": "workload", "value": "training", "effect": "NoSchedule"},
        {"key": "workload", "value": "training", "effect": "NoExecute"},
        {"key": "dedicated"},
    ]
    assert services.save_pool(pool=_pool(taints)).taints == taints
