"""Writes to a user's own preferences (services, STYLE.md conventions 1)."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from .choices import JobMail


def set_user_language(*, user, language: str) -> None:
    """Store the language the portal speaks to `user` (one of settings.LANGUAGES)."""
    if language not in dict(settings.LANGUAGES):
        raise ValidationError({"language": _("Unknown language: %(code)s.") % {"code": language}})
    if user.language != language:
        user.language = language
        user.save(update_fields=["language"])


def set_notify_default(*, user, notify: list[str]) -> None:
    """Store when `user` is e-mailed about the jobs they submit from now on, unless a job says otherwise
    (`JobMail` values; jobs/notifications.py sends them)."""
    field = user._meta.get_field("notify_default")
    try:
        notify = field.clean(JobMail.ordered(notify), user)
    except ValidationError as error:
        raise ValidationError({"notify_default": error.messages}) from None
    if user.notify_default != notify:
        user.notify_default = notify
        user.save(update_fields=["notify_default"])
