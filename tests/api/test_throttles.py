"""API rate limits (issue 15): writes per user across the API, job submissions per user on top; reads are not
limited; one user's limit is not another's; the answer is 429 with Retry-After."""

import pytest

from tests.factories import QuotaFactory


@pytest.fixture
def no_cluster(monkeypatch):
    monkeypatch.setattr("reconcile.tasks.submit_job_to_cluster.delay", lambda job_id: None)
    monkeypatch.setattr("reconcile.tasks.reconcile_team_namespace.delay", lambda team_id: None)


def submission(name: str) -> dict:
    return {"team": "alpha", "pool": "train", "name": name, "image": "registry.example.com/a/b:1", "gpus": 1}


def test_job_submissions_are_limited_per_user(settings, api, no_cluster, team, researcher, lead, pool):
    settings.THROTTLE_RATES = {"writes": "", "job_submissions": "3/minute"}
    QuotaFactory(team=team, pool=pool, max_gpus=1)
    client = api(researcher)
    for n in range(3):
        assert client.post("/api/v1/jobs/", submission(f"job-{n}"), format="json").status_code == 201
    refused = client.post("/api/v1/jobs/", submission("job-3"), format="json")
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    # Reads go on, and another user of the same team still has their own allowance.
    assert client.get("/api/v1/jobs/").status_code == 200
    assert api(lead).post("/api/v1/jobs/", submission("by-lead"), format="json").status_code == 201


def test_every_write_counts_toward_the_users_write_limit(settings, api, team, platform_admin, pool):
    settings.THROTTLE_RATES = {"writes": "2/minute", "job_submissions": ""}
    client = api(platform_admin)
    assert client.patch("/api/v1/teams/alpha/", {"description": "one"}, format="json").status_code == 200
    assert client.patch("/api/v1/teams/alpha/", {"description": "two"}, format="json").status_code == 200
    assert client.patch("/api/v1/teams/alpha/", {"description": "three"}, format="json").status_code == 429
    for _ in range(5):
        assert client.get("/api/v1/teams/alpha/").status_code == 200
    team.refresh_from_db()
    assert team.description == "two"


def test_a_cache_outage_does_not_refuse_writes(settings, api, team, platform_admin, monkeypatch):
    settings.THROTTLE_RATES = {"writes": "1/minute", "job_submissions": ""}

    def broken(*args, **kwargs):
        raise ConnectionError("Redis is down")

    monkeypatch.setattr("portal.api.throttles.WriteRateThrottle.cache.get", broken)
    client = api(platform_admin)
    for text in ("one", "two"):
        assert client.patch("/api/v1/teams/alpha/", {"description": text}, format="json").status_code == 200
