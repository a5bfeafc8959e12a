"""A lead who saved a named secret with a key Kubernetes refuses (".", ".." or one starting with "..": apimachinery's
IsConfigMapKey) got the apiserver's raw 422 as a form-wide error ("The cluster did not take the secret ...") instead
of an error beside the values: the portal's key rule (`jobs.specs.SECRET_KEY`) allowed them. The rule, which the keys
jobs name in secret_env follow too, now refuses them before any cluster call."""

import pytest
from django.core.exceptions import ValidationError

from cluster.errors import ClusterError
from jobs.specs import JobSpec, check_team_data
from teamdata import services


@pytest.fixture
def apiserver(monkeypatch):
    sent = []

    def apply_secret(manifest):
        sent.append(manifest["metadata"]["name"])
        bad = [key for key in manifest["data"] if key in (".", "..") or key.startswith("..")]
        if bad:
            raise ClusterError(
                f'apiserver answered 422 Unprocessable Entity: Secret "{manifest["metadata"]["name"]}" is invalid: '
                f"data[{bad[0]}]: Invalid value: \"{bad[0]}\": must not be '.', '..' or start with '..'",
                status=422,
            )
        return True

    monkeypatch.setattr("teamdata.services.ensure_namespace", lambda team: None)
    monkeypatch.setattr("teamdata.services.resources.apply_secret", apply_secret)
    return sent


@pytest.mark.parametrize("key", [".", "..", "..data"])
def test_keys_kubernetes_refuses_are_refused_beside_the_values(team, lead, apiserver, key):
    with pytest.raises(ValidationError) as refused:
        services.save_secret(team=team, user=lead, name="cfg", kind="opaque", values={key: "x"}, create_only=True)
    fields = refused.value.message_dict if hasattr(refused.value, "error_dict") else {}
    assert "values" in fields, f"not a field error: {refused.value.messages}"
    assert "may not be '.' or start with '..'" in fields["values"][0]
    assert apiserver == []  # refused before any cluster call


def test_keys_with_dots_kubernetes_takes_are_saved(team, lead, apiserver):
    """The control: a leading single dot or dots inside a key are Kubernetes keys."""
    values = {".env": "x", "a..b": "y", "config.json": "z"}
    secret = services.save_secret(team=team, user=lead, name="cfg", kind="opaque", values=values, create_only=True)
    assert secret.keys == sorted(values) and apiserver == ["cfg"]


@pytest.mark.parametrize(("key", "refused"), [("..data", True), (".env", False)])
def test_a_jobs_secret_env_follows_the_same_key_rule(key, refused):
    spec = JobSpec(
        name="t", image="registry.example.com/a/train:1", gpus=1, secret_env={"TOKEN": {"secret": "s", "key": key}}
    )
    errors: dict = {}
    check_team_data(spec, errors)
    assert ("secret_env" in errors) is refused
