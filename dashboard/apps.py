from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DashboardConfig(AppConfig):
    """The top floor: the root URLs, the API root, the home page and the pages that gather several apps, the
    navigation and the demo data. It imports the apps; nothing imports it."""

    name = "dashboard"
    verbose_name = _("Dashboard")
