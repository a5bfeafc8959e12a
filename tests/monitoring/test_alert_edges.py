"""Alerts at their edges: a firing notification retried after its alert resolved does not reopen it at the receiver;
GPUs that report no utilisation are no 0 % to alert on; queue wait counts from the job's last time to Queued (a
preemption); and the exported PrometheusRule, run by Prometheus' own rule tester (promtool), says what the portal
says of a pool's Pending pods (not yet placed: a pod bound to its node and pulling its image is not one) and of its
free GPUs."""

import shutil
import subprocess
from datetime import timedelta
from decimal import Decimal

import pytest
import yaml
from django.utils import timezone

from monitoring import exports, services, telemetry
from monitoring.choices import AlertKind, AlertState, NotificationStatus
from monitoring.models import Alert, AlertNotification, UtilisationSample
from monitoring.services import WebhookError
from tests.factories import NodeFactory

NOW = timezone.now().replace(second=0, microsecond=0)


# A firing notification retried after its alert resolved may reach the receiver after the resolution: it says so.
@pytest.mark.django_db(transaction=True)
def test_a_late_firing_notification_does_not_reopen_a_resolved_alert_at_the_receiver(settings, webhook, monkeypatch):
    from portal import outbox
    from tests.monitoring.test_rules import _reading

    monkeypatch.setattr(outbox, "publish_now", lambda message: None)  # the worker runs the deliveries by hand below

    settings.MONITORING_STEP_SECONDS = 60
    node = NodeFactory()
    services.set_rule(kind=AlertKind.GPU_TEMPERATURE_HIGH, threshold=Decimal(85), for_seconds=0)
    _reading(node, 99, at=NOW)
    webhook.status = 503  # the receiver is down when the alert fires
    services.evaluate_alerts(now=NOW)
    alert = Alert.objects.get(kind=AlertKind.GPU_TEMPERATURE_HIGH)
    firing = AlertNotification.objects.get(alert=alert, event=AlertState.FIRING)
    with pytest.raises(WebhookError):  # first attempt: 503, the task will retry in 5 s
        services.deliver_notification(firing.pk)
    firing.refresh_from_db()
    assert firing.status == NotificationStatus.PENDING  # to be retried
    # The GPU cools down; the receiver is back: the resolution goes out first...
    webhook.status = 200
    _reading(node, 60, at=NOW + timedelta(seconds=60))
    services.evaluate_alerts(now=NOW + timedelta(seconds=60))
    resolved = AlertNotification.objects.get(alert=alert, event=AlertState.RESOLVED)
    services.deliver_notification(resolved.pk)
    # ...then the firing notification's retry.
    services.deliver_notification(firing.pk)
    ours = [p for p in webhook.received if p["alerts"][0]["fingerprint"] == str(alert.pk)]
    last = ours[-1]["alerts"][0]
    # The receiver's last word on this alert must say it is over (Alertmanager: endsAt in the past / resolved).
    assert last["status"] == "resolved" or last["endsAt"] != "0001-01-01T00:00:00Z"


# GPUs that report no utilisation series (MIG, or a series missing in a step) are no 0 % to alert on.
@pytest.mark.django_db(transaction=True)
def test_no_utilisation_data_does_not_raise_a_low_utilisation_alert(settings):
    settings.MONITORING_STEP_SECONDS = 60
    node = NodeFactory()
    services.set_rule(kind=AlertKind.GPU_UTILISATION_LOW, threshold=Decimal(30), for_seconds=3600)
    for minutes in range(0, 62, 1):
        step = NOW + timedelta(minutes=minutes)
        rows = {
            (node.name, gpu): telemetry.GpuRow(node.name, gpu, values={"temperature_c": 60.0, "power_watts": 300.0})
            for gpu in range(8)
        }
        telemetry.attribute(rows)
        telemetry.store(step, rows, collected_at=step, duration_ms=1)
        services.evaluate_alerts(now=step)
    sample = UtilisationSample.objects.filter(pool=node.pool).latest("at")
    assert sample.gpus == 8
    # No GPU said how busy it is: there is no utilisation to alert on.
    assert not Alert.objects.filter(kind=AlertKind.GPU_UTILISATION_LOW).exists()


# The exported PrometheusRule, run by Prometheus' own rule tester (promtool test rules) on the series the cluster
# really exports, against what the portal evaluates.


