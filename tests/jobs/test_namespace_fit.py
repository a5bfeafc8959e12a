"""A job is refused at submission when its team namespace could never take it, rather than accepted and then never
run: below the LimitRange's per-container minimums (LimitRanger refuses every pod), or, all its pods together, above
the ResourceQuota's pods, CPU or memory (Kueue never admits it, or the quota refuses the pods past the cap). A team
without limits of its own is held to the defaults its namespace gets."""

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from jobs import services
from jobs.models import Job
from jobs.specs import JobSpec
from pools import services as pool_services
from tests.factories import NodeFactory, PoolFactory, QuotaFactory


@pytest.fixture
def pool(team):
    pool = PoolFactory(slug="train", name="Training", contracted_gpus=256, max_nodes=40)
    for index in range(32):
        NodeFactory(pool=pool, name=f"node-{index}", gpu_capacity=8, gpu_allocatable=8)
    QuotaFactory(team=team, pool=pool, max_gpus=256)
    return pool


def spec(**changes) -> JobSpec:
    return JobSpec(**{"name": "train", "image": "registry.example.com/llm/train:1.0", "gpus": 1, **changes})


def refusal(team, pool, user, **changes) -> dict:
    with pytest.raises(ValidationError) as error:
        services.submit_job(team=team, pool=pool, user=user, spec=spec(**changes))
    assert not Job.objects.exists()
    return error.value.message_dict


@pytest.mark.parametrize(
    "changes, field, message",
    [
        # the defaults: at least 500 millicores and 1,024 MiB a container; 20 pods, 32,000 millicores and 131,072 MiB
        # requested in the namespace at once
        ({"cpu_millicores": 250}, "cpu_millicores", "At least 500 millicores per container."),
        ({"memory_mib": 512}, "memory_mib", "At least 1024 MiB per container."),
        ({"nodes": 24}, "nodes", "Alpha's namespace holds at most 20 pods: a job of 24 nodes can never run."),
        (
            {"nodes": 8, "cpu_millicores": 8000},
            "cpu_millicores",
            "8 × 8000 millicores is more CPU than Alpha's namespace may request at once (32000 millicores).",
        ),
        (
            {"nodes": 16, "memory_mib": 16384},
            "memory_mib",
            "16 × 16384 MiB is more memory than Alpha's namespace may request at once (131072 MiB).",
        ),
    ],
)
def test_what_the_namespace_could_never_take_is_refused(team, pool, researcher, changes, field, message):
    assert refusal(team, pool, researcher, **changes) == {field: [message]}


def test_the_teams_own_limits_are_the_ones_held(team, pool, researcher):
    pool_services.set_namespace_limits(team=team, max_pods=40, requests_cpu_millicores=64_000)
    services.submit_job(team=team, pool=pool, user=researcher, spec=spec(nodes=24))
    services.submit_job(team=team, pool=pool, user=researcher, spec=spec(name="wide", nodes=8, cpu_millicores=8000))
    pool_services.set_namespace_limits(team=team, container_min_cpu_millicores=1000)
    with pytest.raises(ValidationError) as error:
        services.submit_job(team=team, pool=pool, user=researcher, spec=spec(name="small", cpu_millicores=900))
    assert error.value.message_dict == {"cpu_millicores": ["At least 1000 millicores per container."]}


def test_a_job_at_the_namespaces_bounds_is_accepted(team, pool, researcher):
    services.submit_job(team=team, pool=pool, user=researcher, spec=spec(cpu_millicores=500, memory_mib=1024))
    services.submit_job(team=team, pool=pool, user=researcher, spec=spec(name="wide", nodes=20, cpu_millicores=1600))
    assert Job.objects.count() == 2


def test_the_api_names_the_field(team, pool, researcher):
    api = APIClient()
    api.force_login(researcher)
    body = {"team": team.slug, "pool": pool.slug, "name": "small", "image": "registry.example.com/t/train:1", "gpus": 1}
    answer = api.post("/api/v1/jobs/", {**body, "cpu_millicores": 250}, format="json")
    assert answer.status_code == 400
    assert answer.json() == {"cpu_millicores": ["At least 500 millicores per container."]}
    assert not Job.objects.exists()
