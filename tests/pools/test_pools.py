"""Pool, quota and namespace-limit rules: model validation, database constraints and services."""

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.urls import reverse

from pools import services
from pools.choices import PoolKind
from pools.models import NamespaceLimits, Pool, Quota
from portal.models import AuditEntry
from tests.factories import NodeFactory, PoolFactory, ReservationFactory


def test_a_pool_needs_a_node_selector(db):
    pool = PoolFactory.build(node_selector={})
    with pytest.raises(ValidationError) as error:
        pool.full_clean()
    assert "node_selector" in error.value.message_dict
    with pytest.raises(IntegrityError), transaction.atomic():
        PoolFactory(node_selector={})


def test_selector_labels_must_be_valid_kubernetes_labels(db):
    pool = PoolFactory.build(node_selector={"node role": "training"})
    with pytest.raises(ValidationError) as error:
        pool.full_clean()
    assert "not a valid Kubernetes label key" in str(error.value)


def test_taints_need_a_known_effect(db):
    pool = PoolFactory.build(taints=[{"key": "workload", "value": "x", "effect": "Sometimes"}])
    with pytest.raises(ValidationError) as error:
        pool.full_clean()
    assert "taints" in error.value.message_dict


def test_reserved_pool_needs_a_contract(db):
    pool = PoolFactory.build(kind=PoolKind.RESERVED, contracted_gpus=None)
    with pytest.raises(ValidationError) as error:
        pool.full_clean()
    assert "contracted_gpus" in error.value.message_dict
    with pytest.raises(IntegrityError), transaction.atomic():
        PoolFactory(kind=PoolKind.RESERVED, contracted_gpus=None)


def test_min_nodes_not_above_max(db):
    pool = PoolFactory.build(min_nodes=5, max_nodes=2)
    with pytest.raises(ValidationError) as error:
        pool.full_clean()
    assert "max_nodes" in error.value.message_dict
    with pytest.raises(IntegrityError), transaction.atomic():
        PoolFactory(min_nodes=5, max_nodes=2)


def test_prices_are_decimal_and_not_negative(db):
    pool = PoolFactory(hourly_price_per_gpu=Decimal("12.3456"))
    pool.refresh_from_db()
    assert pool.hourly_price_per_gpu == Decimal("12.3456")
    with pytest.raises(IntegrityError), transaction.atomic():
        Pool.objects.filter(pk=pool.pk).update(monthly_price_per_gpu=Decimal("-1"))


def test_pool_matches_nodes_by_every_selector_label(db):
    pool = PoolFactory(node_selector={"node-role": "training", "gpu-type": "a100"})
    assert pool.matches({"node-role": "training", "gpu-type": "a100", "extra": "x"})
    assert not pool.matches({"node-role": "training", "gpu-type": "t4"})


def test_a_pool_whose_selector_changes_takes_its_nodes_at_once(platform_admin):
    old = PoolFactory(slug="a-old", node_selector={"node-role": "training"})
    node = NodeFactory(pool=old, labels={"node-role": "training", "gpu-type": "a100"})
    other = NodeFactory(pool=None, labels={"node-role": "spare"})
    new = PoolFactory.build(slug="b-new", node_selector={"gpu-type": "a100"}, taints=[])
    services.save_pool(pool=new, user=platform_admin)
    node.refresh_from_db()
    assert node.pool_id == old.pk  # both select it: the first by slug keeps it
    old.node_selector = {"node-role": "inference"}
    services.save_pool(pool=old, user=platform_admin)
    node.refresh_from_db()
    assert node.pool_id == new.pk  # without waiting for the node to change in the cluster
    services.delete_pool(pool=new, user=platform_admin)
    node.refresh_from_db()
    other.refresh_from_db()
    assert node.pool_id is None and other.pool_id is None


def test_a_contract_keeps_its_history_and_django_admin_shows_it_read_only(client, platform_admin):
    created = PoolFactory.build(slug="hist", kind=PoolKind.RESERVED, contracted_gpus=16)
    services.save_pool(pool=created, user=platform_admin)
    pool = Pool.objects.get(slug="hist")
    pool.name = "Renamed"
    services.save_pool(pool=pool, user=platform_admin)  # the contract did not change: nothing to record
    pool.contracted_gpus = 24
    services.save_pool(pool=pool, user=platform_admin)
    history = list(pool.contract_changes.order_by("effective_from", "id").values_list("contracted_gpus", flat=True))
    assert history == [16, 24]
    client.force_login(platform_admin)
    response = client.get(reverse("admin:pools_pool_change", args=[pool.pk]))
    inline, prices = response.context["inline_admin_formsets"]
    shown = [(form.form.instance.contracted_gpus, form.form.instance.changed_by) for form in inline]
    assert shown == [(16, platform_admin), (24, platform_admin)]
    for each in (inline, prices):
        assert not each.has_add_permission and not each.has_change_permission and not each.has_delete_permission


