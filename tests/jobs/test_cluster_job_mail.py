"""The job e-mails on the real path (issue 28, part 5): a job submitted through the portal, admitted by Kueue, run by
the scheduler on a KWOK node and finished by the Job controller, seen by a sync running in threads of this process.
Its submitter, who asked for a mail when it starts and when it ends, gets exactly those two, also after a second
sync has listed everything again (what a restart or a lease takeover replays). Tasks run eagerly after each commit,
as a worker would; mail goes to Django's locmem backend."""

import pytest
from django.utils import timezone

from jobs import services
from jobs.choices import JobState
from jobs.models import JobNotification, SyncState
from jobs.specs import JobSpec
from pools.models import Pool
from portal.models import OutboxMessage
from tests.clusterkit import KWOK_DELAY, set_quota, wait_for, wait_state

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]
RELISTED = ("pods", "jobs", "workloads")


def test_a_real_job_sends_one_start_and_one_end_mail_also_when_the_sync_replays(cluster_sync, cluster_team, mailoutbox):
    pool = Pool.objects.get(slug="reserved-a800")
    set_quota(cluster_team, pool, 8)
    spec = JobSpec(
        name="mailed",
        image="registry.example.com/research/train:1.0",
        gpus=1,
        command=["python", "train.py"],
        pod_annotations={KWOK_DELAY: "4s"},
    )
    job = services.submit_job(
        team=cluster_team, pool=pool, user=cluster_team.researcher, spec=spec, notify=["start", "end"]
    )
    wait_state(job, JobState.RUNNING)
    wait_for(lambda: len(mailoutbox) == 1, what="the start mail")
    wait_state(job, JobState.SUCCEEDED)
    wait_for(lambda: len(mailoutbox) == 2, what="the end mail")

    cluster_sync.stop()
    restarted = timezone.now()
    cluster_sync.start(resume=False)  # a new sync lists everything again
    wait_for(
        lambda: SyncState.objects.filter(resource__in=RELISTED, listed_at__gt=restarted).count() == len(RELISTED),
        what="the new sync's lists of pods, Jobs and Workloads",
    )
    assert [message.subject for message in mailoutbox] == [
        f"Reservoir: job mailed (#{job.pk}) is running",
        f"Reservoir: job mailed (#{job.pk}) succeeded",
    ]
    assert mailoutbox[0].to == [cluster_team.researcher.email]
    sent = JobNotification.objects.filter(job=job, sent_at__isnull=False)
    assert sorted(sent.values_list("kind", flat=True)) == ["end", "start"]
    assert OutboxMessage.objects.filter(task="jobs.send_job_mail").count() == 2
