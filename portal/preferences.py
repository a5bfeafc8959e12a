"""Writes to a user's own preferences (services, STYLE.md conventions 1)."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _


def set_user_language(*, user, language: str) -> None:
    """Store the language the portal speaks to `user` (one of settings.LANGUAGES)."""
    if language not in dict(settings.LANGUAGES):
        raise ValidationError({"language": _("Unknown language: %(code)s.") % {"code": language}})
    if user.language != language:
        user.language = language
        user.save(update_fields=["language"])
