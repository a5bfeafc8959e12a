"""Lending in the daily rollups: lent, borrowed and served-by-unreserved GPU-seconds per team, pool and day.

Existing rows get unreserved = overage (nothing was lent before), and the days of the open months are marked stale
so the next refresh meters them with lending (closed months stay as invoiced). A lending change marks stale the
days from its moment to its reservation's end (up to today), whoever writes it, like the triggers of 0003.
"""

import django.db.models.expressions
from django.db import migrations, models

EXISTING_ROWS = """
UPDATE billing_dailyusage SET unreserved_gpu_seconds = overage_gpu_seconds;
INSERT INTO billing_staleday (day)
SELECT DISTINCT day FROM billing_dailyusage
WHERE day >= coalesce((SELECT max(month) + interval '1 month' FROM billing_closedmonth), '-infinity'::timestamp)
ON CONFLICT (day) DO NOTHING;
"""

LENDING_CHANGES_MARK_STALE_DAYS = """
CREATE OR REPLACE FUNCTION billing_lending_change_days(reservation bigint, effective timestamptz) RETURNS void AS $$
DECLARE
    reservation_end timestamptz;
BEGIN
    SELECT ends_at INTO reservation_end FROM pools_reservation WHERE id = reservation;
    PERFORM billing_mark_days_stale(effective, least(coalesce(reservation_end, now()), greatest(now(), effective)));
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION billing_lending_changed() RETURNS trigger AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM billing_lending_change_days(OLD.reservation_id, OLD.effective_from);
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        PERFORM billing_lending_change_days(NEW.reservation_id, NEW.effective_from);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER billing_lending_change_marks_stale_days
AFTER INSERT OR UPDATE OR DELETE ON pools_lendingchange
FOR EACH ROW EXECUTE FUNCTION billing_lending_changed();
"""

DROP_LENDING_TRIGGER = """
DROP TRIGGER IF EXISTS billing_lending_change_marks_stale_days ON pools_lendingchange;
DROP FUNCTION IF EXISTS billing_lending_changed();
DROP FUNCTION IF EXISTS billing_lending_change_days(bigint, timestamptz);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0005_invoice_line_description_as_words"),
        ("pools", "0010_pool_lending_price_share"),
        ("billing", "0003_triggers"),
        ("portal", "0007_verbose_names_for_translation"),
    ]

    operations = [
        migrations.RunSQL(LENDING_CHANGES_MARK_STALE_DAYS, DROP_LENDING_TRIGGER),
        migrations.RemoveConstraint(
            model_name="dailyusage",
            name="billing_dailyusage_not_negative",
        ),
        migrations.AddField(
            model_name="dailyusage",
            name="borrowed_gpu_seconds",
            field=models.DecimalField(decimal_places=6, default=0, max_digits=24, verbose_name="borrowed GPU-seconds"),
        ),
        migrations.AddField(
            model_name="dailyusage",
            name="lent_gpu_seconds",
            field=models.DecimalField(decimal_places=6, default=0, max_digits=24, verbose_name="lent GPU-seconds"),
        ),
        migrations.AddField(
            model_name="dailyusage",
            name="unreserved_gpu_seconds",
            field=models.DecimalField(
                decimal_places=6, default=0, max_digits=24, verbose_name="GPU-seconds served by unreserved GPUs"
            ),
        ),
        migrations.RunSQL(EXISTING_ROWS, migrations.RunSQL.noop),
        migrations.AddConstraint(
            model_name="dailyusage",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("reserved_gpu_seconds__gte", 0),
                    ("in_reservation_gpu_seconds__gte", 0),
                    ("overage_gpu_seconds__gte", 0),
                    ("spill_gpu_seconds__gte", 0),
                    ("lent_gpu_seconds__gte", 0),
                    ("borrowed_gpu_seconds__gte", 0),
                    ("unreserved_gpu_seconds__gte", 0),
                ),
                name="billing_dailyusage_not_negative",
            ),
        ),
        migrations.AddConstraint(
            model_name="dailyusage",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "overage_gpu_seconds",
                        django.db.models.expressions.CombinedExpression(
                            models.F("borrowed_gpu_seconds"), "+", models.F("unreserved_gpu_seconds")
                        ),
                    )
                ),
                name="billing_dailyusage_overage_is_borrowed_plus_unreserved",
            ),
        ),
    ]
