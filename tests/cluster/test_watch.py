"""ListWatch against the real apiserver: resume from a version, relist on 410, relist when a version is unusable."""

import threading

import pytest

from cluster import client
from cluster.watch import ListWatch
from tests.clusterkit import wait_for

pytestmark = pytest.mark.cluster


def test_a_version_the_apiserver_cannot_serve_leads_to_a_relist(kube_cluster, kube_namespace, settings):
    settings.KUBECONFIG = str(kube_cluster.kubeconfig_path)
    client.reset()
    core = client.core()
    relists: list[int] = []
    events: list[str] = []
    stop = threading.Event()
    watch = ListWatch(
        name="test-namespaces",
        list_call=core.list_namespace,
        on_relist=lambda items, version: relists.append(len(items)),
        on_event=lambda kind, obj: events.append(obj["metadata"]["name"]),
        stop=stop,
        watch_timeout_seconds=5,
    )
    # A resourceVersion far beyond the cluster's, as after the cluster's storage was replaced.
    thread = threading.Thread(target=watch.run, kwargs={"start_version": "999999999999"}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: relists, timeout=60, what="a relist after the unusable version")
        core.create_namespace({"metadata": {"name": f"{kube_namespace}-seen"}})
        wait_for(lambda: f"{kube_namespace}-seen" in events, timeout=30, what="the watch to resume")
    finally:
        watch.close()
        thread.join(timeout=15)
        core.delete_namespace(f"{kube_namespace}-seen")
        client.reset()
