"""E-mail to a team's leads: each in their own language, from `RESERVOIR_EMAIL_FROM`, through Django's mail backend
(`EMAIL_URL`: SMTP in production; the console under `make dev`, nothing leaves the machine). A lead without an
address gets nothing. Callers send from tasks (never from a request), so a slow mail server delays nobody."""

from collections.abc import Callable

from django.conf import settings
from django.core.mail import send_mail
from django.utils import translation

from .choices import Role
from .models import Membership, Team


def leads_of(team: Team) -> list:
    """The team's leads who have an e-mail address."""
    memberships = Membership.objects.filter(team=team, role=Role.LEAD).select_related("user").order_by("user_id")
    return [m.user for m in memberships if m.user.email and m.user.is_active]


def mail_leads(team: Team, compose: Callable[[], tuple[str, str]]) -> int:
    """Send each lead of `team` the (subject, body) `compose()` returns in the lead's language; how many were sent."""
    sent = 0
    for lead in leads_of(team):
        with translation.override(lead.language or settings.LANGUAGE_CODE):
            subject, body = compose()
        sent += send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [lead.email], fail_silently=False)
    return sent
