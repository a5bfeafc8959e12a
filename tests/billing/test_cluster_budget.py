"""The budget's hard stop on the real local cluster with the real Kueue: once a team's month has spent its cap on
the variable part, Kueue holds the team's jobs that would run on hourly-priced GPUs (the portal's AdmissionCheck,
answered by reconcile/budget.py) — a Job sent to the team's LocalQueue around the portal too — with the reason in
words on the Workload, while jobs inside the reservation are admitted and run; raising the cap or an admin's lift for
a job lets them in."""

import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import services as billing_services
from billing.budget import lift_budget, set_budget
from billing.models import Budget
from billing.periods import midnight, month_of
from cluster import client, kueue_objects
from cluster.kueue import BUDGET_CHECK_NAME, KUEUE_GROUP, KUEUE_VERSION
from cluster.labels import GPU_RESOURCE, LOCAL_QUEUE_NAME
from jobs import services
from jobs.choices import JobState
from jobs.models import Job
from jobs.specs import JobSpec
from pools import services as pool_services
from pools.models import Pool
from reconcile import budget
from tests.clusterkit import KWOK_DELAY, create_job_for_kueue, project_now, set_quota, wait_for, wait_state
from tests.factories import UsageIntervalFactory, UserFactory

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def quick_requeue(monkeypatch):
    """A held Workload asks again after 3 s instead of a minute, so that a test sees it let in."""
    monkeypatch.setattr(budget, "REQUEUE_AFTER_SECONDS", 3)


@pytest.fixture
def admin(db):
    return UserFactory(username="budget-admin", is_platform_admin=True, is_staff=True)


def submit(team, pool_slug, *, gpus, name):
    spec = JobSpec(
        name=name,
        image="registry.example.com/research/train:1.0",
        gpus=gpus,
        command=["python", "train.py"],
        pod_annotations={KWOK_DELAY: "10m"},
    )
    return services.submit_job(team=team, pool=Pool.objects.get(slug=pool_slug), user=team.researcher, spec=spec)


def raw_elastic_job(namespace: str, name: str) -> None:
    """A batch/v1 Job written straight to the team's LocalQueue, as kubectl would: the portal never saw it."""
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": LOCAL_QUEUE_NAME}},
        "spec": {
            "suspend": True,
            "template": {
                "metadata": {"annotations": {KWOK_DELAY: "10m"}},
                "spec": {
                    "restartPolicy": "Never",
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {"key": "node-role", "operator": "In", "values": ["elastic"]}
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.example.com/research/train:1.0",
                            "resources": {
                                "requests": {GPU_RESOURCE: "1", "cpu": "1", "memory": "4Gi"},
                                "limits": {GPU_RESOURCE: "1"},
                            },
                        }
                    ],
                },
            },
        },
    }
    create_job_for_kueue(namespace, manifest)


def workloads_of(namespace: str) -> list[dict]:
    return client.custom_objects().list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads")[
        "items"
    ]


def workload_owned_by(namespace: str, job_name: str) -> dict | None:
    for workload in workloads_of(namespace):
        if any(owner.get("name") == job_name for owner in workload["metadata"].get("ownerReferences") or []):
            return workload
    return None


def budget_check(workload: dict | None) -> dict:
    checks = (workload or {}).get("status", {}).get("admissionChecks") or []
    return next((check for check in checks if check["name"] == BUDGET_CHECK_NAME), {})


def admitted(workload: dict | None) -> bool:
    conditions = (workload or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)


def until(predicate, *, what: str, namespace: str, timeout: float = 60.0):
    """Run the controller's rounds (as beat does every few seconds) until `predicate` holds; on a timeout, fail with
    what the team's Workloads say."""

    def round_then_check():
        budget.check_budgets()
        return predicate()

    try:
        return wait_for(round_then_check, timeout=timeout, interval=0.5, what=what)
    except AssertionError as error:
        said = [
            f"{w['metadata']['name']} ({[o.get('name') for o in w['metadata'].get('ownerReferences') or []]}): "
            f"{(w.get('status') or {}).get('conditions')} checks {(w.get('status') or {}).get('admissionChecks')}"
            for w in workloads_of(namespace)
        ]
        raise AssertionError(f"{error}\n" + "\n".join(said)) from None


@pytest.fixture
def over_budget(cluster_sync, cluster_team, admin):
    """The team holds 2 GPUs of reserved-a800 for the month and may use 4 elastic GPUs; it already spilled this month
    (4 GPUs for up to half an hour at 1.10 per GPU-hour) past a cap of 0.01. In a month's first seconds there is
    not yet time for that spend to fit in the month: the fixture waits until 20 s have passed (4.4 per hour over
    19 s is 0.023, over the cap)."""
    now = timezone.now()
    month_start = midnight(month_of(now))
    if now - month_start < timedelta(seconds=20):
        time.sleep((month_start + timedelta(seconds=20) - now).total_seconds())
        now = timezone.now()
    team = cluster_team
    reserved, elastic = Pool.objects.get(slug="reserved-a800"), Pool.objects.get(slug="elastic")
    pool_services.create_reservation(
        team=team, pool=reserved, gpus=2, starts_at=midnight(month_of(now)), ends_at=now + timedelta(days=40)
    )
    set_quota(team, reserved, 2)
    set_quota(team, elastic, 4)
    UsageIntervalFactory(
        team=team,
        pool=elastic,
        gpus=4,
        started_at=max(now - timedelta(minutes=30), month_start),
        ended_at=now - timedelta(seconds=1),
    )
    billing_services.refresh_usage(now=now)
    set_budget(team=team, monthly_cap=Decimal("0.01"), user=admin, now=now)
    project_now()
    return team


