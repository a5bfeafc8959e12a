"""Team secrets used only as intended (issue 24), without the cluster (its calls are stood in for):
- image pull credentials are only ever an image pull secret, never an environment source, in the form and the API;
- environment from secrets is capped like the other lists of a spec, with a field error;
- five concurrent creates of one secret answer one success and field errors, never a 500 (threads, real PostgreSQL);
- a 500 while a secret is saved shows none of its values, not even on the DEBUG error page."""

import base64
import threading
import time

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from jobs.models import Job
from jobs.specs import MAX_SECRET_ENV
from teamdata.choices import SecretKind
from teamdata.models import TeamSecret
from tests.factories import PoolFactory, QuotaFactory

PASSWORD = "hunter2-registry-password"  # noqa: S105 - what must never show
TOKEN = "hf_token_value_never_shown"  # noqa: S105


@pytest.fixture
def pool(db):
    return PoolFactory(slug="train", name="Training", contracted_gpus=16)


@pytest.fixture
def secrets(team):
    return {
        "pull": TeamSecret.objects.create(team=team, name="pull", kind=SecretKind.REGISTRY, keys=[".dockerconfigjson"]),
        "hf": TeamSecret.objects.create(team=team, name="hf", kind=SecretKind.OPAQUE, keys=["token"]),
    }


@pytest.fixture
def cluster_takes_secrets(monkeypatch):
    """The namespace exists and the cluster takes every Secret, slowly (as a real apiserver call can be)."""
    taken = []

    def apply_secret(manifest):
        time.sleep(0.5)
        taken.append(manifest["metadata"]["name"])
        return True

    monkeypatch.setattr("teamdata.services.ensure_namespace", lambda team: None)
    monkeypatch.setattr("teamdata.services.resources.apply_secret", apply_secret)
    return taken


def _body(**fields) -> dict:
    return {
        "team": "alpha",
        "pool": "train",
        "name": "t1",
        "image": "registry.example.com/t/train:1",
        "gpus": 1,
        **fields,
    }


def _form(**fields) -> dict:
    base = {"team": "alpha", "pool": "train", "name": "t1", "image": "registry.example.com/t/train:1", "gpus": "1"}
    base.update({"cpu": "1", "memory_gib": "4", "placement": "strict", "priority": "50", "max_run_minutes": "60"})
    return {**base, **fields}


def test_image_pull_credentials_are_never_an_environment_source(client, team, pool, researcher, secrets):
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    api = APIClient()
    api.force_login(researcher)
    leak = {"REG": {"secret": "pull", "key": ".dockerconfigjson"}}
    response = api.post("/api/v1/jobs/", _body(secret_env=leak), format="json")
    assert response.status_code == 400
    assert "pull holds image pull credentials" in response.json()["secret_env"][0]

    client.force_login(researcher)
    page = client.post(reverse("jobs:job_submit"), _form(secret_env="REG=pull/.dockerconfigjson"))
    assert page.status_code == 400
    assert "pull holds image pull credentials, which a job can only name as an image pull secret" in page.text
    assert not Job.objects.exists()
    # What they are for still works: named as the pull secret, and a named secret as the environment source.
    fine = _body(image_pull_secrets=["pull"], secret_env={"HF_TOKEN": {"secret": "hf", "key": "token"}})
    assert api.post("/api/v1/jobs/", fine, format="json").status_code == 201


def test_environment_from_secrets_is_capped_with_a_field_error(client, team, pool, researcher, secrets):
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    api = APIClient()
    api.force_login(researcher)
    api.raise_request_exception = False
    too_many = {f"V{n}": {"secret": "hf", "key": "token"} for n in range(MAX_SECRET_ENV + 1)}
    response = api.post("/api/v1/jobs/", _body(secret_env=too_many), format="json")
    assert response.status_code == 400
    assert response.json()["secret_env"] == [
        f"At most {MAX_SECRET_ENV} variables from secrets ({MAX_SECRET_ENV + 1} given)."
    ]

    client.force_login(researcher)
    lines = "\n".join(f"V{n}=hf/token" for n in range(MAX_SECRET_ENV + 1))
    page = client.post(reverse("jobs:job_submit"), _form(secret_env=lines))
    assert page.status_code == 400 and f"At most {MAX_SECRET_ENV} variables from secrets" in page.text
    assert not Job.objects.exists()
    at_the_cap = {f"V{n}": {"secret": "hf", "key": "token"} for n in range(MAX_SECRET_ENV)}
    assert api.post("/api/v1/jobs/", _body(secret_env=at_the_cap), format="json").status_code == 201


