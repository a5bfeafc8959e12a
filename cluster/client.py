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


def api_client() -> client.ApiClient:
    """This thread's ApiClient (created on first use, after settings are loaded)."""
    api = getattr(_local, "api", None)
    path = settings.KUBECONFIG or os.environ.get("KUBECONFIG", "")
    if api is None or getattr(_local, "path", None) != path:
        if api is not None:
            api.close()
        api = client.ApiClient(_load_configuration())
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
