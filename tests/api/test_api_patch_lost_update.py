"""A PATCH of one field of a pool or a team keeps what another request committed meanwhile in the fields it does not
name. Users saw two admins (or two scripts: one keeping prices, one autoscaler bounds) PATCH the same pool at about
the same time, and the one that took the row lock second write back the `max_nodes` it had read before the first
committed: the first change was lost, and the second's audit entry showed that value going back as its own change.
Teams lost `allow_high_priority` the same way. The services now apply only the fields sent to the row they lock and
read, and audit before/after from that row; Django admin passes only the fields its form changed.

The interleaving is made deterministic: the other request's committed change is written just before the service
takes its row lock (where a concurrent request can land), then the PATCH goes on."""

from decimal import Decimal

from django.urls import reverse

from pools import services as pool_services
from pools import teams as team_services
from pools.models import Pool
from portal.models import AuditEntry, Team
from tests.pools.test_pools_edges import _admin_form_data


def _another_admin_commits_first(monkeypatch, module, name, change):
    original = getattr(module, name)

    def commits_first(**kwargs):
        change()  # the other request, committed meanwhile
        return original(**kwargs)

    monkeypatch.setattr(module, name, commits_first)


def test_a_pool_patch_keeps_a_change_committed_while_it_ran(api, platform_admin, pool, monkeypatch):
    _another_admin_commits_first(
        monkeypatch, pool_services, "save_pool", lambda: Pool.objects.filter(pk=pool.pk).update(max_nodes=7)
    )
    response = api(platform_admin).patch("/api/v1/pools/train/", {"hourly_price_per_gpu": "3.5000"}, format="json")

    assert response.status_code == 200
    assert response.json()["max_nodes"] == 7
    pool.refresh_from_db()
    assert pool.hourly_price_per_gpu == Decimal("3.5")
    assert pool.max_nodes == 7, "the other admin's max_nodes was put back by a PATCH that never named it"
    entry = AuditEntry.objects.filter(action="pool.update").latest("id")
    assert entry.before["max_nodes"] == entry.after["max_nodes"] == 7, "the audit shows 7 going back as this change"


def test_a_team_patch_keeps_a_change_committed_while_it_ran(api, platform_admin, team, monkeypatch):
    _another_admin_commits_first(
        monkeypatch,
        team_services,
        "save_team",
        lambda: Team.objects.filter(pk=team.pk).update(allow_high_priority=True),
    )
    response = api(platform_admin).patch("/api/v1/teams/alpha/", {"description": "vision group"}, format="json")

    assert response.status_code == 200
    team.refresh_from_db()
    assert team.description == "vision group"
    assert team.allow_high_priority is True, "the other admin's allow_high_priority was undone"
    entry = AuditEntry.objects.filter(action="team.update").latest("id")
    assert entry.before["allow_high_priority"] is True and entry.before["description"] == ""


def test_a_pool_changed_in_django_admin_keeps_a_change_committed_while_it_ran(
    client, platform_admin, pool, monkeypatch
):
    client.force_login(platform_admin)
    url = reverse("admin:pools_pool_change", args=[pool.pk])
    data = _admin_form_data(client, url)
    data["hourly_price_per_gpu"] = "3.5"
    _another_admin_commits_first(
        monkeypatch, pool_services, "save_pool", lambda: Pool.objects.filter(pk=pool.pk).update(max_nodes=7)
    )

    response = client.post(url, data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    pool.refresh_from_db()
    assert pool.hourly_price_per_gpu == Decimal("3.5")
    assert pool.max_nodes == 7


def test_a_team_changed_in_django_admin_keeps_a_change_committed_while_it_ran(
    client, platform_admin, team, monkeypatch
):
    client.force_login(platform_admin)
    url = reverse("admin:portal_team_change", args=[team.pk])
    data = _admin_form_data(client, url)
    data["description"] = "vision group"
    _another_admin_commits_first(
        monkeypatch,
        team_services,
        "save_team",
        lambda: Team.objects.filter(pk=team.pk).update(allow_high_priority=True),
    )

    response = client.post(url, data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    team.refresh_from_db()
    assert team.description == "vision group"
    assert team.allow_high_priority is True
