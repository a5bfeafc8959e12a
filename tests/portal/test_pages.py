"""The login page, the page shell's role-aware navigation, and Django admin for the seeded pools."""

import io

import pytest
from django.core.management import call_command
from django.urls import reverse

from pools.models import Pool


def test_login_page_renders_for_anonymous(client, db):
    response = client.get(reverse("portal:login"))
    assert response.status_code == 200
    assert b"Log in to Reservoir" in response.content


def test_every_page_names_its_icon_so_no_browser_asks_for_a_missing_favicon(client, db):
    from django.contrib.staticfiles import finders
    from django.templatetags.static import static

    icon = static("img/favicon.svg")
    assert f'<link rel="icon" href="{icon}"'.encode() in client.get(reverse("portal:login")).content
    assert finders.find("img/favicon.svg") is not None


def test_pages_need_login(client, db):
    response = client.get(reverse("portal:home"))
    assert response.status_code == 302
    assert reverse("portal:login") in response["Location"]


def test_wrong_password_keeps_the_username(client, researcher):
    response = client.post(reverse("portal:login"), {"username": "rita", "password": "nope"})
    assert response.status_code == 200
    assert b'value="rita"' in response.content
    assert b"Please enter a correct username and password" in response.content


def test_login_then_home_lists_my_teams_only(client, researcher, other_team):
    response = client.post(reverse("portal:login"), {"username": "rita", "password": "pw-for-tests"}, follow=True)
    assert response.status_code == 200
    assert b"Alpha" in response.content
    assert b"Beta" not in response.content


@pytest.mark.parametrize(("who", "sees_admin"), [("researcher", False), ("lead", False), ("platform_admin", True)])
def test_navigation_is_role_aware(client, request, who, sees_admin):
    user = request.getfixturevalue(who)
    client.force_login(user)
    response = client.get(reverse("portal:home"))
    assert (b'href="/admin/"' in response.content) is sees_admin


def test_logout_is_a_post(client, researcher):
    client.force_login(researcher)
    response = client.post(reverse("portal:logout"))
    assert response.status_code == 302
    assert client.get(reverse("portal:home")).status_code == 302


def test_admin_sees_seeded_pools_in_django_admin(client, platform_admin):
    call_command("seed_demo", stdout=io.StringIO())
    client.force_login(platform_admin)
    response = client.get(reverse("admin:pools_pool_changelist"))
    assert response.status_code == 200
    for pool in Pool.objects.all():
        assert pool.name.encode() in response.content


def test_researcher_cannot_open_django_admin(client, researcher):
    client.force_login(researcher)
    response = client.get(reverse("admin:pools_pool_changelist"))
    assert response.status_code == 302


def test_htmx_is_served_from_static(client, researcher):
    client.force_login(researcher)
    response = client.get(reverse("portal:home"))
    assert b"/static/vendor/htmx/htmx.min.js" in response.content
    assert b'hx-headers=\'{"X-CSRFToken"' in response.content


def test_pool_list_and_detail(client, researcher):
    call_command("seed_demo", stdout=io.StringIO())
    client.force_login(researcher)
    response = client.get(reverse("pools:pool_list"))
    assert b"Reserved A800 (monthly)" in response.content
    detail = client.get(reverse("pools:pool_detail", args=["training"]))
    assert b"node-role=training" in detail.content
    assert client.get(reverse("pools:pool_detail", args=["no-such-pool"])).status_code == 404
