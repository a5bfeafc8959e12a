"""A live page that cannot refresh says so, in a real browser: while the portal cannot be reached, the jobs list's
poll fails and the page says that what it shows may be out of date (instead of looking live while it is not); the
first poll that works again clears it. An action the portal refuses says that too. Needs no cluster."""

import pytest
from playwright.sync_api import expect

from tests.e2e.test_browser import log_in
from tests.factories import JobFactory, PoolFactory, QuotaFactory

pytestmark = pytest.mark.django_db(transaction=True)
POLL_MS = 10_000  # jobs.views.LIST_POLL_SECONDS


def _is_the_jobs_poll(url: str) -> bool:
    return "/jobs/?" in url


def test_a_live_page_says_when_it_cannot_refresh_and_clears_it_when_it_can(live_server, page, team, lead):
    pool = PoolFactory(slug="train", name="Train Pool")
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    job = JobFactory(team=team, pool=pool, submitted_by=lead, name="live-job")
    base = live_server.url
    log_in(page, base, "leo")

    page.goto(f"{base}/jobs/")
    status = page.locator("#live-status")
    expect(page.locator("#job-table")).to_contain_text("live-job")
    expect(status).to_be_hidden()

    page.route(_is_the_jobs_poll, lambda route: route.abort("connectionrefused"))
    expect(status).to_be_visible(timeout=2 * POLL_MS + 5_000)
    expect(status).to_contain_text("could not be refreshed")
    expect(page.locator("#job-table")).to_contain_text("live-job")  # what was shown stays

    page.unroute(_is_the_jobs_poll)
    expect(status).to_be_hidden(timeout=2 * POLL_MS + 5_000)

    # An action refused (the job is gone meanwhile: 404) says so too.
    page.goto(f"{base}/jobs/{job.pk}/")
    job.delete()
    page.get_by_role("button", name="Cancel job").click()
    expect(status).to_be_visible()
    expect(status).to_contain_text("did not do that (HTTP 404)")
