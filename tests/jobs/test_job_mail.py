"""E-mail about a job's transitions (issue 28, part 5): what the researcher relies on is one mail per transition they
asked for — not two when the sync replays what it saw, a task is retried or the outbox delivers a message twice, and
not none when the mail server was down for a while. The transitions come through the sync's real routing
(`reconcile.sync.ClusterSync`, fed what a watch hands over); the outbox publishes after each commit and the task runs
eagerly (portal/settings/test.py); mail goes to Django's locmem backend (`mailoutbox`) unless a test says otherwise.
"""

import smtplib
import socket
from datetime import timedelta

import pytest
import time_machine
from django.core import mail
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.mail.backends.base import BaseEmailBackend
from django.db import transaction
from django.utils import timezone

from jobs import services
from jobs.choices import JobState
from jobs.models import Job, JobNotification
from jobs.specs import JobSpec
from jobs.tasks import MAIL_ATTEMPTS, resend_job_mails, send_job_mail
from pools import services as pool_services
from portal import outbox
from portal.models import Membership, OutboxMessage
from reconcile.sync import ClusterSync
from tests.factories import JobFactory, PoolFactory
from tests.jobs.test_submission import workload
from tests.jobs.test_sync_routing import k8s_job, node, pod

pytestmark = pytest.mark.django_db

FINISHED = "2026-03-02T11:00:00Z"


@pytest.fixture
def world(team, researcher):
    """A pool with one node, and the sync that has seen it."""
    pool = PoolFactory(slug="a800")
    sync = ClusterSync()
    sync.relist_nodes([node("gpu-a", dict(pool.node_selector))], "10")
    return sync, pool


@pytest.fixture
def submitted(world, team, researcher):
    """submitted(notify) -> a job of rita's, created in the cluster, that Kueue has just admitted."""

    def make(notify=("start", "end", "fail"), user=None):
        sync, pool = world
        job = JobFactory(
            team=team,
            pool=pool,
            submitted_by=user or researcher,
            notify=list(notify),
            cluster_created_at=timezone.now() - timedelta(minutes=5),
        )
        sync.workload_event("ADDED", admitted(job))
        job.refresh_from_db()
        assert job.state == JobState.ADMITTED
        return job

    return make


@pytest.fixture
def retrying(monkeypatch):
    """Eager tasks retry as a worker's would (one after the other, without the countdown) instead of raising Celery's
    Retry at the first failure; a task that gives up answers its error as its result."""
    monkeypatch.setitem(send_job_mail.app.conf, "task_eager_propagates", False)


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    """Runs what each commit asks for (the outbox's publication, hence the mail task) as a real commit would."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


def admitted(job, **kwargs):
    """Kueue's Workload of `job` (admitted unless said otherwise), one per job."""
    return workload(job, uid=f"wl-{job.pk}", admitted=kwargs.pop("admitted", True), **kwargs)


def running(job):
    return pod(f"{job.pk}-0", job.team.namespace, node_name="gpu-a", job_id=job.pk, owner=job.job_name)


def finished(job, *, failed=False):
    if not failed:
        return k8s_job(job.team.namespace, job.job_name, job.pk, complete_at=FINISHED)
    from cluster.facts import job_facts

    condition = {
        "type": "Failed",
        "status": "True",
        "reason": "BackoffLimitExceeded",
        "message": "Job has reached the specified backoff limit",
        "lastTransitionTime": FINISHED,
    }
    metadata = {"namespace": job.team.namespace, "name": job.job_name, "labels": {"reservoir.io/job-id": str(job.pk)}}
    return job_facts({"metadata": metadata, "status": {"conditions": [condition]}})


def mails_about(job):
    return [message for message in mail.outbox if f"(#{job.pk})" in message.subject]


def test_a_job_that_runs_sends_one_start_mail_however_often_the_sync_replays_it(
    world, submitted, committed, researcher, mailoutbox
):
    sync, _pool = world
    job = submitted()
    with committed():
        sync.pod_event("ADDED", running(job))
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    [message] = mailoutbox
    assert message.to == ["rita@example.com"]
    assert message.subject == f"Reservoir: job {job.name} (#{job.pk}) is running"
    assert f"/jobs/{job.pk}/" in message.body and "running on gpu-a" in message.body

    with committed():
        sync.pod_event("MODIFIED", running(job))  # the watch again
        sync.relist_pods([running(job)], "21")  # a relist
        ClusterSync().relist_pods([running(job)], "22")  # another replica took the lease over and replays
        sync.relist_workloads([admitted(job)], "23")
    assert len(mailoutbox) == 1
    assert OutboxMessage.objects.filter(task="jobs.send_job_mail").count() == 1


