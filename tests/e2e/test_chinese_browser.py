"""The portal as a Chinese-speaking team meets it, in a real browser against the real local cluster: a researcher
who reads Chinese submits a job that runs and one that waits for quota, then walks the main pages; a team lead
walks the team, billing and alert pages. No page shows an English sentence: only data (team, pool, job and node
names, images), product and technical terms (GPU, Pod, Kueue, MiB ...) and text marked lang="en" (what the
cluster says verbatim: manifests, logs, Kubernetes events) stay in Latin letters.

Both walk the alerts page and the detail of an alert the worker's evaluation raised about a job Kueue really holds
back (its team's quota full), and the pending view with that job; the lead also reads the invoice of a closed
month, whose reservation-fee line gives its dates in the reader's format."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from billing import services as billing_services
from jobs import services as job_services
from jobs.choices import JobState
from jobs.models import Job
from jobs.specs import JobSpec
from monitoring import services as monitoring_services
from monitoring import tasks as monitoring_tasks
from monitoring.choices import AlertKind, AlertState
from monitoring.models import Alert
from pools import services as pool_services
from pools.models import Node, Pool
from portal.choices import Role
from tests.clusterkit import KWOK_DELAY, set_quota, wait_for
from tests.e2e.conftest import SCREENSHOTS
from tests.english import english_phrases, english_words
from tests.factories import MembershipFactory, UserFactory

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("compiled_translations"),
]
PASSWORD = "pw-for-tests"
IMAGE = "registry.example.com/research/train:1.0"

# The page's words as a reader meets them: its visible text and the titles and labels a pointer or a screen reader
# reads, without what is marked as another language, the options of selects (teams and pools: data) and
# <noscript> (raw markup to a browser that runs scripts).
PAGE_WORDS = """() => {
  const copy = document.body.cloneNode(true);
  copy.querySelectorAll("script, style, noscript, [lang]:not([lang^=zh]), option").forEach((node) => node.remove());
  const labels = [...copy.querySelectorAll("[title], [aria-label], [placeholder]")].map((node) =>
    [node.getAttribute("title"), node.getAttribute("aria-label"), node.getAttribute("placeholder")].join(" "));
  return [document.title, copy.innerText || copy.textContent, ...labels].join("\\n");
}"""


@pytest.fixture
def chinese_page(browser):
    context = browser.new_context(viewport={"width": 1360, "height": 900}, locale="zh-CN")
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.on("dialog", lambda dialog: dialog.accept())
    yield page
    context.close()


@pytest.fixture
def shoot(chinese_page):
    """Screenshots of the Chinese page (conftest's `shoot` takes its own English page, which stays blank here)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def shoot(name: str) -> None:
        chinese_page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)

    return shoot


def data_words(team, *extra) -> tuple[str, ...]:
    pools = list(Pool.objects.values_list("name", flat=True))
    nodes = list(Node.objects.values_list("name", flat=True))
    models = list(Pool.objects.values_list("gpu_model", flat=True))
    jobs = list(Job.objects.filter(team=team).values_list("name", flat=True))
    return (team.name, team.slug, team.namespace, IMAGE, *pools, *nodes, *models, *jobs, *extra)


def assert_no_english(page, data, what: str, *, word_by_word: bool = False) -> None:
    """No English phrase in the page; `word_by_word`: not even one English word (codes shown raw, e.g. a state)."""
    page.wait_for_load_state("networkidle")
    words = page.evaluate(PAGE_WORDS)
    assert "<html" not in words
    left = english_words(words, data) if word_by_word else english_phrases(words, data)
    assert not left, f"{what}: English left in the Chinese page: {left}"


def log_in(page, base_url: str, username: str) -> None:
    page.goto(f"{base_url}/login/")
    assert_no_english(page, (), "the log-in page")
    page.locator("input[name=username]").fill(username)
    page.locator("input[name=password]").fill(PASSWORD)
    page.get_by_role("button", name="登录").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("欢迎")


