"""What a job spec may not ask for (issue 15): GPU-steering environment names, annotations off the allowlist or
under reserved prefixes, oversized fields, high priority without the right, more waiting jobs than a team may have.
The same rules answer in the service, the submit form and the API."""

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from rest_framework.test import APIClient

from jobs import services
from jobs.choices import JobState, Placement, Priority
from jobs.models import Job
from jobs.specs import JobSpec, validate_spec
from tests.factories import JobFactory, NodeFactory, PoolFactory, QuotaFactory


def spec(**kwargs) -> JobSpec:
    values = {"name": "train", "image": "registry.example.com/llm/train:1.0", "gpus": 1}
    values.update(kwargs)
    return JobSpec(**values)


def errors_of(job_spec: JobSpec) -> dict:
    with pytest.raises(ValidationError) as caught:
        validate_spec(job_spec)
    return caught.value.message_dict


@pytest.fixture
def pool(db):
    pool = PoolFactory(slug="train", name="Train Pool")
    NodeFactory(pool=pool)
    return pool


@pytest.fixture
def no_cluster(monkeypatch):
    """Admitted jobs are not sent anywhere (these tests are about the rules, not the cluster)."""
    monkeypatch.setattr("reconcile.tasks.submit_job_to_cluster.delay", lambda job_id: None)
    monkeypatch.setattr("reconcile.tasks.reconcile_team_namespace.delay", lambda team_id: None)


# --- environment -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_MIG_CONFIG_DEVICES", "nvidia_visible_devices"],
)
def test_environment_names_that_steer_gpu_visibility_are_refused(name):
    message = errors_of(spec(env={name: "all", "NCCL_DEBUG": "INFO"}))["env"][0]
    assert name in message and "decide which GPUs a container sees" in message


def test_cuda_visible_devices_only_narrows_and_stays_allowed():
    validate_spec(spec(env={"CUDA_VISIBLE_DEVICES": "0", "NCCL_DEBUG": "INFO"}))


# --- annotations -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "scheduling.eks.ebcloud.com/allow-soft-placement",
        "scheduling.eks.ebcloud.com/node-pool",
        "container.apparmor.security.beta.kubernetes.io/main",
        "seccomp.security.alpha.kubernetes.io/pod",
        "cluster-autoscaler.kubernetes.io/safe-to-evict",
        "kueue.x-k8s.io/queue-name",
        "reservoir.io/team",
        "karpenter.sh/do-not-disrupt",
    ],
)
def test_reserved_annotation_prefixes_are_refused_even_when_allowlisted(settings, key):
    settings.POD_ANNOTATION_ALLOWLIST = [key, "*"]
    message = errors_of(spec(pod_annotations={key: "unconfined"}))["pod_annotations"][0]
    assert f"Reserved for the cluster and the portal: {key}." in message


def test_annotations_off_the_allowlist_are_refused_and_the_message_lists_what_is_allowed(settings):
    settings.POD_ANNOTATION_ALLOWLIST = ["example.com/owner", "dcgm.reservoir.dev/*"]
    message = errors_of(spec(pod_annotations={"example.com/other": "x"}))["pod_annotations"][0]
    assert "Not on the annotation allowlist: example.com/other" in message
    assert "example.com/owner, dcgm.reservoir.dev/*" in message
    validate_spec(spec(pod_annotations={"example.com/owner": "me", "dcgm.reservoir.dev/gpu-util": "40"}))


def test_production_allows_no_annotation_by_default(settings):
    settings.POD_ANNOTATION_ALLOWLIST = []
    message = errors_of(spec(pod_annotations={"pod-complete.stage.kwok.x-k8s.io/delay": "1m"}))["pod_annotations"][0]
    assert "(allowed: none)" in message


def test_the_local_clusters_run_time_annotation_is_allowed_in_tests():
    validate_spec(spec(pod_annotations={"pod-complete.stage.kwok.x-k8s.io/delay": "30s"}))


# --- sizes -------------------------------------------------------------------------------------------------------


def test_environment_annotations_and_command_have_size_caps(settings):
    settings.JOB_ENV_MAX_BYTES = 100
    settings.JOB_ANNOTATIONS_MAX_BYTES = 60
    settings.JOB_COMMAND_MAX_BYTES = 50
    errors = errors_of(
        spec(
            env={"DATA": "x" * 97},
            pod_annotations={"pod-complete.stage.kwok.x-k8s.io/delay": "1" * 30},
            command=["python", "-c"],
            args=["y" * 50],
        )
    )
    assert errors["env"] == ["Environment variables take 101 bytes; at most 100 are allowed."]
    assert errors["pod_annotations"] == ["Pod annotations take 68 bytes; at most 60 are allowed."]
    assert errors["command"] == ["The command and its arguments take 58 bytes; at most 50 are allowed."]
    validate_spec(spec(env={"DATA": "x" * 96}, command=["python"], args=["y" * 40]))


def test_sizes_count_bytes_not_characters(settings):
    settings.JOB_ENV_MAX_BYTES = 10
    assert "env" in errors_of(spec(env={"A": "训练训练"}))  # 1 + 12 bytes, 5 characters


# --- high priority -----------------------------------------------------------------------------------------------


def test_a_researcher_may_not_submit_high_priority(no_cluster, team, researcher, pool):
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    with pytest.raises(ValidationError) as caught:
        services.submit_job(team=team, pool=pool, user=researcher, spec=spec(priority=Priority.HIGH))
    assert "only team leads" in caught.value.message_dict["priority"][0]
    assert not Job.objects.exists()
    # Normal priority is fine.
    services.submit_job(team=team, pool=pool, user=researcher, spec=spec(priority=Priority.NORMAL))


