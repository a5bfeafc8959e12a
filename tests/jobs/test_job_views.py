"""The job pages and fragments: list with filters, detail with status polling, logs, cancel/resubmit,
submit with live preview and templates, and the pending queue; visibility by role and constant query counts."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from cluster.errors import ClusterError
from jobs import views as job_views
from jobs.choices import JobState, Placement
from jobs.models import Job, JobTemplate, Pod, Workload
from pools.models import NamespaceLimits, Pool
from portal.htmx import STOP_POLLING
from tests.factories import JobFactory, NodeFactory, PodFactory, PoolFactory, QuotaFactory, UserFactory

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def pool(db):
    pool = PoolFactory(slug="train", name="Train Pool")
    NodeFactory(pool=pool, name="node-a")
    NodeFactory(pool=pool, name="node-b")
    return pool


@pytest.fixture
def job(team, pool, researcher):
    return JobFactory(team=team, pool=pool, submitted_by=researcher, name="my-train", state=JobState.RUNNING)


@pytest.fixture
def other_job(other_team, pool, outsider):
    return JobFactory(team=other_team, pool=pool, submitted_by=outsider, name="secret-job", image="secret/image:1")


def login(client, user):
    client.force_login(user)
    return client


# --- visibility: the role matrix ----------------------------------------------------------------------------------

JOB_PAGES = ["jobs:job_detail", "jobs:job_status", "jobs:job_logs", "jobs:job_cluster_events", "jobs:job_cancel"]


@pytest.mark.parametrize("url_name", JOB_PAGES)
@pytest.mark.parametrize(
    ("who", "status"), [("researcher", 200), ("lead", 200), ("platform_admin", 200), ("outsider", 404)]
)
def test_job_pages_and_fragments_follow_team_membership(client, request, job, url_name, who, status, monkeypatch):
    monkeypatch.setattr(job_views.live, "log_tail", lambda *a, **k: "")
    monkeypatch.setattr(job_views.live, "events_for", lambda *a, **k: [])
    login(client, request.getfixturevalue(who))
    assert client.get(reverse(url_name, args=[job.pk])).status_code == status
    assert client.get(reverse(url_name, args=[job.pk]), **HTMX).status_code == status


@pytest.mark.parametrize("method", ["get", "post"])
def test_an_outsider_cannot_cancel_or_resubmit(client, outsider, job, method):
    login(client, outsider)
    for name in ("jobs:job_cancel", "jobs:job_resubmit"):
        assert getattr(client, method)(reverse(name, args=[job.pk])).status_code == 404
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING


@pytest.mark.parametrize("url_name", ["jobs:job_list", "jobs:pending", "jobs:job_submit"])
def test_pages_need_login(client, db, url_name):
    response = client.get(reverse(url_name))
    assert response.status_code == 302 and reverse("portal:login") in response["Location"]


# --- list --------------------------------------------------------------------------------------------------------


def test_the_list_shows_my_teams_jobs_only(client, researcher, job, other_job):
    response = login(client, researcher).get(reverse("jobs:job_list"))
    assert b"my-train" in response.content
    assert b"secret-job" not in response.content


def test_the_admin_sees_every_team_in_the_list(client, platform_admin, job, other_job):
    response = login(client, platform_admin).get(reverse("jobs:job_list"))
    assert b"my-train" in response.content and b"secret-job" in response.content


def test_filters_by_state_pool_team_and_user(client, researcher, lead, team, pool, job):
    JobFactory(team=team, pool=pool, submitted_by=lead, name="leads-job", state=JobState.SUCCEEDED)
    login(client, researcher)
    by_state = client.get(reverse("jobs:job_list"), {"state": "succeeded"})
    assert b"leads-job" in by_state.content and b"my-train" not in by_state.content
    by_user = client.get(reverse("jobs:job_list"), {"submitted_by": "rita"})
    assert b"my-train" in by_user.content and b"leads-job" not in by_user.content
    by_pool = client.get(reverse("jobs:job_list"), {"pool": "train", "team": "alpha"})
    assert b"my-train" in by_pool.content and b"leads-job" in by_pool.content


def test_filtering_by_another_teams_slug_is_refused_not_leaked(client, researcher, job, other_job):
    response = login(client, researcher).get(reverse("jobs:job_list"), {"team": "beta"})
    assert b"secret-job" not in response.content
    assert b"Select a valid choice" in response.content


def test_the_list_fragment_is_the_table_only(client, researcher, job):
    response = login(client, researcher).get(reverse("jobs:job_list"), {"state": "running"}, **HTMX)
    assert response.status_code == 200
    assert b'id="job-table"' in response.content and b"<html" not in response.content


def test_the_list_paginates(client, researcher, team, pool):
    Job.objects.bulk_create(
        [Job(team=team, pool=pool, submitted_by=researcher, name=f"bulk-{i}", image="x/y:1", gpus=1) for i in range(30)]
    )
    login(client, researcher)
    first = client.get(reverse("jobs:job_list"))
    assert b"30 jobs" in first.content and b"Page 1 of 2" in first.content
    second = client.get(reverse("jobs:job_list"), {"page": 2})
    assert b"Page 2 of 2" in second.content


def _count_queries(client, url, params=None, **extra) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, params or {}, **extra)
    assert response.status_code == 200
    return len(queries.captured_queries)


def _many_jobs(team, pool, user, n):
    Job.objects.bulk_create(
        [
            Job(
                team=team,
                pool=pool,
                submitted_by=user,
                name=f"many-{i}",
                image="x/y:1",
                gpus=1 + i % 4,
                state=[JobState.QUEUED, JobState.RUNNING, JobState.SUCCEEDED][i % 3],
            )
            for i in range(n)
        ]
    )


@pytest.mark.parametrize(
    ("url_name", "params"),
    [("jobs:job_list", {}), ("jobs:job_list", {"state": "running", "pool": "train"}), ("jobs:pending", {})],
)
def test_query_count_is_the_same_for_10_and_1000_jobs(client, researcher, team, pool, url_name, params):
    QuotaFactory(team=team, pool=pool, max_gpus=4)
    login(client, researcher)
    _many_jobs(team, pool, researcher, 10)
    few = _count_queries(client, reverse(url_name), params)
    _many_jobs(team, pool, researcher, 990)
    job_ids = list(Job.objects.values_list("pk", flat=True)[:200])
    Pod.objects.bulk_create(
        [
            Pod(
                uid=f"uid-{i}",
                namespace="team-alpha",
                name=f"pod-{i}",
                team=team,
                pool=pool,
                gpus=2,
                job_id=job_ids[i],
                phase="Pending",
                scheduled=False,
                created_at="2026-01-01T00:00:00Z",
                pending_reason="0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
            )
            for i in range(200)
        ]
    )
    many = _count_queries(client, reverse(url_name), params)
    assert many == few


def test_job_detail_query_count_does_not_grow_with_events(client, researcher, job):
    from jobs.models import JobEvent

    login(client, researcher)
    few = _count_queries(client, reverse("jobs:job_detail", args=[job.pk]))
    JobEvent.objects.bulk_create([JobEvent(job=job, message=f"note {i}") for i in range(200)])
    assert _count_queries(client, reverse("jobs:job_detail", args=[job.pk])) == few


# --- detail, status polling, logs --------------------------------------------------------------------------------


def test_detail_shows_timeline_placement_and_a_polling_status(client, researcher, job):
    from jobs.models import JobEvent

    JobEvent.objects.create(job=job, from_state="", to_state=JobState.QUEUED, message="submitted")
    JobEvent.objects.create(job=job, from_state=JobState.QUEUED, to_state=JobState.RUNNING, message="running on node-a")
    Job.objects.filter(pk=job.pk).update(node_name="node-a")
    response = login(client, researcher).get(reverse("jobs:job_detail", args=[job.pk]))
    html = response.content.decode()
    assert "Timeline" in html and "running on node-a" in html
    assert "node-a" in html and "Train Pool" in html
    assert 'hx-trigger="every 3s"' in html
    assert "Cancel job" in html


def test_status_polling_stops_once_the_job_is_final(client, researcher, job):
    login(client, researcher)
    running = client.get(reverse("jobs:job_status", args=[job.pk]), **HTMX)
    assert running.status_code == 200 and b"every 3s" in running.content
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED)
    final = client.get(reverse("jobs:job_status", args=[job.pk]), **HTMX)
    assert final.status_code == STOP_POLLING
    assert b"Succeeded" in final.content and b"every 3s" not in final.content


def test_the_log_tail_shows_the_pods_output(client, researcher, job, monkeypatch):
    Pod.objects.create(
        uid="u1",
        namespace="team-alpha",
        name="rsv-1-abc",
        team=job.team,
        job=job,
        phase="Running",
        created_at="2026-01-01T00:00:00Z",
    )
    monkeypatch.setattr(job_views.live, "log_tail", lambda ns, pod, max_lines: f"epoch 1 loss 0.5 from {pod}")
    response = login(client, researcher).get(reverse("jobs:job_logs", args=[job.pk]), **HTMX)
    assert b"epoch 1 loss 0.5 from rsv-1-abc" in response.content


def test_the_log_tail_says_clearly_when_the_cluster_has_no_logs(client, researcher, job, monkeypatch):
    Pod.objects.create(
        uid="u1",
        namespace="team-alpha",
        name="rsv-1-abc",
        team=job.team,
        job=job,
        phase="Running",
        created_at="2026-01-01T00:00:00Z",
    )

    def refuse(*args, **kwargs):
        raise ClusterError("apiserver answered 405 Method Not Allowed", status=405)

    monkeypatch.setattr(job_views.live, "log_tail", refuse)
    response = login(client, researcher).get(reverse("jobs:job_logs", args=[job.pk]), **HTMX)
    assert response.status_code == 200
    assert b"Logs are not available from the cluster" in response.content


def test_the_log_tail_without_a_pod_says_so(client, researcher, job):
    response = login(client, researcher).get(reverse("jobs:job_logs", args=[job.pk]), **HTMX)
    assert b"No pod yet" in response.content


# --- cancel and resubmit -----------------------------------------------------------------------------------------


def test_cancel_asks_first_then_cancels(client, researcher, team, pool):
    queued = JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.QUEUED, name="to-cancel")
    login(client, researcher)
    confirm = client.get(reverse("jobs:job_cancel", args=[queued.pk]))
    assert b"Yes, cancel it" in confirm.content
    assert Job.objects.get(pk=queued.pk).state == JobState.QUEUED
    response = client.post(reverse("jobs:job_cancel", args=[queued.pk]), **HTMX)
    assert response["HX-Redirect"] == reverse("jobs:job_detail", args=[queued.pk])
    assert Job.objects.get(pk=queued.pk).state == JobState.CANCELLED


def test_resubmit_creates_a_new_job_with_the_same_spec(client, researcher, team, pool):
    QuotaFactory(team=team, pool=pool, max_gpus=0)  # no room: the new job stays queued, no cluster call
    Job.objects.filter(pk__gt=0).delete()
    old = JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.FAILED, name="again", gpus=1)
    QuotaFactory._meta.model.objects.filter(team=team, pool=pool).update(max_gpus=1)
    JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.RUNNING, name="holds-quota", gpus=1)
    login(client, researcher)
    response = client.post(reverse("jobs:job_resubmit", args=[old.pk]))
    new = Job.objects.get(resubmitted_from=old)
    assert response.status_code == 302 and response["Location"] == reverse("jobs:job_detail", args=[new.pk])
    assert (new.name, new.image, new.gpus, new.state) == ("again", old.image, 1, JobState.QUEUED)


# --- submit ------------------------------------------------------------------------------------------------------


def _form(**changes):
    data = {
        "team": "alpha",
        "pool": "train",
        "name": "bert-base",
        "image": "registry.example.com/nlp/bert:2.1",
        "command": "python train.py --epochs 3",
        "gpus": "2",
        "cpu": "4",
        "memory_gib": "16",
        "placement": Placement.STRICT,
        "spill_after_minutes": "",
        "priority": "50",
        "max_run_minutes": "120",
        "env": "",
        "pod_annotations": "",
        "save_as_template": "",
    }
    data.update(changes)
    return data


def test_submit_errors_sit_beside_their_fields_and_keep_what_was_typed(client, researcher, pool):
    login(client, researcher)
    response = client.post(reverse("jobs:job_submit"), _form(image="Not An Image!", gpus="0", name="Bad_Name"))
    html = response.content.decode()
    assert response.status_code == 400
    assert 'value="Not An Image!"' in html and 'value="python train.py --epochs 3"' in html
    assert "Ensure this value is greater than or equal to 1." in html
    assert not Job.objects.exists()


def test_submit_over_the_quota_limit_says_so_beside_gpus(client, researcher, team, pool):
    QuotaFactory(team=team, pool=pool, max_gpus=2)
    response = login(client, researcher).post(reverse("jobs:job_submit"), _form(gpus="4"))
    assert response.status_code == 400
    assert b"may use at most 2 GPUs at once" in response.content
    assert b'value="bert-base"' in response.content


def test_submit_queues_when_the_quota_is_in_use_and_saves_a_template(client, researcher, team, pool):
    QuotaFactory(team=team, pool=pool, max_gpus=2)
    JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.RUNNING, gpus=2)
    login(client, researcher)
    response = client.post(reverse("jobs:job_submit"), _form(save_as_template="bert nightly"), follow=True)
    job = Job.objects.get(name="bert-base")
    assert job.state == JobState.QUEUED
    assert (job.gpus, job.cpu_millicores, job.memory_mib, job.command) == (
        2,
        4000,
        16384,
        ["python", "train.py", "--epochs", "3"],
    )
    assert b"queued at position 1" in response.content
    template = JobTemplate.objects.get(team=team, name="bert nightly")
    prefilled = client.get(reverse("jobs:job_submit"), {"template": template.pk})
    assert b'value="registry.example.com/nlp/bert:2.1"' in prefilled.content
    assert b'value="python train.py --epochs 3"' in prefilled.content


def test_templates_of_other_teams_are_404(client, researcher, other_team, pool):
    template = JobTemplate.objects.create(team=other_team, name="theirs", spec={"name": "x"})
    login(client, researcher)
    assert client.get(reverse("jobs:job_submit"), {"template": template.pk}).status_code == 404
    assert client.post(reverse("jobs:template_delete", args=[template.pk])).status_code == 404
    assert JobTemplate.objects.filter(pk=template.pk).exists()


def test_the_preview_shows_manifest_quota_and_expected_start(client, researcher, team, pool):
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    response = login(client, researcher).post(reverse("jobs:job_submit_preview"), _form(), **HTMX)
    html = response.content.decode()
    assert "kind: Job" in html and "nvidia.com/gpu: &#x27;2&#x27;" in html or "nvidia.com/gpu: '2'" in html
    assert "registry.example.com/nlp/bert:2.1" in html
    assert "2 of 8 GPUs" in html
    assert "Starts now in Train Pool" in html
    assert not Job.objects.exists()


def test_the_preview_of_an_untouched_form_says_what_to_fill_in_not_errors(client, researcher, team, pool):
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    untouched = _form(pool="", name="", image="")  # what the page posts on load: team preselected, defaults kept
    html = login(client, researcher).post(reverse("jobs:job_submit_preview"), untouched, **HTMX).content.decode()
    assert "This field is required" not in html
    assert "Still to fill in:</strong> Pool, Name, Image" in html


def test_the_preview_names_what_is_wrong_once_typed_and_what_is_still_missing(client, researcher, team, pool):
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    typed = _form(image="", gpus="0")
    html = login(client, researcher).post(reverse("jobs:job_submit_preview"), typed, **HTMX).content.decode()
    assert "Still to fill in:</strong> Image" in html
    assert "GPUs per node: Ensure this value is greater than or equal to 1." in html
    assert "This field is required" not in html


def test_the_preview_says_queued_at_position_k(client, researcher, team, pool):
    QuotaFactory(team=team, pool=pool, max_gpus=2)
    JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.RUNNING, gpus=2)
    JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.QUEUED, gpus=1)
    response = login(client, researcher).post(reverse("jobs:job_submit_preview"), _form(), **HTMX)
    assert b"Queued at position 2" in response.content


def test_the_preview_says_when_it_cannot_fit(client, researcher, team, pool):
    QuotaFactory(team=team, pool=pool, max_gpus=16)
    NamespaceLimits.objects.create(team=team, container_max_gpus=16)  # the nodes, not the namespace, refuse it
    response = login(client, researcher).post(reverse("jobs:job_submit_preview"), _form(gpus="16"), **HTMX)
    assert b"Cannot fit" in response.content and b"can never fit" in response.content


def test_the_preview_says_when_the_largest_free_block_is_too_small(client, researcher, team, pool):
    QuotaFactory(team=team, pool=pool, max_gpus=16)
    for i, node in enumerate(["node-a", "node-b"]):
        Pod.objects.create(
            uid=f"p{i}",
            namespace="x",
            name=f"p{i}",
            node_name=node,
            gpus=7,
            phase="Running",
            scheduled=True,
            created_at="2026-01-01T00:00:00Z",
        )
    response = login(client, researcher).post(reverse("jobs:job_submit_preview"), _form(gpus="4"), **HTMX)
    assert b"the largest free block in Train Pool is 1 GPUs" in response.content


def test_a_researcher_cannot_submit_for_another_team(client, researcher, other_team, pool):
    QuotaFactory(team=other_team, pool=pool, max_gpus=8)
    response = login(client, researcher).post(reverse("jobs:job_submit"), _form(team="beta"))
    assert response.status_code == 400 and not Job.objects.exists()


# --- pending -----------------------------------------------------------------------------------------------------


def test_pending_shows_other_teams_without_their_details(client, researcher, team, other_team, pool, outsider):
    QuotaFactory(team=other_team, pool=pool, max_gpus=1)
    secret = JobFactory(
        team=other_team, pool=pool, submitted_by=outsider, name="secret-job", gpus=4, state=JobState.QUEUED
    )
    PodFactory(
        name="secret-pod",
        team=other_team,
        pool=pool,
        gpus=8,
        pending_reason="0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
    )
    response = login(client, researcher).get(reverse("jobs:pending"))
    html = response.content.decode()
    assert html.count("another team") >= 2
    assert "secret-job" not in html and "secret-pod" not in html and "Beta" not in html
    assert reverse("jobs:job_detail", args=[secret.pk]) not in html
    assert "Train Pool" in html


def test_pending_explains_in_plain_words_and_says_what_would_fit(client, researcher, team, pool):
    elastic = PoolFactory(slug="spare", name="Spare Pool", kind="elastic", contracted_gpus=None)
    NodeFactory(pool=elastic, name="spare-1")
    pool.spill_pools.add(elastic)
    QuotaFactory(team=team, pool=pool, max_gpus=16)
    for i, node in enumerate(["node-a", "node-b"]):
        Pod.objects.create(
            uid=f"r{i}",
            namespace="x",
            name=f"r{i}",
            node_name=node,
            gpus=6,
            phase="Running",
            scheduled=True,
            created_at="2026-01-01T00:00:00Z",
        )
    job = JobFactory(
        team=team,
        pool=pool,
        submitted_by=researcher,
        name="wants-four",
        gpus=4,
        state=JobState.PENDING,
        placement=Placement.STRICT,
    )
    PodFactory(
        name="rsv-w",
        team=team,
        pool=pool,
        job=job,
        gpus=4,
        pending_reason="0/3 nodes are available: 2 Insufficient nvidia.com/gpu, 1 node(s) had "
        "untolerated taint {workload: spare}. preemption: 0/3 nodes are available.",
    )
    big = JobFactory(
        team=team,
        pool=pool,
        submitted_by=researcher,
        name="wants-eight",
        gpus=8,
        state=JobState.PENDING,
        placement=Placement.SOFT,
    )
    PodFactory(
        name="rsv-b",
        team=team,
        pool=pool,
        job=big,
        gpus=8,
        created_at="2026-01-01T00:01:00Z",
        pending_reason="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
    )
    response = login(client, researcher).get(reverse("jobs:pending"))
    html = response.content.decode()
    assert "2 nodes lack enough free GPUs" in html
    assert "1 node is kept for other workloads (taint)" in html
    assert "fits now with soft placement (in Spare Pool)" in html
    assert "largest free block is 2 GPUs" in html
    assert "wants-four" in html and "Alpha" in html


def test_pending_shows_queued_jobs_over_quota_with_their_position(client, researcher, team, pool):
    QuotaFactory(team=team, pool=pool, max_gpus=2)
    JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.RUNNING, gpus=2)
    first = JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.QUEUED, gpus=2, name="first-q")
    JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.QUEUED, gpus=1, name="second-q")
    said = (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor train, "
        "2 more needed"
    )
    Workload.objects.create(uid="w1", namespace="t", name="w1", job=first, message=said, created_at=first.created_at)
    response = login(client, researcher).get(reverse("jobs:pending"))
    html = response.content.decode()
    assert "Waiting for its team&#x27;s quota in Train Pool: 2 more GPUs needed" in html
    assert "Waiting for Kueue to admit it against the team&#x27;s quota." in html  # not synced yet
    assert "queued at position 1" in html and "queued at position 2" in html
    assert "starts when 2 GPUs of the team&#x27;s quota are freed" in html


def test_pending_filters_by_pool_and_404s_an_unknown_pool(client, researcher, pool):
    login(client, researcher)
    assert client.get(reverse("jobs:pending"), {"pool": "train"}, **HTMX).status_code == 200
    assert client.get(reverse("jobs:pending"), {"pool": "nope"}).status_code == 404


def test_pending_empty_state(client, researcher, pool):
    response = login(client, researcher).get(reverse("jobs:pending"))
    assert b"Nothing is waiting" in response.content


def test_users_filter_lists_only_members_of_my_teams(client, researcher, outsider, job):
    UserFactory(username="stranger")
    response = login(client, researcher).get(reverse("jobs:job_list"))
    assert b'value="rita"' in response.content
    assert b'value="otto"' not in response.content and b'value="stranger"' not in response.content
    assert Pool.objects.count() == 1


@pytest.mark.parametrize("who", ["researcher", "lead", "platform_admin", "outsider"])
def test_list_pages_and_their_fragments_answer_every_role_within_its_scope(client, request, job, other_job, who):
    user = request.getfixturevalue(who)
    login(client, user)
    for url in (reverse("jobs:job_list"), reverse("jobs:pending"), reverse("jobs:job_submit")):
        assert client.get(url).status_code == 200
    assert client.get(reverse("jobs:job_list"), **HTMX).status_code == 200
    assert client.get(reverse("jobs:pending"), **HTMX).status_code == 200
    assert client.post(reverse("jobs:job_submit_preview"), _form(), **HTMX).status_code == 200
    listed = client.get(reverse("jobs:job_list")).content
    assert (b"my-train" in listed) is (who != "outsider")
    assert (b"secret-job" in listed) is (who in ("outsider", "platform_admin"))


def test_edit_a_copy_prefills_the_form_from_a_visible_job_only(client, researcher, job, other_job):
    login(client, researcher)
    response = client.get(reverse("jobs:job_submit"), {"from": job.pk})
    assert response.status_code == 200
    assert b'value="my-train"' in response.content and b'value="python train.py"' in response.content
    assert client.get(reverse("jobs:job_submit"), {"from": other_job.pk}).status_code == 404


def test_a_plain_form_post_cancels_and_redirects_with_a_message(client, researcher, team, pool):
    queued = JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.QUEUED, name="plain")
    login(client, researcher)
    response = client.post(reverse("jobs:job_cancel", args=[queued.pk]), follow=True)
    assert response.redirect_chain[-1][0] == reverse("jobs:job_detail", args=[queued.pk])
    assert f"Job #{queued.pk} cancelled.".encode() in response.content
    again = client.post(reverse("jobs:job_cancel", args=[queued.pk]), follow=True)
    assert b"is already Cancelled" in again.content


def test_run_and_wait_times_carry_units(client, researcher, team, pool):
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    JobFactory(
        team=team,
        pool=pool,
        submitted_by=researcher,
        state=JobState.SUCCEEDED,
        name="timed",
        started_at=now - timedelta(minutes=5),
        finished_at=now - timedelta(minutes=1, seconds=48),
    )
    html = login(client, researcher).get(reverse("jobs:job_list")).content.decode()
    assert "3 min 12 s" in html
