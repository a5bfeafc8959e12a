"""Role-aware navigation: which sections of the portal the signed-in user sees."""

from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from portal.choices import Role
from portal.models import Membership


def navigation(request) -> dict:
    """Computed once per request: a page that renders a fragment with the request (`render_to_string(...,
    request=request)`) runs the context processors again, and the lead check and alert count would be asked twice."""
    cached = getattr(request, "_navigation", None)
    if cached is None:
        cached = _navigation(request)
        request._navigation = cached
    return cached


def _navigation(request) -> dict:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav_items": [], "nav_is_admin": False, "nav_is_lead": False}
    is_admin = user.is_admin
    is_lead = is_admin or Membership.objects.of(user, roles=[Role.LEAD]).exists()
    items = [
        {"label": _("Overview"), "url": reverse("portal:home"), "key": "home"},
        {"label": _("Pools"), "url": reverse("pools:pool_list"), "key": "pools"},
        {"label": _("Pending"), "url": reverse("jobs:pending"), "key": "pending"},
        {"label": _("Jobs"), "url": reverse("jobs:job_list"), "key": "jobs"},
        {"label": _("Submit"), "url": reverse("jobs:job_submit"), "key": "job_submit"},
    ]
    if is_lead:
        items.append({"label": _("Teams"), "url": reverse("portal:team_list"), "key": "teams"})
        items.append({"label": _("Billing"), "url": reverse("billing:home"), "key": "billing"})
    items.append(_alerts_item(user))
    if is_admin:
        items.append({"label": _("Admin"), "url": reverse("admin:index"), "key": "admin"})
    current = _current_key(request)
    for item in items:
        item["current"] = item["key"] == current
    return {"nav_items": items, "nav_is_admin": is_admin, "nav_is_lead": is_lead}


def _current_key(request) -> str:
    """Which navigation item the page belongs to."""
    match = getattr(request, "resolver_match", None)
    if match is None:
        return ""
    if match.url_name in ("pending", "job_submit", "job_submit_preview"):
        return "job_submit" if match.url_name != "pending" else "pending"
    if match.url_name in ("team_list", "team_detail"):
        return "teams"
    if match.app_name in ("pools", "jobs", "billing"):
        return match.app_name
    return match.url_name or ""


def _alerts_item(user) -> dict:
    """The alerts entry, with a badge counting the firing alerts the user may see (one query)."""
    from django.utils.html import format_html

    from monitoring.selectors import firing_count

    firing = firing_count(user)
    label = _("Alerts")
    if firing:
        label = format_html(
            '{} <span class="nav-badge" title="{}" style="{}">{}</span>',
            label,
            _("firing alerts"),
            "background:#b42318;color:#fff;border-radius:999px;padding:0 .45rem;font-size:.75rem;font-weight:700",
            firing,
        )
    return {"label": label, "url": reverse("monitoring:alert_list"), "key": "monitoring", "badge": firing}