def submit(page, base_url: str, team, *, name: str, gpus: int, runs_for: str) -> int:
    page.goto(f"{base_url}/jobs/submit/")
    preview = page.locator("#submit-preview")
    expect(preview).to_contain_text("还需填写")  # what to fill in, not errors, before anything is typed
    expect(preview).not_to_contain_text("必填")
    assert_no_english(page, data_words(team), "the untouched submit page")
    page.locator("select[name=team]").select_option(team.slug)
    page.locator("select[name=pool]").select_option("reserved-a800")
    page.locator("input[name=name]").fill(name)
    page.locator("input[name=image]").fill(IMAGE)
    page.locator("input[name=gpus]").fill(str(gpus))
    page.get_by_text("高级：环境变量与 Pod 注解").click()
    page.locator("textarea[name=pod_annotations]").fill(f"{KWOK_DELAY}={runs_for}")
    expect(preview).to_contain_text("kind: Job")
    assert_no_english(page, data_words(team, name), "the filled-in submit page")
    page.get_by_role("button", name="提交作业").click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    return int(re.search(r"/jobs/(\d+)/$", page.url).group(1))


def wait_until_kueue_holds_back(job_id: int) -> None:
    """Until Kueue has said why it does not admit the job (the sync records its Workload's message)."""
    wait_for(lambda: Job.objects.get(pk=job_id).workloads.exclude(message="").exists(), what="Kueue's reason")
    assert Job.objects.get(pk=job_id).state == JobState.QUEUED


def raise_queue_wait_alert(team, job_id: int) -> Alert:
    """The worker's evaluation (the Celery task, run eagerly) raises a queue-wait alert about the job Kueue holds
    back: the team's rule fires as soon as a job waits, so the test need not wait half an hour."""
    monitoring_services.set_rule(kind=AlertKind.QUEUE_WAIT, threshold=Decimal(0), for_seconds=0, team=team)
    # Waits are measured in minutes to two places: a job queued under 0.3 s ago has waited 0.00, not above 0.
    wait_for(
        lambda: (timezone.now() - Job.objects.get(pk=job_id).created_at).total_seconds() > 1,
        what="the job to have waited a second",
    )
    monitoring_tasks.evaluate_alerts.delay()
    return Alert.objects.get(kind=AlertKind.QUEUE_WAIT, job_id=job_id, state=AlertState.FIRING)


def walk_alert(page, base: str, alert: Alert, data, job_name: str) -> None:
    page.goto(f"{base}/alerts/")
    expect(page.locator("main")).to_contain_text(f"作业 {job_name}（#{alert.job_id}）")
    assert_no_english(page, data, "/alerts/ with a firing alert")
    page.goto(f"{base}/alerts/{alert.pk}/")
    expect(page.locator("main")).to_contain_text("等待启动的时间")
    assert_no_english(page, data, "an alert's detail", word_by_word=True)


def close_last_month(team) -> tuple:
    """A reservation of 4 GPUs of reserved-a800 from the 3rd, 08:30 UTC, of last month to its end, and last month
    closed: its invoice is frozen with the reservation fee. Returns (the month, the reservation's start)."""
    this_month = timezone.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    last_month = (this_month - timedelta(days=1)).replace(day=1)
    starts_at = last_month + timedelta(days=2, hours=8, minutes=30)
    pool_services.create_reservation(
        team=team, pool=Pool.objects.get(slug="reserved-a800"), gpus=4, starts_at=starts_at, ends_at=this_month
    )
    result = billing_services.close_month(month=last_month.date(), now=timezone.now())
    assert result.closed_now and result.invoices >= 1
    return last_month.date(), starts_at