@pytest.mark.django_db(transaction=True)
def test_five_concurrent_creates_of_one_secret_answer_one_success_and_field_errors(team, lead, cluster_takes_secrets):
    start = threading.Barrier(5)
    answers = []

    def create():
        client = Client()
        client.raise_request_exception = False
        client.force_login(lead)
        start.wait()
        try:
            form = {"name": "hf", "kind": SecretKind.OPAQUE, "values": f"token={TOKEN}"}
            answers.append(client.post(reverse("teamdata:secret_create", args=["alpha"]), form))
        finally:
            connection.close()

    threads = [threading.Thread(target=create) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(answer.status_code for answer in answers) == [302, 400, 400, 400, 400]
    for refused in (answer for answer in answers if answer.status_code == 400):
        assert (
            "Secret hf is being saved by another request right now: try again in a moment." in refused.text
            or "The team already has a secret of that name: rotate it instead." in refused.text
        )
        assert TOKEN not in refused.text
    assert list(TeamSecret.objects.values_list("name", "version")) == [("hf", 1)]
    assert cluster_takes_secrets == ["hf"]


@pytest.fixture
def cluster_fails(monkeypatch):
    """A bug, not a cluster refusal: the save ends in a 500."""

    def apply_secret(manifest):
        raise RuntimeError("unexpected")

    monkeypatch.setattr("teamdata.services.ensure_namespace", lambda team: None)
    monkeypatch.setattr("teamdata.services.resources.apply_secret", apply_secret)


def _shows_a_value(page: str) -> list[str]:
    login = base64.b64encode(f"robot:{PASSWORD}".encode()).decode()
    return [value for value in (PASSWORD, TOKEN, login, base64.b64encode(TOKEN.encode()).decode()) if value in page]


@pytest.mark.parametrize(
    "form",
    [
        {"name": "pull", "kind": SecretKind.REGISTRY, "registry": "registry.example.com", "username": "robot"},
        {"name": "hf", "kind": SecretKind.OPAQUE, "values": f"token={TOKEN}"},
    ],
    ids=["registry", "opaque"],
)
def test_a_500_while_saving_a_secret_shows_no_value_even_with_debug_on(
    settings, client, team, lead, cluster_fails, form
):
    settings.DEBUG = True
    client.raise_request_exception = False
    client.force_login(lead)
    form = {**form, "password": PASSWORD} if form["kind"] == SecretKind.REGISTRY else form
    page = client.post(reverse("teamdata:secret_create", args=["alpha"]), form)
    assert page.status_code == 500 and "RuntimeError" in page.text  # Django's DEBUG page, with its tables
    assert _shows_a_value(page.text) == []

    secret = TeamSecret.objects.create(team=team, name="rotated", kind=form["kind"], keys=["token"])
    page = client.post(reverse("teamdata:secret_rotate", args=["alpha", secret.pk]), form)
    assert page.status_code == 500 and "RuntimeError" in page.text
    assert _shows_a_value(page.text) == []

    api = APIClient()
    api.force_login(lead)
    api.raise_request_exception = False
    body = {"team": "alpha", **form, "name": "by-api"}
    if "values" in body:
        body["values"] = {"token": TOKEN}
    # As JSON, and (credentials) as form data, which lands in the request's POST table.
    for kind in ("json", "multipart") if "password" in body else ("json",):
        page = api.post("/api/v1/secrets/", body, format=kind, HTTP_ACCEPT="text/html")
        assert page.status_code == 500 and "RuntimeError" in page.content.decode()
        assert _shows_a_value(page.content.decode()) == []


def test_a_secret_for_a_team_whose_namespace_is_not_made_yet_says_so(team, lead, monkeypatch):
    """The web process may not make a namespace (the chart leaves that to the worker): the API server's 403 would say
    nothing to a lead who saves a secret right after the team was made. Nothing is saved either way."""
    from django.core.exceptions import ValidationError

    from cluster.errors import ClusterError
    from teamdata import services

    def refused(team):
        raise ClusterError("namespaces is forbidden: User cannot create resource")

    monkeypatch.setattr("reconcile.namespaces.reconcile", refused)  # the web process's rights: no namespace made
    with pytest.raises(ValidationError) as refusal:
        services.save_secret(team=team, user=lead, name="hf", kind=SecretKind.OPAQUE, values={"token": TOKEN})
    assert "The team's namespace is not in the cluster yet" in str(refusal.value)
    assert "forbidden" not in str(refusal.value) and not TeamSecret.objects.filter(name="hf").exists()
