"""The whole path with the chart's least privilege, on the real local cluster: the web process (gunicorn), the two
Celery workers (the cluster's queue in a thread pool, and the others) and beat, the outbox dispatcher and the sync
run as the chart runs them (its commands, its environment), each with a kubeconfig that holds only its
ServiceAccount's TokenRequest token, the RBAC objects applied from `helm template`. Everything is asked of the web
process's API, as people would:

team created → namespace, its RoleBindings, ResourceQuota, LimitRange, Kueue queues; a job submitted → Admitted →
Running → Succeeded → metered; a cancel; a secret saved and rotated; a volume claimed; a lender's reclaim.

A right the code needs and the chart lacks shows up as a 403: the step waits in vain, and every process's log is
searched for refusals at the end, so the chart and the code cannot drift apart. The test process itself holds a
token without any right, and its Celery tasks go to the real worker: after the demo pools are loaded (seed_demo, with
the admin's kubeconfig as in every cluster test), nothing here acts with the admin's kubeconfig but the reads that
check the cluster's state and the clean-up."""

import base64
import re
import uuid
from datetime import timedelta

import pytest
import requests
from django.conf import settings
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.db import connection
from django.utils import timezone
from kubernetes import client as kube

from billing.models import DailyUsage, UsageInterval
from cluster import client
from jobs.choices import JobState
from jobs.models import Job
from portal.celery import app as celery_app
from portal.models import User
from portal.services import create_token
from teamdata.models import TeamVolume
from tests.clusterkit import KWOK_DELAY, delete_team_namespace, diagnose, wait_for
from tests.deploy.chartkit import Release
from tests.deploy.processkit import PortalProcess, chart_command, chart_environment, wait_for_http
from tests.faultkit import celery_broker, free_port

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

POOL = "reserved-a800"
IMAGE = "registry.example.com/research/train:1.0"
CHART_VALUES = (
    "config.allowedHosts={127.0.0.1}",
    "config.baseUrl=http://127.0.0.1",
    "config.trustedProxyCount=0",
    "config.volumeStorageClasses={local-data}",
    # The local cluster's fake nodes read how long a pod "runs" from this annotation (devcluster/README.md).
    f"extraEnv.RESERVOIR_POD_ANNOTATION_ALLOWLIST={KWOK_DELAY}",
    # The test talks plain HTTP on loopback while the portal believes the (absent) proxy's X-Forwarded-Proto: its
    # session cookie must come back without TLS.
    "extraEnv.DJANGO_SECURE_COOKIES=false",
)
PROCESSES = ("web", "worker", "cluster-worker", "beat", "outbox", "sync")


class Portal:
    """The running processes and the API as its users see it."""

    def __init__(self, release: Release, processes: dict[str, PortalProcess], base_url: str, admin_api):
        self.release = release
        self.processes = processes
        self.base_url = base_url
        self.admin = admin_api  # an ApiClient of the cluster's admin: reads that check, and the clean-up
        self.namespaces: list[str] = []

    def api(self, user: User):
        _token, secret = create_token(owner=user, name=f"test-{uuid.uuid4().hex[:6]}")
        session = requests.Session()
        # Production settings behind a TLS-terminating proxy (the chart's secureProxySslHeader).
        session.headers.update({"Authorization": f"Bearer {secret}", "X-Forwarded-Proto": "https"})

        def call(method: str, path: str, body: dict | None = None, expect: int = 200) -> dict:
            answer = session.request(method, self.base_url + path, json=body, timeout=60)
            assert answer.status_code == expect, (
                f"{method} {path}: {answer.status_code} {answer.text[:800]}\nweb:\n{self.processes['web'].tail()}"
            )
            return answer.json() if answer.content else {}

        return call

    def pages(self, user: User) -> requests.Session:
        """A browser's session of `user`, signed in through the log-in form."""
        session = requests.Session()
        session.headers.update({"X-Forwarded-Proto": "https", "Referer": f"https://{self.base_url[7:]}/login/"})
        form = session.get(f"{self.base_url}/login/", timeout=30)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        answer = session.post(
            f"{self.base_url}/login/",
            {"username": user.username, "password": user.test_password, "csrfmiddlewaretoken": token},
            allow_redirects=False,
            timeout=30,
        )
        assert answer.status_code == 302, answer.text[:500]
        return session

    def report(self) -> str:
        """Each process's refusals by the API server first (what the chart lacks), then its log's tail."""
        return "\n".join(
            f"  {name} (pid {p.pid}, alive {p.alive()}), refused: {p.refusals()[-5:]}\n{p.tail(25)}"
            for name, p in self.processes.items()
        )

    def diagnose(self, job_id: int) -> str:
        """clusterkit's diagnosis of a job, read with the admin's kubeconfig (this process's token has no right)."""
        saved = settings.KUBECONFIG
        settings.KUBECONFIG = str(self.release.admin)
        client.reset()
        try:
            return diagnose(job_id)
        finally:
            settings.KUBECONFIG = saved
            client.reset()


