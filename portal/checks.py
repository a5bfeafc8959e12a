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


@register(Tags.security)
def annotation_allowlist_reserved(app_configs, **kwargs):
    from jobs.specs import annotation_is_reserved

    reserved = [entry for entry in settings.POD_ANNOTATION_ALLOWLIST if annotation_is_reserved(entry.rstrip("*"))]
    if reserved:
        return [
            Warning(
                "RESERVOIR_POD_ANNOTATION_ALLOWLIST names reserved annotations, which stay refused: "
                + ", ".join(reserved),
                id="reservoir.W002",
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
def grace_cap_in_range(app_configs, **kwargs):
    from jobs.specs import MAX_TERMINATION_GRACE_SECONDS

    if not 0 <= settings.JOB_MAX_GRACE_SECONDS <= MAX_TERMINATION_GRACE_SECONDS:
        return [
            Warning(
                f"RESERVOIR_MAX_GRACE_SECONDS={settings.JOB_MAX_GRACE_SECONDS} is outside 0–"
                f"{MAX_TERMINATION_GRACE_SECONDS}: grace periods are capped at "
                f"{max(0, min(settings.JOB_MAX_GRACE_SECONDS, MAX_TERMINATION_GRACE_SECONDS))} s.",
                id="reservoir.W004",
            )
        ]
    return []
