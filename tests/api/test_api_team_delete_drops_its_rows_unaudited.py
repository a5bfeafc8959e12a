"""Deleting a team (API and Django admin, both `pools.teams.delete_team`) while it still holds quotas, namespace
limits, volumes, secrets, group rules, a budget, members, pending quota requests or job templates is refused with
what remains. Users saw DELETE /api/v1/teams/vision/ answer 204 and take all of them with it by the database's
CASCADE, with one "team.delete" audit entry for the lot, as `delete_pool` already refuses for a pool's quotas.
Each is removed through its own audited service first; a team that holds nothing is deleted as before."""

from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import Budget
from identity import services as identity_services
from identity.models import GroupRule
from jobs.models import JobTemplate
from pools import services
from pools.models import Quota, QuotaRequest
from portal.models import AuditEntry, Team
from teamdata import services as teamdata_services
from teamdata.models import TeamSecret, TeamVolume
from tests.factories import MembershipFactory, PoolFactory, QuotaFactory, TeamFactory, UserFactory


def test_a_team_holding_quotas_volumes_and_rules_is_not_deleted_with_them_unaudited(api, platform_admin):
    team = TeamFactory(slug="vision", name="Vision")
    QuotaFactory(team=team, pool=PoolFactory(slug="train"), max_gpus=8)
    TeamVolume.objects.create(team=team, name="datasets", created_by=platform_admin)
    GroupRule.objects.create(group="vision-researchers", team=team, role="researcher")

    response = api(platform_admin).delete("/api/v1/teams/vision/")

    dropped = {
        "quotas": not Quota.objects.filter(team_id=team.pk).exists(),
        "volumes": not TeamVolume.objects.filter(team_id=team.pk).exists(),
        "group rules": not GroupRule.objects.filter(group="vision-researchers").exists(),
    }
    audited = set(AuditEntry.objects.values_list("action", flat=True))
    assert response.status_code == 400, f"answered {response.status_code}; dropped {dropped}; audited only {audited}"
    assert not any(dropped.values())
    message = str(response.json())
    for held in ("quotas (1)", "volumes (1)", "group rules (1)", "remove each first", team.namespace):
        assert held in message, message
    assert "team.delete" not in audited


def test_once_each_is_removed_through_its_service_the_team_is_deleted(api, platform_admin):
    """Positive control: the same team, emptied through the audited services, is deleted (204, audited)."""
    team = TeamFactory(slug="vision", name="Vision")
    quota = QuotaFactory(team=team, pool=PoolFactory(slug="train"), max_gpus=8)
    volume = TeamVolume.objects.create(team=team, name="datasets", created_by=platform_admin)
    rule = GroupRule.objects.create(group="vision-researchers", team=team, role="researcher")

    services.delete_quota(quota=quota, user=platform_admin)
    teamdata_services.unregister_volume(volume=volume, user=platform_admin)
    identity_services.delete_rule(rule=rule, user=platform_admin)
    response = api(platform_admin).delete("/api/v1/teams/vision/")

    assert response.status_code == 204, response.content
    assert not Team.objects.filter(pk=team.pk).exists()
    audited = set(AuditEntry.objects.values_list("action", flat=True))
    assert audited >= {"quota.delete", "volume.unregister", "grouprule.delete", "team.delete"}


def _namespace_limits(team, user):
    services.set_namespace_limits(team=team, user=user, max_pods=10)


def _secret(team, user):
    TeamSecret.objects.create(team=team, name="registry", kind="registry", created_by=user)


def _budget(team, user):
    Budget.objects.create(team=team, monthly_cap=Decimal("100.00"), updated_by=user)


def _member(team, user):
    MembershipFactory(team=team, role="researcher", user=UserFactory(username="rita"))


def _pending_request(team, user):
    QuotaRequest.objects.create(team=team, pool=PoolFactory(slug="train"), max_gpus=4, reason="a paper deadline")


def _template(team, user):
    JobTemplate.objects.create(team=team, name="nightly", spec={}, created_by=user)


@pytest.mark.parametrize(
    ("hold", "named"),
    [
        (_namespace_limits, "namespace limits (1)"),
        (_secret, "secrets (1)"),
        (_budget, "a budget (1)"),
        (_member, "members (1)"),
        (_pending_request, "pending quota requests (1)"),
        (_template, "job templates (1)"),
    ],
)
def test_each_thing_a_team_holds_alone_keeps_it(api, platform_admin, hold, named):
    team = TeamFactory(slug="vision", name="Vision")
    hold(team, platform_admin)

    response = api(platform_admin).delete("/api/v1/teams/vision/")

    assert response.status_code == 400, response.content
    assert named in str(response.json())
    assert Team.objects.filter(pk=team.pk).exists()


def test_a_decided_quota_request_does_not_keep_the_team(api, platform_admin):
    """Only pending requests wait for a decision; decided ones are not a reason to keep the team (as for a pool)."""
    team = TeamFactory(slug="vision", name="Vision")
    QuotaRequest.objects.create(
        team=team,
        pool=PoolFactory(slug="train"),
        max_gpus=4,
        reason="a paper deadline",
        state="rejected",
        decided_at=timezone.now(),
    )

    assert api(platform_admin).delete("/api/v1/teams/vision/").status_code == 204


def test_django_admin_says_why_and_keeps_the_team(client, platform_admin):
    team = TeamFactory(slug="vision", name="Vision")
    QuotaFactory(team=team, pool=PoolFactory(slug="train"), max_gpus=8)
    client.force_login(platform_admin)
    url = f"/admin/portal/team/{team.pk}/delete/"

    page = client.get(url).content.decode()
    answer = client.post(url, {"post": "yes"})
    bulk = client.post(
        "/admin/portal/team/", {"action": "delete_selected", "_selected_action": [team.pk], "post": "yes"}
    )

    assert "quotas (1)" in page and team.namespace in page
    assert answer.status_code == 200 and bulk.status_code == 200
    assert Team.objects.filter(pk=team.pk).exists() and Quota.objects.filter(team=team).exists()
    assert not AuditEntry.objects.filter(action="team.delete").exists()


def test_django_admin_deletes_a_team_that_holds_nothing(client, platform_admin):
    team = TeamFactory(slug="vision", name="Vision")
    client.force_login(platform_admin)

    client.post(f"/admin/portal/team/{team.pk}/delete/", {"post": "yes"})

    assert not Team.objects.filter(pk=team.pk).exists()
    assert AuditEntry.objects.filter(action="team.delete").exists()
