"""Deleting a user in Django admin took their memberships and API tokens with it by CASCADE: the audit log got one
`user.delete` with the user's own columns, so which teams the user led or worked in, and which tokens acted as them,
was gone from the record (the same was fixed for teams, docs/features.md: a team is deleted only once it holds
nothing). A user still in a team is refused, on the delete page and in the bulk action, saying why and recommending
deactivation; a user in no team is deleted with their tokens revoked first, each revocation audited."""

import pytest

from portal import services
from portal.choices import Role
from portal.models import AuditEntry, Membership, User
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def lena(team, platform_admin):
    lena = MembershipFactory(team=team, role=Role.LEAD, user=UserFactory(username="lena")).user
    services.create_token(owner=lena, name="ci", user=platform_admin)
    return lena


@pytest.fixture
def admin_client(client, platform_admin):
    client.force_login(platform_admin)
    return client


def test_a_lead_is_not_deleted_in_django_admin_and_the_page_says_why(admin_client, lena):
    page = admin_client.get(f"/admin/portal/user/{lena.pk}/delete/")
    assert b"lena is still a member of Alpha" in page.content and b"deactivate the user" in page.content

    admin_client.post(f"/admin/portal/user/{lena.pk}/delete/", {"post": "yes"})

    assert User.objects.filter(pk=lena.pk).exists() and Membership.objects.filter(user=lena).exists()
    assert lena.api_tokens.get().revoked_at is None


def test_a_lead_is_not_bulk_deleted_in_django_admin(admin_client, lena):
    page = admin_client.post(
        "/admin/portal/user/", {"action": "delete_selected", "_selected_action": [lena.pk], "post": "yes"}
    )
    assert b"lena is still a member of Alpha" in page.content
    assert User.objects.filter(pk=lena.pk).exists() and Membership.objects.filter(user=lena).exists()


def test_a_user_in_no_team_is_deleted_with_their_tokens_revoked_and_audited(admin_client, platform_admin, lena):
    services.remove_member(membership=Membership.objects.get(user=lena), user=platform_admin)
    token = lena.api_tokens.get()

    answer = admin_client.post(f"/admin/portal/user/{lena.pk}/delete/", {"post": "yes"})

    assert answer.status_code == 302 and not User.objects.filter(pk=lena.pk).exists()
    revoked = AuditEntry.objects.get(object_type="portal.apitoken", object_id=str(token.pk), action="token.revoke")
    deleted = AuditEntry.objects.get(object_type="portal.user", object_id=str(lena.pk), action="user.delete")
    assert revoked.actor == deleted.actor == platform_admin
    assert revoked.after["revoked_at"] is not None
