"""E-mail to people of the portal: each in their own language, from `RESERVOIR_EMAIL_FROM`, through Django's mail
backend (`EMAIL_URL`: SMTP in production; the console under `make dev`, nothing leaves the machine). A user without
an address (or no longer active) gets nothing. Callers send from tasks (never from a request), so a slow mail server
delays nobody; a mail server that fails raises (`MAIL_ERRORS`), for the task to retry or not."""

import smtplib
from collections.abc import Callable

from django.conf import settings
from django.core.mail import send_mail
from django.utils import translation

from .choices import Role
from .models import Membership, Team

# What a mail backend raises when the mail server is unreachable, drops the connection or refuses the mail.
MAIL_ERRORS = (smtplib.SMTPException, OSError)


def can_be_mailed(user) -> bool:
    """Whether mail can reach `user`: an active account with an e-mail address (the one rule for every mail)."""
    return bool(user.email) and user.is_active


def mail_user(user, compose: Callable[[], tuple[str, str]]) -> int:
    """Send `user` the (subject, body) `compose()` returns in the user's language; 1 when sent, 0 when mail cannot
    reach them (`can_be_mailed`)."""
    if not can_be_mailed(user):
        return 0
    with translation.override(user.language or settings.LANGUAGE_CODE):
        subject, body = compose()
    return send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [user.email], fail_silently=False)


def leads_of(team: Team) -> list:
    """The team's leads whom mail can reach."""
    memberships = Membership.objects.filter(team=team, role=Role.LEAD).select_related("user").order_by("user_id")
    return [m.user for m in memberships if can_be_mailed(m.user)]


def mail_leads(team: Team, compose: Callable[[], tuple[str, str]]) -> int:
    """Send each lead of `team` the (subject, body) `compose()` returns in the lead's language; how many were sent."""
    return sum(mail_user(lead, compose) for lead in leads_of(team))