@pytest.fixture
def portal(portal_cluster, tmp_path, throwaway_redis):
    release = Release(admin=portal_cluster.kubeconfig_path, directory=tmp_path, set_values=CHART_VALUES)
    release.create_namespace()
    release.install_rbac()
    database = connection.settings_dict
    throwaway_redis.start()  # the processes' broker and cache: a Redis of this test's own, empty
    redis_url = throwaway_redis.url
    secrets = {
        "DATABASE_URL": (
            f"postgres://{database['USER']}:{database['PASSWORD']}@{database['HOST']}:{database['PORT']}/"
            f"{database['NAME']}"
        ),
        "REDIS_URL": redis_url,
        "DJANGO_SECRET_KEY": f"least-privilege-{uuid.uuid4().hex}{uuid.uuid4().hex}",
    }
    port = free_port()
    processes = {}
    for name in PROCESSES:
        command = chart_command(release, name, port=port if name == "web" else None)
        if name == "beat":
            command[command.index("/tmp/celerybeat-schedule")] = str(tmp_path / "celerybeat-schedule")
        env = chart_environment(release, name, secrets)
        # In a pod the token is mounted and found by the in-cluster configuration; here a kubeconfig holds it. The
        # worker, beat and outbox get no token in the chart: here one without any right (the outbox's account), so
        # a call to the API from any of them would be refused, and fail the test.
        mounted = release.deployment(name)["spec"]["template"]["spec"]["automountServiceAccountToken"]
        env["KUBECONFIG"] = str(release.kubeconfig(release.account_of(name) if mounted else "outbox"))
        processes[name] = PortalProcess(name, command, env, tmp_path / f"{name}.log")
    # The test process: a token without rights, and tasks sent to the real worker rather than run here.
    settings.KUBECONFIG = str(release.kubeconfig("outbox"))
    client.reset()
    admin_api = portal_cluster.api_client()
    running = Portal(release, processes, f"http://127.0.0.1:{port}", admin_api)
    try:
        for process in processes.values():
            process.start()
        wait_for_http(f"{running.base_url}/readyz", process=processes["web"])
        with celery_broker(redis_url):
            yield running
    finally:
        for process in processes.values():
            process.stop()
        client.reset()
        for namespace in running.namespaces:
            delete_team_namespace(namespace)
        admin_api.close()
        release.uninstall()


def _user(username: str, **extra) -> User:
    """A user whose password the web process (production settings) can check: hashed with Django's default
    PBKDF2, not the test settings' fast MD5."""
    password = uuid.uuid4().hex
    hasher = PBKDF2PasswordHasher()
    user = User.objects.create_user(username=username, password=None, **extra)
    user.password = hasher.encode(password, hasher.salt())
    user.save(update_fields=["password"])
    user.test_password = password
    return user


def _state(job_id: int) -> str:
    return Job.objects.get(pk=job_id).state


def _wait_state(portal: Portal, job_id: int, state: str, timeout: float = 120) -> Job:
    try:
        wait_for(lambda: _state(job_id) == state, timeout=timeout, what=f"job #{job_id} to be {state}")
    except AssertionError as error:
        raise AssertionError(f"{error}\n{portal.diagnose(job_id)}\nprocesses:\n{portal.report()}") from None
    return Job.objects.get(pk=job_id)


