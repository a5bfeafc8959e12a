"""The admission benchmark's first wave (bench/admission_measure.py) is counted in the order Kueue takes the jobs:
by their Workloads' creation time, whole seconds, then — within a second — first the jobs admitted before any job of
their team finished, in the order Kueue reserved their quota (the order they reached its queue: Kueue's own
tie-break, the UID, orders only what is in the queue at a scheduling cycle), then those that waited for a slot
together, by UID. Counted the benchmark's way, or by UID, a job behind one that does not fit in its team's quota,
or whose slot a same-second job queued first had taken, was counted as one that waits for nothing, and its
20-second wait for a slot set the phase's p99."""

from dataclasses import dataclass

from bench.admission_floor import FLOOR_ID_BASE
from bench.admission_measure import first_wave, kueue_order

INF = float("inf")


@dataclass
class Submitted:
    job_id: int
    team_index: int
    gpus: int


def workload(
    job_id: int, created: float, reserved: float | None = None, finished: float | None = None, namespace: str = "t0"
) -> dict:
    seen = {"job": f"rsv-{job_id}", "namespace": namespace, "created": created}
    # Each condition: its time (whole seconds), and when the observer saw it.
    if reserved is not None:
        seen["QuotaReserved"] = [int(reserved), reserved]
    if finished is not None:
        seen["Finished"] = [int(finished), finished]
    return seen


def test_jobs_created_in_the_same_second_are_in_the_wave_in_the_order_kueue_reserved_their_quota():
    # Team 0's quota is 4 GPUs: job 1 (2 GPUs) at second 100; jobs 2 and 3 (2 GPUs each) both at second 101. Job 2's
    # UID sorts first, but job 3 reached the queue first and took the last 2 GPUs at 101.3; job 2 waited for job 1 to
    # finish (reserved at 125). The wave is jobs 1 and 3: job 2's wait is for a slot, not the portal's.
    jobs = [Submitted(1, 0, 2), Submitted(2, 0, 2), Submitted(3, 0, 2)]
    first = workload(1, 100.0, 100.2, finished=124.0)
    seen = {"c-1": first, "a-2": workload(2, 101.0, 125.0), "b-3": workload(3, 101.0, 101.3)}
    assert [s.job_id for s in first_wave(jobs, kueue_order(seen), quota=4)] == [1, 3]
    # Reserved the other way round, job 2 is in the wave.
    seen = {"c-1": first, "a-2": workload(2, 101.0, 101.3), "b-3": workload(3, 101.0, 125.0)}
    assert [s.job_id for s in first_wave(jobs, kueue_order(seen), quota=4)] == [1, 2]


def test_same_second_jobs_that_both_waited_for_a_slot_are_in_the_queues_uid_order_whatever_was_seen_first():
    # Job 2 (4 GPUs, UID "a…") heads the strict queue and does not fit beside job 1; job 3 (1 GPU) waits behind it.
    # Job 1 finishes at 121 and both are reserved in one moment, job 3 seen a hair first. Job 3 waited for job 2, a
    # job that waited for a slot: neither is in the wave.
    jobs = [Submitted(1, 0, 2), Submitted(2, 0, 4), Submitted(3, 0, 1)]
    seen = {
        "c-1": workload(1, 100.0, 100.2, finished=121.0),
        "a-2": workload(2, 101.0, 121.31),
        "b-3": workload(3, 101.0, 121.30),
    }
    assert [s.job_id for s in first_wave(jobs, kueue_order(seen), quota=4)] == [1]
    # Another team's finish, or the other phase's in this team's namespace, says nothing of this team's queue in this
    # phase: reserved before its own first finish, at once.
    seen["c-1"] = workload(1, 100.0, 100.2, finished=130.0)
    seen["d-4"] = workload(4, 99.0, 99.1, finished=110.0, namespace="t1")
    seen["e-floor"] = workload(FLOOR_ID_BASE + 1, 50.0, 50.1, finished=70.0)
    assert [s.job_id for s in first_wave(jobs, kueue_order(seen), quota=4)] == [1, 3]


def test_a_job_never_admitted_comes_after_the_admitted_ones_of_its_second_and_the_uid_breaks_what_is_left():
    order = kueue_order({"a": workload(1, 101.0), "b": workload(2, 101.0, 101.5), "c": workload(3, 101.0)})
    assert sorted(order, key=order.get) == [2, 1, 3]


def test_a_job_of_an_earlier_second_keeps_its_place_however_late_its_quota_was_reserved():
    # Job 1 was created a second before job 2 but admitted 20 s later: it stays first, so its wait is counted
    # (the wave never drops a job for having been slow).
    jobs = [Submitted(1, 0, 2), Submitted(2, 0, 2)]
    seen = {"u1": workload(1, 100.0, 121.0), "u2": workload(2, 101.0, 101.2)}
    assert [s.job_id for s in first_wave(jobs, kueue_order(seen), quota=2)] == [1]


def test_each_team_has_its_own_wave_and_a_job_without_a_workload_ends_it():
    jobs = [Submitted(1, 0, 1), Submitted(2, 1, 1), Submitted(3, 0, 1), Submitted(4, 1, 1)]
    seen = {"u1": workload(1, 1.0), "u2": workload(2, 1.0), "u4": workload(4, 3.0)}  # job 3 has no Workload yet
    assert sorted(s.job_id for s in first_wave(jobs, kueue_order(seen), quota=8)) == [1, 2, 4]


def test_a_job_whose_workload_was_made_again_keeps_its_first_place():
    order = kueue_order({"late": workload(7, 50.0), "early": workload(7, 10.0, 10.5), "other": workload(8, 20.0)})
    assert order == {7: (10.0, 10.5, "early"), 8: (20.0, INF, "other")}