def test_a_preempted_job_that_runs_again_is_not_mailed_again(world, submitted, committed, mailoutbox):
    sync, _pool = world
    job = submitted()
    with committed():
        sync.pod_event("ADDED", running(job))
        preempted = {"reason": "Preempted", "message": "Preempted to accommodate a workload", "status": "True"}
        sync.workload_event("MODIFIED", admitted(job, admitted=False, evicted=preempted))
        job.refresh_from_db()
        assert job.state == JobState.QUEUED
        sync.workload_event("MODIFIED", admitted(job))
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.preemptions == 1
    assert len(mails_about(job)) == 1


def test_success_and_failure_are_mailed_once_each_with_the_reason(world, submitted, committed, mailoutbox):
    sync, _pool = world
    succeeds, fails = submitted(), submitted()
    with committed():
        for job in (succeeds, fails):
            sync.pod_event("ADDED", running(job))
        sync.job_event("MODIFIED", finished(succeeds))
        sync.job_event("MODIFIED", finished(fails, failed=True))
        sync.job_event("MODIFIED", finished(fails, failed=True))  # replayed
        sync.relist_jobs([finished(succeeds), finished(fails, failed=True)], "30")
    assert [m.subject for m in mails_about(succeeds)] == [
        f"Reservoir: job {succeeds.name} (#{succeeds.pk}) is running",
        f"Reservoir: job {succeeds.name} (#{succeeds.pk}) succeeded",
    ]
    assert [m.subject for m in mails_about(fails)] == [
        f"Reservoir: job {fails.name} (#{fails.pk}) is running",
        f"Reservoir: job {fails.name} (#{fails.pk}) failed",
    ]
    failure = mails_about(fails)[1].body
    failed_at = fails.events.get(to_state=JobState.FAILED).at
    assert f"failed at {failed_at:%Y-%m-%d %H:%M:%S} UTC." in failure
    assert "BackoffLimitExceeded: Job has reached the specified backoff limit" in failure


def test_only_the_transitions_asked_for_are_mailed(world, submitted, committed, mailoutbox):
    sync, _pool = world
    quiet, failures_only = submitted(notify=[]), submitted(notify=["fail"])
    with committed():
        for job in (quiet, failures_only):
            sync.pod_event("ADDED", running(job))
            sync.job_event("MODIFIED", finished(job))
    assert Job.objects.filter(state=JobState.SUCCEEDED).count() == 2
    assert mailoutbox == [] and not JobNotification.objects.exists()


def test_a_user_without_an_address_gets_no_mail(world, submitted, committed, researcher, lead, mailoutbox):
    sync, _pool = world
    researcher.email = ""
    researcher.save()
    job = submitted()
    with committed():
        sync.pod_event("ADDED", running(job))
    assert mailoutbox == [] and not JobNotification.objects.exists()

    # An address removed after the transition was written: nothing is sent, and nothing is marked sent.
    lead_job = submitted(user=lead)
    with committed():  # the task runs once this block is over, as after a commit
        sync.pod_event("ADDED", running(lead_job))
        lead.email = ""
        lead.save()
    notification = JobNotification.objects.get(job=lead_job)
    assert mailoutbox == [] and notification.sent_at is None and notification.last_error == "no e-mail address"
    assert notification.dropped_at is not None

    # The address back hours later: the dropped mail is not sent late (a stale "is running" after the job ended).
    lead.email = "leo@example.com"
    lead.save()
    with time_machine.travel(timezone.now() + timedelta(hours=3)):
        assert resend_job_mails.apply().get() == 0
        assert send_job_mail.apply(args=[notification.pk]).get() == "dropped"
    assert mailoutbox == []


