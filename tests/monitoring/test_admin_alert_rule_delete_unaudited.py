"""Alert rules are edited in Django admin only, and every save there is audited (`monitoring.services.set_rule`), but
a delete, single or bulk, was not: the override was gone, thresholds fell back to the pool's or the default, and the
audit log had no entry of who removed it (docs/features.md "Audit"). Deletes now go through
`monitoring.services.delete_rule`, audited as `monitoring.rule_delete` with the rule as it was."""

from decimal import Decimal

import pytest

from monitoring import services
from monitoring.choices import AlertKind
from monitoring.models import AlertRule
from portal.models import AuditEntry
from tests.factories import PoolFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def rule(platform_admin):
    pool = PoolFactory(slug="train", name="Training", contracted_gpus=16)
    return services.set_rule(
        kind=AlertKind.QUEUE_WAIT, threshold=Decimal("45"), for_seconds=0, pool=pool, user=platform_admin
    )


def _deleted_and_audited(rule: AlertRule, admin) -> None:
    assert not AlertRule.objects.filter(pk=rule.pk).exists()  # the admin's delete did happen
    entries = AuditEntry.objects.filter(object_type="monitoring.alertrule", object_id=str(rule.pk))
    entry = entries.exclude(action="monitoring.rule_set").first()
    assert entry is not None, "alert rule deleted in Django admin without an audit entry"
    assert (entry.action, entry.actor, entry.after) == ("monitoring.rule_delete", admin, None)
    assert (entry.before["kind"], entry.before["pool"]) == (AlertKind.QUEUE_WAIT, rule.pool_id)
    assert Decimal(entry.before["threshold"]) == Decimal("45")


def test_an_alert_rule_deleted_in_django_admin_is_audited(client, platform_admin, rule):
    client.force_login(platform_admin)
    answer = client.post(f"/admin/monitoring/alertrule/{rule.pk}/delete/", {"post": "yes"})
    assert answer.status_code == 302
    _deleted_and_audited(rule, platform_admin)


def test_alert_rules_bulk_deleted_in_django_admin_are_audited(client, platform_admin, rule):
    client.force_login(platform_admin)
    answer = client.post(
        "/admin/monitoring/alertrule/", {"action": "delete_selected", "_selected_action": [rule.pk], "post": "yes"}
    )
    assert answer.status_code == 302
    _deleted_and_audited(rule, platform_admin)
