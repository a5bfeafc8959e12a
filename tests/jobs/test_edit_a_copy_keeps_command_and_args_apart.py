""" "Edit a copy" (the job page's button: /jobs/submit/?from=<id>) of a job submitted through the API with arguments
but no command (`command: []`: the image's own ENTRYPOINT, `args: [...]`) used to prefill the form's one Command field
with the arguments; submitted unchanged, they became the container's *command*, the image's entrypoint was replaced by
"--epochs" and the copy could not even start. The form now has an Arguments field beside Command, prefilled apart, so
an unchanged copy runs the same container."""

import pytest
from django.urls import reverse

from jobs.choices import JobState
from jobs.models import Job
from tests.factories import JobFactory, NodeFactory, PoolFactory, QuotaFactory

pytestmark = pytest.mark.django_db


def _post_data(form) -> dict:
    """What the browser posts back for the prefilled form, untouched."""
    data = {}
    for name in form.fields:
        value = form[name].value()
        if value is None:
            value = ""
        data[name] = [str(each) for each in value] if isinstance(value, list | tuple) else str(value)
    return data


@pytest.fixture
def copy_of(client, researcher, team):
    pool = PoolFactory(slug="train")
    NodeFactory(pool=pool, name="node-a")
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    client.force_login(researcher)

    def copy(**spec) -> Job:
        original = JobFactory(
            team=team, pool=pool, submitted_by=researcher, state=JobState.SUCCEEDED, name="original", **spec
        )
        page = client.get(reverse("jobs:job_submit"), {"from": original.pk})
        assert page.status_code == 200
        data = _post_data(page.context["form"])
        data["name"] = f"copy-{original.pk}"
        response = client.post(reverse("jobs:job_submit"), data)
        assert response.status_code == 302, response.content.decode()[:2000]
        return Job.objects.get(name=data["name"])

    return copy


@pytest.mark.parametrize(
    "command, args",
    [
        (
            [],
            ["--epochs", "3"],
        ),  # as POST /api/v1/jobs/ stores {"args": [...]}: the image's entrypoint, these arguments
        (["python", "train.py"], ["--sep", "\t", "--prefix", " part "]),  # whitespace survives the copy too
        (["bash", "-c", "echo 'a b' && train"], []),  # as the submit page stores it: all of it the command
    ],
)
def test_an_unchanged_copy_of_a_job_runs_the_same_container(copy_of, command, args):
    copy = copy_of(command=command, args=args)
    assert (copy.command, copy.args) == (command, args)


def test_the_copy_prefills_command_and_arguments_apart(client, copy_of):
    job = copy_of(command=[], args=["--epochs", "3"])
    assert job.command == []
    page = client.get(reverse("jobs:job_submit"), {"from": job.pk})
    form = page.context["form"]
    assert (form["command"].value(), form["args"].value()) == ("", "--epochs 3")
    assert 'name="args"' in page.content.decode()
