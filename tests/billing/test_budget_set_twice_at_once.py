"""Two requests set a team's first budget at once (a lead's double click on "Set the budget", or a retried PUT).
Users saw the second one answer 500 (an IntegrityError on the one-budget-per-team constraint: there was no budget
row yet for the first request's lock to hold back) and the cap they typed was lost. Now the team row is locked
first, so the second request waits, then updates the budget the first one committed. The interleaving is forced:
the first request commits only once the second waits on its lock."""

import threading
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.utils import timezone

from billing import budget
from billing.models import Budget

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_first_budgets_at_once_leave_one_budget_and_no_error(team, lead, monkeypatch):
    monkeypatch.setattr(budget, "_budget_changed", lambda **kwargs: None)  # no outbox: the cluster is not involved
    first_written, release, outcome = threading.Event(), threading.Event(), {}
    pids = {}

    def first():
        try:
            with transaction.atomic():
                budget.set_budget(team=team, monthly_cap=Decimal("100.00"), user=lead, now=timezone.now())
                first_written.set()
                release.wait(timeout=60)
        finally:
            connection.close()

    def second():
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pids["second"] = cursor.fetchone()[0]
            budget.set_budget(team=team, monthly_cap=Decimal("200.00"), user=lead, now=timezone.now())
            outcome["second"] = "ok"
        except Exception as error:  # noqa: BLE001 - what the request would answer with
            outcome["second"] = repr(error)
        finally:
            connection.close()

    a = threading.Thread(target=first)
    a.start()
    assert first_written.wait(timeout=60)
    b = threading.Thread(target=second)
    b.start()
    # Let the first commit only once the second waits on its lock (or has finished without waiting).
    second_waited = False
    for _ in range(6000):
        if not b.is_alive():
            break
        if "second" in pids:
            with connection.cursor() as cursor:
                cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pids["second"]])
                row = cursor.fetchone()
            if row and row[0] == "Lock":
                second_waited = True
                break
        threading.Event().wait(0.01)
    release.set()
    a.join(timeout=60)
    b.join(timeout=60)
    assert second_waited  # the two requests did overlap: the second was held back by the first's lock
    assert outcome["second"] == "ok"
    assert list(Budget.objects.filter(team=team).values_list("monthly_cap", flat=True)) == [Decimal("200.00")]
