"""Where a researcher says which e-mails a job sends (issue 28, part 5): the default in their preferences, the submit
form (ticked as the default), the job's page (its submitter, while it is not finished) and the API (`notify` on
create, in every answer, PATCH to change it), each refusing what it cannot take with a clear answer. What is sent
and when: tests/jobs/test_job_mail.py."""

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from jobs.choices import JobState
from jobs.models import Job
from tests.factories import JobFactory, PoolFactory, QuotaFactory
from tests.jobs.test_job_views import _form

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool(team):
    pool = PoolFactory(slug="train", name="Train Pool")
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    return pool


@pytest.fixture
def job(team, pool, researcher):
    return JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.RUNNING, notify=["fail"])


def api(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def test_the_preferences_page_keeps_the_default_and_the_language(client, researcher):
    client.force_login(researcher)
    page = client.get(reverse("portal:preferences")).content.decode()
    assert "rita@example.com" in page and 'name="notify_default"' in page
    response = client.post(reverse("portal:preferences"), {"language": "zh-hans", "notify_default": ["fail", "start"]})
    assert response.status_code == 302
    researcher.refresh_from_db()
    assert (researcher.language, researcher.notify_default) == ("zh-hans", ["start", "fail"])
    assert "偏好设置已保存" in client.get(reverse("portal:preferences")).content.decode()

    refused = client.post(reverse("portal:preferences"), {"language": "en", "notify_default": ["weekly"]})
    assert refused.status_code == 400
    researcher.refresh_from_db()
    assert researcher.notify_default == ["start", "fail"]


def test_a_user_without_an_address_is_told_so(client, researcher):
    researcher.email = ""
    researcher.save()
    client.force_login(researcher)
    assert b"no e-mail can reach you" in client.get(reverse("portal:preferences")).content


def test_the_submit_form_starts_from_the_default_and_the_job_keeps_what_was_ticked(client, researcher, pool):
    researcher.notify_default = ["end"]
    researcher.save()
    client.force_login(researcher)
    page = client.get(reverse("jobs:job_submit")).content.decode()
    assert 'value="end" id="id_notify_1" checked' in page and 'value="start" id="id_notify_0">' in page
    client.post(reverse("jobs:job_submit"), _form(name="ticked", notify=["start", "fail"]))
    client.post(reverse("jobs:job_submit"), _form(name="unticked"))  # nothing ticked: no mail for this one
    assert Job.objects.get(name="ticked").notify == ["start", "fail"]
    assert Job.objects.get(name="unticked").notify == []


def test_the_job_page_lets_its_submitter_change_the_mails_until_it_is_finished(client, researcher, lead, job):
    detail = reverse("jobs:job_detail", args=[job.pk])
    client.force_login(lead)
    page = client.get(detail).content.decode()
    assert "rita is e-mailed when it fails." in page and reverse("jobs:job_notify", args=[job.pk]) not in page
    assert client.post(reverse("jobs:job_notify", args=[job.pk]), {"notify": ["start"]}).status_code == 403

    client.force_login(researcher)
    assert reverse("jobs:job_notify", args=[job.pk]) in client.get(detail).content.decode()
    response = client.post(reverse("jobs:job_notify", args=[job.pk]), {"notify": ["end", "fail"]}, follow=True)
    assert f"E-mails about job #{job.pk} saved." in response.content.decode()
    job.refresh_from_db()
    assert job.notify == ["end", "fail"]

    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED)
    assert reverse("jobs:job_notify", args=[job.pk]) not in client.get(detail).content.decode()
    late = client.post(reverse("jobs:job_notify", args=[job.pk]), {"notify": []}, follow=True)
    assert f"Job #{job.pk} is already Succeeded." in late.content.decode()
    job.refresh_from_db()
    assert job.notify == ["end", "fail"]


def test_the_api_takes_notify_on_create_defaults_it_and_says_what_is_wrong(researcher, pool):
    researcher.notify_default = ["fail"]
    researcher.save()
    body = {"team": "alpha", "pool": "train", "name": "t1", "image": "registry.example.com/t/train:1", "gpus": 1}
    client = api(researcher)
    assert client.post("/api/v1/jobs/", body, format="json").json()["notify"] == ["fail"]
    chosen = client.post("/api/v1/jobs/", {**body, "name": "t2", "notify": ["fail", "start"]}, format="json")
    assert chosen.status_code == 201 and chosen.json()["notify"] == ["start", "fail"]
    assert client.post("/api/v1/jobs/", {**body, "name": "t3", "notify": []}, format="json").json()["notify"] == []

    wrong = client.post("/api/v1/jobs/", {**body, "name": "t4", "notify": ["start", "daily"]}, format="json")
    assert wrong.status_code == 400
    assert wrong.json() == {"notify": {"1": ['"daily" is not one of start, end, fail.']}}
    not_a_list = client.post("/api/v1/jobs/", {**body, "name": "t5", "notify": "all"}, format="json")
    assert not_a_list.status_code == 400 and "notify" in not_a_list.json()
    assert not Job.objects.filter(name__in=["t4", "t5"]).exists()
    assert client.get("/api/v1/jobs/").json()["results"][0]["notify"] == []


def test_the_api_changes_notify_for_the_submitter_only_and_nothing_else(researcher, lead, job):
    url = f"/api/v1/jobs/{job.pk}/"
    changed = api(researcher).patch(url, {"notify": ["start", "end"]}, format="json")
    assert changed.status_code == 200 and changed.json()["notify"] == ["start", "end"]
    assert api(lead).patch(url, {"notify": []}, format="json").status_code == 403
    other = api(researcher).patch(url, {"notify": [], "gpus": 8}, format="json")
    assert other.status_code == 400 and other.json() == {"gpus": ["Only notify can be changed on a job."]}
    assert api(researcher).put(url, {"notify": []}, format="json").status_code == 405
    Job.objects.filter(pk=job.pk).update(state=JobState.FAILED)
    late = api(researcher).patch(url, {"notify": []}, format="json")
    assert late.status_code == 400 and late.json() == {"notify": [f"Job #{job.pk} is already Failed."]}
    job.refresh_from_db()
    assert job.notify == ["start", "end"]
