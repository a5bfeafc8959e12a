"""Durations in words with their units ("45 s", "3 min 12 s", "2 h 5 min", "3 d 4 h"), for run and wait times."""

from django import template
from django.utils.translation import gettext as _

register = template.Library()


@register.filter
def duration(seconds) -> str:
    if seconds is None or seconds == "":
        return "—"
    seconds = max(int(seconds), 0)
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return _("%(d)d d %(h)d h") % {"d": days, "h": hours}
    if hours:
        return _("%(h)d h %(m)d min") % {"h": hours, "m": minutes}
    if minutes:
        return _("%(m)d min %(s)d s") % {"m": minutes, "s": secs}
    return _("%(s)d s") % {"s": secs}


@register.simple_tag
def run_time(job, now) -> str:
    """How long `job` ran (or has been running): from started_at to finished_at, or to `now`."""
    if job.started_at is None:
        return "—"
    return duration(((job.finished_at or now) - job.started_at).total_seconds())
