"""Client factory: one ApiClient per process and thread, configured from KUBECONFIG or in-cluster."""

import os
import threading

from django.conf import settings
from kubernetes import client, config

_local = threading.local()


def _load_configuration() -> client.Configuration:
    configuration = client.Configuration()
    path = settings.KUBECONFIG or os.environ.get("KUBECONFIG", "")
    if path:
        config.load_kube_config(config_file=path, client_configuration=configuration)
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)
    # Retries are ours (cluster.errors), not urllib3's silent ones.
    configuration.retries = 0
    return configuration


CONNECT_TIMEOUT_SECONDS = 5.0
# How long the API server keeps a watch open that names no timeoutSeconds: at most twice --min-request-timeout
# (1,800 s by default).
WATCH_LIMIT_SECONDS = 3600.0


def default_timeout(query_params) -> tuple[float, float]:
    """(connect, read) seconds for a call that names no timeout of its own: each read of the answer waits at most
    `KUBE_REQUEST_TIMEOUT_SECONDS`; a watch, silent while nothing changes, as long as the server keeps it open
    (its timeoutSeconds, else the server's own limit) and that much more."""
    read = settings.KUBE_REQUEST_TIMEOUT_SECONDS
    params = dict(query_params or ())
    if str(params.get("watch", "")).lower() == "true":
        read += float(params.get("timeoutSeconds") or WATCH_LIMIT_SECONDS)
    return min(CONNECT_TIMEOUT_SECONDS, read), read


class BoundedApiClient(client.ApiClient):
    """The Kubernetes client with a bound on every call: one that names no timeout of its own (the sync's watches,
    live reads and the Lease do) gets `default_timeout`, then fails as "apiserver did not answer in time"
    (transient: retried as any such failure). A silent apiserver otherwise holds the calling thread for good: in the
    cluster worker's thread pool no time limit of Celery's ends a task (docs/failures.md)."""

    def request(self, method, url, query_params=None, *args, _request_timeout=None, **kwargs):
        if _request_timeout is None:
            _request_timeout = default_timeout(query_params)
        return super().request(method, url, query_params, *args, _request_timeout=_request_timeout, **kwargs)


def api_client() -> client.ApiClient:
    """This thread's ApiClient (created on first use, after settings are loaded)."""
    api = getattr(_local, "api", None)
    path = settings.KUBECONFIG or os.environ.get("KUBECONFIG", "")
    if api is None or getattr(_local, "path", None) != path:
        if api is not None:
            api.close()
        api = BoundedApiClient(_load_configuration())
        _local.api = api
        _local.path = path
    return api


def reset() -> None:
    """Forget this thread's client (tests point the portal at another cluster)."""
    api = getattr(_local, "api", None)
    if api is not None:
        api.close()
    _local.api = None


def core() -> client.CoreV1Api:
    return client.CoreV1Api(api_client())


def batch() -> client.BatchV1Api:
    return client.BatchV1Api(api_client())


def scheduling() -> client.SchedulingV1Api:
    return client.SchedulingV1Api(api_client())


def custom_objects() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client())


def networking() -> client.NetworkingV1Api:
    return client.NetworkingV1Api(api_client())


def coordination() -> client.CoordinationV1Api:
    return client.CoordinationV1Api(api_client())


def storage() -> client.StorageV1Api:
    return client.StorageV1Api(api_client())
