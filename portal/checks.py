"""System checks for settings that would quietly weaken or disable something (`manage.py check [--deploy]`)."""

from django.conf import settings
from django.core.checks import Tags, Warning, register


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
