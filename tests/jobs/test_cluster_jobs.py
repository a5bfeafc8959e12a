"""The portal and the real cluster: submission, placement, queueing, cancel, spill-after and sync.

Runs against the local control plane (real apiserver, scheduler and Job controller, Kueue; KWOK plays the GPU
nodes). Celery runs tasks eagerly in the test process after commit, as a worker would. Kueue admits against quota,
not free nodes: to see the scheduler hold an admitted job, the training nodes are filled with pods that are no
portal job's (as an inference Deployment would), which Kueue does not manage.
"""

import threading
import time
from datetime import timedelta

import pytest

from billing.models import UsageInterval
from cluster import client, resources
from jobs import services
from jobs.choices import JobState, Placement
from jobs.models import Job, Pod
from jobs.specs import JobSpec
from jobs.spill import spill_due_jobs
from pools.models import Pool
from reconcile.tasks import submit_job_to_cluster
from tests.clusterkit import KWOK_DELAY, job_state, set_quota, wait_for, wait_state

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def submit(team, pool_slug, *, gpus, runs_for="10m", name=None, **kwargs):
    pool = Pool.objects.get(slug=pool_slug)
    spec = JobSpec(
        name=name or f"job-{gpus}g",
        image="registry.example.com/research/train:1.0",
        gpus=gpus,
        command=["python", "train.py"],
        pod_annotations={KWOK_DELAY: runs_for},
        **kwargs,
    )
    return services.submit_job(team=team, pool=pool, user=team.researcher, spec=spec)


def fill_training_nodes(namespace: str) -> None:
    """Two 8-GPU pods outside the portal (no queue label: Kueue leaves them alone) take both training nodes."""
    core = client.core()
    for index in range(2):
        core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": f"outside-{index}", "annotations": {KWOK_DELAY: "30m"}},
                "spec": {
                    "nodeSelector": {"node-role": "training"},
                    "tolerations": [{"key": "workload", "operator": "Equal", "value": "training"}],
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.example.com/inference/serve:1",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                },
            },
        )
    wait_for(
        lambda: all(pod.status.phase == "Running" for pod in core.list_namespaced_pod(namespace).items),
        what="the outside pods to run",
    )


def fill_training_quota(team) -> Job:
    """The team's quota in training (4 GPUs, all borrowed: nobody reserved them) taken by one job."""
    set_quota(team, Pool.objects.get(slug="training"), 4)
    return wait_state(submit(team, "training", gpus=4, name="filler"), JobState.RUNNING)


def test_a_strict_job_lands_in_its_pool_and_its_interval_is_recorded(cluster_sync, cluster_team):
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    job = submit(cluster_team, "reserved-a800", gpus=4, runs_for="2s")
    job = wait_state(job, JobState.SUCCEEDED)
    assert job.node_name.startswith("reserved-a800-")
    states = [e.to_state for e in job.events.exclude(to_state="")]
    assert states[0] == JobState.QUEUED  # until Kueue admitted it
    assert JobState.RUNNING in states and states[-1] == JobState.SUCCEEDED
    assert job.admitted_pool.slug == "reserved-a800"
    interval = wait_for(
        lambda: UsageInterval.objects.filter(job=job, ended_at__isnull=False).first(), what="the closed usage interval"
    )
    assert (interval.gpus, interval.pool.slug, interval.team_id) == (4, "reserved-a800", cluster_team.pk)
    assert interval.ended_at - interval.started_at >= timedelta(seconds=2)


