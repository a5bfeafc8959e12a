"""POST /api/v1/jobs/ used to strip whitespace from every command argument: the serializer's `CharField` children
trim by default. An argument that was only whitespace became empty and one with leading or trailing whitespace
changed, so the container ran something other than what was sent, with no error ("--sep", "\t" became "--sep", "").
Now command and args are stored as sent. Environment and annotation values are trimmed on purpose, as the submit
page trims its KEY=value lines, so that a copy of the job made in the form keeps the same values."""

import pytest

from jobs.models import Job
from tests.factories import NodeFactory, PoolFactory, QuotaFactory

pytestmark = pytest.mark.django_db


def test_the_api_stores_command_arguments_as_sent(api, researcher, team):
    pool = PoolFactory(slug="train")
    NodeFactory(pool=pool, name="node-a")
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    body = {
        "team": team.slug,
        "pool": "train",
        "name": "split-tsv",
        "image": "registry.example.com/team/tools:1.0",
        "gpus": 1,
        "command": ["bash", "-c", "split.sh\n"],
        "args": ["--sep", "\t", "--prefix", " part "],
        "env": {"MODE": " fast "},
        "pod_annotations": {"dcgm.reservoir.dev/note": " kept tidy "},
    }
    response = api(researcher).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.command == ["bash", "-c", "split.sh\n"]
    assert job.args == ["--sep", "\t", "--prefix", " part "]
    # As the submit page takes them.
    assert job.env == {"MODE": "fast"}
    assert job.pod_annotations == {"dcgm.reservoir.dev/note": "kept tidy"}
