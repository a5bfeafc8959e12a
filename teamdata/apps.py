from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class TeamDataConfig(AppConfig):
    name = "teamdata"
    verbose_name = _("Team volumes and secrets")