def test_a_job_whose_team_queue_is_missing_gets_the_queue_before_its_job(cluster_sync, cluster_team):
    """A Job made before its team's LocalQueue was never admitted (issue 31: Kueue v0.17.0 skips a Job whose namespace
    it has not seen and never looks again). The submit task makes the Kueue projection first when the queue is not
    in the cluster: here it was deleted behind the portal's back, and nothing else puts it back during the test."""
    from cluster import kueue_objects
    from cluster.labels import LOCAL_QUEUE_NAME

    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    kueue_objects.delete_kueue_object("LocalQueue", LOCAL_QUEUE_NAME, cluster_team.namespace)
    wait_for(
        lambda: kueue_objects.read_kueue_object("LocalQueue", LOCAL_QUEUE_NAME, cluster_team.namespace) is None,
        what="the LocalQueue to be gone",
    )
    job = submit(cluster_team, "reserved-a800", gpus=2, runs_for="1s")
    wait_state(job, JobState.SUCCEEDED)
    assert kueue_objects.read_kueue_object("LocalQueue", LOCAL_QUEUE_NAME, cluster_team.namespace) is not None


def test_a_queue_deleted_while_the_worker_remembers_it_costs_no_job(cluster_sync, cluster_team, monkeypatch):
    """The submit task takes a team's queue seen a moment ago (old enough that Kueue knows its namespace) as there,
    without reading it again. When it was deleted meanwhile, the Job is made with its label all the same: Kueue makes
    its Workload, which waits, and admits it once the projection's reconcile (the beat's, every 60 s; here called)
    has made the queue again."""
    from cluster import kueue_objects
    from cluster.labels import LOCAL_QUEUE_NAME
    from reconcile import jobs as reconcile_jobs
    from tests.clusterkit import project_now

    # Kueue has seen the namespace once the queue is older than this (15 s in production; shortened to keep the test
    # short, the queue is waited for until it is that old).
    monkeypatch.setattr(reconcile_jobs, "FRESH_QUEUE_SECONDS", 3)
    monkeypatch.setattr(reconcile_jobs, "QUEUE_MEMO_SECONDS", 600.0)
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    time.sleep(3.5)
    reads = []
    real_read = kueue_objects.read_kueue_object
    monkeypatch.setattr(
        kueue_objects, "read_kueue_object", lambda kind, *args: reads.append(kind) or real_read(kind, *args)
    )
    wait_state(submit(cluster_team, "reserved-a800", gpus=2, runs_for="1s", name="first"), JobState.SUCCEEDED)
    assert reads.count("LocalQueue") == 1

    kueue_objects.delete_kueue_object("LocalQueue", LOCAL_QUEUE_NAME, cluster_team.namespace)
    wait_for(
        lambda: real_read("LocalQueue", LOCAL_QUEUE_NAME, cluster_team.namespace) is None,
        what="the LocalQueue to be gone",
    )
    job = submit(cluster_team, "reserved-a800", gpus=2, runs_for="1s", name="second")
    assert reads.count("LocalQueue") == 1  # remembered: not read again
    job.refresh_from_db()
    assert job.cluster_created_at is not None
    wait_for(lambda: kueue_objects.job_has_workload(cluster_team.namespace, job.job_name), what="the Job's Workload")
    time.sleep(2)
    assert job_state(job.pk) == JobState.QUEUED  # its queue is missing: Kueue holds it

    project_now()
    wait_state(job, JobState.SUCCEEDED)


def test_an_admitted_job_on_full_nodes_stays_pending_with_the_schedulers_reason(
    cluster_sync, cluster_team, kube_namespace
):
    set_quota(cluster_team, Pool.objects.get(slug="training"), 4)
    fill_training_nodes(kube_namespace)
    job = submit(cluster_team, "training", gpus=4, name="waits")
    job = wait_state(job, JobState.PENDING)
    assert job.admitted_pool.slug == "training"  # Kueue admitted it: the quota had room, the nodes had not
    job = wait_for(
        lambda: Job.objects.filter(pk=job.pk, pending_reason__contains="lack enough free GPUs").first(),
        what="the scheduler's reason in words",
    )
    pod = Pod.objects.get(job=job)
    assert not pod.scheduled and pod.node_name == ""
    assert "Insufficient nvidia.com/gpu" in pod.pending_reason


