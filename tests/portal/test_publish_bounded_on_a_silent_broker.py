"""Publishing to a broker that takes the connection and never answers gives up within seconds, in the request that
committed a change and in the outbox dispatcher alike.

Users saw: with Redis hung (blocked, SIGSTOPped) or a pooled connection left half-open when Redis's node went away, a
submit or cancel that had committed never answered (its on-commit publication waited for good); gunicorn killed the
worker and the user, who got no 201/202, submitted again: two jobs. `manage.py dispatch_outbox` stopped publishing,
holding its rows' locks, until someone restarted it, however long Redis had been back. Nothing bounded a read on
Celery's broker connection; `CELERY_BROKER_TRANSPORT_OPTIONS` now bounds connects and reads (docs/failures.md).

The broker here is a local socket that accepts connections and never answers (as tests/cluster/test_client_timeout.py
does for the API server); the test ends its connections afterwards, so nothing is left waiting. The positive control:
the worker's BRPOP, with the same options, still waits on an empty queue longer than the socket timeout and receives
what is published then (kombu sends BRPOP with a server-side timeout shorter than the socket's)."""

import socket
import threading
import time
import uuid

import pytest
from django.conf import settings
from django.db import connection
from kombu import Connection

from portal import outbox
from portal.models import OutboxMessage
from tests.faultkit import celery_broker

pytestmark = pytest.mark.django_db(transaction=True)

BOUND_SECONDS = 12  # three publish attempts of at most 2 s each, and their pauses, with room to spare


class SilentBroker:
    """Accepts TCP connections and never answers."""

    def __init__(self):
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port = self.server.getsockname()[1]
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self):
        for conn in self.held:
            conn.close()  # whoever still waits on it gets an error now
        self.server.close()


@pytest.fixture
def silent_broker():
    broker = SilentBroker()
    yield broker
    broker.close()


def _within_bound(call) -> tuple[bool, object]:
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as error:  # noqa: BLE001 - reported to the test
            outcome["value"] = error
        finally:
            connection.close()

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(BOUND_SECONDS)
    return not worker.is_alive(), outcome.get("value")


def test_the_publication_after_a_commit_gives_up_on_a_broker_that_never_answers(silent_broker):
    message = OutboxMessage.objects.create(task="jobs.delete_job", args=[1])
    with celery_broker(silent_broker.url):
        finished, value = _within_bound(lambda: outbox.publish_now(message))
        silent_broker.close()
    assert finished, f"publish_now still waiting on the broker after {BOUND_SECONDS} s (the request never answers)"
    assert value is False
    message.refresh_from_db()
    assert message.sent_at is None  # left for the dispatcher


def test_the_dispatcher_gives_up_on_a_broker_that_never_answers(silent_broker):
    OutboxMessage.objects.create(task="jobs.delete_job", args=[2])
    with celery_broker(silent_broker.url):
        finished, value = _within_bound(outbox.dispatch_pending)
        silent_broker.close()
    assert finished, f"dispatch_pending still waiting on the broker after {BOUND_SECONDS} s (the dispatcher is stuck)"
    assert isinstance(value, outbox.BrokerUnavailable)


def test_the_worker_still_waits_for_messages_on_a_broker_that_answers():
    options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    idle_seconds = options["socket_timeout"] * 2
    queue_name = f"test-brpop-{uuid.uuid4().hex}"
    with Connection(settings.CELERY_BROKER_URL, transport_options=options) as broker:
        queue = broker.SimpleQueue(queue_name)
        pool_options = queue.channel.client.connection_pool.connection_kwargs
        assert pool_options["socket_timeout"] == options["socket_timeout"]  # the bounds are on the consuming connection
        sender = threading.Timer(idle_seconds, lambda: _publish(queue_name, options))
        sender.start()
        try:
            started = time.monotonic()
            message = queue.get(timeout=idle_seconds + 10)
            waited = time.monotonic() - started
            message.ack()
            assert message.payload == {"hello": "worker"}
            assert waited >= idle_seconds - 0.5  # it waited past the socket timeout without failing
        finally:
            sender.join()
            queue.queue.delete()
            queue.close()


def _publish(queue_name: str, options: dict) -> None:
    with Connection(settings.CELERY_BROKER_URL, transport_options=options) as broker:
        queue = broker.SimpleQueue(queue_name)
        queue.put({"hello": "worker"})
        queue.close()
