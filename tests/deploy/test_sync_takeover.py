"""Exactly one sync at a time, with two real `manage.py sync_cluster` processes run as the chart runs them (its
command, its environment, the sync ServiceAccount's token only): the first holds the Lease and writes, the second
waits without watching anything; the first is killed (SIGKILL: it releases nothing) while a job runs; the second
takes over within the lease + 2 s and finishes the story. Every job's usage interval is recorded exactly once, with
the length the local cluster ran its pod: none doubled, none lost across the takeover."""

import re
import time
import uuid

import pytest
from django.conf import settings
from django.db import connection
from kubernetes import client as kube

from billing.models import UsageInterval
from jobs.choices import JobState
from pools.models import Pool
from tests.clusterkit import integration_team, set_quota, wait_for, wait_state
from tests.deploy.chartkit import Release
from tests.deploy.processkit import PortalProcess, chart_command, chart_environment
from tests.jobs.test_kueue_admission import submit

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

LEASE_SECONDS = 6
RETRY_SECONDS = 2  # cluster/lease.py's default


@pytest.fixture
def release(portal_cluster, tmp_path, settings):
    installed = Release(
        admin=portal_cluster.kubeconfig_path, directory=tmp_path, set_values=(f"sync.leaseSeconds={LEASE_SECONDS}",)
    )
    installed.create_namespace()
    installed.install_rbac()
    # The team namespace below is made by this process (with the admin's kubeconfig, as in the other cluster
    # tests); the sync's rights in it come from the RoleBinding the namespace reconciler makes from this setting.
    settings.TEAM_ROLE_BINDINGS = chart_environment(installed, "sync", _secrets())[
        "RESERVOIR_TEAM_ROLE_BINDINGS"
    ].split(",")
    yield installed
    installed.uninstall()


@pytest.fixture
def team(release):
    yield from integration_team("Takeover")


def _secrets() -> dict[str, str]:
    database = connection.settings_dict
    return {
        "DATABASE_URL": f"postgres://{database['USER']}:{database['PASSWORD']}@{database['HOST']}:{database['PORT']}/"
        f"{database['NAME']}",
        "REDIS_URL": settings.REDIS_URL,
        "DJANGO_SECRET_KEY": f"takeover-{uuid.uuid4().hex}{uuid.uuid4().hex}",
    }


def _sync(release: Release, name: str, directory) -> PortalProcess:
    env = chart_environment(release, "sync", _secrets())
    env["KUBECONFIG"] = str(release.kubeconfig("sync"))
    return PortalProcess(name, chart_command(release, "sync"), env, directory / f"{name}.log")


def _holder(release: Release, api) -> str:
    try:
        lease = kube.CoordinationV1Api(api).read_namespaced_lease(f"{release.fullname}-sync", release.namespace)
    except kube.ApiException as error:
        if error.status == 404:
            return ""
        raise
    return lease.spec.holder_identity or ""


def _holds(process: PortalProcess, holder: str) -> bool:
    return f"_{process.pid}_" in holder


def test_a_second_sync_takes_over_within_the_lease_when_the_first_is_killed(release, team, portal_cluster, tmp_path):
    api = portal_cluster.api_client()
    first, second = _sync(release, "sync-1", tmp_path), _sync(release, "sync-2", tmp_path)
    pool = Pool.objects.get(slug="reserved-a800")
    set_quota(team, pool, 2)
    try:
        first.start()
        wait_for(lambda: _holds(first, _holder(release, api)), what="the first sync to hold the Lease")
        second.start()
        before = wait_state(submit(team, "reserved-a800", gpus=1, runs_for="3s", name="before"), JobState.SUCCEEDED)
        # The second waits and watches nothing while the first holds the Lease.
        assert _holds(first, _holder(release, api))
        assert "waiting for the Lease" in second.log() and "cluster.watch" not in second.log(), second.tail()

        across = wait_state(submit(team, "reserved-a800", gpus=1, runs_for="20s", name="across"), JobState.RUNNING)
        first.kill()
        killed = time.monotonic()
        wait_for(
            lambda: _holds(second, _holder(release, api)),
            timeout=LEASE_SECONDS + 4 * RETRY_SECONDS,
            interval=0.1,
            what="the second sync to take the Lease over",
        )
        takeover = time.monotonic() - killed
        print(f"takeover after SIGKILL: {takeover:.1f}s (lease {LEASE_SECONDS}s, retry {RETRY_SECONDS}s)")
        assert takeover <= LEASE_SECONDS + RETRY_SECONDS + 1, takeover

        across = wait_state(across, JobState.SUCCEEDED, timeout=90)
        after = wait_state(submit(team, "reserved-a800", gpus=1, runs_for="3s", name="after"), JobState.SUCCEEDED)
        for job, seconds in ((before, 3), (across, 20), (after, 3)):
            wait_for(
                lambda job=job: UsageInterval.objects.filter(job=job, ended_at__isnull=False).exists(),
                what=f"{job.name}'s interval closed",
            )
            intervals = list(UsageInterval.objects.filter(job=job))
            assert len(intervals) == 1, (job.name, intervals)  # not doubled, not lost
            [interval] = intervals
            length = (interval.ended_at - interval.started_at).total_seconds()
            assert interval.gpus == 1 and seconds - 1 <= length <= seconds + 3, (job.name, length)
        refused = [line for p in (first, second) for line in p.refusals()]
        assert refused == [], refused
        assert re.search(r"holding the Lease", second.log()), second.tail()
    finally:
        first.stop()
        second.stop()
        api.close()
