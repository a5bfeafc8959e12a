"""django-allauth's own Django admin pages (social accounts, social tokens, e-mail addresses) were served as they
come, outside the audit: deleting a provider user's social account there takes the user out of the provider's control
(docs/sign-in.md: after "disconnect the provider ... the group rules never apply to them again"), and re-pointing one
at another user makes the provider identity sign in as that user; neither left an audit entry. Every write and
delete there is audited now (docs/features.md "Audit"), and a link's user, provider and uid are read only."""

import pytest
from allauth.account.models import EmailAddress
from allauth.socialaccount.models import SocialAccount, SocialApp, SocialToken

from portal.models import AuditEntry
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def pat(team):
    return MembershipFactory(team=team, user=UserFactory(username="pat")).user


@pytest.fixture
def account(pat):
    return SocialAccount.objects.create(user=pat, provider="sso", uid="pat", extra_data={})


@pytest.fixture
def admin_client(client, platform_admin):
    client.force_login(platform_admin)
    return client


def _entry(instance, action: str) -> AuditEntry:
    return AuditEntry.objects.get(
        object_type=instance._meta.label_lower,
        object_id=str(instance.pk),
        action=f"{instance._meta.model_name}.{action}",
    )


def test_disconnecting_a_provider_account_in_django_admin_is_audited(admin_client, platform_admin, pat, account):
    admin_client.post(f"/admin/socialaccount/socialaccount/{account.pk}/delete/", {"post": "yes"})

    assert not SocialAccount.objects.filter(pk=account.pk).exists()
    entry = _entry(account, "delete")
    assert entry.actor == platform_admin and entry.after is None
    assert (entry.before["user"], entry.before["provider"], entry.before["uid"]) == (pat.pk, "sso", "pat")


def test_provider_accounts_bulk_deleted_in_django_admin_are_audited(admin_client, account):
    admin_client.post(
        "/admin/socialaccount/socialaccount/",
        {"action": "delete_selected", "_selected_action": [account.pk], "post": "yes"},
    )

    assert not SocialAccount.objects.filter(pk=account.pk).exists()
    assert _entry(account, "delete").before["uid"] == "pat"


def test_a_provider_account_is_not_pointed_at_another_user_nor_made_by_hand(admin_client, pat, account):
    other = UserFactory(username="otto")
    page = admin_client.get(f"/admin/socialaccount/socialaccount/{account.pk}/change/")
    assert page.status_code == 200 and 'name="user"' not in page.content.decode()

    admin_client.post(
        f"/admin/socialaccount/socialaccount/{account.pk}/change/",
        {"user": other.pk, "provider": "sso", "uid": "otto", "extra_data": "{}"},
    )

    account.refresh_from_db()
    assert (account.user, account.uid) == (pat, "pat")
    assert admin_client.get("/admin/socialaccount/socialaccount/add/").status_code == 403


def test_an_e_mail_address_edited_or_verified_in_django_admin_is_audited(admin_client, platform_admin, pat):
    address = EmailAddress.objects.create(user=pat, email="pat@example.com", primary=True, verified=False)

    admin_client.post(
        f"/admin/account/emailaddress/{address.pk}/change/",
        {"user": UserFactory(username="otto").pk, "email": "pat@example.org", "primary": "on"},
    )
    admin_client.post("/admin/account/emailaddress/", {"action": "make_verified", "_selected_action": [address.pk]})

    address.refresh_from_db()
    assert (address.user, address.email, address.verified) == (pat, "pat@example.org", True)
    updates = AuditEntry.objects.filter(object_type="account.emailaddress", action="emailaddress.update").order_by("id")
    assert [(e.before["email"], e.after["email"], e.after["verified"]) for e in updates] == [
        ("pat@example.com", "pat@example.org", False),
        ("pat@example.org", "pat@example.org", True),
    ]
    assert {e.actor for e in updates} == {platform_admin}


def test_a_provider_token_deleted_in_django_admin_is_audited_without_the_token(admin_client, account):
    app = SocialApp.objects.create(provider="openid_connect", provider_id="sso", name="SSO", client_id="portal")
    token = SocialToken.objects.create(app=app, account=account, token="access-secret", token_secret="refresh-secret")

    admin_client.post(f"/admin/socialaccount/socialtoken/{token.pk}/delete/", {"post": "yes"})

    assert not SocialToken.objects.filter(pk=token.pk).exists()
    entry = _entry(token, "delete")
    assert entry.before["token"] == entry.before["token_secret"] == "(hidden)"
    assert "access-secret" not in str(entry.before) and "refresh-secret" not in str(entry.before)
