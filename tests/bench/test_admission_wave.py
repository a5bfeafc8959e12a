"""The admission benchmark's first wave (bench/admission_measure.py) is counted in the order Kueue takes the jobs:
by their Workloads' creation time, whole seconds, then by the Workloads' UIDs — not by when the benchmark created
them, which Kueue cannot see within a second. Counted the benchmark's way, a job behind one that does not fit in its
team's quota was counted as one that waits for nothing, and its 20-second wait for a slot set the phase's p99."""

from dataclasses import dataclass

from bench.admission_measure import first_wave, kueue_order


@dataclass
class Submitted:
    job_id: int
    team_index: int
    gpus: int


def workload(job_id: int, created: float) -> dict:
    return {"job": f"rsv-{job_id}", "created": created}


def test_jobs_created_in_the_same_second_are_in_the_wave_in_the_order_of_their_workloads_uids():
    # Team 0's quota is 4 GPUs: job 1 (2 GPUs) at second 100; jobs 2 (4 GPUs) and 3 (2 GPUs) both at second 101.
    # The benchmark created 3 before 2, but Kueue takes 2 first (UID "a…" before "b…"): 2 does not fit beside 1,
    # and 3, behind it in the strict queue, waits too. The wave is job 1 alone.
    jobs = [Submitted(1, 0, 2), Submitted(3, 0, 2), Submitted(2, 0, 4)]
    seen = {"c-1": workload(1, 100.0), "a-2": workload(2, 101.0), "b-3": workload(3, 101.0)}
    assert [s.job_id for s in first_wave(jobs, kueue_order(seen), quota=4)] == [1]
    # With the UIDs the other way round Kueue takes 3 first, and 1 and 3 fill the quota.
    seen = {"c-1": workload(1, 100.0), "b-2": workload(2, 101.0), "a-3": workload(3, 101.0)}
    assert [s.job_id for s in first_wave(jobs, kueue_order(seen), quota=4)] == [1, 3]


def test_each_team_has_its_own_wave_and_a_job_without_a_workload_ends_it():
    jobs = [Submitted(1, 0, 1), Submitted(2, 1, 1), Submitted(3, 0, 1), Submitted(4, 1, 1)]
    seen = {"u1": workload(1, 1.0), "u2": workload(2, 1.0), "u4": workload(4, 3.0)}  # job 3 has no Workload yet
    assert sorted(s.job_id for s in first_wave(jobs, kueue_order(seen), quota=8)) == [1, 2, 4]


def test_a_job_whose_workload_was_made_again_keeps_its_first_place():
    order = kueue_order({"late": workload(7, 50.0), "early": workload(7, 10.0), "other": workload(8, 20.0)})
    assert order == {7: (10.0, "early"), 8: (20.0, "other")}
