"""Field errors a caller can act on, and lists that page, filter and sort like the pages do."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.manifests import render
from jobs.models import Job
from pools.models import Quota, Reservation
from teamdata.choices import SecretKind
from teamdata.models import TeamSecret
from tests.factories import JobFactory, PoolFactory, QuotaFactory, ReservationFactory


@pytest.fixture
def admin_api(api, platform_admin):
    return api(platform_admin)


@pytest.mark.parametrize("gpus", [-1, 2.5, "four", True])
def test_quota_gpus_must_be_a_whole_number_of_zero_or_more(admin_api, team, pool, gpus):
    response = admin_api.post("/api/v1/quotas/", {"team": "alpha", "pool": "train", "max_gpus": gpus}, format="json")
    assert response.status_code == 400
    assert "GPUs" in response.json()["max_gpus"][0]
    assert not Quota.objects.filter(team=team).exists()


def test_quota_below_what_the_team_runs_now_names_the_jobs(admin_api, team, pool, researcher):
    quota = QuotaFactory(team=team, pool=pool, max_gpus=8)
    big = JobFactory(team=team, pool=pool, submitted_by=researcher, state="running", gpus=4, name="big-train")
    small = JobFactory(team=team, pool=pool, submitted_by=researcher, state="pending", gpus=2, name="small-eval")
    JobFactory(team=team, pool=pool, submitted_by=researcher, state="succeeded", gpus=8, name="old-done")

    response = admin_api.patch(f"/api/v1/quotas/{quota.pk}/", {"max_gpus": 5}, format="json")

    assert response.status_code == 400
    message = response.json()["max_gpus"][0]
    assert "6 GPUs" in message
    assert f"#{big.pk} big-train (4 GPUs, running)" in message
    assert f"#{small.pk} small-eval (2 GPUs, pending)" in message
    assert "old-done" not in message
    quota.refresh_from_db()
    assert quota.max_gpus == 8
    # Exactly what the jobs use is fine.
    assert admin_api.patch(f"/api/v1/quotas/{quota.pk}/", {"max_gpus": 6}, format="json").status_code == 200


def test_unknown_pool_is_a_field_error(admin_api, team):
    response = admin_api.post("/api/v1/quotas/", {"team": "alpha", "pool": "nope", "max_gpus": 1}, format="json")
    assert response.status_code == 400
    assert response.json()["pool"] == ["Unknown pool 'nope'."]


def test_reservation_beyond_the_contract_says_how_many_are_left(admin_api, team, other_team, pool):
    start = timezone.now() + timedelta(days=1)
    ReservationFactory(team=other_team, pool=pool, gpus=12, starts_at=start, ends_at=start + timedelta(days=30))
    body = {"team": "alpha", "pool": "train", "gpus": 6, "starts_at": start, "ends_at": start + timedelta(days=30)}

    response = admin_api.post("/api/v1/reservations/", body, format="json")

    assert response.status_code == 400
    message = response.json()["gpus"][0]
    assert "16 contracted GPUs" in message and "at most 4 more" in message
    assert not Reservation.objects.filter(team=team).exists()
    assert admin_api.post("/api/v1/reservations/", {**body, "gpus": 4}, format="json").status_code == 201


def test_malformed_image_reference_is_refused(api, researcher, team, pool):
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    body = {"team": "alpha", "pool": "train", "name": "t1", "image": "Registry/UPPER CASE:!", "gpus": 1}
    response = api(researcher).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    assert "is not an image reference" in response.json()["image"][0]
    assert not Job.objects.exists()


def test_a_jobs_grace_period_is_whole_seconds_up_to_the_cap_and_reaches_its_pods(settings, api, researcher, team, pool):
    settings.JOB_MAX_GRACE_SECONDS = 900  # the platform's cap (tests/jobs/test_grace_cap.py: its default, 60)
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    client = api(researcher)
    body = {"team": "alpha", "pool": "train", "image": "registry.example.com/t/train:1.0", "gpus": 1}
    for wrong in (-1, 901, 3601, 1.5, "soon"):
        wrong_body = {**body, "name": "t", "termination_grace_seconds": wrong}
        response = client.post("/api/v1/jobs/", wrong_body, format="json")
        assert response.status_code == 400, wrong
        assert "termination_grace_seconds" in response.json()
    assert not Job.objects.exists()
    response = client.post("/api/v1/jobs/", {**body, "name": "ckpt", "termination_grace_seconds": 600}, format="json")
    assert response.status_code == 201 and response.json()["termination_grace_seconds"] == 600
    job = Job.objects.get(pk=response.json()["id"])
    assert render(job)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 600
    default = client.post("/api/v1/jobs/", {**body, "name": "plain"}, format="json").json()
    assert default["termination_grace_seconds"] == 30 and default["borrowed_gpus"] == 0
    assert default["borrowed_note"] == ""


def test_submit_answers_201_with_state_and_queue_position(api, researcher, team, pool):
    QuotaFactory(team=team, pool=pool, max_gpus=2)
    client = api(researcher)
    body = {"team": "alpha", "pool": "train", "image": "registry.example.com/t/train:1.0", "gpus": 2}

    first = client.post("/api/v1/jobs/", {**body, "name": "first"}, format="json")
    second = client.post("/api/v1/jobs/", {**body, "name": "second"}, format="json")

    assert first.status_code == 201 and second.status_code == 201
    # Both wait for Kueue in the team's queue, in submission order.
    assert first.json()["state"] == "queued" and first.json()["queue_position"] == 1
    assert second.json()["state"] == "queued" and second.json()["queue_position"] == 2
    assert first.json()["admitted_pool"] is None
    assert second.json()["submitted_by"] == "rita"


def test_cancel_answers_202_and_a_final_job_cannot_be_cancelled_again(api, researcher, team, pool):
    job = JobFactory(team=team, pool=pool, submitted_by=researcher, state="running")
    client = api(researcher)
    response = client.post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 202
    assert response.json()["state"] == "cancelled"
    again = client.post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert again.status_code == 400
    assert "already Cancelled" in again.json()["non_field_errors"][0]


def test_job_list_pages_filters_with_the_page_filters_and_orders(api, platform_admin, team, other_team, pool):
    other_pool = PoolFactory(slug="infer")
    for index in range(7):
        JobFactory(team=team, pool=pool, state="running", gpus=1 + index % 3)
    JobFactory(team=team, pool=other_pool, state="running")
    JobFactory(team=other_team, pool=pool, state="running")
    JobFactory(team=team, pool=pool, state="queued")
    client = api(platform_admin)

    page = client.get("/api/v1/jobs/", {"team": "alpha", "pool": "train", "state": "running", "page_size": 5}).json()
    assert page["count"] == 7
    assert len(page["results"]) == 5 and page["next"]
    rest = client.get(page["next"]).json()
    assert len(rest["results"]) == 2

    ordered = client.get("/api/v1/jobs/", {"team": "alpha", "state": "running", "ordering": "gpus"}).json()["results"]
    assert [job["gpus"] for job in ordered] == sorted(job["gpus"] for job in ordered)

    several = client.get("/api/v1/jobs/?state=running&state=queued&team=alpha&pool=train").json()
    assert several["count"] == 8

    unknown = client.get("/api/v1/jobs/", {"pool": "nope"})
    assert unknown.status_code == 400 and "pool" in unknown.json()


def test_a_researcher_cannot_filter_their_way_into_another_team(api, researcher, other_team, pool):
    JobFactory(team=other_team, pool=pool, state="running")
    response = api(researcher).get("/api/v1/jobs/", {"team": "beta"})
    # beta is not one of rita's teams: to her it does not exist.
    assert response.status_code == 400
    assert api(researcher).get("/api/v1/jobs/").json()["count"] == 0


def test_a_trailing_newline_in_a_names_end_is_refused(api, researcher, team, pool):
    """JSON keys are not trimmed like fields: a pattern ending in `$` took "HF_HOME\\n" for a variable name."""
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    TeamSecret.objects.create(team=team, name="hf", kind=SecretKind.OPAQUE, keys=["token"])
    client = api(researcher)
    body = {"team": "alpha", "pool": "train", "name": "t", "image": "registry.example.com/t/train:1.0", "gpus": 1}
    for field, value in (
        ("env", {"HF_HOME\n": "/data"}),
        ("secret_env", {"TOKEN\n": {"secret": "hf", "key": "token"}}),
    ):
        response = client.post("/api/v1/jobs/", {**body, field: value}, format="json")
        assert response.status_code == 400, (field, value)
        assert "Invalid variable names: " in response.json()[field][0]
    assert not Job.objects.exists()
    assert client.post("/api/v1/jobs/", {**body, "env": {"HF_HOME": "/data"}}, format="json").status_code == 201


def test_a_slug_that_names_cluster_objects_is_fixed_once_made(admin_api, client, platform_admin, team, pool):
    """A team's slug names its namespace and queues, a pool's its Kueue flavor: renaming either would leave the jobs,
    pods and usage already there belonging to nothing. The name changes; the slug does not (API and admin)."""
    response = admin_api.patch("/api/v1/teams/alpha/", {"slug": "alpha2", "name": "Alpha Two"}, format="json")
    assert response.status_code == 400
    assert "team-alpha" in response.json()["slug"][0]
    team.refresh_from_db()
    assert (team.slug, team.name) == ("alpha", "Alpha")
    assert admin_api.patch("/api/v1/teams/alpha/", {"name": "Alpha Two"}, format="json").status_code == 200
    team.refresh_from_db()
    assert (team.slug, team.name) == ("alpha", "Alpha Two")

    response = admin_api.patch("/api/v1/pools/train/", {"slug": "train2"}, format="json")
    assert response.status_code == 400 and "train" in response.json()["slug"][0]
    pool.refresh_from_db()
    assert pool.slug == "train"
    assert admin_api.patch("/api/v1/pools/train/", {"name": "Training (A100)"}, format="json").status_code == 200

    client.force_login(platform_admin)
    for page in (f"/admin/portal/team/{team.pk}/change/", f"/admin/pools/pool/{pool.pk}/change/"):
        assert b'name="slug"' not in client.get(page).content, page
    assert b'name="slug"' in client.get("/admin/portal/team/add/").content
    assert b'name="slug"' in client.get("/admin/pools/pool/add/").content


def test_a_pools_kind_is_fixed_once_it_has_reservations(admin_api, team, pool):
    """Reserved or elastic decides how a pool's usage is billed, and past days are metered again from it."""
    start = timezone.now() + timedelta(days=1)
    response = admin_api.patch("/api/v1/pools/train/", {"kind": "elastic", "contracted_gpus": None}, format="json")
    assert response.status_code == 200, response.json()
    pool.refresh_from_db()
    assert pool.kind == "elastic", "a pool nothing used yet may still change its kind"
    response = admin_api.patch("/api/v1/pools/train/", {"kind": "reserved", "contracted_gpus": 16}, format="json")
    assert response.status_code == 200, response.json()
    ReservationFactory(team=team, pool=pool, gpus=4, starts_at=start, ends_at=start + timedelta(days=30))
    response = admin_api.patch("/api/v1/pools/train/", {"kind": "elastic", "contracted_gpus": None}, format="json")
    assert response.status_code == 400 and "Make a new pool" in response.json()["kind"][0]
    pool.refresh_from_db()
    assert pool.kind == "reserved"
