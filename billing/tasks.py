"""Billing tasks: thin wrappers around `billing.services`, idempotent, on the billing queue ("billing.*")."""

from celery import shared_task
from django.utils import timezone

from . import services
from .periods import format_month, parse_month


@shared_task(name="billing.refresh_usage", acks_late=True)
def refresh_usage() -> dict:
    """Meter stale and incomplete days and rebuild the draft invoices; runs every few minutes (beat.py)."""
    result = services.refresh_usage(now=timezone.now())
    if result.more_days_pending:
        refresh_usage.delay()  # catching up on a backlog, one bounded batch per run
    return {"days": len(result.days), "drafts": result.invoices, "more": result.more_days_pending}


@shared_task(name="billing.close_month", acks_late=True)
def close_month(month: str, user_id: int | None = None) -> dict:
    """Close the month named 'YYYY-MM'; closing a closed month does nothing."""
    from portal.models import User

    parsed = parse_month(month)
    if parsed is None:
        raise ValueError(f"not a month: {month!r} (expected YYYY-MM)")
    user = User.objects.filter(pk=user_id).first() if user_id else None
    result = services.close_month(month=parsed, now=timezone.now(), user=user)
    return {"month": format_month(result.month), "closed_now": result.closed_now, "invoices": result.invoices}


@shared_task(name="billing.email_spend_summaries", acks_late=True)
def email_spend_summaries() -> int:
    """Monthly (beat.py): the reservation advice to every team's leads by e-mail."""
    from django.conf import settings

    from . import spend

    return spend.email_spend_summaries(now=timezone.now(), base_url=settings.PORTAL_BASE_URL)
