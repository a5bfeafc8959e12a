"""The whole telemetry path on real processes: pods placed by the real scheduler on KWOK GPU nodes, the DCGM
exporter reporting the GPUs they hold, Prometheus scraping it, the portal querying Prometheus and rolling the
series up into PostgreSQL, alert rules firing after their "for" and resolving, the webhook receiving both."""

import pytest
from django.urls import reverse
from django.utils import timezone

from cluster.client import core as kube_core
from devcluster.dcgm_exporter import ANNOTATION_HOT_GPUS, ANNOTATION_UTIL
from jobs import services as job_services
from jobs.choices import JobState
from jobs.models import Job
from jobs.specs import JobSpec
from monitoring import selectors, services, telemetry
from monitoring.choices import AlertKind, AlertState, Scope
from monitoring.models import Alert, GpuReading, JobUtilisation, UtilisationSample
from monitoring.prometheus import instant_query
from pools.models import Pool
from tests.clusterkit import KWOK_DELAY, job_state, set_quota, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def submit(team, *, gpus, util=None, name):
    annotations = {KWOK_DELAY: "10m"}
    if util is not None:
        annotations[ANNOTATION_UTIL] = str(util)
    spec = JobSpec(name=name, image="registry.example.com/research/train:1.0", gpus=gpus, pod_annotations=annotations)
    return job_services.submit_job(
        team=team, pool=Pool.objects.get(slug="reserved-a800"), user=team.researcher, spec=spec
    )


def scraped(expr: str) -> list:
    return instant_query(expr, at=timezone.now())


def collect_until(predicate, what: str):
    """Collect telemetry steps until `predicate()` holds (Prometheus scrapes every second)."""

    def attempt():
        telemetry.collect(at=telemetry.aligned_step(timezone.now()))
        return predicate()

    return wait_for(attempt, timeout=40, interval=0.5, what=what)


def test_job_utilisation_flows_from_dcgm_through_prometheus_into_rollups(
    portal_prometheus, cluster_sync, cluster_team, settings
):
    settings.MONITORING_IDLE_AFTER_SECONDS = 0  # flagged at the first idle step
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 16)
    busy = submit(cluster_team, gpus=4, name="busy")
    idle = submit(cluster_team, gpus=2, util=1, name="holds-gpus-idle")
    for job in (busy, idle):
        wait_for(lambda job=job: job_state(job.pk) == JobState.RUNNING, what=f"job {job.pk} running")
    namespace = cluster_team.namespace
    wait_for(
        lambda: len(scraped(f'DCGM_FI_DEV_GPU_UTIL{{namespace="{namespace}"}}')) == 6,
        what="Prometheus to scrape the six GPUs the two jobs hold",
    )
    collect_until(
        lambda: JobUtilisation.objects.filter(job__in=[busy, idle]).count() == 2, "both jobs' utilisation rolled up"
    )

    readings = GpuReading.objects.filter(team=cluster_team)
    assert readings.count() == 6
    assert sorted(readings.values_list("job_id", flat=True)) == sorted([busy.pk] * 4 + [idle.pk] * 2)
    assert {reading.pool.slug for reading in readings} == {"reserved-a800"}
    busy_readings = readings.filter(job=busy)
    assert all(50 <= reading.util_percent <= 90 for reading in busy_readings)
    assert all(reading.temperature_c and reading.power_watts and reading.fb_used_mib for reading in busy_readings)
    assert all(reading.gr_engine_active is not None for reading in busy_readings)  # A800s expose profiling fields
    assert all(reading.util_percent == 1 for reading in readings.filter(job=idle))

    busy, idle = Job.objects.get(pk=busy.pk), Job.objects.get(pk=idle.pk)
    busy_view = selectors.job_gpu_utilisation(busy)
    idle_view = selectors.job_gpu_utilisation(idle)
    assert busy_view.has_data and busy_view.gpus == 4 and 50 <= busy_view.last_util_percent <= 90
    assert not busy_view.idle
    assert idle_view.has_data and idle_view.gpus == 2 and idle_view.last_util_percent == 1
    assert idle_view.idle
    assert selectors.idle_job_ids([busy.pk, idle.pk]) == {idle.pk}

    team_sample = UtilisationSample.objects.filter(scope=Scope.TEAM, team=cluster_team).latest("at")
    assert team_sample.gpus == 6 and team_sample.gpus_busy == 6
    pool_sample = UtilisationSample.objects.filter(scope=Scope.POOL, pool__slug="reserved-a800").latest("at")
    assert pool_sample.gpus == 32  # every GPU of the pool reports, free ones near zero
    assert pool_sample.gpus_busy >= 6

    # The job page's fragment, rendered from the rollups.
    from django.template.loader import render_to_string

    html = render_to_string("monitoring/partials/job_gpu_utilisation.html", {"gpu": idle_view})
    assert "Idle" in html and "1.0 %" in html

    # Once the idle job is cancelled its GPUs go back to idle in the exporter, and then in the readings.
    job_services.cancel_job(job=idle, user=cluster_team.researcher)
    wait_for(
        lambda: len(scraped(f'DCGM_FI_DEV_GPU_UTIL{{namespace="{namespace}"}}')) == 4,
        what="the cancelled job's GPUs to leave its namespace",
    )
    collect_until(lambda: GpuReading.objects.filter(job=idle).count() == 0, "the idle job's GPUs to be free")


