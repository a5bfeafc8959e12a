"""`manage.py sync_cluster`: the long-lived process that mirrors nodes, GPU pods, the portal's Jobs and their Kueue
Workloads."""

import functools
import logging
import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections, connection

from cluster import client
from cluster.facts import job_facts, node_facts, workload_facts
from cluster.kueue import KUEUE_GROUP, KUEUE_VERSION
from cluster.labels import LABEL_MANAGED_BY, MANAGED_BY
from cluster.lease import LeaderLease, own_namespace
from cluster.watch import ListWatch, run_forever
from reconcile.sync import ClusterSync

log = logging.getLogger("reconcile.sync")


def _guarded(handler):
    """Run a DB-writing handler; on failure drop the connection so the retry gets a fresh one."""

    def run(*args):
        try:
            return handler(*args)
        except Exception:
            close_old_connections()
            connection.close()
            raise

    return run


def build_watches(sync: ClusterSync, stop: threading.Event) -> list[ListWatch]:
    """One list-then-watch per resource: each object parsed into facts as it arrives, then routed to the resource's
    pair of sync handlers. Nodes come first: pods are attributed to pools by the node they run on."""
    core, batch = client.core(), client.batch()
    managed = {"label_selector": f"{LABEL_MANAGED_BY}={MANAGED_BY}"}
    list_workloads = functools.partial(
        client.custom_objects().list_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, "workloads"
    )
    watched = [
        # (name, list call, list arguments, parser, on a full list, on each event, on a batch of events or None)
        ("nodes", core.list_node, {}, node_facts, sync.relist_nodes, sync.node_event, None),
        ("pods", core.list_pod_for_all_namespaces, {}, sync.parse_pod, sync.relist_pods, None, sync.pod_events),
        ("jobs", batch.list_job_for_all_namespaces, managed, job_facts, sync.relist_jobs, sync.job_event, None),
        ("workloads", list_workloads, {}, workload_facts, sync.relist_workloads, None, sync.workload_events),
    ]
    return [
        ListWatch(
            name=name,
            list_call=list_call,
            list_kwargs=list_kwargs,
            parse=parse,
            on_relist=_guarded(on_relist),
            on_event=on_event and _guarded(on_event),
            on_events=on_events and _guarded(on_events),
            save_version=_guarded(lambda version, name=name: sync.save_version(name, version)),
            on_list_start=functools.partial(sync.list_starting, name),
            stop=stop,
            gather_seconds=settings.SYNC_GATHER_SECONDS,
        )
        for name, list_call, list_kwargs, parse, on_relist, on_event, on_events in watched
    ]


class Command(BaseCommand):
    help = (
        "Mirror the cluster's nodes, GPU pods, the portal's Jobs and their Kueue Workloads into the database "
        "(list, then watch)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--relist", action="store_true", help="List everything again instead of resuming.")

    def handle(self, *args, relist: bool = False, **options):
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        # Exactly one sync writes: the holder of the Lease (cluster/lease.py). The others wait here, watching nothing.
        lease = LeaderLease(
            name=settings.SYNC_LEASE_NAME,
            namespace=settings.SYNC_LEASE_NAMESPACE or own_namespace(),
            lease_seconds=settings.SYNC_LEASE_SECONDS,
        )
        self.stdout.write(f"sync_cluster: waiting for the Lease {lease.namespace}/{lease.name} as {lease.identity}")
        if not lease.acquire(stop):
            self.stdout.write("sync_cluster: stopped before holding the Lease")
            return
        self.stdout.write(f"sync_cluster: holding the Lease {lease.namespace}/{lease.name}")
        lease.keep_renewing(stop)
        try:
            self._sync(stop, relist=relist)
        finally:
            if lease.lost.is_set():
                raise CommandError("sync_cluster: the Lease was lost; stopped writing")
            lease.release()

    def _sync(self, stop: threading.Event, *, relist: bool) -> None:
        sync = ClusterSync()
        watches = build_watches(sync, stop)
        versions = {} if relist else {w.name: sync.load_version(w.name) for w in watches}
        # Nodes first, so pods can be attributed to pools by the node they run on.
        if not versions.get("nodes"):
            watches[0].relist()
            versions["nodes"] = sync.load_version("nodes")
        resuming = versions or "a fresh list"
        self.stdout.write(f"sync_cluster: watching nodes, pods, jobs, workloads (resuming from {resuming})")
        # A lambda, so that `connection` is resolved in each watch thread (its own connection), not here.
        threads = run_forever(watches, versions=versions, on_exit=lambda: connection.close())
        while not stop.is_set():
            stop.wait(1.0)
        for watch in watches:
            watch.close()
        for thread in threads:
            thread.join(timeout=10)
        self.stdout.write("sync_cluster: stopped")