def test_over_budget_the_elastic_jobs_wait_with_the_reason_and_the_reservation_keeps_running(
    over_budget, admin, quick_requeue
):
    team = over_budget
    queue = kueue_objects.read_kueue_object("ClusterQueue", f"team-{team.slug}")
    # Reached: every flavor waits for the check, the reserved ones too (a job inside the reservation passes at once).
    assert queue["spec"]["admissionChecksStrategy"]["admissionChecks"][0]["onFlavors"] == [
        "reserved-a800",
        "training",
        "elastic",
        "inference",
    ]
    assert kueue_objects.admission_check_active(kueue_objects.read_kueue_object("AdmissionCheck", BUDGET_CHECK_NAME))

    inside = submit(team, "reserved-a800", gpus=2, name="inside")
    spilling = submit(team, "elastic", gpus=1, name="spilling")
    raw_elastic_job(team.namespace, "around-the-portal")

    # The reservation's job runs: the check is not on its flavor.
    until(
        lambda: state_of(inside) == JobState.RUNNING,
        what="the job inside the reservation to run",
        namespace=team.namespace,
    )
    # Both elastic jobs are held, with the reason in words on their Workloads.
    for job_name in (spilling.job_name, "around-the-portal"):
        until(
            lambda job_name=job_name: (
                budget_check(workload_owned_by(team.namespace, job_name))
                .get("message", "")
                .startswith(f"budget for {month_of(timezone.now()):%B} reached: ¥")
            ),
            what=f"the budget's reason on {job_name}",
            namespace=team.namespace,
        )
        workload = workload_owned_by(team.namespace, job_name)
        assert not admitted(workload)
        assert budget_check(workload)["message"].endswith("of ¥0.01")
    assert state_of(spilling) == JobState.QUEUED
    # The portal's job says why in plain words, from the check's message the sync reads off its Workload.
    wait_for(
        lambda: "Held by the team's budget" in Job.objects.get(pk=spilling.pk).pending_reason,
        what="the held job's reason in the portal",
    )

    # An admin lifts the budget for the portal's job: it alone is let in.
    lift_budget(job=spilling, user=admin, now=timezone.now(), reason="deadline")
    until(
        lambda: admitted(workload_owned_by(team.namespace, spilling.job_name)),
        what="the lifted job admitted",
        namespace=team.namespace,
    )
    assert not admitted(workload_owned_by(team.namespace, "around-the-portal"))

    # The admin raises the cap: the job sent around the portal is let in too.
    set_budget(team=team, monthly_cap=Decimal("1000"), user=admin, now=timezone.now())
    until(
        lambda: admitted(workload_owned_by(team.namespace, "around-the-portal")),
        what="the held job admitted",
        namespace=team.namespace,
    )
    assert budget_check(workload_owned_by(team.namespace, "around-the-portal"))["state"] == "Ready"
    wait_state(spilling, JobState.RUNNING)


def test_removing_the_budget_takes_the_check_off_the_team_queue(over_budget, admin):
    team = over_budget
    set_budget(team=team, monthly_cap=None, user=admin, now=timezone.now())
    project_now()
    queue = kueue_objects.read_kueue_object("ClusterQueue", f"team-{team.slug}")
    assert "admissionChecksStrategy" not in queue["spec"]
    assert not Budget.objects.filter(team=team).exists()
    job = submit(team, "elastic", gpus=1, name="free-again")
    wait_state(job, JobState.RUNNING)


def state_of(job) -> str:
    from jobs.models import Job

    return Job.objects.get(pk=job.pk).state


def test_over_budget_a_job_beyond_the_reservation_waits_and_one_inside_it_runs(over_budget, quick_requeue):
    team = over_budget
    set_quota(team, Pool.objects.get(slug="reserved-a800"), 4)  # 2 reserved + 2 it may borrow: overage
    budget.check_budgets()  # the budget is reached: the projection checks the reserved flavor too
    queue = kueue_objects.read_kueue_object("ClusterQueue", f"team-{team.slug}")
    assert "reserved-a800" in queue["spec"]["admissionChecksStrategy"]["admissionChecks"][0]["onFlavors"]

    inside = submit(team, "reserved-a800", gpus=2, name="inside")
    until(lambda: state_of(inside) == JobState.RUNNING, what="the job inside the reservation", namespace=team.namespace)
    beyond = submit(team, "reserved-a800", gpus=2, name="beyond")
    until(
        lambda: (
            budget_check(workload_owned_by(team.namespace, beyond.job_name))
            .get("message", "")
            .startswith("budget for ")
        ),
        what="the overage job held with the budget's reason",
        namespace=team.namespace,
    )
    assert not admitted(workload_owned_by(team.namespace, beyond.job_name))
    assert state_of(inside) == JobState.RUNNING
