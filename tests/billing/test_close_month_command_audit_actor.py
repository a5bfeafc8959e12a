"""`manage.py close_month` froze every team's invoice for a month (money) and audited it as nobody: the entry's actor
was empty, which the audit log shows as "the system", as for an automatic change, though nothing closes months by
itself. The entry now names the command, as `manage.py create_break_glass_admin` names itself; the Django admin
action names the admin."""

import io

import pytest
import time_machine
from django.core.management import call_command

from billing import services
from portal.models import AuditEntry
from tests.billing.conftest import at

pytestmark = pytest.mark.django_db


def test_a_month_closed_with_the_command_names_the_command_in_the_audit_log(team, reservation):
    with time_machine.travel(at(2, 6, month=4), tick=False):
        call_command("close_month", "2026-03", stdout=io.StringIO())
    entry = AuditEntry.objects.get(action="billing.close_month")
    assert entry.actor_username == "manage.py close_month", (
        "closing 2026-03 with manage.py close_month is audited with no actor (the system)"
    )
    assert entry.actor is None


def test_a_month_closed_by_an_admin_names_the_admin(team, reservation, platform_admin):
    services.close_month(month=at(1).date(), now=at(2, 6, month=4), user=platform_admin)
    entry = AuditEntry.objects.get(action="billing.close_month")
    assert (entry.actor, entry.actor_username) == (platform_admin, platform_admin.username)