def _promtool_alerts(tmp_path, input_series, eval_time, alertname):
    """The alerts Prometheus has firing at eval_time (labels), using promtool's unit tests: the test expects none,
    so promtool prints the ones it got."""
    rules = tmp_path / "rules.yml"
    rules.write_text(exports.prometheus_rules(as_custom_resource=False))
    test = tmp_path / "test.yml"
    test.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(rules)],
                "evaluation_interval": "30s",
                "tests": [
                    {
                        "interval": "30s",
                        "input_series": input_series,
                        "alert_rule_test": [{"eval_time": eval_time, "alertname": alertname, "exp_alerts": []}],
                    }
                ],
            }
        )
    )
    promtool = shutil.which("promtool")
    assert promtool
    check = subprocess.run([promtool, "test", "rules", str(test)], capture_output=True, text=True)
    return check.returncode == 0, check.stdout + check.stderr


@pytest.mark.django_db
def test_exported_pod_pending_pool_override_applies_to_the_pools_pending_pods(tmp_path, team):
    from jobs.models import Pod
    from tests.factories import PoolFactory

    pool = PoolFactory(slug="training")
    NodeFactory(name="gpu-node-01", pool=pool)
    # This pool's pods may wait 10 minutes before a pod-Pending alert.
    services.set_rule(kind=AlertKind.POD_PENDING, threshold=Decimal(10), for_seconds=0, pool=pool)
    # The portal: a pod of the pool Pending for 5 minutes does not alert.
    Pod.objects.create(uid="u1", namespace=team.namespace, name="rsv-1-0", team=team, pool=pool, gpus=1,
                       phase="Pending", created_at=NOW - timedelta(minutes=5))  # fmt: skip
    services.evaluate_alerts(now=NOW)
    assert not Alert.objects.filter(kind=AlertKind.POD_PENDING).exists()
    # Prometheus: the same pod as kube-state-metrics exports it (a Pending pod has no node; its pool is a label of
    # the pod, reservoir.io/pool -> kube_pod_labels), Pending for 5 minutes.
    series = [
        {
            "series": f'kube_pod_status_phase{{namespace="{team.namespace}", pod="rsv-1-0", uid="u1", '
            f'phase="Pending"}}',
            "values": "1x20",
        },
        {
            "series": f'kube_pod_status_scheduled{{namespace="{team.namespace}", pod="rsv-1-0", uid="u1", '
            f'condition="false"}}',
            "values": "1x20",
        },
        {
            "series": f'kube_pod_labels{{namespace="{team.namespace}", pod="rsv-1-0", uid="u1", '
            f'label_reservoir_io_pool="training"}}',
            "values": "1x20",
        },
    ]
    quiet, output = _promtool_alerts(tmp_path, series, "5m", "PodPending")
    assert quiet, output
    # ...and after 11 minutes the pool's own rule fires for it, once.
    quiet, output = _promtool_alerts(tmp_path, series, "11m", "PodPending")
    assert not quiet and output.count('scope="pool training"') == 1 and 'scope="default"' not in output, output


# A job's pod bound to its node ten minutes ago and still Pending while it pulls a large image: users saw the exported
# rule fire PodPending (critical) though the portal, its Pending page and the job's lifecycle call the pod placed.
@pytest.mark.django_db
def test_a_placed_pod_pulling_its_image_raises_no_pod_pending_alert_in_either(tmp_path, team):
    from jobs.models import Pod
    from tests.factories import PoolFactory

    pool = PoolFactory(slug="training")
    NodeFactory(name="gpu-node-01", pool=pool)
    services.set_rule(kind=AlertKind.POD_PENDING, threshold=Decimal(3), for_seconds=0)
    Pod.objects.create(uid="u1", namespace=team.namespace, name="rsv-1-0", team=team, pool=pool, gpus=1,
                       phase="Pending", scheduled=True, node_name="gpu-node-01",
                       created_at=NOW - timedelta(minutes=10))  # fmt: skip
    services.evaluate_alerts(now=NOW)
    assert not Alert.objects.filter(kind=AlertKind.POD_PENDING).exists()  # the portal: placed, not pending

    def pod_series(name, uid, scheduled):
        pod = f'namespace="{team.namespace}", pod="{name}", uid="{uid}"'
        return [
            {"series": f'kube_pod_status_phase{{{pod}, phase="Pending"}}', "values": "1x40"},
            {"series": f'kube_pod_status_scheduled{{{pod}, condition="true"}}', "values": f"{int(scheduled)}x40"},
            {"series": f'kube_pod_status_scheduled{{{pod}, condition="false"}}', "values": f"{int(not scheduled)}x40"},
            {"series": f'kube_pod_labels{{{pod}, label_reservoir_io_pool="training"}}', "values": "1x40"},
        ]

    quiet, output = _promtool_alerts(tmp_path, pod_series("rsv-1-0", "u1", scheduled=True), "10m", "PodPending")
    assert quiet, output
    # The control: beside it, a pod the scheduler could not place fires, once.
    series = pod_series("rsv-1-0", "u1", scheduled=True) + pod_series("rsv-2-0", "u2", scheduled=False)
    quiet, output = _promtool_alerts(tmp_path, series, "10m", "PodPending")
    assert not quiet and output.count('alertname="PodPending"') == 1 and 'pod="rsv-2-0"' in output, output


