"""What the API and the pages answer while Redis or PostgreSQL is down (issue 14: accepted means persisted, an
error leaves nothing behind, never a 500 or a traceback page).

The broker tests publish to a real redis-server of their own that they stop and start; the database tests make
PostgreSQL refuse this process's connections, as it does while restarting."""

import threading

import pytest
from django.test import Client

from jobs.models import Job
from portal import outbox
from portal.models import OutboxMessage
from tests.factories import JobFactory, NodeFactory, QuotaFactory
from tests.faultkit import celery_broker, database_down

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {"team": "alpha", "pool": "train", "name": "through-outage", "image": "registry.example.com/t/a:1", "gpus": 1}


@pytest.fixture
def quota(team, pool):
    NodeFactory(pool=pool, name="gpu-outage")
    return QuotaFactory(team=team, pool=pool, max_gpus=8)


def test_a_broker_outage_after_commit_is_no_error_and_the_dispatcher_sends_the_message_later(
    api, researcher, quota, throwaway_redis
):
    client = api(researcher)
    throwaway_redis.start()
    with celery_broker(throwaway_redis.url):
        throwaway_redis.stop()  # Redis goes away

        response = client.post("/api/v1/jobs/", BODY, format="json")
        assert response.status_code == 201
        job = Job.objects.get(pk=response.json()["id"])
        assert job.state == "queued"
        pending = OutboxMessage.objects.get(task="jobs.submit_job", args=[job.pk])
        assert pending.sent_at is None

        cancelled = client.post(f"/api/v1/jobs/{job.pk}/cancel/")
        assert cancelled.status_code == 202
        assert OutboxMessage.objects.get(task="jobs.delete_job", args=[job.pk]).sent_at is None

        # The dispatcher keeps trying while Redis is down, and sends everything once it is back.
        stop = threading.Event()
        dispatcher = threading.Thread(target=_dispatch_until, args=(stop,))
        dispatcher.start()
        try:
            stop.wait(1.5)
            assert OutboxMessage.objects.filter(sent_at__isnull=True).count() >= 2
            throwaway_redis.start()
            _wait(lambda: not OutboxMessage.objects.filter(sent_at__isnull=True).exists(), what="the outbox to drain")
        finally:
            stop.set()
            dispatcher.join(timeout=15)

    sent = throwaway_redis.messages("cluster")
    assert {"task": "jobs.submit_job", "args": f"({job.pk},)"} in sent
    assert {"task": "jobs.delete_job", "args": f"({job.pk},)"} in sent
    assert sum(1 for m in sent if m["task"] == "jobs.submit_job") == 1  # once, not once per attempt


def test_with_the_broker_up_the_message_is_sent_at_commit(api, researcher, quota, throwaway_redis):
    throwaway_redis.start()
    with celery_broker(throwaway_redis.url):
        response = api(researcher).post("/api/v1/jobs/", BODY, format="json")
    assert response.status_code == 201
    job_id = response.json()["id"]
    assert OutboxMessage.objects.get(task="jobs.submit_job", args=[job_id]).sent_at is not None
    assert {"task": "jobs.submit_job", "args": f"({job_id},)"} in throwaway_redis.messages("cluster")


def test_an_error_before_commit_leaves_no_message(api, researcher, quota, throwaway_redis):
    throwaway_redis.start()
    with celery_broker(throwaway_redis.url):
        response = api(researcher).post("/api/v1/jobs/", {**BODY, "gpus": 9}, format="json")  # above the quota
    assert response.status_code == 400
    assert not Job.objects.exists()
    assert not OutboxMessage.objects.filter(task="jobs.submit_job").exists()


def _dispatch_until(stop):
    from django.db import connection

    try:
        outbox.run_dispatcher(stop, interval=0.2, max_backoff=0.5)
    finally:
        connection.close()


def _wait(predicate, *, what, timeout=20.0):
    from tests.clusterkit import wait_for

    return wait_for(predicate, timeout=timeout, what=what)


# --- PostgreSQL down -----------------------------------------------------------------------------------------------


def test_while_the_database_is_down_the_api_answers_503_json_with_retry_after(token_client, researcher, quota):
    client = token_client(researcher)
    with database_down():
        listed = client.get("/api/v1/jobs/")
        submitted = client.post("/api/v1/jobs/", BODY, format="json")
    for response in (listed, submitted):
        assert response.status_code == 503
        assert response["Content-Type"] == "application/json"
        assert response["Retry-After"] == "10"
        body = response.json()
        assert "cannot reach its database" in body["detail"] and body["retry_after"] == 10
    assert not Job.objects.exists()  # the error left nothing behind
    assert client.get("/api/v1/jobs/").status_code == 200  # and the next request, once it is back, works


def test_a_session_api_call_fails_in_the_middleware_and_still_answers_json(researcher, quota):
    client = Client(raise_request_exception=False)
    client.force_login(researcher)
    with database_down():
        response = client.post("/api/v1/jobs/", BODY, content_type="application/json")
    assert response.status_code == 503
    assert response.json()["retry_after"] == 10
    assert response["Retry-After"] == "10"


@pytest.mark.parametrize("debug", [False, True])
def test_while_the_database_is_down_pages_answer_a_friendly_503(researcher, quota, settings, debug):
    settings.DEBUG = debug  # make dev runs with DEBUG: no traceback page there either
    client = Client(raise_request_exception=False)
    client.force_login(researcher)
    with database_down():
        response = client.get("/jobs/")
    assert response.status_code == 503
    assert response["Retry-After"] == "10"
    html = response.content.decode()
    assert "Back in a moment" in html and "cannot reach its database" in html
    assert "Traceback" not in html and "OperationalError" not in html
    assert client.get("/jobs/").status_code == 200


def test_a_submit_whose_answer_cannot_be_read_back_still_says_it_was_accepted(api, researcher, quota, monkeypatch):
    """PostgreSQL goes away right after the commit: the job is saved, so the answer must not be an error (the
    caller would submit it again)."""
    from jobs import services

    real_submit = services.submit_job
    outage = database_down()

    def submit_then_lose_the_database(**kwargs):
        job = real_submit(**kwargs)
        outage.__enter__()
        return job

    monkeypatch.setattr(services, "submit_job", submit_then_lose_the_database)
    try:
        response = api(researcher).post("/api/v1/jobs/", BODY, format="json")
    finally:
        outage.__exit__(None, None, None)
    assert response.status_code == 201
    assert response.json()["state"] == "queued"
    assert Job.objects.filter(pk=response.json()["id"], name="through-outage").exists()


def test_cancel_during_a_database_outage_changes_nothing(token_client, researcher, quota, team, pool):
    job = JobFactory(team=team, pool=pool, submitted_by=researcher, state="running")
    client = token_client(researcher)
    with database_down():
        response = client.post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 503
    job.refresh_from_db()
    assert job.state == "running"
