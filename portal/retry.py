"""The one retry policy: how often, how long and on which errors anything in the portal is tried again.

- **Tasks** retry with Celery's own `autoretry_for`, on transient errors only, with exponential backoff and jitter
  (`RetryingTask`: `BACKOFF_SECONDS` doubling up to `BACKOFF_MAX_SECONDS`). A verdict (400, 403, 404, 422, a
  refused webhook) fails at once. Each task names its transient errors and its budget:
  - `ClusterTask`: `cluster.errors.TransientClusterError` (unreachable, timeout, 429, 5xx), up to
    `settings.CLUSTER_TASK_MAX_RETRIES`; inside it every cluster call is tried once
    (`cluster.errors.single_attempt`), so retries are never stacked inside retries;
  - `monitoring.send_alert_notification`: a webhook that did not take the notification, 6 attempts;
  - `jobs.send_job_mail` and `monitoring.email_alert`: a mail server unreachable or refusing
    (`portal.mail.MAIL_ERRORS`), 8 attempts.
- **Periodic sweeps** (the namespace sweep, the reservation-boundary check, the volume refresh) do not retry: their
  next run is their retry, and their cluster calls are tried once (`single_attempt`).
- **Cluster calls outside any task** (a web request, the sync process, a command) are tried up to
  `settings.KUBE_CALL_ATTEMPTS` times by `cluster.errors.with_retries` (tenacity), with the same backoff function —
  but never inside a database transaction: a service that calls the cluster inside its transaction (saving a secret)
  tries once and tells the user, who is the retry.
- **A transaction PostgreSQL aborted** to break a deadlock or a serialization conflict (SQLSTATE 40P01, 40001) is
  run again whole by `retry_on_conflict` (tenacity), only when it is the outermost one (inside a caller's transaction
  the error goes to the caller), a few times, after a short random pause taken outside any transaction.
- The outbox dispatcher and the watches do not retry work: they wait for their peer (the broker, the apiserver) to
  come back, with a capped backoff, and then carry on from where they were.
"""

import functools
import logging
import random

import tenacity
from celery import Task
from django.db import OperationalError, connection

log = logging.getLogger(__name__)

BACKOFF_SECONDS = 2
BACKOFF_MAX_SECONDS = 300
RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})
CONFLICT_ATTEMPTS = 4


class RetryingTask(Task):
    """A task retried by Celery on the errors it lists in `autoretry_for`, with exponential backoff and jitter."""

    abstract = True
    acks_late = True
    retry_backoff = BACKOFF_SECONDS
    retry_backoff_max = BACKOFF_MAX_SECONDS
    retry_jitter = True


class ClusterTask(RetryingTask):
    """A task that calls the cluster: each cluster call is tried once (`cluster.errors.single_attempt`), and a
    transient failure (unreachable, timeout, 429, 5xx) retries the whole task, up to `CLUSTER_TASK_MAX_RETRIES`; a
    verdict (400, 403, 404, 422) fails at once. When the task gives up, `gave_up(error, *args)` is called so the
    task can leave its object in a state that says why (a job Failed with the reason after a verdict)."""

    abstract = True

    @property
    def autoretry_for(self):
        from cluster.errors import TransientClusterError

        return (TransientClusterError,)

    @property
    def max_retries(self) -> int:
        from django.conf import settings

        return settings.CLUSTER_TASK_MAX_RETRIES

    def __call__(self, *args, **kwargs):
        from cluster.errors import single_attempt

        with single_attempt():
            return super().__call__(*args, **kwargs)

    def on_failure(self, exc, task_id, args, kwargs, einfo):
        self.gave_up(exc, *args, **kwargs)

    def gave_up(self, error: BaseException, *args, **kwargs) -> None:
        """Called once the task has failed for good; subclasses record why."""


def is_retryable_conflict(error: BaseException) -> bool:
    cause = error.__cause__ if isinstance(error, OperationalError) else None
    return getattr(cause, "pgcode", None) in RETRYABLE_SQLSTATES


def retry_on_conflict(function=None, *, attempts: int = CONFLICT_ATTEMPTS):
    """Run the decorated function (which opens its own transaction) again when PostgreSQL aborted it for a deadlock
    or a serialization conflict, after a short random pause, up to `attempts` times in all. Inside a caller's
    transaction it runs once (nothing of an aborted inner transaction could be run again alone)."""

    def decorate(wrapped):
        def conflict(error: BaseException) -> bool:
            return (
                isinstance(error, OperationalError) and not connection.in_atomic_block and is_retryable_conflict(error)
            )

        def again(state: tenacity.RetryCallState) -> None:
            log.warning(
                "%s: %s; running it again (attempt %d)",
                wrapped.__qualname__,
                state.outcome.exception(),
                state.attempt_number + 1,
            )

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(attempts),
            wait=lambda state: random.uniform(0.05, 0.2) * state.attempt_number,  # noqa: S311 - jitter
            retry=tenacity.retry_if_exception(conflict),
            before_sleep=again,
            reraise=True,
        )

        @functools.wraps(wrapped)
        def run(*args, **kwargs):
            return retrying(wrapped, *args, **kwargs)

        return run

    return decorate(function) if function is not None else decorate
