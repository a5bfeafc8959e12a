from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

PASSWORD_BACKEND = "identity.backends.PasswordBackend"


def audit_break_glass_sign_in(sender, request, user, **kwargs):
    """`user_logged_in`: a break-glass account signing in with its password is an audit entry (who, from where), not
    only a line of django-axes' access log: it is the one way in that skips the provider."""
    if not getattr(user, "is_break_glass", False) or getattr(user, "backend", "") != PASSWORD_BACKEND:
        return
    from portal import audit
    from portal.client_address import client_address

    after = {"address": client_address(request) if request is not None else None}
    audit.record(actor=user, action="user.break_glass_sign_in", instance=user, before=None, after=after)


class IdentityConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "identity"
    verbose_name = _("Sign-in")

    def ready(self):
        from django.contrib.auth.signals import user_logged_in

        user_logged_in.connect(audit_break_glass_sign_in, dispatch_uid="identity.audit_break_glass_sign_in")
