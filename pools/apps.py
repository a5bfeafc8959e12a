from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PoolsConfig(AppConfig):
    name = "pools"
    verbose_name = _("Pools")