def test_a_researcher_who_reads_chinese_meets_no_english_sentence(
    cluster_sync, cluster_team, live_server, chinese_page, shoot
):
    page = chinese_page
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    researcher = cluster_team.researcher
    researcher.set_password(PASSWORD)
    researcher.language = "zh-hans"
    researcher.save()
    base = live_server.url
    log_in(page, base, researcher.username)
    assert_no_english(page, data_words(cluster_team, researcher.username), "the home page")

    running = submit(page, base, cluster_team, name="zh-train", gpus=6, runs_for="10m")
    expect(page.locator("#job-status [data-state]")).to_have_text("运行中", timeout=45_000)
    queued = submit(page, base, cluster_team, name="zh-waits", gpus=4, runs_for="10s")
    expect(page.locator("#job-status [data-state]")).to_have_text("排队中")
    wait_until_kueue_holds_back(queued)
    page.reload()
    expect(page.locator("#job-status")).to_contain_text("等待团队在 Reserved A800")
    data = data_words(cluster_team, researcher.username)
    assert_no_english(page, data, "a queued job")
    shoot("zh-01-queued-job")
    page.goto(f"{base}/jobs/{running}/")
    assert_no_english(page, data, "a running job")
    for path in ["/pools/", "/pools/reserved-a800/", "/jobs/pending/", "/jobs/", "/alerts/"]:
        page.goto(f"{base}{path}")
        assert_no_english(page, data, path)
    page.goto(f"{base}/preferences/")
    assert_no_english(page, (*data, researcher.email), "/preferences/")
    page.goto(f"{base}/jobs/pending/")
    expect(page.locator("#pending-table")).to_contain_text("等待团队在 Reserved A800")
    shoot("zh-02-pending")
    walk_alert(page, base, raise_queue_wait_alert(cluster_team, queued), data, "zh-waits")
    shoot("zh-04-alert")
    assert Job.objects.get(pk=running).state == JobState.RUNNING


def this_month(last_month) -> str:
    """The first day of the month after `last_month`, as Chinese pages write a date."""
    first = (last_month.replace(day=28) + timedelta(days=4)).replace(day=1)
    return f"{first.year}年{first.month}月1日"


def submit_directly(team, *, name: str, gpus: int, runs_for: str) -> int:
    spec = JobSpec(name=name, image=IMAGE, gpus=gpus, pod_annotations={KWOK_DELAY: runs_for})
    pool = Pool.objects.get(slug="reserved-a800")
    return job_services.submit_job(team=team, pool=pool, user=team.researcher, spec=spec).pk


def test_a_team_lead_who_reads_chinese_meets_no_english_sentence(
    cluster_sync, cluster_team, live_server, chinese_page, shoot
):
    page = chinese_page
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    lead = UserFactory(username=f"{cluster_team.slug}-lead", language="zh-hans")
    lead.set_password(PASSWORD)
    lead.save()
    MembershipFactory(team=cluster_team, user=lead, role=Role.LEAD)
    wait_for(lambda: Pool.objects.get(slug="reserved-a800").nodes.exists(), what="the synced nodes")
    running = submit_directly(cluster_team, name="lead-train", gpus=6, runs_for="10m")
    wait_for(lambda: Job.objects.get(pk=running).state == JobState.RUNNING, timeout=45, what="the job to run")
    queued = submit_directly(cluster_team, name="lead-waits", gpus=4, runs_for="10s")
    wait_until_kueue_holds_back(queued)
    alert = raise_queue_wait_alert(cluster_team, queued)
    month, starts_at = close_last_month(cluster_team)
    base = live_server.url
    log_in(page, base, lead.username)
    data = data_words(cluster_team, lead.username, cluster_team.researcher.username)
    for path in [f"/teams/{cluster_team.slug}/", f"/billing/teams/{cluster_team.slug}/", "/alerts/", "/pools/"]:
        page.goto(f"{base}{path}")
        assert_no_english(page, data, path)
    page.goto(f"{base}/jobs/pending/")
    expect(page.locator("#pending-table")).to_contain_text("等待团队在 Reserved A800")
    assert_no_english(page, data, "the pending view")
    walk_alert(page, base, alert, data, "lead-waits")

    page.goto(f"{base}/billing/teams/{cluster_team.slug}/invoices/{month:%Y-%m}/")
    start = f"{starts_at.year}年{starts_at.month}月{starts_at.day}日 08:30"  # stored as ISO text, read in Chinese
    pool = Pool.objects.get(slug="reserved-a800").name
    expect(page.locator("main")).to_contain_text(f"预留 {pool} 的 4 块 GPU，{start} → {this_month(month)} 00:00")
    expect(page.locator("main")).to_contain_text(f"{month.year}年{month.month}月")
    assert_no_english(page, data, "a closed month's invoice", word_by_word=True)
    shoot("zh-05-closed-invoice")
    page.goto(f"{base}/teams/{cluster_team.slug}/")
    expect(page.get_by_role("heading", name="用量与配额、预留对比")).to_be_visible()
    shoot("zh-03-team-page")
