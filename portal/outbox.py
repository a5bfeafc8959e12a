"""Transactional outbox: a task asked for by a committed change is sent to Celery even if Redis is down then.

Idea: a service that changes rows and wants a task to run afterwards calls `outbox.send(task_name, *args)` inside its
transaction. That writes an `OutboxMessage` row in the same transaction, so the message exists exactly when the
change committed: a rollback leaves no message, a commit cannot lose one. Right after the commit the message is
published at once (best effort: an unreachable broker is logged, never turned into an error for the user, whose
change is already saved). `manage.py dispatch_outbox`, a small loop of its own, publishes whatever is still
pending once the broker answers again. Nothing needs to survive in Redis for that.

Each publication claims its row (locked, `SKIP LOCKED`), marks it sent and publishes in one transaction, so the
request that wrote the row and the dispatcher never both send it, and a publication that fails leaves it pending. A
publisher that dies between publishing and its commit leaves the row pending and it is sent again: delivery is at
least once, which is why every task is idempotent (STYLE.md, convention 5).
"""

import logging
import threading
import time
from datetime import timedelta

from celery import current_app
from django.db import DatabaseError, close_old_connections, connection, transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerOperationalError

from .models import OutboxMessage

log = logging.getLogger(__name__)

BATCH = 200
# A message refused this many times for a reason other than the broker (unknown task...) is left for an admin.
MAX_ATTEMPTS = 10
KEEP_SENT = timedelta(days=7)
# What an unreachable or restarting broker raises from a publish (kombu wraps most of it; redis-py may not).
BROKER_ERRORS = (BrokerOperationalError, ConnectionError, TimeoutError, OSError)


class BrokerUnavailable(Exception):
    """The broker could not be reached; pending messages stay pending."""


def send(task: str, *args, **kwargs) -> OutboxMessage:
    """Ask for the task registered as `task` (its name, `<app>.<verb>_<noun>`) to run with `*args, **kwargs` once
    the current transaction commits (at once outside of one). By name, so that a service never imports the tasks
    module that imports it back, and an app can ask for a task of a floor above it (a reconciler).

    Arguments must be JSON values (ids, not model instances)."""
    message = OutboxMessage.objects.create(task=task, args=list(args), kwargs=kwargs)
    transaction.on_commit(lambda: publish_now(message))
    return message


_discovering = threading.Lock()


def task_named(name: str):
    """The registered task called `name`; in a process that never imported the apps' tasks.py (the dispatcher, a
    web process before its first task), Celery's autodiscovery runs once first. One thread at a time: Celery's
    autodiscovery returns at once, having imported nothing, to a thread that calls it while another runs it (its
    `_RACE_PROTECTION`), and that thread then found no task (a KeyError under gunicorn's threads)."""
    if name not in current_app.tasks:
        with _discovering:
            if name not in current_app.tasks:
                current_app.loader.import_default_modules()
    return current_app.tasks[name]


def _publish(message: OutboxMessage) -> None:
    task = task_named(message.task)
    # `delay` rather than a lower-level send: the message is exactly what `task.delay(...)` would have sent.
    task.delay(*message.args, **message.kwargs)


# Claims a pending message for the caller's transaction and marks it sent in one statement: the row stays locked
# until that transaction ends, so that a publication that fails rolls the mark back, and a message the dispatcher
# holds (locked) or has sent is skipped rather than waited for. Written once (issue 30): it runs after every change
# that asks for a task, and the ORM's two queries (lock, then mark) cost more to compile than to run.
_TABLE = OutboxMessage._meta.db_table
_CLAIM = (
    f"UPDATE {_TABLE} SET sent_at = %s WHERE id = "
    f"(SELECT id FROM {_TABLE} WHERE id = %s AND sent_at IS NULL FOR UPDATE SKIP LOCKED)"
)


def publish_now(message: OutboxMessage) -> bool:
    """Publish one message (the row `send` wrote) right after its commit. True when sent now; on any failure it
    stays pending for the dispatcher, and the caller (a request whose change is committed) carries on."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(_CLAIM, [timezone.now(), message.pk])
            if cursor.rowcount == 0:
                return False  # the dispatcher has it, or has sent it already
            _publish(message)  # what the row holds: `send` wrote it from these very values
        return True
    except Exception as error:  # noqa: BLE001 - whatever it is, the dispatcher retries and the change stands
        log.warning("outbox message %s not sent now, the dispatcher will send it: %s", message.pk, error)
        return False


def dispatch_pending(*, batch: int = BATCH) -> int:
    """Publish up to `batch` pending messages, oldest first; returns how many were sent.

    Raises BrokerUnavailable (after recording what was sent) when the broker cannot be reached."""
    sent: list[int] = []
    broker_down: BaseException | None = None
    with transaction.atomic():
        pending = list(
            OutboxMessage.objects.select_for_update(skip_locked=True)
            .filter(sent_at__isnull=True, attempts__lt=MAX_ATTEMPTS)
            .order_by("id")[:batch]
        )
        for message in pending:
            try:
                _publish(message)
            except BROKER_ERRORS as error:
                broker_down = error
                break
            except Exception as error:  # noqa: BLE001 - this message is refused; the others may go
                message.attempts += 1
                message.last_error = f"{type(error).__name__}: {error}"[:2000]
                message.save(update_fields=["attempts", "last_error"])
                log.error("outbox message %s (%s) refused: %s", message.pk, message.task, error)
                continue
            sent.append(message.pk)
        if sent:
            OutboxMessage.objects.filter(pk__in=sent).update(sent_at=timezone.now())
    if broker_down is not None:
        raise BrokerUnavailable(str(broker_down)) from broker_down
    return len(sent)


def prune(*, now=None) -> int:
    """Forget messages sent more than KEEP_SENT ago."""
    now = now or timezone.now()
    deleted, _ = OutboxMessage.objects.filter(sent_at__lt=now - KEEP_SENT).delete()
    return deleted


def run_dispatcher(stop, *, interval: float = 1.0, max_backoff: float = 5.0) -> None:
    """Publish pending messages until `stop` (a threading.Event) is set.

    Lives through outages of either side: an unreachable broker or database is retried with a growing pause (up
    to `max_backoff` seconds); the database connection is dropped after an error so the next round opens a new
    one."""
    failures = 0
    last_prune = 0.0
    while not stop.is_set():
        try:
            count = dispatch_pending()
            if failures:
                log.info("outbox: publishing again (%d sent)", count)
            failures = 0
            if time.monotonic() - last_prune > 3600:
                prune()
                last_prune = time.monotonic()
            if count == BATCH:
                continue  # more waiting: no pause
            pause = interval
        except BrokerUnavailable as error:
            failures += 1
            pause = min(max_backoff, interval * 2 ** min(failures, 5))
            log.warning("outbox: broker unreachable (%s); retrying in %.0fs", error, pause)
        except DatabaseError as error:
            failures += 1
            pause = min(max_backoff, interval * 2 ** min(failures, 5))
            log.warning("outbox: database unavailable (%s); retrying in %.0fs", error, pause)
            close_old_connections()
            connection.close()
        stop.wait(pause)
