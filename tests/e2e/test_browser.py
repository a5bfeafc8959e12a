"""The portal in a real browser against the real local cluster: a researcher logs in, submits a job, watches it go
Running then Succeeded, cancels another; a team lead opens the team page. Screenshots go to .state/screenshots/."""

import re

import pytest
from playwright.sync_api import expect

from jobs.choices import JobState
from jobs.models import Job
from pools.models import Pool
from portal.choices import Role
from tests.clusterkit import KWOK_DELAY, set_quota, wait_for
from tests.factories import MembershipFactory, UserFactory

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-for-tests"


def log_in(page, base_url: str, username: str) -> None:
    page.goto(f"{base_url}/login/")
    page.get_by_label("Username", exact=True).fill(username)
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Welcome")


def submit_from_the_form(
    page, shoot, base_url: str, team, *, name: str, gpus: int, runs_for: str, expected_start: str = ""
) -> int:
    page.goto(f"{base_url}/jobs/submit/")
    page.get_by_label("Team", exact=True).select_option(team.slug)
    page.get_by_label("Pool", exact=True).select_option("reserved-a800")
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Image", exact=True).fill("registry.example.com/research/train:1.0")
    page.get_by_label("Command", exact=True).fill("python train.py --epochs 1")
    page.get_by_label("GPUs per node", exact=True).fill(str(gpus))
    page.get_by_text("Advanced: environment and pod annotations").click()
    page.get_by_label("Pod annotations", exact=True).fill(f"{KWOK_DELAY}={runs_for}")
    preview = page.locator("#submit-preview")
    expect(preview).to_contain_text(expected_start or "Starts now in Reserved A800 (monthly).")
    expect(preview).to_contain_text("kind: Job")
    expect(preview).to_contain_text("of 8 GPUs")  # the team quota after submission
    shoot(f"submit-{name}")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    return int(re.search(r"/jobs/(\d+)/$", page.url).group(1))


def test_a_researcher_submits_watches_and_cancels_jobs(cluster_sync, cluster_team, live_server, page, shoot):
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    cluster_team.researcher.set_password(PASSWORD)
    cluster_team.researcher.save()
    base = live_server.url
    log_in(page, base, cluster_team.researcher.username)

    job_id = submit_from_the_form(page, shoot, base, cluster_team, name="e2e-train", gpus=2, runs_for="12s")
    shoot("01-job-submitted")
    status = page.locator("#job-status [data-state]")
    expect(status).to_have_text("Running", timeout=45_000)
    expect(page.locator("#job-status")).to_contain_text("reserved-a800-")  # placement: the node
    shoot("02-job-running")
    expect(status).to_have_text("Succeeded", timeout=60_000)
    expect(page.locator("#job-status .timeline")).to_contain_text("Running")
    shoot("03-job-succeeded")
    assert Job.objects.get(pk=job_id).state == JobState.SUCCEEDED
    # KWOK serves no pod logs: the page says so instead of failing.
    page.reload()
    expect(page.locator("#job-logs")).to_contain_text("Logs are not available from the cluster", timeout=30_000)

    long_id = submit_from_the_form(page, shoot, base, cluster_team, name="e2e-long", gpus=4, runs_for="10m")
    expect(page.locator("#job-status [data-state]")).to_have_text("Running", timeout=45_000)
    page.goto(f"{base}/pools/reserved-a800/")
    expect(page.locator(".strip .slot.team-0")).to_have_count(4)  # the running job's GPUs, in the team's colour
    shoot("06-pool-detail-with-a-running-job")
    # 4 of the team's 8 GPUs are in use: an 8-GPU job waits for quota, and the pending view says why.
    queued_id = submit_from_the_form(
        page, shoot, base, cluster_team, name="e2e-queued", gpus=8, runs_for="2s", expected_start="Queued at position 1"
    )
    expect(page.locator("#job-status [data-state]")).to_have_text("Queued")
    page.goto(f"{base}/jobs/pending/")
    row = page.locator("#pending-table tr", has_text="e2e-queued")
    # Kueue's reason, in words, once the sync has mirrored its Workload (the pending view does not poll: reload).
    for _ in range(30):
        if "Waiting for its team's quota in Reserved A800" in row.inner_text():
            break
        page.wait_for_timeout(1000)
        page.reload()
    expect(row).to_contain_text("Waiting for its team's quota in Reserved A800 (monthly): 4 more GPUs needed")
    expect(row).to_contain_text("starts when 4 GPUs of the team's quota are freed")
    shoot("07-pending-queued")
    page.goto(f"{base}/jobs/{long_id}/")
    page.get_by_role("button", name="Cancel job").click()  # hx-confirm: the dialog is accepted
    expect(page.locator("#job-status [data-state]")).to_have_text("Cancelled")
    expect(page.get_by_role("status").first).to_contain_text(f"Job #{long_id} cancelled.")
    shoot("04-job-cancelled")
    assert Job.objects.get(pk=long_id).state == JobState.CANCELLED
    # The cancelled job freed the quota: the queued one is admitted and runs by itself.
    page.goto(f"{base}/jobs/{queued_id}/")
    expect(page.locator("#job-status [data-state]")).to_have_text("Succeeded", timeout=60_000)

    page.goto(f"{base}/jobs/?team={cluster_team.slug}")
    expect(page.locator("#job-table")).to_contain_text("e2e-train")
    expect(page.locator("#job-table")).to_contain_text("Cancelled")
    shoot("05-jobs-list")
    page.goto(f"{base}/pools/")
    expect(page.get_by_role("heading", name="Reserved A800 (monthly)")).to_be_visible()
    shoot("07-pools-dashboard")


def test_a_team_lead_opens_the_team_page(cluster_sync, cluster_team, live_server, page, shoot):
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    lead = UserFactory(username=f"{cluster_team.slug}-lead")
    MembershipFactory(team=cluster_team, user=lead, role=Role.LEAD)
    wait_for(lambda: Pool.objects.get(slug="reserved-a800").nodes.exists(), what="the synced nodes")
    base = live_server.url
    log_in(page, base, lead.username)
    page.get_by_role("link", name="Teams").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(cluster_team.name)
    expect(page.get_by_role("heading", name="Usage against quota and reservation")).to_be_visible()
    expect(page.get_by_text("0 of 8 GPUs of the quota").first).to_be_visible()
    expect(page.get_by_role("link", name="Billing and invoices")).to_have_attribute(
        "href", f"/billing/teams/{cluster_team.slug}/"
    )
    shoot("08-team-page")
    page.get_by_label("Language", exact=True).select_option("zh-hans")
    expect(page.get_by_role("heading", name="用量与配额、预留对比")).to_be_visible()
    shoot("09-team-page-zh")
    page.goto(f"{base}/pools/")
    expect(page.get_by_text("各节点 GPU 槽位").first).to_be_visible()
    shoot("10-pools-zh")
