"""`cluster.client`: every call is bounded. An API server that takes the connection and never answers (a hung
process, a half-open connection) fails a call that names no timeout of its own after
`KUBE_REQUEST_TIMEOUT_SECONDS`, as a transient failure in words people read, instead of holding the calling thread
for good (the cluster worker's thread pool has no Celery time limit to end a task)."""

import socket
import threading

import pytest

from cluster import client
from cluster.errors import TransientClusterError, single_attempt, with_retries


@pytest.fixture
def silent_apiserver(tmp_path):
    """A kubeconfig pointing at a loopback server that accepts connections, reads nothing and answers nothing."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                return
            held.append(connection)

    threading.Thread(target=accept, daemon=True).start()
    port = server.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: silent\n"
        f"clusters: [{{name: silent, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: silent, user: {token: not-checked}}]\n"
        "contexts: [{name: silent, context: {cluster: silent, user: silent}}]\n"
    )
    yield kubeconfig, held
    stop.set()
    server.close()
    for connection in held:
        connection.close()


def call_in_thread(call, *, wait: float):
    """Run `call` in a thread; (finished, what it raised or returned). A call still running after `wait` seconds is
    reported unfinished rather than hanging the test."""
    outcome: dict = {}

    def run():
        client.reset()
        try:
            outcome["value"] = call()
        except Exception as error:  # noqa: BLE001 - the test looks at what was raised
            outcome["error"] = error
        finally:
            client.reset()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(wait)
    return not thread.is_alive(), outcome


def test_a_call_to_an_apiserver_that_never_answers_fails_as_transient_within_its_timeout(silent_apiserver, settings):
    kubeconfig, held = silent_apiserver
    settings.KUBECONFIG = str(kubeconfig)
    settings.KUBE_REQUEST_TIMEOUT_SECONDS = 0.5

    def create():
        with single_attempt():
            return with_retries(lambda: client.batch().create_namespaced_job("team-x", {"metadata": {"name": "j"}}))

    finished, outcome = call_in_thread(create, wait=20)
    assert finished, "the call still waited for the silent API server after 20 s"
    assert held, "the call never reached the server"
    error = outcome.get("error")
    assert isinstance(error, TransientClusterError), outcome
    assert str(error) == "apiserver did not answer in time"


def test_a_call_that_names_its_own_timeout_keeps_it(silent_apiserver, settings):
    """Watches and live reads name theirs: the default does not shorten them."""
    kubeconfig, _ = silent_apiserver
    settings.KUBECONFIG = str(kubeconfig)
    settings.KUBE_REQUEST_TIMEOUT_SECONDS = 0.2

    def read():
        return client.core().list_namespace(_request_timeout=(5, 60))

    finished, outcome = call_in_thread(read, wait=3)
    assert not finished, f"the call's own 60 s read timeout was cut short: {outcome}"


def test_a_watch_that_names_no_timeout_waits_as_long_as_the_server_keeps_it_open(silent_apiserver, settings):
    """A watch is silent while nothing changes: the read bound does not cut it, its timeoutSeconds (or the server's
    own limit) does, with the same margin."""
    kubeconfig, _ = silent_apiserver
    settings.KUBECONFIG = str(kubeconfig)
    settings.KUBE_REQUEST_TIMEOUT_SECONDS = 0.2

    def watch():
        return client.core().list_namespace(watch=True, timeout_seconds=60, _preload_content=False)

    finished, outcome = call_in_thread(watch, wait=3)
    assert not finished, f"a quiet watch was cut by the read bound: {outcome}"
    assert client.default_timeout([("timeoutSeconds", 60), ("watch", True)]) == (5.0, 60.2)
    assert client.default_timeout([("watch", True)]) == (5.0, 3600.2)
    assert client.default_timeout([("limit", 500)]) == (0.2, 0.2)
