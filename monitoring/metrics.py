"""The portal's own /metrics (prometheus_client): request latency, Celery queue depth, task messages waiting in
the outbox, cluster sync lag, jobs by state, telemetry age and firing alerts.

Latency is a histogram each process keeps; everything else is read when Prometheus scrapes (a custom collector:
a handful of cheap queries), so every process answers the same numbers. Under gunicorn's several workers the
histogram must be the pod's, not the answering worker's (else its counts jump between the workers' totals and
look like counter resets): the web pods' gunicorn config (portal/gunicorn_config.py) sets PROMETHEUS_MULTIPROC_DIR,
each worker writes its observations there (prometheus_client's multiprocess mode) and a scrape reads them all.
"""

from __future__ import annotations

import logging
import os
import secrets

from django.conf import settings
from django.db.models import Count, Max, Min
from django.http import HttpResponse, HttpResponseForbidden
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

log = logging.getLogger(__name__)
REGISTRY = CollectorRegistry(auto_describe=False)  # nothing is read at import time
REQUEST_LATENCY = Histogram(
    "reservoir_http_request_duration_seconds",
    "Time the portal took to answer a request, by method, route and status.",
    ["method", "route", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)


def celery_queues() -> list[str]:
    return [queue.name for queue in settings.CELERY_TASK_QUEUES]


class PortalCollector:
    """Gauges read at scrape time from PostgreSQL and Redis."""

    def collect(self):
        from jobs.choices import JobState
        from jobs.models import Job, SyncState

        from .models import Alert, TelemetryRun

        now = timezone.now()
        jobs = GaugeMetricFamily("reservoir_jobs", "Jobs by state.", labels=["state"])
        counts = dict(Job.objects.values_list("state").annotate(n=Count("pk")).values_list("state", "n"))
        for state in JobState.values:
            jobs.add_metric([state], counts.get(state, 0))
        yield jobs

        lag = GaugeMetricFamily(
            "reservoir_sync_lag_seconds",
            "Seconds since the cluster sync last recorded progress (a list, an event or a bookmark), per resource.",
            labels=["resource"],
        )
        for resource, updated_at in SyncState.objects.values_list("resource", "updated_at"):
            lag.add_metric([resource], max(0.0, (now - updated_at).total_seconds()))
        yield lag

        telemetry = GaugeMetricFamily(
            "reservoir_telemetry_age_seconds", "Seconds since the last GPU telemetry step collected from Prometheus."
        )
        last = TelemetryRun.objects.filter(ok=True).aggregate(at=Max("at"))["at"]
        if last is not None:
            telemetry.add_metric([], (now - last).total_seconds())
        yield telemetry

        alerts = GaugeMetricFamily("reservoir_alerts_firing", "Firing alerts by kind.", labels=["kind"])
        for kind, n in Alert.objects.firing().values_list("kind").annotate(n=Count("pk")).values_list("kind", "n"):
            alerts.add_metric([kind], n)
        yield alerts

        from portal.models import OutboxMessage

        pending = OutboxMessage.objects.filter(sent_at__isnull=True).aggregate(n=Count("pk"), oldest=Min("created_at"))
        outbox = GaugeMetricFamily(
            "reservoir_outbox_pending", "Task messages committed but not yet in the broker (portal/outbox.py)."
        )
        outbox.add_metric([], pending["n"])
        yield outbox
        outbox_age = GaugeMetricFamily(
            "reservoir_outbox_oldest_pending_seconds", "Age of the oldest task message not yet in the broker."
        )
        outbox_age.add_metric([], (now - pending["oldest"]).total_seconds() if pending["oldest"] else 0.0)
        yield outbox_age

        depth = GaugeMetricFamily(
            "reservoir_celery_queue_depth", "Tasks waiting in each Celery queue.", labels=["queue"]
        )
        try:
            import redis

            connection = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=2, socket_connect_timeout=2)
            for queue in celery_queues():
                depth.add_metric([queue], connection.llen(queue))
        except Exception as error:  # noqa: BLE001 - the broker down must not break the whole scrape
            log.warning("queue depth not read: %s", error)
        yield depth


PORTAL_COLLECTOR = PortalCollector()
REGISTRY.register(PORTAL_COLLECTOR)


def scrape_registry() -> CollectorRegistry:
    """This process's registry; under a multi-process server (PROMETHEUS_MULTIPROC_DIR set, read per scrape) one
    with every worker's histogram read from that directory, this one's included, and the portal's gauges."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        return REGISTRY
    registry = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(registry, path=directory)
    registry.register(PORTAL_COLLECTOR)
    return registry


def metrics_view(request):
    token = settings.METRICS_BEARER_TOKEN
    if not token and settings.METRICS_REQUIRE_TOKEN:
        return HttpResponseForbidden("metrics are refused until RESERVOIR_METRICS_TOKEN is set\n")
    if token:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not secrets.compare_digest(given.encode(), token.encode()):  # bytes: a non-ASCII str would raise
            return HttpResponseForbidden("metrics need a bearer token\n")
    return HttpResponse(generate_latest(scrape_registry()), content_type=CONTENT_TYPE_LATEST)
