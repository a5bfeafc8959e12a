"""The API's request body limit (Django's DATA_UPLOAD_MAX_MEMORY_SIZE, 2.5 MB unless set) holds for DRF's
`request.data` too (issue 24): a JSON body over it is refused unparsed, and a compression codec named as the charset
cannot grow a small body past it. DRF keeps to the limit since 3.17.2 and refuses such charsets since 3.18.2: the
requirements pin it from below there."""

import bz2
import json
from pathlib import Path

from django.conf import settings
from packaging.requirements import Requirement

from jobs.models import Job
from tests.factories import QuotaFactory

BODY = {"team": "alpha", "pool": "train", "name": "big", "image": "registry.example.com/t/train:1", "gpus": 1}


def test_drf_is_pinned_from_below_to_the_release_that_holds_the_body_limit():
    lines = (Path(settings.BASE_DIR) / "requirements.txt").read_text().splitlines()
    (drf,) = [Requirement(line) for line in lines if line.startswith("djangorestframework")]
    assert not drf.specifier.contains("3.18.1") and drf.specifier.contains("3.18.2")


def test_a_json_body_over_the_limit_is_refused_unparsed(settings, api, researcher, team, pool):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    client = api(researcher)
    client.raise_request_exception = False
    big = json.dumps({**BODY, "command": ["x" * 1000] * 100})
    assert client.post("/api/v1/jobs/", big, content_type="application/json").status_code == 400
    small = json.dumps({**BODY, "name": "small"})
    assert client.post("/api/v1/jobs/", small, content_type="application/json").status_code == 201
    assert list(Job.objects.values_list("name", flat=True)) == ["small"]


def test_a_compression_codec_as_the_charset_is_refused(api, researcher, team, pool):
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    packed = bz2.compress(json.dumps({**BODY, "command": ["x" * 1000] * 5000}).encode())
    assert len(packed) < 10_000  # some 5 MB of JSON once decompressed
    response = api(researcher).post("/api/v1/jobs/", packed, content_type="application/json; charset=bz2_codec")
    assert response.status_code == 400 and "Unsupported charset" in response.json()["detail"]
    assert not Job.objects.exists()
