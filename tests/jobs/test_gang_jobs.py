"""Multi-node jobs in the portal (no cluster): N × G GPUs counted wherever quota and queues count a job's GPUs, a
gang that can never fit refused, the submit preview saying whether it fits now, the job page and API listing its
pods by index, and a half-started gang settled as Pending, never Running."""

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from jobs import services, settling
from jobs.choices import JobState
from jobs.models import Job, Workload
from jobs.outlook import manifest_preview, submit_outlook
from jobs.specs import JobSpec
from tests.factories import JobFactory, NodeFactory, PodFactory, PoolFactory, QuotaFactory


@pytest.fixture
def pool(db):
    pool = PoolFactory(slug="train", name="Train Pool", contracted_gpus=24)  # all unreserved: the team may borrow them
    for name in ("node-a", "node-b", "node-c"):
        NodeFactory(pool=pool, name=name)
    return pool


def spec(**changes) -> JobSpec:
    values = dict(name="llama", image="registry.example.com/llm/train:1.0", gpus=8, nodes=3)
    values.update(changes)
    return JobSpec(**values)


def test_a_jobs_gpus_are_nodes_times_gpus_per_node_in_the_quota_held(team, pool, researcher):
    JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.RUNNING, gpus=8, nodes=3)
    JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.RUNNING, gpus=2)
    JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.QUEUED, gpus=8, nodes=2)
    assert services.gpus_in_use(team=team, pool=pool) == 26
    assert Job.objects.get(nodes=3).total_gpus == 24


def test_a_gang_above_the_team_quota_or_wider_than_the_pool_is_refused(team, pool, researcher):
    QuotaFactory(team=team, pool=pool, max_gpus=16)
    with pytest.raises(ValidationError) as refused:
        services.submit_job(team=team, pool=pool, user=researcher, spec=spec(nodes=3))  # 24 > 16
    assert "at most 16 GPUs at once" in str(refused.value)
    QuotaFactory._meta.model.objects.filter(team=team).update(max_gpus=64)
    with pytest.raises(ValidationError) as refused:
        services.submit_job(team=team, pool=pool, user=researcher, spec=spec(nodes=4, gpus=4))
    assert refused.value.message_dict["nodes"] == [
        "Train Pool has 3 nodes with 4 GPUs or more: a job on 4 nodes can never fit."
    ]
    job = services.submit_job(team=team, pool=pool, user=researcher, spec=spec(nodes=3, gpus=8, retries=1))
    assert (job.nodes, job.gpus, job.retries, Job.objects.get(pk=job.pk).total_gpus) == (3, 8, 1, 24)


def test_the_submit_preview_says_whether_n_nodes_have_g_free_gpus_now(team, pool, researcher):
    QuotaFactory(team=team, pool=pool, max_gpus=64)
    outlook = submit_outlook(team=team, pool=pool, spec=spec(nodes=3))
    assert outlook.start == "now" and outlook.gang.fits
    assert outlook.after == 24
    assert "kind: Service" in outlook.manifest_yaml and "completionMode: Indexed" in outlook.manifest_yaml
    assert "rsv-<id>-0.rsv-<id>." in outlook.manifest_yaml  # MASTER_ADDR with the id still to come
    # A pod of another team takes 2 GPUs of node-c: only 2 nodes have 8 free.
    PodFactory(pool=pool, node_name="node-c", gpus=2, phase="Running", scheduled=True)
    outlook = submit_outlook(team=team, pool=pool, spec=spec(nodes=3))
    assert outlook.start == "pending" and not outlook.gang.fits
    assert "needs 3 nodes with 8 free GPUs; 2 have" in outlook.start_text
    assert submit_outlook(team=team, pool=pool, spec=spec(nodes=3, gpus=6)).gang.fits


def test_the_job_page_and_api_list_a_gangs_pods_by_index(client, team, pool, researcher):
    job = JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.PENDING, gpus=8, nodes=3)
    now = timezone.now()
    for index, node, phase in ((1, "node-b", "Running"), (0, "node-a", "Running"), (2, "", "Pending")):
        PodFactory(
            job=job,
            team=team,
            pool=pool,
            name=f"rsv-{job.pk}-{index}-x",
            node_name=node,
            gpus=8,
            phase=phase,
            scheduled=bool(node),
            bound_at=now if node else None,
            completion_index=index,
            restarts=index,
        )
    client.force_login(researcher)
    html = client.get(reverse("jobs:job_detail", args=[job.pk])).content.decode()
    assert "2 of 3 pods running, 0 completed" in html
    assert "3 nodes × 8 GPUs = 24 GPUs, one pod per node" in html
    table = html[html.index('<table class="pods">') :]
    assert table.index(f"rsv-{job.pk}-0-x") < table.index(f"rsv-{job.pk}-1-x") < table.index(f"rsv-{job.pk}-2-x")
    answer = client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert (answer["nodes"], answer["total_gpus"], answer["pods_running"]) == (3, 24, 2)
    assert [(pod["completion_index"], pod["node_name"], pod["restarts"]) for pod in answer["pods"]] == [
        (0, "node-a", 0),
        (1, "node-b", 1),
        (2, "", 2),
    ]


def test_a_half_started_gang_is_pending_with_how_many_run_and_running_once_all_do(team, pool, researcher):
    job = JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.ADMITTED, gpus=8, nodes=3)
    Workload.objects.create(
        uid="w1", namespace=team.namespace, name="w", job=job, admitted=True, created_at=timezone.now()
    )
    pods = [
        PodFactory(job=job, team=team, pool=pool, node_name=node, gpus=8, phase=phase, scheduled=bool(node))
        for node, phase in (("node-a", "Running"), ("node-b", "Running"), ("", "Pending"))
    ]
    pods[2].pending_reason = "0/9 nodes are available: 3 Insufficient nvidia.com/gpu."
    pods[2].save()
    settling.settle_job(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert job.pending_reason.startswith("2 of the job's 3 pods run; the others wait to start.")
    assert "3 nodes lack enough free GPUs" in job.pending_reason
    pods[2].node_name, pods[2].phase, pods[2].scheduled = "node-c", "Running", True
    pods[2].save()
    settling.settle_job(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING


def test_each_gang_gets_its_own_rendezvous_token_and_the_preview_never_shows_one(team, pool, researcher, settings):
    from cluster.labels import RENDEZVOUS_TOKEN_ENV
    from jobs.manifests import render

    def token(job):
        env = render(job)["spec"]["template"]["spec"]["containers"][0].get("env", [])
        return {entry["name"]: entry.get("value") for entry in env}.get(RENDEZVOUS_TOKEN_ENV)

    first = JobFactory(team=team, pool=pool, submitted_by=researcher, gpus=8, nodes=2)
    second = JobFactory(team=team, pool=pool, submitted_by=researcher, gpus=8, nodes=2)
    first_token = token(first)
    assert len(first_token) == 64 and token(Job.objects.get(pk=first.pk)) == first_token  # the same on a retry
    assert token(second) != first_token
    assert token(JobFactory(team=team, pool=pool, submitted_by=researcher, gpus=8)) is None  # one node: no rendezvous
    settings.SECRET_KEY = "another-installation"
    assert token(first) != first_token  # derived from this installation's secret key
    QuotaFactory(team=team, pool=pool, max_gpus=24)
    preview = manifest_preview(team=team, pool=pool, spec=spec(nodes=2))
    assert "<per-job token>" in preview and first_token not in preview
