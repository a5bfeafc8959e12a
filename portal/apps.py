from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = _("Portal")

    def ready(self):
        from django.contrib.auth.signals import user_logged_in

        from . import checks  # noqa: F401 - registers the system checks
        from .middleware import note_sign_in

        user_logged_in.connect(note_sign_in, dispatch_uid="portal.note_sign_in")
