"""Role-aware navigation: which sections of the portal the signed-in user sees."""

from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from .choices import Role


def navigation(request) -> dict:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav_items": [], "nav_is_admin": False, "nav_is_lead": False}
    is_admin = user.is_admin
    is_lead = is_admin or user.memberships.filter(role=Role.LEAD).exists()
    items = [
        {"label": _("Overview"), "url": reverse("portal:home"), "key": "home"},
        {"label": _("Pools"), "url": reverse("pools:pool_list"), "key": "pools"},
    ]
    if is_lead:
        items.append({"label": _("Billing"), "url": reverse("billing:home"), "key": "billing"})
    if is_admin:
        items.append({"label": _("Admin"), "url": reverse("admin:index"), "key": "admin"})
    return {"nav_items": items, "nav_is_admin": is_admin, "nav_is_lead": is_lead}
