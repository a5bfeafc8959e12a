"""When the DCGM exporter stops (DaemonSet crash, a scrape config change), Prometheus still answers, with empty
vectors. Users saw every firing GPU alert (temperature, memory) resolved, a "resolved" webhook sent to on-call and
the telemetry reported as fresh (reservoir_telemetry_age_seconds ~ 0), though nothing had been measured: the step
was stored as a successful collection of zero GPUs and every GPU reading deleted. Such a step is now recorded as
not collected, like a Prometheus error: the readings and their alerts are kept and the telemetry counts as stale.
A cluster without any Ready GPU node still collects its empty step as a success (the positive control)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from monitoring import services, telemetry
from monitoring.choices import AlertKind, AlertState
from monitoring.models import Alert, GpuReading, TelemetryRun
from monitoring.prometheus import Sample
from tests.factories import NodeFactory

NOW = timezone.now().replace(second=0, microsecond=0)


@pytest.mark.django_db(transaction=True)
def test_an_exporter_that_stops_reporting_does_not_resolve_a_hot_gpu_alert(settings, monkeypatch):
    settings.MONITORING_STEP_SECONDS = 60
    node = NodeFactory(name="gpu-node-01", gpu_allocatable=8)
    services.set_rule(kind=AlertKind.GPU_TEMPERATURE_HIGH, threshold=Decimal(85), for_seconds=0)
    exporter_up = True

    def instant_query(expr, *, at, **kwargs):
        if not exporter_up:
            return []  # Prometheus answers "success" with an empty vector: no series of that name any more
        value = 95.0 if expr == "DCGM_FI_DEV_GPU_TEMP" else 50.0
        return [Sample({"Hostname": node.name, "gpu": "0", "UUID": "GPU-0"}, value)]

    monkeypatch.setattr(telemetry, "instant_query", instant_query)
    for minute in range(3):
        at = NOW + timedelta(minutes=minute)
        telemetry.collect(at=at)
        services.evaluate_alerts(now=at)
    alert = Alert.objects.get(kind=AlertKind.GPU_TEMPERATURE_HIGH)
    assert alert.state == AlertState.FIRING

    exporter_up = False  # the DCGM exporter is gone; nothing is known of the GPU's temperature
    at = NOW + timedelta(minutes=3)
    run = telemetry.collect(at=at)
    services.evaluate_alerts(now=at)
    alert.refresh_from_db()
    assert alert.state == AlertState.FIRING, "the hot GPU's alert was resolved on no data at all"
    assert not run.ok and "no DCGM series" in run.error
    assert GpuReading.objects.filter(node_name=node.name).exists()
    assert telemetry.latest_ok_run(at).at == NOW + timedelta(minutes=2)


@pytest.mark.django_db(transaction=True)
def test_an_empty_answer_without_ready_gpu_nodes_is_a_collected_step(settings, monkeypatch):
    settings.MONITORING_STEP_SECONDS = 60
    NodeFactory(name="gpu-node-down", gpu_allocatable=8, ready=False)
    monkeypatch.setattr(telemetry, "instant_query", lambda expr, *, at, **kwargs: [])

    run = telemetry.collect(at=NOW)

    assert run.ok and run.gpus == 0
    assert TelemetryRun.objects.get(at=NOW).ok
