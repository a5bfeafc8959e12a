"""System checks for the jobs settings that would quietly weaken something (`manage.py check`)."""

from django.conf import settings
from django.core.checks import Tags, Warning, register

from .specs import MAX_TERMINATION_GRACE_SECONDS, annotation_is_reserved


@register(Tags.security)
def annotation_allowlist_reserved(app_configs, **kwargs):
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
def grace_cap_in_range(app_configs, **kwargs):
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
