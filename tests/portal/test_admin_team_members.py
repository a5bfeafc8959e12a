"""A team's page in Django admin, with its memberships inline: a member's user is an autocomplete of ids, and a
posted value that is not one is refused with the field's message, not a 500 (Django's autocomplete redrew the refused
form by filtering users on the raw value)."""

import pytest

from portal.models import Membership

pytestmark = pytest.mark.django_db


def _posted(page, prefix_values):
    """The change form as the browser would post it back, with `prefix_values` changed."""
    data = {}
    form = page.context["adminform"].form
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        if value is None:
            continue
        data[name] = "on" if value is True else ("" if value is False else value)
    for inline in page.context["inline_admin_formsets"]:
        formset = inline.formset
        for name, value in formset.management_form.initial.items():
            data[f"{formset.prefix}-{name}"] = value
        for form in formset.forms:
            for name, field in form.fields.items():
                value = form.initial.get(name, field.initial)
                if value is not None and not isinstance(value, bool):
                    data[form.add_prefix(name)] = getattr(value, "pk", value)
    data = {key: value for key, value in data.items() if value is not False}
    data.update(prefix_values)
    return data


@pytest.mark.parametrize("value", ["abc", "1 OR 1=1", "9" * 40])
def test_a_members_user_that_is_not_an_id_is_refused_with_a_message(client, platform_admin, team, researcher, value):
    client.force_login(platform_admin)
    url = f"/admin/portal/team/{team.pk}/change/"
    page = client.get(url)
    assert page.status_code == 200
    members = list(Membership.objects.filter(team=team).values_list("user_id", "role"))
    answer = client.post(url, _posted(page, {"memberships-0-user": value}))
    assert answer.status_code == 200  # the form again, not a 500 and not a save
    assert b"errorlist" in answer.content
    assert list(Membership.objects.filter(team=team).values_list("user_id", "role")) == members
