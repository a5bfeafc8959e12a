"""Local passwords as the exception, API tokens checked on each request, group rules managed by admins (API and
Django admin, audited), and the login page's provider button in both languages."""

from datetime import timedelta

import pytest
from allauth.socialaccount.models import SocialAccount
from django.urls import reverse
from rest_framework.test import APIClient

from identity.models import GroupRule
from portal import services as portal_services
from portal.choices import Role
from portal.models import AuditEntry
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.identity.conftest import CLIENT_ID, provider_settings

pytestmark = pytest.mark.django_db
PASSWORD = "pw-for-tests"


def log_in(client, username, password=PASSWORD, address="10.0.0.9"):
    return client.post(reverse("portal:login"), {"username": username, "password": password}, REMOTE_ADDR=address)


@pytest.fixture
def passwords_off(settings):
    settings.LOCAL_PASSWORD_LOGIN = False
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)


def test_with_local_passwords_off_only_a_break_glass_account_signs_in_with_a_password(client, passwords_off, team):
    MembershipFactory(team=team, user=UserFactory(username="rita"))
    UserFactory(username="ada", is_platform_admin=True, is_break_glass=True)

    assert log_in(client, "rita").status_code == 200  # the form again: the right password is not enough
    assert not client.get("/").wsgi_request.user.is_authenticated
    assert log_in(client, "ada").status_code == 302
    assert client.get("/").wsgi_request.user.username == "ada"
    # The one way in that skips the provider is in the audit log, with where from.
    entry = AuditEntry.objects.get(action="user.break_glass_sign_in")
    assert entry.actor_username == "ada" and entry.after == {"address": "10.0.0.9"}
    assert not AuditEntry.objects.filter(action="user.break_glass_sign_in", actor_username="rita").exists()


def test_the_login_throttle_stays_on_break_glass_accounts(client, passwords_off):
    UserFactory(username="ada", is_platform_admin=True, is_break_glass=True)
    for _ in range(2):
        assert log_in(client, "ada", "wrong").status_code == 200
    assert log_in(client, "ada", "wrong").status_code == 429
    assert log_in(client, "ada").status_code == 429  # locked out, even with the right password


def test_django_admin_refuses_a_password_that_is_no_longer_allowed(client, passwords_off):
    UserFactory(username="staffer", is_staff=True, is_superuser=True, is_platform_admin=True)
    answer = client.post("/admin/login/", {"username": "staffer", "password": PASSWORD}, REMOTE_ADDR="10.0.0.9")
    assert answer.status_code == 200 and not client.get("/").wsgi_request.user.is_authenticated


def test_local_passwords_are_on_by_default_without_a_provider(client, team, settings):
    assert settings.LOCAL_PASSWORD_LOGIN is True
    MembershipFactory(team=team, user=UserFactory(username="rita"))
    assert log_in(client, "rita").status_code == 302


def token_of(user, admin):
    _token, secret = portal_services.create_token(owner=user, name="ci", user=admin)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def test_a_deactivated_users_token_is_refused_on_the_next_request(team, platform_admin):
    user = MembershipFactory(team=team, user=UserFactory(username="rita")).user
    api = token_of(user, platform_admin)
    assert api.get("/api/v1/teams/").status_code == 200

    user.is_active = False
    user.save(update_fields=["is_active"])

    refused = api.get("/api/v1/teams/")
    assert refused.status_code == 401


def test_a_provider_users_token_is_refused_once_they_have_lost_every_team(team, platform_admin):
    user = UserFactory(username="pat")
    SocialAccount.objects.create(user=user, provider="sso", uid="pat", extra_data={})
    membership = MembershipFactory(team=team, user=user, role=Role.RESEARCHER)
    api = token_of(user, platform_admin)
    assert [t["slug"] for t in api.get("/api/v1/teams/").json()["results"]] == ["alpha"]

    portal_services.remove_member(membership=membership, actor_name="oidc:https://idp.example.com")

    refused = api.get("/api/v1/teams/")
    assert refused.status_code == 401 and "no longer a member of any team" in refused.json()["detail"]


def test_a_token_stops_seeing_a_team_its_user_lost_while_keeping_another(team, other_team, platform_admin):
    user = UserFactory(username="pat")
    kept = MembershipFactory(team=other_team, user=user)
    lost = MembershipFactory(team=team, user=user)
    api = token_of(user, platform_admin)
    portal_services.remove_member(membership=lost)
    assert kept.pk and [t["slug"] for t in api.get("/api/v1/teams/").json()["results"]] == ["beta"]
    assert api.get(f"/api/v1/teams/{team.slug}/").status_code == 404


def test_admins_manage_group_rules_through_the_api_and_every_write_is_audited(platform_admin, researcher):
    TeamFactory(slug="llm", name="LLM")
    admin_api = APIClient()
    admin_api.force_login(platform_admin)

    created = admin_api.post(
        "/api/v1/group-rules/", {"group": "gpu-llm-leads", "team": "llm", "role": "lead"}, format="json"
    )
    assert created.status_code == 201, created.content
    admin_rule = admin_api.post("/api/v1/group-rules/", {"group": "gpu-admins", "platform_admin": True}, format="json")
    assert admin_rule.status_code == 201
    invalid = admin_api.post("/api/v1/group-rules/", {"group": "gpu-nothing"}, format="json")
    assert invalid.status_code == 400
    changed = admin_api.patch(f"/api/v1/group-rules/{created.json()['id']}/", {"role": "researcher"}, format="json")
    assert changed.status_code == 200 and changed.json()["role"] == "researcher"
    assert admin_api.delete(f"/api/v1/group-rules/{admin_rule.json()['id']}/").status_code == 204

    assert list(GroupRule.objects.values_list("group", "team__slug", "role")) == [
        ("gpu-llm-leads", "llm", "researcher")
    ]
    actions = list(AuditEntry.objects.filter(object_type="identity.grouprule").values_list("action", "actor_username"))
    assert sorted(actions) == sorted(
        [
            ("grouprule.create", "ada"),
            ("grouprule.create", "ada"),
            ("grouprule.update", "ada"),
            ("grouprule.delete", "ada"),
        ]
    )

    member_api = APIClient()
    member_api.force_login(researcher)
    assert member_api.get("/api/v1/group-rules/").status_code in (403, 404)
    assert member_api.post(
        "/api/v1/group-rules/", {"group": "x", "platform_admin": True}, format="json"
    ).status_code in (
        403,
        404,
    )


def test_django_admin_shows_group_rules_and_each_memberships_source(client, platform_admin, researcher):
    client.force_login(platform_admin)
    GroupRule.objects.create(group="gpu-alpha", team=researcher.teams.get(), role=Role.RESEARCHER)
    assert "gpu-alpha" in client.get("/admin/identity/grouprule/").content.decode()
    memberships = client.get("/admin/portal/membership/").content.decode()
    assert "Set by hand" in memberships


def test_the_login_page_offers_the_provider_in_english_and_chinese(client, settings, compiled_translations):
    settings.SOCIALACCOUNT_PROVIDERS = provider_settings("https://idp.example.com", CLIENT_ID, "secret")
    settings.LOCAL_PASSWORD_LOGIN = False

    english = client.get("/login/").content.decode()
    assert "Sign in with Hydra" in english and "Break-glass sign-in" in english

    client.cookies["django_language"] = "zh-hans"
    chinese = client.get("/login/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "Sign in with" not in chinese and "Hydra" in chinese


def test_without_a_provider_the_login_page_has_no_provider_button(client):
    page = client.get("/login/").content.decode()
    assert "Sign in with" not in page and 'name="password"' in page
