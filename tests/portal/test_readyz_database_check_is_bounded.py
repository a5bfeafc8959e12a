"""/readyz answers within the chart's probe timeout when PostgreSQL stops answering without refusing (a host powered
off, a network partition, a fail-over whose old address drops packets).

The database check used to have no bound (no connect_timeout, no TCP timeout): each /readyz probe held one of
gunicorn's 3 sync workers until the kernel gave up (minutes) or gunicorn killed the worker at 30 s. Probes every 5 s
took every worker, so /healthz (liveness) went unanswered and the kubelet restarted every web pod, although the
chart promises that a database outage never restarts one; they came back in CrashLoopBackOff's growing delay after
PostgreSQL was back. Connections now give up connecting after 3 s (portal/settings/base.py).

Here PostgreSQL "stops answering" as a listening socket that accepts and never says a word."""

import socket
import threading

import pytest
from django.db import connections
from django.db.utils import load_backend
from django.test import RequestFactory

from portal import health

# The chart's readinessProbe timeoutSeconds is 3; generous slack for a slow machine, far below the hang.
ANSWER_WITHIN_SECONDS = 10


@pytest.mark.django_db
def test_readyz_answers_in_time_when_postgresql_accepts_and_never_answers(monkeypatch):
    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes the handshake; nobody ever reads or writes
    port = silent.getsockname()[1]
    held = []

    def hold():  # accept and keep each connection open without a word, until the test ends
        while True:
            try:
                held.append(silent.accept()[0])
            except OSError:
                return

    threading.Thread(target=hold, daemon=True).start()
    settings_dict = {**connections["default"].settings_dict, "HOST": "127.0.0.1", "PORT": str(port)}
    answer = {}

    def probe():
        wrapper = load_backend(settings_dict["ENGINE"]).DatabaseWrapper(settings_dict, alias="silent")
        monkeypatch.setattr(health, "connection", wrapper)
        monkeypatch.setattr(health, "_cache", lambda: None)  # the cache answers: only the database is in question
        answer["response"] = health.readyz(RequestFactory().get("/readyz"))

    thread = threading.Thread(target=probe, daemon=True)
    try:
        thread.start()
        thread.join(ANSWER_WITHIN_SECONDS)
        hung = thread.is_alive()
    finally:
        for each in held:
            each.close()  # the hung probe gets an end of stream and returns
        silent.shutdown(socket.SHUT_RDWR)
        silent.close()
        thread.join(30)
    assert not hung, f"/readyz did not answer within {ANSWER_WITHIN_SECONDS} s of PostgreSQL going silent"
    assert answer["response"].status_code == 503