def test_a_hot_gpu_fires_after_its_for_duration_and_resolves_with_webhook_notifications(
    portal_prometheus, cluster_sync, webhook, platform_admin, client
):
    rule = services.set_rule(kind=AlertKind.GPU_TEMPERATURE_HIGH, threshold=85, for_seconds=3)
    node_name, gpu = "gpu-node-02", 5
    core = kube_core()
    core.patch_node(node_name, {"metadata": {"annotations": {ANNOTATION_HOT_GPUS: str(gpu)}}})
    try:
        wait_for(
            lambda: scraped(f'DCGM_FI_DEV_GPU_TEMP{{Hostname="{node_name}", gpu="{gpu}"}} > 85'),
            what="Prometheus to see the hot GPU",
        )
        collect_until(
            lambda: GpuReading.objects.filter(node_name=node_name, gpu=gpu, temperature_c__gt=85).exists(),
            "the hot reading",
        )
        services.evaluate_alerts()
        alert = Alert.objects.get(kind=AlertKind.GPU_TEMPERATURE_HIGH, subject_key=f"gpu:{node_name}/{gpu}")
        assert alert.state == AlertState.PENDING  # the condition holds, but not yet for 3 s
        assert alert.pool.slug == "inference" and alert.rule_id == rule.pk
        assert webhook.received == []

        def fired():
            telemetry.collect(at=telemetry.aligned_step(timezone.now()))
            services.evaluate_alerts()
            return Alert.objects.filter(pk=alert.pk, state=AlertState.FIRING).first()

        alert = wait_for(fired, timeout=30, interval=0.5, what="the alert to fire")
        assert (alert.fired_at - alert.active_since).total_seconds() >= 3
        assert alert.value > 85
        assert webhook.statuses() == ["firing"]
        payload = webhook.received[0]["alerts"][0]
        assert payload["labels"]["alertname"] == "gpu_temperature_high"
        assert payload["labels"]["pool"] == "inference"

        client.force_login(platform_admin)
        page = client.get(reverse("monitoring:alert_list"))
        assert f"GPU {gpu} of {node_name}" in page.content.decode()
        assert 'class="nav-badge"' in page.content.decode()
        api = client.get("/api/v1/alerts/", {"state": "firing"}).json()
        assert [item["id"] for item in api["results"]] == [alert.pk]
    finally:
        core.patch_node(node_name, {"metadata": {"annotations": {ANNOTATION_HOT_GPUS: None}}})

    wait_for(
        lambda: not scraped(f'DCGM_FI_DEV_GPU_TEMP{{Hostname="{node_name}", gpu="{gpu}"}} > 85'),
        what="Prometheus to see the GPU cool down",
    )

    def resolved():
        telemetry.collect(at=telemetry.aligned_step(timezone.now()))
        services.evaluate_alerts()
        return Alert.objects.filter(pk=alert.pk, state=AlertState.RESOLVED).first()

    alert = wait_for(resolved, timeout=30, interval=0.5, what="the alert to resolve")
    assert alert.resolved_at >= alert.fired_at
    assert webhook.statuses() == ["firing", "resolved"]
    assert webhook.received[1]["alerts"][0]["endsAt"] != "0001-01-01T00:00:00Z"
    assert list(alert.notifications.values_list("event", "status")) == [("firing", "sent"), ("resolved", "sent")]