def test_a_soft_job_spills_to_the_elastic_pool_and_is_attributed_there(cluster_sync, cluster_team):
    fill_training_quota(cluster_team)
    set_quota(cluster_team, Pool.objects.get(slug="elastic"), 4)
    job = submit(cluster_team, "training", gpus=4, name="spills", placement=Placement.SOFT)
    job = wait_state(job, JobState.RUNNING)
    assert job.node_name == "gpu-node-20"
    interval = wait_for(lambda: UsageInterval.objects.filter(job=job).first(), what="the usage interval")
    assert interval.pool.slug == "elastic"


def test_spill_after_moves_a_job_kueue_has_not_admitted_to_soft(cluster_sync, cluster_team):
    fill_training_quota(cluster_team)
    set_quota(cluster_team, Pool.objects.get(slug="elastic"), 4)
    job = submit(cluster_team, "training", gpus=4, name="mixed", placement=Placement.SPILL_AFTER, spill_after_minutes=1)
    wait_for(
        lambda: "Waiting for its team's quota" in Job.objects.get(pk=job.pk).pending_reason,
        what="Kueue's reason for holding it",
    )
    assert spill_due_jobs() == []  # not yet: it has waited less than a minute
    # Let the minute pass (the wait is what is simulated; the cluster side below is real).
    Job.objects.filter(pk=job.pk).update(
        cluster_created_at=Job.objects.get(pk=job.pk).cluster_created_at - timedelta(minutes=2)
    )
    assert spill_due_jobs() == [job.pk]
    job = wait_state(job, JobState.RUNNING)
    assert job.node_name == "gpu-node-20"
    assert job.spilled
    assert job.events.filter(message__contains="moved to soft placement").exists()
    k8s_job = resources.read_job(cluster_team.namespace, job.job_name)
    terms = k8s_job.spec.template.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    assert len(terms.node_selector_terms) == 2
    assert k8s_job.spec.suspend is False


def test_queued_jobs_wait_for_quota_and_are_admitted_by_themselves(cluster_sync, cluster_team):
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    first = wait_state(submit(cluster_team, "reserved-a800", gpus=8, name="first", runs_for="20s"), JobState.RUNNING)
    second = submit(cluster_team, "reserved-a800", gpus=8, name="second", runs_for="1s")
    wait_for(lambda: Job.objects.get(pk=second.pk).pending_reason, what="Kueue's reason for holding it")
    assert Job.objects.get(pk=second.pk).state == JobState.QUEUED
    assert services.queue_position(Job.objects.get(pk=second.pk)) == 1
    wait_state(first, JobState.SUCCEEDED)
    second = wait_state(second, JobState.SUCCEEDED)
    admitted = second.events.filter(to_state__in=[JobState.ADMITTED, JobState.RUNNING]).first()
    assert admitted.at >= Job.objects.get(pk=first.pk).finished_at


def test_cancel_deletes_the_job_and_its_pods(cluster_sync, cluster_team):
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    job = wait_state(submit(cluster_team, "reserved-a800", gpus=2, name="cancel-me"), JobState.RUNNING)
    services.cancel_job(job=job, user=cluster_team.researcher)
    assert job_state(job.pk) == JobState.CANCELLED
    wait_for(lambda: resources.read_job(cluster_team.namespace, job.job_name) is None, what="the Job to go")
    core = client.core()
    wait_for(
        lambda: (
            not core.list_namespaced_pod(cluster_team.namespace, label_selector=f"reservoir.io/job-id={job.pk}").items
        ),
        what="the pods to go",
    )
    interval = wait_for(
        lambda: UsageInterval.objects.filter(job=job, ended_at__isnull=False).first(), what="the interval to close"
    )
    assert interval.gpus == 2
    assert job_state(job.pk) == JobState.CANCELLED  # the pod's deletion did not move it


