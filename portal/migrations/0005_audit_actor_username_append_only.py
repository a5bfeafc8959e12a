"""Audit entries keep the actor's username, hold no environment values, and cannot be changed or deleted.

1. `actor_username`, filled from the actor of every existing entry.
2. Environment values already copied into snapshots are redacted (names kept), as `portal.audit.snapshot` does
   from now on.
3. A trigger refuses UPDATE and DELETE on the audit table (like the one that freezes closed invoices, billing
   0003), except the update that deleting a user makes: `actor` set to NULL, nothing else changed.
"""

from django.db import migrations, models

APPEND_ONLY = """
CREATE OR REPLACE FUNCTION portal_auditentry_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.actor_id IS NOT NULL AND NEW.actor_id IS NULL
       AND (to_jsonb(NEW) - 'actor_id') = (to_jsonb(OLD) - 'actor_id') THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'audit entry % is append-only: % refused', OLD.id, TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER portal_auditentry_is_append_only
BEFORE UPDATE OR DELETE ON portal_auditentry
FOR EACH ROW EXECUTE FUNCTION portal_auditentry_append_only();
"""

DROP_APPEND_ONLY = """
DROP TRIGGER IF EXISTS portal_auditentry_is_append_only ON portal_auditentry;
DROP FUNCTION IF EXISTS portal_auditentry_append_only();
"""


def _redact(value):
    if isinstance(value, dict):
        return {
            key: {name: "(redacted)" for name in item} if key == "env" and isinstance(item, dict) else _redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_redact(item) for item in value]
    return value


def fill_usernames_and_redact(apps, schema_editor):
    AuditEntry = apps.get_model("portal", "AuditEntry")
    for entry in AuditEntry.objects.select_related("actor").iterator(chunk_size=1000):
        username = entry.actor.username if entry.actor_id else ""
        before, after = _redact(entry.before), _redact(entry.after)
        if (username, before, after) != (entry.actor_username, entry.before, entry.after):
            AuditEntry.objects.filter(pk=entry.pk).update(actor_username=username, before=before, after=after)


class Migration(migrations.Migration):

    dependencies = [
        ('portal', '0004_team_allow_high_priority'),
    ]

    operations = [
        migrations.AddField(
            model_name='auditentry',
            name='actor_username',
            field=models.CharField(blank=True, help_text='Empty: the system.', max_length=150, verbose_name='actor'),
        ),
        migrations.RunPython(fill_usernames_and_redact, migrations.RunPython.noop),
        migrations.RunSQL(APPEND_ONLY, DROP_APPEND_ONLY),
    ]
