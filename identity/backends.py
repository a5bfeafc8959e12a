"""Local passwords as the exception: with RESERVOIR_LOCAL_PASSWORD_LOGIN off, a username and password sign in only
break-glass accounts (`User.is_break_glass`, e.g. the first admin). django-axes stays in front of this backend
(AUTHENTICATION_BACKENDS), so those attempts are still throttled. Sessions of users who signed in through the
provider are read by this backend too (`get_user`), which the setting does not touch."""

from django.conf import settings
from django.contrib.auth.backends import ModelBackend


class PasswordBackend(ModelBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None or settings.LOCAL_PASSWORD_LOGIN or getattr(user, "is_break_glass", False):
            return user
        return None
