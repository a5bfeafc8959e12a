"""Single sign-on in a real browser through a real provider: Chromium presses "Sign in with Hydra" on the portal's
log-in page, signs in on the provider's own login page (ory/hydra and its login/consent app, tests/identity), comes
back through the real redirects and lands on the dashboard as a member of the team its group maps to."""

import pytest
from playwright.sync_api import expect

from portal.choices import MembershipSource, Role
from portal.models import Membership
from tests.identity.conftest import hydra, sso  # noqa: F401  (the provider fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sso_for_the_browser(hydra, live_server, request):  # noqa: F811
    hydra.redirect_hosts = [live_server.url]
    try:
        yield request.getfixturevalue("sso")
    finally:
        hydra.redirect_hosts = []


def test_a_researcher_signs_in_through_the_provider_and_lands_on_the_dashboard(
    sso_for_the_browser, live_server, page, shoot
):
    page.goto(f"{live_server.url}/login/")
    page.get_by_role("link", name="Sign in with Hydra").click()

    # The provider's own login page, on hydra's login/consent app.
    expect(page.get_by_role("heading", level=1)).to_have_text("Demo identity provider")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("reservoir-sso")
    shoot("sso-provider-login")
    page.get_by_role("button", name="Sign in").click()

    expect(page.get_by_role("heading", level=1)).to_contain_text("Welcome")
    assert page.url == f"{live_server.url}/"
    expect(page.locator("body")).to_contain_text("LLM")
    shoot("sso-dashboard")
    membership = Membership.objects.get(user__username="alice")
    assert (membership.team.slug, membership.role, membership.source) == ("llm", Role.LEAD, MembershipSource.PROVIDER)

    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("link", name="Also sign out of Hydra")).to_be_visible()
    page.get_by_role("link", name="Also sign out of Hydra").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Log in to Reservoir")


def test_a_user_without_a_mapped_group_sees_why_in_the_browser(sso_for_the_browser, live_server, page):
    page.goto(f"{live_server.url}/login/")
    page.get_by_role("link", name="Sign in with Hydra").click()
    page.get_by_label("Username").fill("nogroup")
    page.get_by_label("Password").fill("reservoir-sso")
    page.get_by_role("button", name="Sign in").click()

    expect(page.get_by_role("heading", level=1)).to_have_text("No access to Reservoir")
    expect(page.locator("#no-access")).to_contain_text("staff")
    page.goto(f"{live_server.url}/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Log in to Reservoir")
