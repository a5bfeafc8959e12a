"""Sign-in through a real OpenID Connect provider (ory/hydra, tests/identity/conftest.py) with the real redirects:
authorization code with PKCE, state and nonce; teams and roles from the provider's groups at every sign-in."""

import urllib.parse

import pytest

from portal.choices import MembershipSource, Role
from portal.models import AuditEntry, Membership, User
from tests.factories import MembershipFactory, UserFactory
from tests.identity.conftest import TEST_SERVER, sign_in, start_sign_in, walk_the_provider

pytestmark = pytest.mark.django_db


def signed_in_user(client):
    return client.get("/").wsgi_request.user


def test_the_authorization_request_carries_pkce_a_state_and_a_nonce(sso, client):
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(start_sign_in(client)).query)
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) >= 43
    assert query["state"][0] and len(query["nonce"][0]) >= 32
    assert set(query["scope"][0].split()) == {"openid", "profile", "email"} and query["client_id"] == [
        "reservoir-tests"
    ]


def test_a_member_of_a_mapped_group_signs_in_and_gets_the_team_and_role(sso, client):
    answer = sign_in(client, "alice")

    assert answer.status_code == 302 and answer["Location"] == "/"
    user = signed_in_user(client)
    assert user.is_authenticated and user.username == "alice" and user.email == "alice@sso.example.com"
    membership = Membership.objects.get(user=user)
    assert (membership.team.slug, membership.role, membership.source) == ("llm", Role.LEAD, MembershipSource.PROVIDER)
    entry = AuditEntry.objects.get(action="membership.create", object_id=str(membership.pk))
    assert entry.actor is None and entry.actor_username == f"oidc:{sso.issuer}"
    assert "LLM" in client.get("/").content.decode()


def test_a_group_removed_at_the_provider_removes_the_membership_at_the_next_sign_in(sso, client):
    sign_in(client, "dan")
    dan = User.objects.get(username="dan")
    assert set(Membership.objects.filter(user=dan).values_list("team__slug", flat=True)) == {"speech", "vision"}
    client.post("/logout/")

    sso.login_app.users["dan"] = ["gpu-vision-leads"]  # out of gpu-speech, promoted in vision
    sign_in(client, "dan")

    memberships = dict(Membership.objects.filter(user=dan).values_list("team__slug", "role"))
    assert memberships == {"vision": Role.LEAD}
    removed = AuditEntry.objects.get(action="membership.delete", object_repr__contains="SPEECH")
    assert removed.actor_username == f"oidc:{sso.issuer}" and removed.before["role"] == Role.RESEARCHER
    assert AuditEntry.objects.filter(action="membership.update", actor_username=f"oidc:{sso.issuer}").count() == 1


def test_the_provider_wins_over_memberships_set_by_hand(sso, client):
    bob = UserFactory(username="bob")
    from allauth.socialaccount.models import SocialAccount

    SocialAccount.objects.create(user=bob, provider="sso", uid="bob", extra_data={})
    by_hand_kept = MembershipFactory(user=bob, team=sso.teams["llm"], role=Role.LEAD)
    by_hand_dropped = MembershipFactory(user=bob, team=sso.teams["speech"], role=Role.RESEARCHER)
    assert by_hand_kept.source == MembershipSource.MANUAL

    sign_in(client, "bob")

    assert signed_in_user(client) == bob
    kept = Membership.objects.get(pk=by_hand_kept.pk)
    assert (kept.role, kept.source) == (Role.RESEARCHER, MembershipSource.PROVIDER)
    assert not Membership.objects.filter(pk=by_hand_dropped.pk).exists()


def test_a_group_for_platform_admins_makes_and_unmakes_an_admin(sso, client):
    sign_in(client, "root")
    root = User.objects.get(username="root")
    assert root.is_platform_admin and root.is_staff
    client.post("/logout/")

    sso.login_app.users["root"] = ["gpu-llm"]
    sign_in(client, "root")
    root.refresh_from_db()
    assert not root.is_platform_admin and not root.is_staff and not root.is_superuser
    assert Membership.objects.get(user=root).team.slug == "llm"


def test_a_user_whose_groups_map_to_nothing_sees_a_clear_page_and_is_not_signed_in(sso, client):
    answer = sign_in(client, "nogroup")

    assert answer.status_code == 403
    text = answer.content.decode()
    assert "No access to Reservoir" in text and "none of your groups gives a team" in text and "staff" in text
    assert not signed_in_user(client).is_authenticated


