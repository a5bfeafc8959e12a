"""Database triggers that keep billing honest whoever writes the data.

1. Stale days: any insert, update or delete of a usage interval or a reservation marks the UTC days it covers in
   `billing_staleday`, in the same transaction, so a refresh meters exactly those days again. Open intervals and
   reservations are marked up to the database's current day (later days are not complete yet and are metered
   anyway). An update that only moves `ended_at` marks just the days between the old and the new end.
2. Frozen invoices: a closed invoice, and every line of it, refuses update and delete; no line can be added to it.
"""

from django.db import migrations

STALE_DAYS = """
CREATE OR REPLACE FUNCTION billing_mark_days_stale(lo timestamptz, hi timestamptz) RETURNS void AS $$
BEGIN
    IF lo IS NULL OR hi IS NULL OR hi < lo THEN
        RETURN;
    END IF;
    INSERT INTO billing_staleday (day)
    SELECT generate_series((lo AT TIME ZONE 'UTC')::date, (hi AT TIME ZONE 'UTC')::date, interval '1 day')::date
    ON CONFLICT (day) DO NOTHING;
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION billing_interval_changed() RETURNS trigger AS $$
DECLARE
    old_end timestamptz;
    new_end timestamptz;
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM billing_mark_days_stale(NEW.started_at, coalesce(NEW.ended_at, greatest(now(), NEW.started_at)));
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM billing_mark_days_stale(OLD.started_at, coalesce(OLD.ended_at, greatest(now(), OLD.started_at)));
    ELSE
        old_end := coalesce(OLD.ended_at, greatest(now(), OLD.started_at));
        new_end := coalesce(NEW.ended_at, greatest(now(), NEW.started_at));
        IF NEW.team_id IS NOT DISTINCT FROM OLD.team_id AND NEW.pool_id = OLD.pool_id AND NEW.gpus = OLD.gpus
           AND NEW.started_at = OLD.started_at THEN
            IF NEW.ended_at IS DISTINCT FROM OLD.ended_at THEN
                PERFORM billing_mark_days_stale(least(old_end, new_end), greatest(old_end, new_end));
            END IF;
        ELSE
            PERFORM billing_mark_days_stale(OLD.started_at, old_end);
            PERFORM billing_mark_days_stale(NEW.started_at, new_end);
        END IF;
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER billing_interval_marks_stale_days
AFTER INSERT OR UPDATE OR DELETE ON billing_usageinterval
FOR EACH ROW EXECUTE FUNCTION billing_interval_changed();

CREATE OR REPLACE FUNCTION billing_reservation_changed() RETURNS trigger AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM billing_mark_days_stale(OLD.starts_at, OLD.ends_at);
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        PERFORM billing_mark_days_stale(NEW.starts_at, NEW.ends_at);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER billing_reservation_marks_stale_days
AFTER INSERT OR UPDATE OR DELETE ON pools_reservation
FOR EACH ROW EXECUTE FUNCTION billing_reservation_changed();
"""

DROP_STALE_DAYS = """
DROP TRIGGER IF EXISTS billing_reservation_marks_stale_days ON pools_reservation;
DROP FUNCTION IF EXISTS billing_reservation_changed();
DROP TRIGGER IF EXISTS billing_interval_marks_stale_days ON billing_usageinterval;
DROP FUNCTION IF EXISTS billing_interval_changed();
DROP FUNCTION IF EXISTS billing_mark_days_stale(timestamptz, timestamptz);
"""

FROZEN_INVOICES = """
CREATE OR REPLACE FUNCTION billing_invoice_frozen() RETURNS trigger AS $$
BEGIN
    IF OLD.status = 'closed' THEN
        RAISE EXCEPTION 'invoice % is closed and cannot change', OLD.id USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER billing_invoice_closed_is_frozen
BEFORE UPDATE OR DELETE ON billing_invoice
FOR EACH ROW EXECUTE FUNCTION billing_invoice_frozen();

CREATE OR REPLACE FUNCTION billing_invoiceline_frozen() RETURNS trigger AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND EXISTS (
        SELECT 1 FROM billing_invoice WHERE id = OLD.invoice_id AND status = 'closed'
    ) THEN
        RAISE EXCEPTION 'invoice % is closed: its lines cannot change', OLD.invoice_id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') AND EXISTS (
        SELECT 1 FROM billing_invoice WHERE id = NEW.invoice_id AND status = 'closed'
    ) THEN
        RAISE EXCEPTION 'invoice % is closed: no line can be added', NEW.invoice_id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER billing_invoiceline_closed_is_frozen
BEFORE INSERT OR UPDATE OR DELETE ON billing_invoiceline
FOR EACH ROW EXECUTE FUNCTION billing_invoiceline_frozen();
"""

DROP_FROZEN_INVOICES = """
DROP TRIGGER IF EXISTS billing_invoiceline_closed_is_frozen ON billing_invoiceline;
DROP FUNCTION IF EXISTS billing_invoiceline_frozen();
DROP TRIGGER IF EXISTS billing_invoice_closed_is_frozen ON billing_invoice;
DROP FUNCTION IF EXISTS billing_invoice_frozen();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0002_metering_invoices"),
        ("pools", "0002_initial"),
    ]

    operations = [
        migrations.RunSQL(STALE_DAYS, DROP_STALE_DAYS),
        migrations.RunSQL(FROZEN_INVOICES, DROP_FROZEN_INVOICES),
    ]
