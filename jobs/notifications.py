"""E-mail to a job's submitter when it starts running, succeeds or fails, as they asked (`Job.notify`, by default
their `User.notify_default`): one mail per job and kind, whatever is retried or replayed.

Idea: a claim row, then a send. When a transition the submitter asked about is written (`transition_written`, called
in the transaction of the service that writes it), a `JobNotification` row (job, kind) is inserted — unique — and
only when this insert made it is `jobs.send_job_mail` asked for through the outbox, in the same transaction: a
rolled-back transition leaves neither, a committed one both (the outbox publishes it even if Redis is down then). A
replayed transition (the sync seeing the same events again after a restart or a lease takeover; a preempted job
that runs again) finds the row and asks for nothing more: the first start is the one mailed, and a start asked for
only once the job had run (the box ticked while it ran, or an address added since) is not mailed at its restart.

The task (`send`) claims the row with SELECT ... FOR UPDATE in its own transaction, sends, and marks the row sent in
that same transaction. A second delivery (a retried task, a message the outbox published twice, Redis handing it to
another worker) waits on the lock and then finds the row sent. A mail server that fails raises: the transaction
rolls back, the row stays unsent (the attempt and its error are noted apart) and the task retries with backoff
(portal/retry.py), so a row is never marked sent without a send. The one window left is any SMTP client's: the
server took the mail and the commit after it failed; the retry then sends it again — twice at worst, never none.

A mail server down for longer than the task's retries, or retries lost with Redis, leave rows unsent: the beat task
`jobs.resend_job_mails` (every minute) sends again each unsent row nobody has tried for `RESEND_AFTER`, for a day
(`GIVE_UP_AFTER`); the claim makes that safe whatever else is still trying.

Who gets it is decided again when it is sent: a submitter with no address then, or no longer in the job's team (their
group gone at the identity provider: they may no longer see the job, nor change what it asks for), gets nothing, and
the row is dropped (`dropped_at`, why in `last_error`) rather than tried again: an address added hours later does not
bring a stale "is running" after the "succeeded", and a former member is not told of the team's jobs.
"""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _

from portal import outbox
from portal.choices import JobMail
from portal.mail import MAIL_ERRORS, can_be_mailed, mail_user

from .choices import MAIL_FOR_STATE, JobState
from .models import Job, JobEvent, JobNotification


def transition_written(job: Job, event: JobEvent) -> JobNotification | None:
    """`event`, a transition of `job` just saved in the caller's transaction: when its submitter asked to be mailed
    about it (and mail can reach them), claim its mail and ask for the task once. The row, or None."""
    kind = MAIL_FOR_STATE.get(event.to_state)
    if kind is None or kind not in job.notify or not can_be_mailed(job.submitted_by):
        return None
    earlier_runs = job.events.filter(to_state=JobState.RUNNING).exclude(pk=event.pk)
    if event.to_state == JobState.RUNNING and earlier_runs.exists():
        return None  # it ran before (the first start is the one mailed): a restart after a preemption
    notification, created = JobNotification.objects.get_or_create(job=job, kind=kind, defaults={"event": event})
    if created:
        outbox.send("jobs.send_job_mail", notification.pk)
    return notification


def send(notification_id: int) -> str:
    """Send one job e-mail, at most once (module docstring): "sent", "sent already", "dropped" (nothing is sent, ever:
    the submitter has no address now, or is no longer in the job's team) or "gone". Raises one of `MAIL_ERRORS` when
    the mail server failed: the row stays unsent and the attempt is noted."""
    try:
        with transaction.atomic():
            notification = (
                JobNotification.objects.select_for_update(of=("self",))  # the job's own row stays free for the sync
                .select_related("job__team", "job__submitted_by", "event")
                .filter(pk=notification_id)
                .first()
            )
            if notification is None:
                return "gone"
            if notification.sent_at is not None:
                return "sent already"
            if notification.dropped_at is not None:
                return "dropped"
            notification.tried_at = timezone.now()
            job, submitter = notification.job, notification.job.submitted_by
            if not Job.objects.visible_to(submitter).filter(pk=job.pk).exists():
                return _drop(notification, "no longer in the job's team")
            if not mail_user(submitter, lambda: compose(notification)):
                return _drop(notification, "no e-mail address")
            notification.sent_at = timezone.now()
            notification.attempts += 1
            notification.last_error = ""
            notification.save(update_fields=["sent_at", "tried_at", "attempts", "last_error"])
            return "sent"
    except MAIL_ERRORS as error:
        JobNotification.objects.filter(pk=notification_id, sent_at__isnull=True).update(
            attempts=F("attempts") + 1, tried_at=timezone.now(), last_error=f"{type(error).__name__}: {error}"[:2000]
        )
        raise