def _submit(api, team: str, name: str, gpus: int, runs_for: str) -> int:
    body = {
        "team": team,
        "pool": POOL,
        "name": name,
        "image": IMAGE,
        "gpus": gpus,
        "command": ["python", "train.py"],
        "pod_annotations": {KWOK_DELAY: runs_for},
    }
    return api("POST", "/api/v1/jobs/", body, expect=201)["id"]


def test_the_whole_path_runs_with_each_process_holding_only_the_charts_rights(portal):
    core, batch = kube.CoreV1Api(portal.admin), kube.BatchV1Api(portal.admin)
    custom, rbac = kube.CustomObjectsApi(portal.admin), kube.RbacAuthorizationV1Api(portal.admin)
    tag = uuid.uuid4().hex[:5]
    admin = portal.api(_user(f"lp-admin-{tag}", is_platform_admin=True, is_staff=True))
    people = {}
    for team in ("lender", "borrower"):
        slug = f"lp-{tag}-{team}"
        # An admin creates the team and its members, hands the lender a reservation and both a quota.
        admin("POST", "/api/v1/teams/", {"slug": slug, "name": f"LP {team} {tag}"}, expect=201)
        portal.namespaces.append(f"{settings.TEAM_NAMESPACE_PREFIX}{slug}")
        for role in ("lead", "researcher"):
            user = _user(f"{slug}-{role}")
            admin("POST", "/api/v1/memberships/", {"team": slug, "user": user.username, "role": role}, expect=201)
            people[(team, role)] = portal.api(user)
            people[(team, role, "user")] = user
    lender, borrower = f"lp-{tag}-lender", f"lp-{tag}-borrower"
    now = timezone.now()
    for reservation in admin("GET", f"/api/v1/reservations/?pool={POOL}")["results"]:
        admin("POST", f"/api/v1/reservations/{reservation['id']}/lending/", {"lending": "none"})
    span = {"starts_at": (now - timedelta(minutes=1)).isoformat(), "ends_at": (now + timedelta(days=30)).isoformat()}
    admin("POST", "/api/v1/reservations/", {"team": lender, "pool": POOL, "gpus": 4, **span}, expect=201)
    # the reservation made the lender's quota (4 GPUs): setting it again changes nothing
    admin("POST", "/api/v1/quotas/", {"team": lender, "pool": POOL, "max_gpus": 4}, expect=200)
    admin("POST", "/api/v1/quotas/", {"team": borrower, "pool": POOL, "max_gpus": 8}, expect=201)

    # The worker made each namespace with its RoleBindings, quota, limits and Kueue queues.
    for slug in (lender, borrower):
        namespace = f"{settings.TEAM_NAMESPACE_PREFIX}{slug}"

        def projected(namespace=namespace, slug=slug):
            try:
                core.read_namespace(namespace)
                quotas = core.list_namespaced_resource_quota(namespace).items
                limits = core.list_namespaced_limit_range(namespace).items
                bindings = {b.role_ref.name for b in rbac.list_namespaced_role_binding(namespace).items}
                queues = custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "localqueues")
                custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", f"team-{slug}")
            except kube.ApiException as error:
                if error.status == 404:
                    return False
                raise
            teams = {f"{portal.release.fullname}-team-{kind}" for kind in ("worker", "web", "sync")}
            return quotas and limits and bindings == teams and queues["items"]

        try:
            wait_for(projected, timeout=120, interval=1, what=f"{namespace} with its objects")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{portal.report()}") from None

    # A job: Queued, Admitted, Running, Succeeded, then metered.
    researcher = people[("lender", "researcher")]
    short = _submit(researcher, lender, "short", 1, "4s")
    _wait_state(portal, short, JobState.SUCCEEDED)
    done = Job.objects.get(pk=short)
    seen = set(done.events.values_list("to_state", flat=True))
    assert {JobState.QUEUED, JobState.RUNNING, JobState.SUCCEEDED} <= seen, seen
    # Admitted by Kueue (Admitted, or Pending: admitted with its pod not yet placed) in the lender's pool.
    assert seen & {JobState.ADMITTED, JobState.PENDING} and done.admitted_pool.slug == POOL, (seen, done.admitted_pool)
    wait_for(
        lambda: UsageInterval.objects.filter(job_id=short, ended_at__isnull=False, gpus=1).exists(),
        what="the short job's usage interval, closed by the sync",
    )
    celery_app.send_task("billing.refresh_usage")
    wait_for(
        lambda: DailyUsage.objects.filter(team__slug=lender).exists(), timeout=60, what="the day metered by the worker"
    )

    # The job's page reads its pod's log and the cluster's events through the web process, in the team namespace.
    # (The local cluster's fake nodes keep no logs: the log tail says so, never that it was forbidden.)
    browser = portal.pages(people[("lender", "researcher", "user")])
    logs = browser.get(f"{portal.base_url}/jobs/{short}/logs/", timeout=30)
    events = browser.get(f"{portal.base_url}/jobs/{short}/events/", timeout=30)
    assert logs.status_code == 200 and events.status_code == 200
    assert "forbidden" not in logs.text.lower(), logs.text[-1500:]
    assert "Cluster events are not available" not in events.text, events.text[-1500:]

    # A cancel: the Job leaves the cluster.
    long = _submit(researcher, lender, "long", 1, "10m")
    job = _wait_state(portal, long, JobState.RUNNING)
    researcher("POST", f"/api/v1/jobs/{long}/cancel/", {}, expect=202)
    _wait_state(portal, long, JobState.CANCELLED)

    def job_gone():
        try:
            batch.read_namespaced_job(job.job_name, job.team.namespace)
        except kube.ApiException as error:
            return error.status == 404
        return False

    wait_for(job_gone, what="the cancelled Job deleted from the cluster")

    # A secret saved and rotated by the lead, through the web process.
    lead = people[("lender", "lead")]
    namespace = job.team.namespace
    first, second = uuid.uuid4().hex, uuid.uuid4().hex
    made = lead(
        "POST",
        "/api/v1/secrets/",
        {"team": lender, "name": "hf", "kind": "opaque", "values": {"token": first}},
        expect=201,
    )

    def secret_value():
        return base64.b64decode(core.read_namespaced_secret("hf", namespace).data["token"]).decode()

    assert secret_value() == first
    lead("POST", f"/api/v1/secrets/{made['id']}/rotate/", {"values": {"token": second}})
    assert secret_value() == second

    # A volume claimed by the worker.
    volume = lead(
        "POST",
        "/api/v1/volumes/",
        {"team": lender, "name": "data", "source": "created", "size_gib": 1, "storage_class": "local-data"},
        expect=201,
    )
    wait_for(
        lambda: any(c.metadata.name == "data" for c in core.list_namespaced_persistent_volume_claim(namespace).items),
        what="the volume's claim",
    )
    wait_for(lambda: TeamVolume.objects.get(pk=volume["id"]).checked_at is not None, what="the claim's state recorded")

    # A lender's reclaim: the borrower runs on the lender's idle GPUs until the lender submits.
    borrowing = _submit(people[("borrower", "researcher")], borrower, "borrowing", 8, "10m")
    _wait_state(portal, borrowing, JobState.RUNNING)
    own = _submit(researcher, lender, "own", 4, "10m")
    _wait_state(portal, own, JobState.RUNNING)
    requeued = _wait_state(portal, borrowing, JobState.QUEUED)
    assert requeued.preemptions == 1
    assert "reclaimed GPUs of its reservation" in requeued.events.filter(to_state=JobState.QUEUED).last().message
    for job_id, api in ((borrowing, people[("borrower", "researcher")]), (own, researcher)):
        api("POST", f"/api/v1/jobs/{job_id}/cancel/", {}, expect=202)
        _wait_state(portal, job_id, JobState.CANCELLED)

    # No process was refused anything on the way, and all are still up.
    refused = {name: process.refusals() for name, process in portal.processes.items() if process.refusals()}
    assert refused == {}, f"refused by the API server: {refused}"
    assert all(process.alive() for process in portal.processes.values()), portal.report()
