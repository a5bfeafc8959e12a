"""System checks for settings that would quietly weaken or disable something (`manage.py check [--deploy]`), or make
what the portal writes to the cluster invalid."""

import re

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

# A team namespace is the prefix and a slug of up to 40 characters: a DNS label (IsDNS1123Label) of at most 63.
_NAMESPACE_PREFIX = re.compile(r"([a-z0-9][-a-z0-9]{0,22})?")


@register(Tags.security, deploy=True)
def metrics_token_set(app_configs, **kwargs):
    if settings.METRICS_REQUIRE_TOKEN and not settings.METRICS_BEARER_TOKEN:
        return [
            Warning(
                "/metrics refuses every scrape: RESERVOIR_METRICS_TOKEN is not set.",
                hint="Set RESERVOIR_METRICS_TOKEN and give Prometheus the same bearer token.",
                id="reservoir.W001",
            )
        ]
    return []


@register()
def alert_webhook_language_known(app_configs, **kwargs):
    if settings.ALERT_WEBHOOK_LANGUAGE not in dict(settings.LANGUAGES):
        return [
            Warning(
                f"ALERT_WEBHOOK_LANGUAGE={settings.ALERT_WEBHOOK_LANGUAGE!r} is not one of the portal's languages "
                f"({', '.join(dict(settings.LANGUAGES))}): webhook texts fall back to English.",
                id="reservoir.W003",
            )
        ]
    return []


@register()
def team_namespace_prefix_valid(app_configs, **kwargs):
    prefix = settings.TEAM_NAMESPACE_PREFIX
    if not _NAMESPACE_PREFIX.fullmatch(prefix):
        return [
            Error(
                f"RESERVOIR_TEAM_NAMESPACE_PREFIX={prefix!r} cannot start a team namespace's name: with a slug of up "
                "to 40 characters it must stay a DNS label of at most 63.",
                hint="Use at most 23 lowercase letters, digits and dashes, not starting with a dash (or none).",
                id="reservoir.E001",
            )
        ]
    return []