def test_a_submitter_no_longer_in_the_team_gets_no_mail_about_its_jobs(world, submitted, committed, team, mailoutbox):
    """Their group gone at the identity provider between the transition and the send: the job is no longer theirs to
    see (its page answers 404), so no mail tells them of it, now or later."""
    sync, _pool = world
    job = submitted()
    with committed():  # the task runs once this block is over, as after a commit
        sync.pod_event("ADDED", running(job))
        Membership.objects.filter(team=team, user=job.submitted_by).delete()
    notification = JobNotification.objects.get(job=job)
    assert mailoutbox == [] and notification.sent_at is None
    assert notification.dropped_at is not None and notification.last_error == "no longer in the job's team"
    with committed():
        sync.job_event("MODIFIED", finished(job))
    assert mailoutbox == [] and JobNotification.objects.get(job=job, kind="end").dropped_at is not None
    with time_machine.travel(timezone.now() + timedelta(minutes=11)):
        assert resend_job_mails.apply().get() == 0
    assert mailoutbox == []


def test_a_start_asked_for_once_the_job_ran_is_not_mailed_at_its_restart(
    world, submitted, committed, researcher, mailoutbox
):
    """The first start is the one mailed: ticking "start" while the job runs asks for no mail when Kueue preempts it
    and it runs again (the job's page says it counts for the transitions still to come; its start has been)."""
    sync, _pool = world
    job = submitted(notify=[])
    with committed():
        sync.pod_event("ADDED", running(job))
        services.set_job_notify(job=job, user=researcher, notify=["start", "end"])
        preempted = {"reason": "Preempted", "message": "Preempted to accommodate a workload", "status": "True"}
        sync.workload_event("MODIFIED", admitted(job, admitted=False, evicted=preempted))
        sync.workload_event("MODIFIED", admitted(job))
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.preemptions == 1
    assert mailoutbox == [] and not JobNotification.objects.filter(job=job).exists()
    with committed():
        sync.job_event("MODIFIED", finished(job))
    assert [m.subject for m in mails_about(job)] == [f"Reservoir: job {job.name} (#{job.pk}) succeeded"]


def test_a_rolled_back_transition_leaves_no_mail_and_no_message(world, submitted, committed, mailoutbox):
    sync, _pool = world
    job = submitted()
    with committed(), pytest.raises(RuntimeError), transaction.atomic():
        sync.pod_event("ADDED", running(job))
        raise RuntimeError("the sync's transaction failed after the transition")
    assert mailoutbox == [] and not JobNotification.objects.exists()
    assert not OutboxMessage.objects.filter(task="jobs.send_job_mail").exists()


def test_a_retried_task_and_a_message_delivered_twice_send_one_mail(world, submitted, committed, mailoutbox):
    sync, _pool = world
    job = submitted()
    with committed():
        sync.pod_event("ADDED", running(job))
    notification = JobNotification.objects.get(job=job)
    assert send_job_mail.apply(args=[notification.pk]).get() == "sent already"  # Redis redelivered it
    OutboxMessage.objects.filter(task="jobs.send_job_mail").update(sent_at=None)  # published again by the outbox
    assert outbox.dispatch_pending() == 1
    assert len(mailoutbox) == 1
    notification.refresh_from_db()
    assert notification.sent_at is not None and notification.attempts == 1


class FlakyMailServer(BaseEmailBackend):
    """A mail server that drops the connection the first `failures` times, then takes the mail."""

    failures = 0

    def send_messages(self, messages):
        if FlakyMailServer.failures > 0:
            FlakyMailServer.failures -= 1
            raise smtplib.SMTPServerDisconnected("Connection unexpectedly closed")
        mail.outbox.extend(messages)
        return len(messages)