def test_a_sync_restart_mid_stream_loses_and_double_counts_nothing(cluster_sync, cluster_team):
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    long = wait_state(submit(cluster_team, "reserved-a800", gpus=1, name="long", runs_for="10m"), JobState.RUNNING)
    # The short jobs must still run when the sync stops: long enough for a loaded machine to get there.
    short = [submit(cluster_team, "reserved-a800", gpus=1, name=f"short-{i}", runs_for="15s") for i in range(2)]
    for job in short:
        wait_state(job, JobState.RUNNING)
    cluster_sync.stop()
    # While sync is down the short jobs finish in the cluster.
    batch = client.batch()
    wait_for(
        lambda: all(
            (batch.read_namespaced_job(j.job_name, cluster_team.namespace).status.succeeded or 0) == 1 for j in short
        ),
        what="the short jobs to complete in the cluster",
    )
    assert all(job_state(j.pk) == JobState.RUNNING for j in short)  # nobody watched
    cluster_sync.start(resume=True)
    for job in short:
        wait_state(job, JobState.SUCCEEDED)
    assert job_state(long.pk) == JobState.RUNNING
    closed = wait_for(
        lambda: (
            list(UsageInterval.objects.filter(job__in=short, ended_at__isnull=False))
            if UsageInterval.objects.filter(job__in=short, ended_at__isnull=False).count() == 2
            else None
        ),
        what="both short intervals closed",
    )
    core = client.core()
    for interval in closed:
        pod = core.read_namespaced_pod(interval.pod_name, cluster_team.namespace)
        finished = pod.status.container_statuses[0].state.terminated.finished_at
        assert interval.ended_at == finished  # the cluster's time, not when sync looked
    before = sorted(UsageInterval.objects.filter(team=cluster_team).values_list("pod_uid", "started_at", "ended_at"))
    assert len(before) == 3
    # A full relist (as after 410 Gone) rewrites the same rows: nothing counted twice.
    cluster_sync.stop()
    cluster_sync.start(resume=False)
    wait_for(lambda: True, timeout=1)
    after = sorted(UsageInterval.objects.filter(team=cluster_team).values_list("pod_uid", "started_at", "ended_at"))
    assert after == before


def test_an_unreachable_apiserver_is_retried_then_the_job_waits_and_is_sent_again_once_it_is_back(
    portal_cluster, cluster_team, settings, tmp_path, monkeypatch
):
    """An outage longer than the task's retries fails no submission (PRODUCT.md, promises under failure): the job
    stays Queued saying why, and convergence sends it again once the apiserver answers, on the real cluster."""
    from django.utils import timezone

    from reconcile.jobs import missing_job_ids

    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    broken = tmp_path / "kubeconfig"
    broken.write_text(
        portal_cluster.kubeconfig_path.read_text().replace(f"127.0.0.1:{_port(portal_cluster)}", "127.0.0.1:9")
    )
    settings.KUBECONFIG = str(broken)
    settings.CLUSTER_TASK_MAX_RETRIES = 2
    client.reset()
    sent = []
    monkeypatch.setattr("reconcile.tasks.submit_job_to_cluster.delay", sent.append)
    job = submit(cluster_team, "reserved-a800", gpus=1, name="unlucky")
    assert sent == [job.pk]
    # As a worker would: the task retries itself (no countdown here) until its budget is spent. Eager retries
    # re-raise Retry to the caller when eager exceptions propagate; a worker reschedules instead.
    monkeypatch.setitem(submit_job_to_cluster.app.conf, "task_eager_propagates", False)
    submit_job_to_cluster.apply(args=[job.pk])
    job = Job.objects.get(pk=job.pk)
    assert job.state == JobState.QUEUED and job.cluster_created_at is None
    assert "unreachable" in job.last_error and "sent again" in job.last_error, job.last_error
    retries = job.events.filter(message__contains="retrying")
    assert retries.count() == 2  # attempts 1 and 2 were retried, attempt 3 gave up

    # The apiserver answers again: convergence finds the job (once its grace has passed) and its resend makes the Job.
    settings.KUBECONFIG = str(portal_cluster.kubeconfig_path)
    client.reset()
    assert job.pk in missing_job_ids(now=timezone.now() + timedelta(minutes=5))
    monkeypatch.setitem(submit_job_to_cluster.app.conf, "task_eager_propagates", True)
    assert submit_job_to_cluster.apply(args=[job.pk]).result == "created"
    assert Job.objects.get(pk=job.pk).cluster_created_at is not None
    assert _portal_jobs(cluster_team, job) == 1