@pytest.mark.django_db
def test_exported_low_utilisation_rule_matches_the_portals_pool_verdict(tmp_path, team):
    from tests.factories import PoolFactory

    pool = PoolFactory(slug="training")
    NodeFactory(name="gpu-node-01", pool=pool)
    # The pool: 8 GPUs, 6 held by team Alpha at 95 %, 2 free at 0 % -> the pool averages 71 %, Alpha 95 %.
    for minutes in range(0, 70):
        step = NOW + timedelta(minutes=minutes)
        rows = {}
        for gpu in range(8):
            busy = gpu < 6
            row = telemetry.GpuRow("gpu-node-01", gpu, values={"util_percent": 95.0 if busy else 0.0})
            if busy:
                row.pod_namespace, row.pod_name = team.namespace, f"rsv-1-{gpu}"
            rows[("gpu-node-01", gpu)] = row
        telemetry.attribute(rows)
        telemetry.store(step, rows, collected_at=step, duration_ms=1)
        services.evaluate_alerts(now=step)
    assert not Alert.objects.filter(kind=AlertKind.GPU_UTILISATION_LOW).exists()  # the portal: nothing is low
    series = []
    for gpu in range(8):
        labels = f'Hostname="gpu-node-01", gpu="{gpu}", job="dcgm-exporter", instance="10.0.0.1:9400"'
        if gpu < 6:
            labels += f', namespace="{team.namespace}", pod="rsv-1-{gpu}", container="main"'
        series.append({"series": f"DCGM_FI_DEV_GPU_UTIL{{{labels}}}", "values": ("95" if gpu < 6 else "0") + "x200"})
    quiet, output = _promtool_alerts(tmp_path, series, "70m", "GPUUtilisationLow")
    assert quiet, output
    # The same GPUs all held by the team at 10 %: the pool and the team are low, for Prometheus as for the portal.
    low = [
        {"series": f"DCGM_FI_DEV_GPU_UTIL{{Hostname=\"gpu-node-01\", gpu=\"{gpu}\", job=\"dcgm-exporter\", "
         f"namespace=\"{team.namespace}\", pod=\"rsv-1-{gpu}\"}}", "values": "10x200"}
        for gpu in range(8)
    ]  # fmt: skip
    quiet, output = _promtool_alerts(tmp_path, low, "70m", "GPUUtilisationLow")
    assert not quiet and 'scope="pool training"' in output and 'scope="teams"' in output, output


# Queue wait counts from the job's last time to Queued: a job preempted back to Queued a minute ago, after running for
# hours, has waited a minute; one that never ran has waited since its submission.
@pytest.mark.django_db
def test_queue_wait_counts_from_the_last_time_to_queued(team):
    from jobs.choices import JobState
    from jobs.models import JobEvent
    from tests.factories import JobFactory

    preempted = JobFactory(team=team, state=JobState.QUEUED, created_at=NOW - timedelta(hours=3), preemptions=1)
    for to_state, ago in ((JobState.QUEUED, 180), (JobState.RUNNING, 175), (JobState.QUEUED, 1)):
        JobEvent.note(job=preempted, message="", to_state=to_state, at=NOW - timedelta(minutes=ago))
    waiting = JobFactory(team=team, state=JobState.QUEUED, created_at=NOW - timedelta(minutes=45))
    JobEvent.note(job=waiting, message="", to_state=JobState.QUEUED, at=NOW - timedelta(minutes=45))
    services.evaluate_alerts(now=NOW)
    [alert] = Alert.objects.filter(kind=AlertKind.QUEUE_WAIT)
    assert alert.job_id == waiting.pk and alert.value == 45.0
