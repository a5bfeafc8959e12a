"""The outbox on its own: what a rollback leaves, what a refused message does to the others, and the broker
settings that keep a healthy task from running twice (tests/api/test_outages.py covers Redis going away)."""

import re
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal import outbox
from portal.celery import app as celery_app
from portal.models import OutboxMessage
from tests.faultkit import celery_broker

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_rolled_back_change_leaves_no_message():
    with pytest.raises(RuntimeError), transaction.atomic():
        outbox.send("jobs.delete_job", 123)
        raise RuntimeError("the change failed")
    assert not OutboxMessage.objects.exists()


def test_a_message_the_broker_refuses_is_set_aside_and_does_not_hold_back_the_others(throwaway_redis):
    throwaway_redis.start()
    bad = OutboxMessage.objects.create(task="jobs.no_such_task", args=[1])
    good = OutboxMessage.objects.create(task="jobs.delete_job", args=[2])
    with celery_broker(throwaway_redis.url):
        assert outbox.dispatch_pending() == 1
    bad.refresh_from_db()
    good.refresh_from_db()
    assert good.sent_at is not None
    assert bad.sent_at is None and bad.attempts == 1 and "no_such_task" in bad.last_error
    assert throwaway_redis.messages("cluster") == [{"task": "jobs.delete_job", "args": "(2,)"}]


def test_with_the_broker_down_nothing_is_marked_sent(throwaway_redis):
    throwaway_redis.start()
    message = OutboxMessage.objects.create(task="jobs.delete_job", args=[3])
    with celery_broker(throwaway_redis.url):
        throwaway_redis.stop()
        with pytest.raises(outbox.BrokerUnavailable):
            outbox.dispatch_pending()
    message.refresh_from_db()
    assert message.sent_at is None and message.attempts == 0  # an outage is no fault of the message


def test_sent_messages_are_forgotten_after_a_week():
    now = timezone.now()
    old = OutboxMessage.objects.create(task="jobs.delete_job", args=[1], sent_at=now - timedelta(days=8))
    recent = OutboxMessage.objects.create(task="jobs.delete_job", args=[2], sent_at=now - timedelta(days=1))
    pending = OutboxMessage.objects.create(task="jobs.delete_job", args=[3], created_at=now - timedelta(days=30))
    assert outbox.prune(now=now) == 1
    assert set(OutboxMessage.objects.values_list("pk", flat=True)) == {recent.pk, pending.pk}
    assert not OutboxMessage.objects.filter(pk=old.pk).exists()


def test_redis_redelivers_only_messages_older_than_any_countdown_plus_the_task_time_limit():
    """A message waits unacknowledged through its countdown and its run; a shorter visibility timeout would hand a
    healthy task to a second worker."""
    visibility = settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
    assert visibility > settings.TASK_MAX_COUNTDOWN_SECONDS + settings.CELERY_TASK_TIME_LIMIT
    assert settings.CELERY_TASK_SOFT_TIME_LIMIT < settings.CELERY_TASK_TIME_LIMIT
    assert celery_app.conf.broker_transport_options["visibility_timeout"] == visibility


def test_metrics_show_what_waits_in_the_outbox(client):
    OutboxMessage.objects.create(task="jobs.delete_job", args=[1], created_at=timezone.now() - timedelta(seconds=90))
    OutboxMessage.objects.create(task="jobs.delete_job", args=[2], sent_at=timezone.now())
    body = client.get("/metrics").content.decode()
    assert "reservoir_outbox_pending 1.0" in body
    age = float(re.search(r"^reservoir_outbox_oldest_pending_seconds (\S+)$", body, re.MULTILINE).group(1))
    assert 90 <= age < 300


def test_two_threads_asking_first_for_a_task_both_find_it(monkeypatch):
    """Celery's autodiscovery returns at once, importing nothing, to a thread that calls it while another runs it
    (loaders.base._RACE_PROTECTION): the second of two gunicorn threads publishing their first message found no
    task. The loader here behaves so, slowly."""
    import threading
    import time
    from types import SimpleNamespace

    registered: dict = {}
    importing = threading.Event()

    def import_default_modules():
        if importing.is_set():
            return []  # another thread is importing: Celery answers at once
        importing.set()
        time.sleep(0.3)
        registered["portal.demo"] = "the task"
        importing.clear()
        return []

    loader = SimpleNamespace(import_default_modules=import_default_modules)
    monkeypatch.setattr(outbox, "current_app", SimpleNamespace(tasks=registered, loader=loader))
    found, errors = [], []

    def ask():
        try:
            found.append(outbox.task_named("portal.demo"))
        except KeyError as error:
            errors.append(error)

    first = threading.Thread(target=ask)
    first.start()
    assert importing.wait(5)
    second = threading.Thread(target=ask)
    second.start()
    first.join(5)
    second.join(5)
    assert errors == []
    assert found == ["the task", "the task"]


def test_publishing_right_after_the_commit_sends_once_and_skips_what_the_dispatcher_holds(throwaway_redis):
    """`publish_now` claims the row, marks it sent and publishes in one transaction: sent once; a row another
    transaction holds (the dispatcher mid-batch) is left to it without waiting; a failed publication leaves the row
    pending."""
    import threading

    from django.db import connection as this_connection

    throwaway_redis.start()
    with celery_broker(throwaway_redis.url):
        sent = OutboxMessage.objects.create(task="jobs.delete_job", args=[1])
        assert outbox.publish_now(sent) is True
        assert outbox.publish_now(sent) is False  # already sent: not again
        sent.refresh_from_db()
        assert sent.sent_at is not None

        held = OutboxMessage.objects.create(task="jobs.delete_job", args=[2])
        locked, release, done = threading.Event(), threading.Event(), threading.Event()

        def dispatcher_holds_it():
            from django.db import connection

            try:
                with transaction.atomic():
                    OutboxMessage.objects.select_for_update().filter(pk=held.pk).first()
                    locked.set()
                    release.wait(10)
            finally:
                connection.close()
                done.set()

        holder = threading.Thread(target=dispatcher_holds_it)
        holder.start()
        try:
            assert locked.wait(10)
            assert outbox.publish_now(held) is False  # at once: SKIP LOCKED, not a wait for the holder
            assert not release.is_set()
        finally:
            release.set()
            holder.join(10)
        assert done.is_set()
        held.refresh_from_db()
        assert held.sent_at is None  # still the holder's (here: pending, for the dispatcher's next round)

        refused = OutboxMessage.objects.create(task="jobs.no_such_task", args=[3])
        assert outbox.publish_now(refused) is False
        refused.refresh_from_db()
        assert refused.sent_at is None  # the mark was rolled back with the failed publication
        assert this_connection.in_atomic_block is False
    assert throwaway_redis.messages("cluster") == [{"task": "jobs.delete_job", "args": "(1,)"}]