def _port(kube_cluster) -> int:
    import re

    match = re.search(r"server: https://127\.0\.0\.1:(\d+)", kube_cluster.kubeconfig_path.read_text())
    return int(match.group(1))


def test_an_apiserver_restart_during_submission_ends_with_exactly_one_job(
    portal_cluster, cluster_team, settings, monkeypatch
):
    from devcluster.launcher import Cluster

    state_dir = portal_cluster.kubeconfig_path.parent
    if not (state_dir / "cluster.json").exists():
        pytest.fail(f"this test restarts the apiserver of a devcluster; {state_dir} is not one")
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    reconcile_now(cluster_team)
    sent = []
    monkeypatch.setattr("reconcile.tasks.submit_job_to_cluster.delay", sent.append)
    job = submit(cluster_team, "reserved-a800", gpus=1, name="through-restart")

    restart = threading.Thread(target=lambda: Cluster(state_dir).restart_component("kube-apiserver"))
    restart.start()
    outcome = run_like_a_worker(submit_job_to_cluster, job.pk)  # runs while the apiserver goes down and comes back
    restart.join(timeout=180)
    assert outcome in ("created", "already there")
    assert job_state(job.pk) == JobState.QUEUED  # no sync runs here: Kueue's verdict is not mirrored
    assert Job.objects.get(pk=job.pk).cluster_created_at is not None
    assert _portal_jobs(cluster_team, job) == 1

    # The worker dies after creating the Job but before recording it: the redelivered task finds it there.
    Job.objects.filter(pk=job.pk).update(cluster_created_at=None)
    assert submit_job_to_cluster.apply(args=[job.pk]).result == "already there"
    assert _portal_jobs(cluster_team, job) == 1
    assert submit_job_to_cluster.apply(args=[job.pk]).result == "nothing to do"


def run_like_a_worker(task, job_id: int, *, budget: float = 240.0) -> str:
    """Run `task` as a worker would: when it asks to be retried (a transient cluster failure), wait its backoff
    (1, 2, 4 ... 30 s here) and run it again as the next retry. (Eager Celery would re-run it at once.)"""
    from celery.exceptions import Retry

    deadline = time.monotonic() + budget
    retries = 0
    while True:
        try:
            return task.apply(args=[job_id], retries=retries, throw=True).result
        except Retry:
            if time.monotonic() > deadline:
                raise
            time.sleep(min(2**retries, 30))
            retries += 1


def _readyz() -> bool:
    try:
        client.api_client().call_api("/readyz", "GET", _preload_content=False, _request_timeout=2)
        return True
    except Exception:  # noqa: BLE001 - not up yet
        return False


def _portal_jobs(team, job) -> int:
    items = client.batch().list_namespaced_job(team.namespace, label_selector=f"reservoir.io/job-id={job.pk}").items
    return len(items)


def reconcile_now(team):
    from reconcile.namespaces import reconcile

    reconcile(team)


def test_rendered_manifests_are_accepted_by_the_real_apiserver(portal_cluster, cluster_team, settings):
    """Server-side dry run of every placement variant, with the seed-000 annotations on."""
    from jobs.manifests import render

    settings.KUBE_WRITE_EBCLOUD_ANNOTATIONS = True
    set_quota(cluster_team, Pool.objects.get(slug="training"), 8)
    reconcile_now(cluster_team)
    pool = Pool.objects.get(slug="training")
    for placement, extra in (
        (Placement.STRICT, {}),
        (Placement.SOFT, {}),
        (Placement.SPILL_AFTER, {"spill_after_minutes": 5}),
    ):
        job = Job.objects.create(
            team=cluster_team,
            pool=pool,
            submitted_by=cluster_team.researcher,
            name=f"dry-{placement.replace('_', '-')}",
            image="registry.example.com/a/b:1",
            gpus=2,
            placement=placement,
            anti_affinity_group="spread",
            **extra,
        )
        for soft in (False, True):
            manifest = render(job, soft=soft)
            created = client.batch().create_namespaced_job(cluster_team.namespace, manifest, dry_run="All")
            assert created.metadata.annotations["scheduling.eks.ebcloud.com/allow-soft-placement"] == str(soft).lower()
            assert created.spec.template.spec.priority_class_name == "reservoir-normal"


