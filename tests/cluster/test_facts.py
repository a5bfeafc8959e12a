"""Parsing raw Kubernetes objects into facts (pure functions: no cluster, no database)."""

from datetime import UTC, datetime

from cluster.facts import job_facts, node_facts, pod_facts, workload_facts


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def test_a_node_reports_its_gpus_readiness_taints_and_cordon():
    node = {
        "metadata": {"name": "gpu-1", "labels": {"gpu-type": "a100"}},
        "spec": {"unschedulable": True, "taints": [{"key": "gpu", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"nvidia.com/gpu": "8"},
            "allocatable": {"nvidia.com/gpu": "9"},  # never believed above capacity
            "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
        },
    }
    facts = node_facts(node)
    assert (facts.name, dict(facts.labels), facts.gpu_capacity, facts.gpu_allocatable) == (
        "gpu-1",
        {"gpu-type": "a100"},
        8,
        8,
    )
    assert facts.ready and facts.unschedulable
    assert facts.taints == ({"key": "gpu", "value": "", "effect": "NoSchedule"},)


def test_a_node_without_gpus_or_conditions_is_zero_and_not_ready():
    facts = node_facts({"metadata": {"name": "cpu-1"}, "status": {"capacity": {"nvidia.com/gpu": "lots"}}})
    assert (facts.gpu_capacity, facts.gpu_allocatable, facts.ready, facts.unschedulable) == (0, 0, False, False)


def pod(**status):
    return {
        "metadata": {
            "uid": "u-1",
            "namespace": "team-alpha",
            "name": "rsv-7-abcde",
            "creationTimestamp": "2026-03-01T10:00:00Z",
            "labels": {"reservoir.io/job-id": "7"},
            "ownerReferences": [
                {"kind": "Job", "name": "rsv-7", "controller": True},
                {"kind": "Other", "name": "x", "controller": False},
            ],
        },
        "spec": {
            "nodeName": status.pop("node", "gpu-1"),
            "initContainers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}],
            "containers": [
                {"resources": {"limits": {"nvidia.com/gpu": "2"}}},
                {"resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}},
                {"resources": {}},
            ],
        },
        "status": status,
    }


def test_a_running_pod_holds_its_containers_gpus_from_when_it_was_bound():
    facts = pod_facts(
        pod(
            phase="Running",
            conditions=[{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-03-01T10:00:05Z"}],
        )
    )
    assert facts.gpus == 3  # init containers run before the others: not added
    assert facts.job_id == 7 and facts.owner_job == "rsv-7"
    assert facts.scheduled and facts.bound_at == at("2026-03-01T10:00:05Z")
    assert facts.finished_at is None and facts.pending_reason == ""


def test_a_finished_pod_ends_when_its_last_container_finished():
    facts = pod_facts(
        pod(
            phase="Succeeded",
            conditions=[{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-03-01T10:00:05Z"}],
            containerStatuses=[
                {"state": {"terminated": {"finishedAt": "2026-03-01T11:00:00Z"}}},
                {"state": {"terminated": {"finishedAt": "2026-03-01T11:30:00Z"}}},
            ],
        )
    )
    assert facts.finished_at == at("2026-03-01T11:30:00Z")


def test_an_unschedulable_pod_carries_the_schedulers_message():
    facts = pod_facts(
        pod(
            node="",
            phase="Pending",
            conditions=[
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes fit"}
            ],
        )
    )
    assert not facts.scheduled and facts.bound_at is None
    assert facts.pending_reason == "0/3 nodes fit"


def test_a_pod_without_owner_or_a_numeric_label_claims_nothing():
    raw = pod(phase="Running")
    raw["metadata"]["ownerReferences"] = []
    raw["metadata"]["labels"] = {"reservoir.io/job-id": "seven"}
    facts = pod_facts(raw)
    assert facts.job_id is None and facts.owner_job == ""


def job(conditions, labels=None):
    return {
        "metadata": {"namespace": "team-alpha", "name": "rsv-7", "labels": labels or {"reservoir.io/job-id": "7"}},
        "status": {"conditions": conditions},
    }


def test_a_job_is_unfinished_until_complete_or_failed_is_true():
    facts = job_facts(job([{"type": "Suspended", "status": "True"}, {"type": "Complete", "status": "False"}]))
    assert (facts.job_id, facts.name, facts.outcome, facts.finished_at) == (7, "rsv-7", "", None)


def test_a_complete_job_and_a_failed_job_say_when_and_why():
    done = job_facts(job([{"type": "Complete", "status": "True", "lastTransitionTime": "2026-03-01T12:00:00Z"}]))
    assert (done.outcome, done.finished_at) == ("Complete", at("2026-03-01T12:00:00Z"))
    failed = job_facts(
        job([{"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "Job was active longer"}])
    )
    assert (failed.outcome, failed.reason, failed.message) == ("Failed", "DeadlineExceeded", "Job was active longer")


def held(raw: dict, *, deleting: bool = False) -> dict:
    raw["metadata"]["finalizers"] = ["batch.kubernetes.io/job-tracking", "reservoir.io/usage"]
    if deleting:
        raw["metadata"]["deletionTimestamp"] = "2026-03-01T11:00:00Z"
    return raw


SCHEDULED = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-03-01T10:00:05Z"}]


def test_a_held_pod_is_released_only_once_it_is_deleted_and_its_gpu_time_is_final():
    running = pod_facts(held(pod(phase="Running", conditions=SCHEDULED)))
    assert running.held_for_usage and not running.usage_final and not running.releasable
    # Deleted while it runs: held until it has terminated, so its finish time is recorded first.
    stopping = pod_facts(held(pod(phase="Running", conditions=SCHEDULED), deleting=True))
    assert stopping.deleting and not stopping.releasable
    for phase in ("Succeeded", "Failed"):
        # Ended and staying beside its Job: its GPU time is final, but the finalizer stays until it is deleted.
        ended = pod_facts(held(pod(phase=phase, conditions=SCHEDULED)))
        assert ended.usage_final and not ended.releasable
        deleted = pod_facts(held(pod(phase=phase, conditions=SCHEDULED), deleting=True))
        assert deleted.usage_final and deleted.releasable


def test_a_pod_deleted_before_it_was_bound_is_released_it_never_held_a_gpu():
    waiting = pod_facts(held(pod(node="", phase="Pending")))
    assert not waiting.releasable  # it may still be bound
    deleted = pod_facts(held(pod(node="", phase="Pending"), deleting=True))
    assert deleted.usage_final and deleted.releasable


def test_a_pod_without_the_portals_finalizer_is_never_released():
    raw = pod(phase="Succeeded", conditions=SCHEDULED)
    raw["metadata"]["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    facts = pod_facts(raw)
    assert facts.usage_final and not facts.held_for_usage and not facts.releasable


def test_a_workload_held_by_the_budget_says_so_rather_than_kueues_admission_check_words():
    held = workload_facts(
        {
            "metadata": {"uid": "w1", "namespace": "team-a", "name": "job-rsv-7-x"},
            "status": {
                "conditions": [
                    {"type": "QuotaReserved", "status": "False", "message": "At least one admission check is false"}
                ],
                "admissionChecks": [
                    {
                        "name": "reservoir-budget",
                        "state": "Pending",
                        "message": "budget for May reached: ¥9.00 of ¥5.00",
                    }
                ],
            },
        }
    )
    assert held.message == "budget for May reached: ¥9.00 of ¥5.00"
