"""API tokens in Django admin are revoked, never deleted. The page offered Django's delete (single and the bulk
"Delete selected" action) next to "Revoke": a deleted token's row went with no audit entry, so who cut off which
automation, and when, was lost (docs/features.md "Audit": every write through Django admin records who, what, before
and after). Deletion is refused; "Revoke" still works and is audited."""

import pytest

from portal import services
from portal.models import ApiToken, AuditEntry

pytestmark = pytest.mark.django_db


@pytest.fixture
def token(platform_admin, researcher):
    token, _secret = services.create_token(owner=researcher, name="ci", user=platform_admin)
    return token


@pytest.fixture
def admin_client(client, platform_admin):
    client.force_login(platform_admin)
    return client


def test_a_token_is_not_deleted_in_django_admin(admin_client, token):
    assert admin_client.get(f"/admin/portal/apitoken/{token.pk}/delete/").status_code == 403
    assert admin_client.post(f"/admin/portal/apitoken/{token.pk}/delete/", {"post": "yes"}).status_code == 403
    assert ApiToken.objects.filter(pk=token.pk).exists()


def test_tokens_are_not_bulk_deleted_in_django_admin(admin_client, token):
    page = admin_client.get("/admin/portal/apitoken/")
    assert b"delete_selected" not in page.content and b'value="revoke"' in page.content
    admin_client.post(
        "/admin/portal/apitoken/", {"action": "delete_selected", "_selected_action": [token.pk], "post": "yes"}
    )
    assert ApiToken.objects.filter(pk=token.pk).exists()


def test_a_token_revoked_in_django_admin_is_audited(admin_client, platform_admin, token):
    admin_client.post("/admin/portal/apitoken/", {"action": "revoke", "_selected_action": [token.pk]})

    token.refresh_from_db()
    assert token.revoked_at is not None and token.revoked_by == platform_admin
    entry = AuditEntry.objects.get(object_type="portal.apitoken", object_id=str(token.pk), action="token.revoke")
    assert entry.actor == platform_admin
