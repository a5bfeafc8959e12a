"""seed_demo builds the seeds' pools exactly and is idempotent."""

import io

from django.core.management import call_command
from django.forms.models import model_to_dict

from pools.models import NamespaceLimits, Pool, Quota, Reservation
from portal.models import Membership, Team, User

VOLATILE = {"created_at", "updated_at", "last_login", "date_joined", "password"}
MODELS = [Pool, Team, User, Membership, Reservation, Quota, NamespaceLimits]


def snapshot():
    rows = {}
    for model in MODELS:
        fields = [f.name for f in model._meta.concrete_fields if f.name not in VOLATILE]
        rows[model.__name__] = sorted(
            (tuple(sorted(model_to_dict(obj, fields=fields).items(), key=str)) for obj in model.objects.all()), key=str
        )
    rows["spill"] = sorted(Pool.spill_pools.through.objects.values_list("from_pool__slug", "to_pool__slug"))
    return rows


def test_seed_demo_twice_gives_the_same_rows(db):
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    first = snapshot()
    call_command("seed_demo", stdout=io.StringIO())
    assert snapshot() == first
    assert "reservoir-demo" in out.getvalue()
    assert "speech-lead" in out.getvalue()


def test_seed_pools_match_the_articles(db):
    call_command("seed_demo", stdout=io.StringIO())
    inference = Pool.objects.get(slug="inference")
    assert inference.node_selector == {"node-role": "inference", "gpu-type": "t4", "workload-tier": "online"}
    assert inference.taints == [{"key": "workload", "value": "inference", "effect": "NoSchedule"}]
    assert (inference.min_nodes, inference.max_nodes) == (2, 10)
    elastic = Pool.objects.get(slug="elastic")
    assert {t["key"] for t in elastic.taints} == {"workload", "cloud.google.com/gke-spot"}
    assert (elastic.min_nodes, elastic.max_nodes) == (0, 20)
    reserved = Pool.objects.get(slug="reserved-a800")
    assert reserved.node_selector["scheduling.eks.ebcloud.com/node-pool"] == "reserved"
    assert reserved.contracted_gpus == 32
    assert [p.slug for p in reserved.spill_pools.all()] == ["elastic"]
    for team in Team.objects.all():
        roles = set(team.memberships.values_list("role", flat=True))
        assert roles == {"lead", "researcher"}
    assert User.objects.get(username="admin").is_platform_admin
