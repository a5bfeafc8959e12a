"""`manage.py close_month 2026-10`: close a billing month (default: the previous month). Idempotent."""

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from billing import services
from billing.periods import format_month, month_of, parse_month, previous_month


class Command(BaseCommand):
    help = "Close a billing month: meter it from the raw intervals, then freeze every team's invoice for it."

    def add_arguments(self, parser):
        parser.add_argument("month", nargs="?", help="YYYY-MM; default: the month before the current one (UTC)")

    def handle(self, *args, month=None, **options):
        now = timezone.now()
        chosen = parse_month(month) if month else previous_month(month_of(now))
        if chosen is None:
            raise CommandError(f"not a month: {month!r} (expected YYYY-MM)")
        try:
            result = services.close_month(month=chosen, now=now, actor_name="manage.py close_month")
        except ValidationError as error:
            raise CommandError(" ".join(error.messages)) from None
        if result.closed_now:
            self.stdout.write(f"closed {format_month(result.month)}: {result.invoices} invoices")
        else:
            self.stdout.write(f"{format_month(result.month)} was already closed ({result.invoices} invoices)")