def test_a_contract_changed_in_django_admin_is_recorded(client, platform_admin):
    pool = PoolFactory(slug="via-admin", kind=PoolKind.RESERVED, contracted_gpus=16)
    client.force_login(platform_admin)
    url = reverse("admin:pools_pool_change", args=[pool.pk])
    form = client.get(url).context["adminform"].form
    data = {
        name: field.prepare_value(form.initial.get(name)) if form.initial.get(name) is not None else ""
        for name, field in form.fields.items()
    }
    data |= {"contracted_gpus": "20", "spill_pools": [], "apply_taints": "on" if pool.apply_taints else ""}
    for name in ("TOTAL_FORMS", "INITIAL_FORMS", "MIN_NUM_FORMS", "MAX_NUM_FORMS"):
        data[f"contract_changes-{name}"] = "0"
        data[f"price_changes-{name}"] = "0"
    response = client.post(url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert list(pool.contract_changes.values_list("contracted_gpus", "changed_by")) == [
        (16, None),
        (20, platform_admin.pk),
    ]


def test_quota_is_set_and_audited(team, platform_admin):
    pool = PoolFactory()
    services.set_quota(team=team, pool=pool, max_gpus=4, user=platform_admin)
    services.set_quota(team=team, pool=pool, max_gpus=6, user=platform_admin)
    assert Quota.objects.get(team=team, pool=pool).max_gpus == 6
    entry = AuditEntry.objects.filter(action="quota.set").first()
    assert (entry.before["max_gpus"], entry.after["max_gpus"]) == (4, 6)


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_quota_must_be_a_whole_non_negative_number(team, bad):
    with pytest.raises(ValidationError) as error:
        services.set_quota(team=team, pool=PoolFactory(), max_gpus=bad)
    assert "max_gpus" in error.value.message_dict


def test_quota_may_not_go_below_the_current_reservation(team):
    pool = PoolFactory()
    ReservationFactory(team=team, pool=pool, gpus=8)
    with pytest.raises(ValidationError) as error:
        services.set_quota(team=team, pool=pool, max_gpus=4)
    assert "reserves up to 8 GPUs" in str(error.value)
    assert not Quota.objects.exists()


def test_namespace_limits_keep_min_below_max(team):
    with pytest.raises(ValidationError) as error:
        services.set_namespace_limits(team=team, container_min_cpu_millicores=9000, container_max_cpu_millicores=8000)
    assert "container_min_cpu_millicores" in error.value.message_dict
    assert not NamespaceLimits.objects.exists()


@pytest.mark.parametrize(
    "change, field",
    [
        # Kubernetes refuses a LimitRange unless min <= default request <= default limit <= max, per resource; the
        # defaults are min 500m / 1 GiB, request 1 / 4 GiB, limit 2 / 8 GiB, max 8 / 32 GiB.
        ({"container_max_cpu_millicores": 1000}, "container_default_cpu_millicores"),
        ({"container_max_memory_mib": 4096}, "container_default_memory_mib"),
        ({"container_min_cpu_millicores": 3000}, "container_min_cpu_millicores"),
        ({"container_min_memory_mib": 6144}, "container_min_memory_mib"),
        ({"container_default_request_cpu_millicores": 4000}, "container_default_request_cpu_millicores"),
    ],
)
def test_namespace_limits_keep_the_order_kubernetes_requires(team, change, field):
    with pytest.raises(ValidationError) as error:
        services.set_namespace_limits(team=team, **change)
    assert field in error.value.message_dict
    assert not NamespaceLimits.objects.exists()


def test_namespace_limits_may_all_be_equal(team):
    equal = {"cpu_millicores": 2000, "memory_mib": 4096}
    limits = services.set_namespace_limits(
        team=team,
        **{f"container_{part}_{unit}": value for part in ("min", "max", "default", "default_request")
           for unit, value in equal.items()},
    )  # fmt: skip
    assert limits.container_min_cpu_millicores == limits.container_max_cpu_millicores == 2000


def test_namespace_limits_refuse_unknown_fields(team):
    with pytest.raises(ValidationError):
        services.set_namespace_limits(team=team, gpus_per_moon=3)
