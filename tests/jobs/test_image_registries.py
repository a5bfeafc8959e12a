"""An optional allowlist of image registries (issue 24, RESERVOIR_IMAGE_REGISTRIES; empty: any), checked at
submission for the form and the API alike, with a field error beside the image."""

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from jobs.models import Job
from jobs.specs import image_registry
from tests.factories import PoolFactory, QuotaFactory

BODY = {"team": "alpha", "pool": "train", "name": "t", "gpus": 1}
FORM = {**BODY, "gpus": "1", "cpu": "1", "memory_gib": "4", "placement": "strict", "priority": "50"}
FORM["max_run_minutes"] = "60"


@pytest.fixture
def api(researcher, team):
    QuotaFactory(team=team, pool=PoolFactory(slug="train"), max_gpus=8)
    client = APIClient()
    client.force_login(researcher)
    return client


@pytest.mark.parametrize(
    ("image", "registry"),
    [
        ("registry.example.com/team/train:1.0", "registry.example.com"),
        ("registry.example.com:5000/team/train", "registry.example.com:5000"),
        ("localhost/train", "localhost"),
        ("ubuntu:22.04", "docker.io"),
        ("pytorch/pytorch:2.5", "docker.io"),
        ("docker.io/pytorch/pytorch:2.5", "docker.io"),
    ],
)
def test_the_registry_of_an_image_is_read_as_the_runtime_reads_it(image, registry):
    assert image_registry(image) == registry


def test_with_an_allowlist_only_its_registries_are_accepted(settings, api, client, researcher):
    settings.JOB_IMAGE_REGISTRIES = ["registry.example.com", "registry.example.com:5000"]
    for image in ("pytorch/pytorch:2.5", "evil.example.net/x/y:1", "registry.example.com.evil.net/x:1"):
        response = api.post("/api/v1/jobs/", {**BODY, "image": image}, format="json")
        assert response.status_code == 400, image
        assert response.json()["image"] == [
            f"Images come from registry.example.com, registry.example.com:5000 on this portal, not from "
            f"{image_registry(image)}."
        ]
    client.force_login(researcher)
    page = client.post(reverse("jobs:job_submit"), {**FORM, "image": "pytorch/pytorch:2.5"})
    assert page.status_code == 400 and "on this portal, not from docker.io." in page.content.decode()
    assert not Job.objects.exists()
    for n, image in enumerate(("registry.example.com/team/train:1", "Registry.Example.com:5000/team/train:1")):
        assert api.post("/api/v1/jobs/", {**BODY, "name": f"ok-{n}", "image": image}, format="json").status_code == 201


def test_without_an_allowlist_any_registry_is_accepted(settings, api):
    settings.JOB_IMAGE_REGISTRIES = []
    assert api.post("/api/v1/jobs/", {**BODY, "image": "pytorch/pytorch:2.5"}, format="json").status_code == 201