def test_a_mail_server_that_fails_then_recovers_gets_the_mail_once(
    world, submitted, committed, retrying, settings, mailoutbox, monkeypatch
):
    sync, _pool = world
    settings.EMAIL_BACKEND = f"{__name__}.FlakyMailServer"
    monkeypatch.setattr(FlakyMailServer, "failures", 2)
    job = submitted()
    with committed():
        sync.pod_event("ADDED", running(job))  # the task fails twice, retries, then sends
    notification = JobNotification.objects.get(job=job)
    assert len(mailoutbox) == 1
    assert notification.sent_at is not None and notification.attempts == 3 and notification.last_error == ""


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_mail_server_down_longer_than_the_retries_gets_the_mail_once_it_is_back(
    world, submitted, retrying, settings, mailoutbox
):
    sync, _pool = world
    job = submitted()
    sync.pod_event("ADDED", running(job))
    notification = JobNotification.objects.get(job=job)
    locmem = settings.EMAIL_BACKEND
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"  # Django's real SMTP client
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_USE_TLS = "127.0.0.1", _closed_port(), False
    gave_up = send_job_mail.apply(args=[notification.pk])
    assert gave_up.failed() and isinstance(gave_up.result, ConnectionRefusedError)
    notification.refresh_from_db()
    assert notification.sent_at is None and notification.attempts == MAIL_ATTEMPTS
    assert notification.last_error.startswith("ConnectionRefusedError")

    settings.EMAIL_BACKEND = locmem  # the mail server is back
    assert resend_job_mails.apply().get() == 0  # tried a moment ago: not yet
    with time_machine.travel(timezone.now() + timedelta(minutes=11)):
        assert resend_job_mails.apply().get() == 1
        assert resend_job_mails.apply().get() == 0
    assert len(mailoutbox) == 1
    notification.refresh_from_db()
    assert notification.sent_at is not None and notification.attempts == MAIL_ATTEMPTS + 1
    with time_machine.travel(timezone.now() + timedelta(days=2)):
        assert resend_job_mails.apply().get() == 0


def test_a_mail_nobody_could_send_is_given_up_after_a_day(world, submitted, mailoutbox):
    sync, _pool = world
    job = submitted()
    with transaction.atomic():
        sync.pod_event("ADDED", running(job))  # committed, but the outbox never published it (Redis lost it)
    with time_machine.travel(timezone.now() + timedelta(minutes=11)):
        assert resend_job_mails.apply().get() == 1
    assert len(mailoutbox) == 1
    later = submitted()
    sync.pod_event("ADDED", running(later))
    with time_machine.travel(timezone.now() + timedelta(days=1, minutes=1)):
        assert resend_job_mails.apply().get() == 0
    assert len(mailoutbox) == 1


def test_the_mail_is_in_the_submitters_language(
    world, submitted, committed, researcher, mailoutbox, compiled_translations
):
    sync, _pool = world
    researcher.language = "zh-hans"
    researcher.save()
    job = submitted()
    with committed():
        sync.pod_event("ADDED", running(job))
        sync.job_event("MODIFIED", finished(job, failed=True))
    started, failed = mailoutbox
    assert started.subject == f"Reservoir：作业 {job.name}（#{job.pk}）已开始运行"
    assert failed.subject == f"Reservoir：作业 {job.name}（#{job.pk}）失败"
    at = job.events.get(to_state=JobState.FAILED).at
    assert f"{at.year}年{at.month}月{at.day}日 {at:%H:%M:%S}" in failed.body and "集群" in failed.body
    assert "Your job" not in started.body + failed.body


def test_the_submitters_choice_goes_with_the_job_and_changes_until_it_ends(team, researcher, lead, world):
    _sync, pool = world
    pool_services.set_quota(team=team, pool=pool, max_gpus=8)
    researcher.notify_default = ["fail", "start"]
    researcher.save()
    spec = JobSpec(name="train", image="registry.example.com/llm/train:1.0", gpus=1)
    job = services.submit_job(team=team, pool=pool, user=researcher, spec=spec)
    assert job.notify == ["start", "fail"]  # the default, in its one order
    assert services.submit_job(team=team, pool=pool, user=researcher, spec=spec, notify=[]).notify == []
    assert services.set_job_notify(job=job, user=researcher, notify=["end", "end"]).notify == ["end"]

    with pytest.raises(PermissionDenied):
        services.set_job_notify(job=job, user=lead, notify=[])
    with pytest.raises(ValidationError) as unknown:
        services.set_job_notify(job=job, user=researcher, notify=["sometimes"])
    assert "notify" in unknown.value.message_dict
    job = services.cancel_job(job=job, user=researcher)
    with pytest.raises(ValidationError) as final:
        services.set_job_notify(job=job, user=researcher, notify=["start"])
    assert final.value.message_dict == {"notify": [f"Job #{job.pk} is already Cancelled."]}
    again = services.resubmit_job(job=job, user=researcher)
    assert again.notify == ["end"]  # the submitter's choice for the job, not their default
    assert services.resubmit_job(job=job, user=lead).notify == []  # another submitter: their own default
