"""The days a write makes stale are marked by the services that write, no longer by triggers.

`billing.usage` (usage intervals) and `pools.services` (reservations and their lending changes) mark the same days
the triggers of 0003 and 0006 marked (`billing.stale_days`), in the same transaction. The triggers that freeze
closed invoices (0003) stay: they refuse a write, they add nothing to it. Reversed, the triggers and their
functions come back as they were.
"""

from importlib import import_module

from django.db import migrations

triggers = import_module("billing.migrations.0003_triggers")
lending = import_module("billing.migrations.0006_daily_usage_lending")


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0007_invoice_line_lending_credit"),
    ]

    operations = [
        # The lending function calls billing_mark_days_stale: it goes first (and comes back last).
        migrations.RunSQL(lending.DROP_LENDING_TRIGGER, lending.LENDING_CHANGES_MARK_STALE_DAYS),
        migrations.RunSQL(triggers.DROP_STALE_DAYS, triggers.STALE_DAYS),
    ]
