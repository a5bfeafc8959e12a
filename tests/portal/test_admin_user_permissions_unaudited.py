"""Django admin rights (the user page's "Groups" and "User permissions", and the permissions a Django group gives)
decide what a staff operator who is not a superuser may change in Django admin, e.g. quotas. They are saved after
the user's row, and the audit snapshot held the row's columns only: giving an operator "Can change quota" was audited
as a `user.update` whose before and after were the same, and Django's Group admin was not audited at all. Both now
record who, and the rights before and after (as natural keys); a plain field change is still audited as before."""

import pytest
from django.contrib.auth.models import Group, Permission

from portal.choices import Role
from portal.models import AuditEntry, Membership
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

CHANGE_QUOTA = ["change_quota", "pools", "quota"]


@pytest.fixture
def admin_client(client, platform_admin):
    client.force_login(platform_admin)
    return client


@pytest.fixture
def change_quota(db):
    return Permission.objects.get(content_type__app_label="pools", codename="change_quota")


def _form_data(admin_client, url: str) -> dict:
    """What the change page would post back unchanged."""
    form = admin_client.get(url).context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        if name == "password":
            continue
        if isinstance(value, bool):
            if value:
                data[name] = "on"
        elif hasattr(field.widget, "widgets") and not isinstance(value, list | tuple):
            for index, part in enumerate(field.widget.decompress(value)):
                data[f"{name}_{index}"] = "" if part is None else str(part)
        elif isinstance(value, list | tuple):
            data[name] = [getattr(item, "pk", item) for item in value]
        else:
            data[name] = "" if value is None else getattr(value, "pk", value)
    return data


def _entries(instance) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(object_type=instance._meta.label_lower, object_id=str(instance.pk)))


def test_granting_a_django_admin_permission_to_a_user_is_audited_with_what_changed(
    admin_client, platform_admin, change_quota
):
    ops = UserFactory(username="ops", is_staff=True)
    url = f"/admin/portal/user/{ops.pk}/change/"
    data = {**_form_data(admin_client, url), "user_permissions": [change_quota.pk]}

    answer = admin_client.post(url, data)

    assert answer.status_code == 302, answer.context["adminform"].form.errors if answer.context else answer
    assert ops.user_permissions.filter(pk=change_quota.pk).exists()
    [entry] = _entries(ops)
    assert (entry.action, entry.actor) == ("user.update", platform_admin)
    assert entry.before["user_permissions"] == [] and entry.after["user_permissions"] == [CHANGE_QUOTA]
    assert entry.before["groups"] == entry.after["groups"] == []


def test_a_django_groups_permissions_changed_in_admin_are_audited(admin_client, platform_admin, change_quota):
    operators = Group.objects.create(name="operators")
    UserFactory(username="ops", is_staff=True).groups.add(operators)
    url = f"/admin/auth/group/{operators.pk}/change/"

    answer = admin_client.post(url, {"name": "operators", "permissions": [change_quota.pk]})

    assert answer.status_code == 302
    [entry] = _entries(operators)
    assert (entry.action, entry.actor) == ("group.update", platform_admin)
    assert entry.before["permissions"] == [] and entry.after["permissions"] == [CHANGE_QUOTA]
    assert entry.after["user_set"] == ["ops"]


def test_a_django_group_deleted_in_admin_is_audited_with_who_was_in_it(admin_client, change_quota):
    operators = Group.objects.create(name="operators")
    operators.permissions.add(change_quota)
    UserFactory(username="ops", is_staff=True).groups.add(operators)

    admin_client.post(f"/admin/auth/group/{operators.pk}/delete/", {"post": "yes"})

    [entry] = _entries(operators)
    assert entry.action == "group.delete" and entry.after is None
    assert entry.before["permissions"] == [CHANGE_QUOTA] and entry.before["user_set"] == ["ops"]


def test_a_memberships_role_changed_in_admin_is_still_audited_once(admin_client, platform_admin, researcher):
    membership = Membership.objects.get(user=researcher)
    url = f"/admin/portal/membership/{membership.pk}/change/"

    answer = admin_client.post(url, {**_form_data(admin_client, url), "role": Role.LEAD})

    assert answer.status_code == 302
    [entry] = _entries(membership)
    assert (entry.action, entry.actor) == ("membership.update", platform_admin)
    assert (entry.before["role"], entry.after["role"]) == (Role.RESEARCHER, Role.LEAD)


def test_a_user_added_in_admin_is_audited_once(admin_client, platform_admin):
    password = "Correct-Horse-Battery-Staple-42"
    answer = admin_client.post(
        "/admin/portal/user/add/",
        {"username": "newbie", "password1": password, "password2": password, "usable_password": "true"},
    )

    assert answer.status_code == 302
    [entry] = AuditEntry.objects.filter(object_type="portal.user", object_repr="newbie")
    assert entry.action == "user.create" and entry.before is None
    assert entry.after["groups"] == [] and entry.after["password"] == "(hidden)" and password not in str(entry.after)
