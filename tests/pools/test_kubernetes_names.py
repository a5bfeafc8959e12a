"""Names and keys the portal writes to the cluster stay within Kubernetes' own rules: a team namespace is a DNS label
of at most 63 characters whatever its slug (the prefix is checked when the portal starts), and a pool's node label or
taint key has a prefix of at most 253 characters (IsQualifiedName)."""

import pytest
from django.core.exceptions import ValidationError

from pools.models import validate_selector, validate_taints
from portal.checks import team_namespace_prefix_valid


@pytest.mark.parametrize("prefix", ["team-", "", "gpu-team-", "a" * 23, "0-"])
def test_a_prefix_that_keeps_every_namespace_a_dns_label_passes(settings, prefix):
    settings.TEAM_NAMESPACE_PREFIX = prefix
    assert team_namespace_prefix_valid(None) == []
    assert len(prefix + "a" * 40) <= 63


@pytest.mark.parametrize("prefix", ["a" * 24, "reservoir-prod-gpu-team-", "Team-", "team_", "-team", "team.x-"])
def test_a_prefix_that_would_make_a_namespace_invalid_stops_the_portal(settings, prefix):
    settings.TEAM_NAMESPACE_PREFIX = prefix
    [error] = team_namespace_prefix_valid(None)
    assert error.id == "reservoir.E001" and error.is_serious()


def test_a_label_key_prefix_over_253_characters_is_refused():
    at_most = ("a" * 62 + ".") * 4 + "b"  # 253 characters
    assert len(at_most) == 253
    validate_selector({f"{at_most}/role": "training"})
    validate_taints([{"key": f"{at_most}/tier", "value": "x", "effect": "NoSchedule"}])
    with pytest.raises(ValidationError, match="is not a valid Kubernetes label key"):
        validate_selector({f"{at_most}c/role": "training"})
    with pytest.raises(ValidationError, match="is not a valid key/value"):
        validate_taints([{"key": f"{at_most}c/tier", "value": "x", "effect": "NoSchedule"}])
