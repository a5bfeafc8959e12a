"""The Content-Security-Policy in a real browser (issue 15): the portal's pages, their htmx fragments, the language
switcher and Swagger UI work under it, and the browser reports no violation. Needs no cluster."""

import contextlib

import pytest
from playwright.sync_api import expect

from tests.factories import JobFactory, PoolFactory, QuotaFactory

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "pw-for-tests"


def violations_of(page) -> list[str]:
    seen = []
    page.on("console", lambda message: seen.append(message.text) if "Content Security Policy" in message.text else None)
    return seen


def test_pages_and_swagger_ui_run_under_the_policy_without_violations(live_server, page, team, lead):
    pool = PoolFactory(slug="train", name="Train Pool")
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    JobFactory(team=team, pool=pool, submitted_by=lead, name="csp-job")
    seen = violations_of(page)
    base = live_server.url

    page.goto(f"{base}/login/")
    page.get_by_label("Username", exact=True).fill("leo")
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Welcome")
    for path in ("/pools/", "/jobs/", "/jobs/pending/", "/alerts/", f"/billing/teams/{team.slug}/", "/teams/"):
        response = page.goto(f"{base}{path}")
        assert "script-src 'self'" in response.headers["content-security-policy"]
        expect(page.locator("main")).to_be_visible()

    page.goto(f"{base}/jobs/submit/")
    page.get_by_label("Team", exact=True).select_option(team.slug)
    page.get_by_label("Pool", exact=True).select_option("train")
    page.get_by_label("Name", exact=True).fill("csp-preview")
    page.get_by_label("Image", exact=True).fill("registry.example.com/research/train:1.0")
    expect(page.locator("#submit-preview")).to_contain_text("kind: Job")  # htmx works under the policy

    # The language switcher submits by the portal's own script, not an inline handler.
    page.get_by_label("Language", exact=True).select_option("zh-hans")
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    page.locator("#language-switch").select_option("en")  # its label is in Chinese now
    expect(page.locator("html")).to_have_attribute("lang", "en")

    page.goto(f"{base}/api/docs/")
    expect(page.locator(".swagger-ui .opblock").first).to_be_visible(timeout=30_000)
    expect(page.locator(".swagger-ui")).to_contain_text("Reservoir API")
    assert seen == []

    # The policy is really in force: an injected inline script does not run, and the browser says why.
    page.goto(f"{base}/jobs/")
    # Chromium may report the refusal as an error: either way the script did not run.
    with contextlib.suppress(Exception):
        page.add_script_tag(content="window.injected = true")
    assert page.evaluate("window.injected === undefined")
    assert any("script-src" in text for text in seen)
