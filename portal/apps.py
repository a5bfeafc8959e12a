from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Portal"

    def ready(self):
        from . import checks  # noqa: F401 - registers the system checks