def test_a_user_removed_from_every_group_loses_the_memberships_and_is_not_signed_in(sso, client):
    sign_in(client, "bob")
    client.post("/logout/")
    sso.login_app.users["bob"] = []

    answer = sign_in(client, "bob")

    assert answer.status_code == 403 and "The provider sent no groups for you." in answer.content.decode()
    assert not Membership.objects.filter(user__username="bob").exists()
    assert not signed_in_user(client).is_authenticated


def test_a_tampered_state_is_refused(sso, client):
    callback = walk_the_provider(start_sign_in(client), "alice", "reservoir-sso", TEST_SERVER)
    parts = urllib.parse.urlsplit(callback)
    query = dict(urllib.parse.parse_qsl(parts.query))
    query["state"] = query["state"][:-2] + ("AA" if not query["state"].endswith("AA") else "BB")

    answer = client.get(f"{parts.path}?{urllib.parse.urlencode(query)}")

    assert "Sign-in failed" in answer.content.decode()
    assert not signed_in_user(client).is_authenticated
    assert not User.objects.filter(username="alice").exists()


def test_a_callback_replayed_after_use_is_refused(sso, client):
    callback = walk_the_provider(start_sign_in(client), "alice", "reservoir-sso", TEST_SERVER)
    assert client.get(callback.removeprefix(TEST_SERVER)).status_code == 302
    client.post("/logout/")

    again = client.get(callback.removeprefix(TEST_SERVER))

    assert "Sign-in failed" in again.content.decode() and not signed_in_user(client).is_authenticated


def test_a_wrong_password_at_the_provider_never_reaches_the_portal(sso, client):
    with pytest.raises(AssertionError, match="Wrong username or password"):
        walk_the_provider(start_sign_in(client), "alice", "wrong", TEST_SERVER)
    assert not User.objects.filter(username="alice").exists()


def test_sign_out_ends_the_session_and_links_to_the_providers_logout(sso, client):
    sign_in(client, "alice")

    answer = client.post("/logout/")

    assert answer.status_code == 200 and not signed_in_user(client).is_authenticated
    link = urllib.parse.urlsplit(answer.context["provider_logout_url"])
    assert f"{link.scheme}://{link.netloc}{link.path}" == f"{sso.issuer}oauth2/sessions/logout"
    query = dict(urllib.parse.parse_qsl(link.query))
    assert query["id_token_hint"].count(".") == 2 and query["post_logout_redirect_uri"] == f"{TEST_SERVER}/login/"
    assert "Also sign out of Hydra" in answer.content.decode()


def test_a_local_user_signing_out_goes_back_to_the_login_page(sso, client):
    client.force_login(UserFactory(username="local"))
    answer = client.post("/logout/")
    assert answer.status_code == 302 and answer["Location"] == "/login/"


def test_a_provider_user_cannot_set_a_password_nor_disconnect_the_provider(sso, client):
    """allauth's account pages would let a provider user set a local password (no old one asked), then disconnect the
    provider: the group rules would never apply to them again. None is served."""
    sign_in(client, "bob")
    assert signed_in_user(client).is_authenticated
    for path in (
        "/accounts/password/set/",
        "/accounts/password/change/",
        "/accounts/password/reset/",
        "/accounts/email/",
        "/accounts/3rdparty/",
        "/accounts/social/connections/",
        "/accounts/reauthenticate/",
    ):
        assert client.get(path).status_code == 404, path
        assert client.post(path, {"password1": "x-Strong-42!", "password2": "x-Strong-42!"}).status_code == 404, path
    bob = User.objects.get(username="bob")
    assert not bob.has_usable_password() and bob.socialaccount_set.count() == 1


def test_a_provider_user_whose_address_another_account_has_is_not_signed_in_nor_linked(sso, client):
    """The portal never joins two accounts by an e-mail address, nor lets the newcomer pick another one on allauth's
    sign-up form: a page says so, and an admin resolves it."""
    local = UserFactory(username="alice-local", email="alice@sso.example.com")

    answer = sign_in(client, "alice")
    if answer.status_code == 302:  # allauth sends the newcomer to its sign-up form
        answer = client.get(answer["Location"])

    assert answer.status_code == 403 and "already has the e-mail address" in answer.content.decode()
    assert not signed_in_user(client).is_authenticated
    assert not User.objects.filter(username="alice").exists() and not local.socialaccount_set.exists()


def test_superuser_left_ticked_by_hand_goes_with_the_admin_group(sso, client):
    sign_in(client, "root")
    client.post("/logout/")
    root = User.objects.get(username="root")
    root.is_platform_admin = False  # unticked in Django admin, superuser left ticked
    root.save(update_fields=["is_platform_admin"])
    sso.login_app.users["root"] = ["gpu-llm"]

    sign_in(client, "root")

    root.refresh_from_db()
    assert not root.is_admin and not root.is_superuser and not root.is_staff
