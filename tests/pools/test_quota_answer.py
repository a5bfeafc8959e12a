"""A quota change answers with what it knows without reading it again (issue 30): the namespace's state as the change
left it (the bump's own RETURNING) and the Kueue projection's version bumped after the commit. Both must be what a
read of the same quota right after shows."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from pools import projection
from pools.models import KueueProjection, TeamNamespace
from tests.factories import PoolFactory, QuotaFactory, TeamFactory

pytestmark = pytest.mark.django_db(transaction=True)


def admin_api(platform_admin) -> APIClient:
    api = APIClient()
    api.force_authenticate(platform_admin)
    return api


@pytest.mark.parametrize("namespace_row", ["none yet", "applied, then an error"])
def test_the_answer_to_a_quota_change_is_what_a_read_right_after_shows(platform_admin, namespace_row):
    team, pool = TeamFactory(), PoolFactory()
    quota = QuotaFactory(team=team, pool=pool, max_gpus=4)
    if namespace_row != "none yet":
        applied_at = timezone.now() - timedelta(minutes=3, microseconds=7)
        TeamNamespace.objects.update_or_create(
            team=team,
            defaults={"desired_version": 5, "applied_version": 5, "applied_at": applied_at, "last_error": "denied"},
        )
    api = admin_api(platform_admin)
    changed = api.patch(f"/api/v1/quotas/{quota.pk}/", {"max_gpus": 9}, format="json")
    assert changed.status_code == 200, changed.content
    read = api.get(f"/api/v1/quotas/{quota.pk}/", HTTP_ACCEPT="application/json")
    assert changed.json() == read.json()
    namespace = changed.json()["namespace"]
    if namespace_row == "none yet":
        assert (namespace["desired_version"], namespace["applied"]) == (1, False)
    else:  # bumped once, no longer applied; when it last was and the last error kept to the microsecond
        assert (namespace["desired_version"], namespace["applied_version"], namespace["applied"]) == (6, 5, False)
        assert namespace["last_error"] == "denied"
        assert namespace["applied_at"] == read.json()["namespace"]["applied_at"] is not None
    assert changed.json()["kueue"]["desired_version"] == KueueProjection.objects.get().desired_version


def test_a_namespace_change_returns_the_state_it_left_and_counts_every_change():
    team = TeamFactory()
    first = projection.namespace_changed(team)  # makes the row
    second = projection.namespace_changed(team)
    assert (first["desired_version"], second["desired_version"]) == (1, 2)
    assert second == projection.namespace_state(team.pk)
    assert projection.namespace_state(TeamFactory().pk) == {
        "applied": False,
        "desired_version": 0,
        "applied_version": 0,
        "applied_at": None,
        "last_error": "",
    }


def test_a_quota_change_reads_neither_state_row_back(platform_admin, monkeypatch):
    """The namespace's state comes from its bump, the Kueue version from its bump, the message is claimed and marked
    sent in one statement: one statement on the namespace's row, two on Kueue's (the bump, the answer's read of its
    state), two on the outbox (the message, its claim). The tasks are not run here: only the statements are counted."""
    from types import SimpleNamespace

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from portal import outbox

    published = []
    monkeypatch.setattr(outbox, "_publish", published.append)
    monkeypatch.setattr(outbox, "task_named", lambda name: SimpleNamespace(delay=published.append))
    quota = QuotaFactory(max_gpus=4)
    projection.namespace_changed(quota.team)  # both state rows exist, as after a first change
    projection.kueue_row()
    published.clear()
    api = admin_api(platform_admin)
    with CaptureQueriesContext(connection) as captured:
        assert api.patch(f"/api/v1/quotas/{quota.pk}/", {"max_gpus": 8}, format="json").status_code == 200
    statements = [query["sql"] for query in captured.captured_queries]

    def on(table: str) -> list[str]:
        return [sql.split()[0] for sql in statements if f'"{table}"' in sql or f" {table} " in sql]

    assert on("pools_teamnamespace") == ["UPDATE"]
    assert on("pools_kueueprojection") == ["UPDATE", "SELECT"]
    assert on("portal_outboxmessage") == ["INSERT", "UPDATE"]
    assert len(published) == 2  # the namespace's reconcile (its message) and Kueue's (its version)
