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


def test_objects_are_parsed_as_they_arrive_and_those_parsed_to_none_are_skipped(
    kube_cluster, kube_namespace, settings, monkeypatch
):
    settings.KUBECONFIG = str(kube_cluster.kubeconfig_path)
    client.reset()
    monkeypatch.setattr("cluster.watch.PAGE_SIZE", 2)  # several pages, each parsed on arrival
    core = client.core()
    names = [f"{kube_namespace}-{i}" for i in range(5)]
    for name in names[:4]:
        core.create_namespace({"metadata": {"name": name, "labels": {"parse-test": kube_namespace}}})
    listed: list[list[str]] = []
    events: list[tuple[str, str]] = []
    stop = threading.Event()

    def mine(namespace: dict) -> str | None:
        name = namespace["metadata"]["name"]
        return name.upper() if name in names[1:] else None  # names[0] is listed by the apiserver, then dropped

    watch = ListWatch(
        name="test-parse",
        list_call=core.list_namespace,
        list_kwargs={"label_selector": f"parse-test={kube_namespace}"},
        parse=mine,
        on_relist=lambda items, version: listed.append(items),
        on_event=lambda kind, parsed: events.append((kind, parsed)),
        stop=stop,
        watch_timeout_seconds=5,
    )
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: listed, timeout=60, what="the first list")
        assert sorted(listed[0]) == [name.upper() for name in names[1:4]]
        core.create_namespace({"metadata": {"name": names[4], "labels": {"parse-test": kube_namespace}}})
        wait_for(lambda: ("ADDED", names[4].upper()) in events, timeout=30, what="the parsed ADDED event")
        assert all(parsed != names[0].upper() and parsed.isupper() for _kind, parsed in events)
    finally:
        watch.close()
        thread.join(timeout=15)
        for name in names:
            core.delete_namespace(name)
        client.reset()


def test_a_handler_that_fails_reads_the_same_events_again_instead_of_relisting(kube_cluster, kube_namespace, settings):
    """As while PostgreSQL restarts: applying events fails again and again. A relist would never see an object that
    came and went meanwhile (a short pod, and its GPU time); reading the same events again does."""
    settings.KUBECONFIG = str(kube_cluster.kubeconfig_path)
    client.reset()
    core = client.core()
    relists: list[int] = []
    seen: list[tuple[str, str]] = []
    refused: list[str] = []
    database_down = threading.Event()

    def on_event(kind, obj):
        if database_down.is_set():
            refused.append(kind)
            raise ConnectionError("database unreachable")
        seen.append((kind, obj["metadata"]["name"]))

    watch = ListWatch(
        name="test-namespaces-handler",
        list_call=core.list_namespace,
        on_relist=lambda items, version: relists.append(len(items)),
        on_event=on_event,
        watch_timeout_seconds=5,
    )
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    fleeting = f"{kube_namespace}-fleeting"
    try:
        wait_for(lambda: relists, timeout=30, what="the first list")
        database_down.set()
        core.create_namespace({"metadata": {"name": fleeting}})
        core.delete_namespace(fleeting)
        wait_for(lambda: len(refused) > ListWatch.RELIST_AFTER_FAILURES, timeout=90, what="repeated failures")
        database_down.clear()
        wait_for(lambda: ("ADDED", fleeting) in seen, timeout=60, what="the namespace's events read again")
    finally:
        watch.close()
        thread.join(timeout=15)
        client.reset()
    assert len(relists) == 1  # no relist because of our own failures