class PodEnds:
    """The finish time of every pod of a namespace, from the apiserver's own watch (a thread of the test): what
    the cluster says, kept even after the pod is gone."""

    def __init__(self, namespace: str):
        from kubernetes import watch

        self.ends: dict[str, object] = {}
        self.gone: set[str] = set()
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, args=(namespace,), daemon=True)
        self._thread.start()

    def _run(self, namespace: str) -> None:
        for event in self._watch.stream(client.core().list_namespaced_pod, namespace, timeout_seconds=300):
            pod = event["object"]
            for status in pod.status.container_statuses or []:
                if status.state.terminated is not None:
                    self.ends[pod.metadata.uid] = status.state.terminated.finished_at
            if event["type"] == "DELETED":
                self.gone.add(pod.metadata.uid)

    def stop(self) -> None:
        self._watch.stop()


def test_pods_that_end_and_go_while_the_sync_is_away_are_billed_to_their_own_end(cluster_sync, cluster_team):
    """While the sync is away (an apiserver restart: its new watch cache cannot serve the old resourceVersion, so
    the sync lists again), one job's pod completes and then the job is cancelled (its Job deleted), and another's
    Job is deleted by a cancel while its pod runs. Neither pod may be billed until the sync came back."""
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    ends = PodEnds(cluster_team.namespace)
    runs = wait_state(submit(cluster_team, "reserved-a800", gpus=2, name="runs", runs_for="10m"), JobState.RUNNING)
    # Long enough to be seen running, and still running when the sync stops, on a loaded machine too.
    completes = wait_state(
        submit(cluster_team, "reserved-a800", gpus=1, name="completes", runs_for="30s"), JobState.RUNNING
    )
    wait_for(lambda: UsageInterval.objects.filter(job__in=[completes, runs]).count() == 2, what="both intervals open")
    uids = dict(UsageInterval.objects.filter(job__in=[completes, runs]).values_list("job_id", "pod_uid"))
    cluster_sync.stop()
    batch = client.batch()
    wait_for(
        lambda: (batch.read_namespaced_job(completes.job_name, cluster_team.namespace).status.succeeded or 0) == 1,
        timeout=90,
        what="the short job to complete in the cluster",
    )
    # The portal has not seen it finish: the user may still cancel it, and cancels the other one too.
    for job in (completes, runs):
        services.cancel_job(job=Job.objects.get(pk=job.pk), user=cluster_team.researcher)
    wait_for(lambda: all(uid in ends.ends for uid in uids.values()), what="both pods to end in the cluster")
    time.sleep(3)  # the sync comes back well after the pods ended
    cluster_sync.start(resume=False)
    try:
        closed = wait_for(
            lambda: (
                dict(UsageInterval.objects.filter(pod_uid__in=uids.values()).values_list("pod_uid", "ended_at"))
                if UsageInterval.objects.filter(pod_uid__in=uids.values(), ended_at__isnull=False).count() == 2
                else None
            ),
            what="both intervals closed",
        )
        assert closed == {uid: ends.ends[uid] for uid in uids.values()}  # each pod's own end, not the relist's time
        # Once recorded, the pods are let go.
        wait_for(lambda: set(uids.values()) <= ends.gone, what="both pods to leave the cluster")
        assert job_state(completes.pk) == job_state(runs.pk) == JobState.CANCELLED
    finally:
        ends.stop()
