"""A provider identity is never joined to an account of the portal: not to the one signed in (allauth's
`?process=connect`, which a plain link could start, is a sign-in like any other), nor to one with the same e-mail
address in another case. Provider sign-ins then get the rights their groups give, and nothing of a break-glass
admin's."""

# ruff: noqa: F811 - the stand-in provider (tests/identity/test_id_token_checks.py's fixture) is imported by name

import pytest
from allauth.socialaccount.models import SocialAccount
from django.urls import reverse

from portal.models import Membership, User
from tests.factories import UserFactory
from tests.identity.test_id_token_checks import forger, sign_in_with  # noqa: F401  (forger: a fixture)

pytestmark = pytest.mark.django_db
PASSWORD = "pw-for-tests"


def forge_callback(client, forger, start_url, **changes):
    return sign_in_with(client, forger, start=start_url, **changes)


def test_a_signed_in_break_glass_account_cannot_be_joined_to_a_provider_identity(client, forger, settings):
    """docs/sign-in.md: "a provider account is never joined to an existing local account"; break-glass accounts are
    the way in that skips the provider. allauth's `process=connect` is reached by a GET (SOCIALACCOUNT_LOGIN_ON_GET)."""
    settings.LOCAL_PASSWORD_LOGIN = False
    ada = UserFactory(username="ada", is_platform_admin=True, is_break_glass=True)
    assert client.post(reverse("portal:login"), {"username": "ada", "password": PASSWORD}).status_code == 302

    forge_callback(client, forger, "/accounts/oidc/sso/login/?process=connect", sub="someone-at-the-idp", groups=[])

    assert not SocialAccount.objects.filter(user=ada).exists(), "the provider identity was joined to the local account"


def test_a_provider_identity_joined_by_connect_keeps_platform_admin_its_groups_do_not_give(client, forger, settings):
    """Had it been joined, signing in through the provider as that identity would land in the break-glass admin, whose
    admin flags the group rules never touch."""
    settings.LOCAL_PASSWORD_LOGIN = False
    UserFactory(username="ada", is_platform_admin=True, is_staff=True, is_superuser=True, is_break_glass=True)
    client.post(reverse("portal:login"), {"username": "ada", "password": PASSWORD})
    forge_callback(client, forger, "/accounts/oidc/sso/login/?process=connect", sub="ada-at-idp", groups=[])
    client.post("/logout/")

    answer = forge_callback(client, forger, "/accounts/oidc/sso/login/", sub="ada-at-idp", groups=["gpu-llm"])

    user = client.get("/").wsgi_request.user
    assert answer.status_code == 302
    assert not (user.is_authenticated and user.username == "ada" and user.is_admin), (
        "a provider sign-in whose groups give only researcher in llm is a platform admin"
    )


def test_a_provider_username_equal_to_a_local_one_makes_a_new_account(client, forger):
    ada = UserFactory(username="ada", is_platform_admin=True, is_break_glass=True, email="")
    answer = forge_callback(client, forger, "/accounts/oidc/sso/login/", sub="x1", preferred_username="ada")
    assert answer.status_code == 302
    user = client.get("/").wsgi_request.user
    assert user.is_authenticated and user.pk != ada.pk and not user.is_admin
    assert not SocialAccount.objects.filter(user=ada).exists()


def test_a_provider_username_differing_in_case_makes_a_new_account(client, forger):
    ada = UserFactory(username="ada", email="")
    forge_callback(client, forger, "/accounts/oidc/sso/login/", sub="x2", preferred_username="ADA")
    user = client.get("/").wsgi_request.user
    assert user.is_authenticated and user.pk != ada.pk


def test_an_email_in_another_case_is_not_linked(client, id_token_only):
    forger = id_token_only
    local = UserFactory(username="eve-local", email="Eve@Example.com")
    answer = forge_callback(client, forger, "/accounts/oidc/sso/login/", email="eve@example.com")
    if answer.status_code == 302:
        answer = client.get(answer["Location"])
    assert not client.get("/").wsgi_request.user.is_authenticated
    assert not local.socialaccount_set.exists()


def test_a_single_string_group_claim_counts(client, forger):
    forge_callback(client, forger, "/accounts/oidc/sso/login/", groups="gpu-llm")
    assert Membership.objects.get(user__username="eve").team.slug == "llm"
    assert User.objects.filter(username="eve").exists()


@pytest.fixture
def id_token_only(settings, forger):
    """The provider's claims from the ID token alone (the stand-in provider's userinfo has no e-mail)."""
    settings.SOCIALACCOUNT_PROVIDERS["openid_connect"]["APPS"][0]["settings"]["fetch_userinfo"] = False
    return forger


def test_an_address_with_capitals_that_another_account_has_is_refused(client, id_token_only):
    """docs/sign-in.md step 5: "When another account already has the address the provider gave ... the portal shows
    instead a page that says so, and signs nobody in". The same address, spelled the same, with a capital letter in
    its local part (as Entra ID often sends them, and as Django keeps them: normalize_email lowers only the domain)."""
    forger = id_token_only
    local = UserFactory(username="eve-local", email="Eve.Smith@example.com")
    answer = forge_callback(client, forger, "/accounts/oidc/sso/login/", email="Eve.Smith@example.com")
    if answer.status_code == 302 and "signup" in answer["Location"]:
        answer = client.get(answer["Location"])
    signed_in = client.get("/").wsgi_request.user
    assert not signed_in.is_authenticated, (
        f"signed in as {signed_in.username!r}, a second account with {local.email!r}: "
        f"{list(User.objects.filter(email__iexact=local.email).values_list('username', flat=True))}"
    )


def test_a_lower_case_address_another_account_has_is_refused(client, id_token_only):
    forger = id_token_only
    UserFactory(username="eve-local", email="eve.smith@example.com")
    answer = forge_callback(client, forger, "/accounts/oidc/sso/login/", email="eve.smith@example.com")
    if answer.status_code == 302 and "signup" in answer["Location"]:
        answer = client.get(answer["Location"])
    assert answer.status_code == 403 and not client.get("/").wsgi_request.user.is_authenticated