def _drop(notification: JobNotification, why: str) -> str:
    notification.dropped_at = notification.tried_at
    notification.last_error = why
    notification.save(update_fields=["tried_at", "dropped_at", "last_error"])
    return "dropped"


# Longer than one task's retries take (jobs.tasks.MAIL_ATTEMPTS), so the sweep does not start a second round beside
# a task that is still retrying (and if it did, the claim would keep the mail single).
RESEND_AFTER = timedelta(minutes=10)
GIVE_UP_AFTER = timedelta(days=1)
RESEND_BATCH = 500


def due_again(*, now=None) -> list[int]:
    """Unsent e-mails whose sending stopped: made between `GIVE_UP_AFTER` and `RESEND_AFTER` ago and not tried for
    `RESEND_AFTER` (their task gave up or was lost with Redis; not dropped), oldest first."""
    now = now or timezone.now()
    quiet = now - RESEND_AFTER
    due = JobNotification.objects.filter(
        Q(tried_at__isnull=True) | Q(tried_at__lt=quiet),
        sent_at__isnull=True,
        dropped_at__isnull=True,
        created_at__gte=now - GIVE_UP_AFTER,
        created_at__lt=quiet,
    )
    return list(due.order_by("created_at", "id").values_list("pk", flat=True)[:RESEND_BATCH])


def sent(job: Job) -> list[JobNotification]:
    """The e-mails about `job` sent so far, oldest first (the job page lists them)."""
    return list(JobNotification.objects.filter(job=job, sent_at__isnull=False).order_by("sent_at", "id"))


def _link(path: str) -> str:
    return f"{settings.PORTAL_BASE_URL.rstrip('/')}{path}"


def compose(notification: JobNotification) -> tuple[str, str]:
    """The mail's subject and body, in the active language."""
    job, event = notification.job, notification.event
    at = event.at if event is not None else notification.created_at
    words = {
        "name": job.name,
        "id": job.pk,
        "team": job.team.name,
        "at": f"{date_format(timezone.localtime(at), 'DATETIME_FORMAT')} {timezone.get_current_timezone_name()}",
    }
    if notification.kind == JobMail.START:
        subject = _("Reservoir: job %(name)s (#%(id)d) is running") % words
        said = _("Your job %(name)s (#%(id)d) of team %(team)s started running at %(at)s.") % words
    elif notification.kind == JobMail.END:
        subject = _("Reservoir: job %(name)s (#%(id)d) succeeded") % words
        said = _("Your job %(name)s (#%(id)d) of team %(team)s succeeded at %(at)s.") % words
    else:
        subject = _("Reservoir: job %(name)s (#%(id)d) failed") % words
        said = _("Your job %(name)s (#%(id)d) of team %(team)s failed at %(at)s.") % words
    lines = [said]
    if event is not None and event.in_words:
        lines.append(event.in_words)
    lines.append(_("The job: %(link)s") % {"link": _link(reverse("jobs:job_detail", args=[job.pk]))})
    lines.append(
        _(
            "You get this e-mail because the job asks for it: its page can change that until it finishes, and what "
            "new jobs ask for is in your preferences: %(link)s"
        )
        % {"link": _link(reverse("portal:preferences"))}
    )
    return subject, "\n\n".join(lines)