def test_team_leads_and_admins_may_submit_high_priority(no_cluster, team, lead, platform_admin, pool):
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    by_lead = services.submit_job(team=team, pool=pool, user=lead, spec=spec(name="a", priority=Priority.HIGH))
    by_admin = services.submit_job(
        team=team, pool=pool, user=platform_admin, spec=spec(name="b", priority=Priority.HIGH)
    )
    assert by_lead.priority == by_admin.priority == Priority.HIGH


def test_a_team_an_admin_allows_lets_every_member_use_high_priority(no_cluster, team, researcher, pool):
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    team.allow_high_priority = True
    team.save()
    job = services.submit_job(team=team, pool=pool, user=researcher, spec=spec(priority=Priority.HIGH))
    assert job.priority == Priority.HIGH


def test_high_priority_refusal_sits_beside_the_priority_field_in_the_form(client, no_cluster, team, researcher, pool):
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    client.force_login(researcher)
    data = {
        "team": "alpha",
        "pool": "train",
        "name": "urgent",
        "image": "registry.example.com/nlp/bert:2.1",
        "command": "python train.py",
        "gpus": "1",
        "cpu": "1",
        "memory_gib": "4",
        "placement": Placement.STRICT,
        "priority": str(Priority.HIGH),
        "max_run_minutes": "60",
        "env": "",
        "pod_annotations": "",
    }
    response = client.post(reverse("jobs:job_submit"), data)
    assert response.status_code == 400
    form = response.context["form"]
    assert "only team leads" in form.errors["priority"][0]
    assert not Job.objects.exists()
    response = client.post(reverse("jobs:job_submit"), {**data, "priority": "50", "env": "NVIDIA_VISIBLE_DEVICES=all"})
    assert response.status_code == 400
    assert "NVIDIA_VISIBLE_DEVICES" in response.context["form"].errors["env"][0]
    assert not Job.objects.exists()


def api(user):
    client = APIClient()
    client.force_login(user)
    return client


def test_high_priority_refusal_in_the_api(no_cluster, team, researcher, pool):
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    body = {"team": "alpha", "pool": "train", "name": "urgent", "image": "registry.example.com/a/b:1", "gpus": 1}
    response = api(researcher).post("/api/v1/jobs/", {**body, "priority": Priority.HIGH}, format="json")
    assert response.status_code == 400
    assert "only team leads" in response.json()["priority"][0]
    annotated = {**body, "pod_annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}}
    response = api(researcher).post("/api/v1/jobs/", annotated, format="json")
    assert response.status_code == 400
    assert "Reserved for the cluster and the portal" in response.json()["pod_annotations"][0]


def test_admins_set_the_high_priority_right_per_team_in_the_api(team, lead, platform_admin):
    assert api(lead).patch("/api/v1/teams/alpha/", {"allow_high_priority": True}, format="json").status_code == 403
    response = api(platform_admin).patch("/api/v1/teams/alpha/", {"allow_high_priority": True}, format="json")
    assert response.status_code == 200 and response.json()["allow_high_priority"] is True
    team.refresh_from_db()
    assert team.allow_high_priority


# --- waiting jobs per team ---------------------------------------------------------------------------------------


def test_a_team_may_have_only_so_many_jobs_waiting(settings, no_cluster, team, other_team, researcher, pool):
    settings.MAX_WAITING_JOBS_PER_TEAM = 3
    QuotaFactory(team=team, pool=pool, max_gpus=1)
    for state in (JobState.QUEUED, JobState.ADMITTED, JobState.PENDING):
        JobFactory(team=team, pool=pool, submitted_by=researcher, state=state)
    # Running and finished jobs do not wait, another team's jobs are not this team's.
    for state in (JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
        JobFactory(team=team, pool=pool, submitted_by=researcher, state=state)
    JobFactory(team=other_team, pool=pool, submitted_by=researcher, state=JobState.QUEUED)

    with pytest.raises(ValidationError) as caught:
        services.submit_job(team=team, pool=pool, user=researcher, spec=spec())
    assert caught.value.message_dict["team"] == [
        "Alpha already has 3 jobs waiting to run (at most 3): wait for some to start, or cancel some."
    ]
    Job.objects.filter(team=team, state=JobState.PENDING).update(state=JobState.RUNNING)
    assert services.submit_job(team=team, pool=pool, user=researcher, spec=spec()).state == JobState.QUEUED


def test_the_refusals_are_translated(settings):
    from django.utils import translation

    with translation.override("zh-hans"):
        assert "NVIDIA_VISIBLE_DEVICES" in errors_of(spec(env={"NVIDIA_VISIBLE_DEVICES": "all"}))["env"][0]
        assert "由集群设置" in errors_of(spec(env={"NVIDIA_VISIBLE_DEVICES": "all"}))["env"][0]
        reserved = errors_of(spec(pod_annotations={"reservoir.io/team": "x"}))["pod_annotations"][0]
        assert reserved.startswith("保留给集群和门户使用")


def test_admins_see_the_high_priority_right_in_django_admin(client, team, platform_admin):
    client.force_login(platform_admin)
    page = client.get(f"/admin/portal/team/{team.pk}/change/").content.decode()
    assert 'name="allow_high_priority"' in page
