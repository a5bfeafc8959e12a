"""A password set in Django admin ("Change password" on the user page, the way docs/sign-in.md tells a break-glass
admin to do it) left no audit entry: Django's password page saves its form itself and never reached
`AuditedAdminMixin.save_model`, so who re-keyed the emergency door, and when, was lost. It is audited as
`user.set_password`, by the admin who set it, saying the password changed and never what it is."""

import pytest

from portal.models import AuditEntry
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

NEW_PASSWORD = "Correct-Horse-Battery-Staple-42"


@pytest.fixture
def glass(db):
    return UserFactory(username="glass", is_break_glass=True, is_platform_admin=True, is_staff=True, is_superuser=True)


def test_a_password_set_in_django_admin_is_audited_without_the_password(client, platform_admin, glass):
    hash_before = glass.password
    client.force_login(platform_admin)

    answer = client.post(
        f"/admin/portal/user/{glass.pk}/password/",
        {"password1": NEW_PASSWORD, "password2": NEW_PASSWORD, "usable_password": "true"},
    )

    assert answer.status_code == 302, answer.content[:500]
    glass.refresh_from_db()
    assert glass.check_password(NEW_PASSWORD)
    entry = AuditEntry.objects.get(object_type="portal.user", object_id=str(glass.pk))
    assert (entry.action, entry.actor) == ("user.set_password", platform_admin)
    assert entry.before["password"] == "(hidden)" and entry.after["password"] == "(changed)"
    written = str((entry.before, entry.after))
    assert NEW_PASSWORD not in written and glass.password not in written and hash_before not in written


def test_a_refused_password_leaves_no_entry(client, platform_admin, glass):
    client.force_login(platform_admin)

    answer = client.post(
        f"/admin/portal/user/{glass.pk}/password/",
        {"password1": NEW_PASSWORD, "password2": "something else", "usable_password": "true"},
    )

    assert answer.status_code == 200
    assert not AuditEntry.objects.filter(object_type="portal.user", object_id=str(glass.pk)).exists()
