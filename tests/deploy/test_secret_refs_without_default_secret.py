"""Every Secret reference the chart renders names a Secret, also when `existingSecret` is empty and each setting
names its own Secret (values.yaml: "Each entry names a Secret and a key; `existingSecret` is the Secret used where an
entry names none").

The web Deployment's optional RESERVOIR_METRICS_TOKEN fell back to `existingSecret` without a check and rendered
`secretKeyRef.name: ""`, which the API server refuses (a Secret name must be a DNS subdomain): the release failed to
install. With an issuer set, the optional OIDC client secret stopped the rendering instead ("existingSecret or
secrets.*.secretName is required"). An optional setting for which no Secret is named is now left out."""

import re
import subprocess

import pytest

from devcluster import build
from tests.deploy.conftest import CHART, helm_template, pod_specs

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
OWN_SECRETS = (
    *("--set", "existingSecret="),
    *("--set", "secrets.databaseUrl.secretName=reservoir-db"),
    *("--set", "secrets.redisUrl.secretName=reservoir-redis"),
    *("--set", "secrets.djangoSecretKey.secretName=reservoir-django"),
)
WITH_SIGN_IN = ("--set", "oidc.issuer=https://idp.example.com", "--set", "oidc.clientId=reservoir")
OPTIONAL = {"RESERVOIR_METRICS_TOKEN", "RESERVOIR_OIDC_CLIENT_SECRET"}


def secret_refs(objects):
    for name, spec in pod_specs(objects).items():
        for container in spec["containers"]:
            for entry in container.get("env", []):
                ref = (entry.get("valueFrom") or {}).get("secretKeyRef")
                if ref is not None:
                    yield name, entry["name"], ref


@pytest.mark.parametrize("sign_in", [(), WITH_SIGN_IN], ids=["local passwords", "with an issuer"])
def test_without_a_default_secret_every_secret_reference_names_a_secret(sign_in):
    refs = list(secret_refs(helm_template(*OWN_SECRETS, *sign_in)))
    assert {variable for _, variable, _ in refs} >= {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY"}
    for workload, variable, ref in refs:
        assert DNS_SUBDOMAIN.match(ref.get("name") or ""), (
            f"{workload}: {variable} refers to Secret {ref.get('name')!r}"
        )
        assert variable not in OPTIONAL, f"{workload}: {variable} is read from a Secret nobody named"


def test_positive_control_optional_settings_are_read_from_the_default_or_their_own_secret():
    by_variable = {variable: ref for _, variable, ref in secret_refs(helm_template(*WITH_SIGN_IN))}
    assert by_variable["RESERVOIR_METRICS_TOKEN"] == {
        "name": "reservoir",
        "key": "RESERVOIR_METRICS_TOKEN",
        "optional": True,
    }
    assert by_variable["RESERVOIR_OIDC_CLIENT_SECRET"]["name"] == "reservoir"
    own = helm_template(*OWN_SECRETS, "--set", "secrets.metricsToken.secretName=scrape")
    assert {variable: ref["name"] for _, variable, ref in secret_refs(own)}["RESERVOIR_METRICS_TOKEN"] == "scrape"


def test_a_required_setting_without_a_secret_still_stops_the_rendering():
    result = subprocess.run(
        [str(build.ensure_helm()), "template", "rsv", str(CHART), *OWN_SECRETS[:4]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "existingSecret or secrets.*.secretName is required" in result.stderr
