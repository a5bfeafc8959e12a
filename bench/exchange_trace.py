"""The lending benchmark's synthetic day (bench/exchange.py): pure functions of a seed, no cluster.

``shifts`` (the default) follows seed 000: three teams work in three shifts; in each stretch of a team's day or night
it submits jobs at uniformly random moments until their GPU·s reach the stretch's load × its reservation × its
length, so the load is what the trace offers and the randomness is only in when, how big and how long. ``uniform``
is the earlier trace: three quarters of a team's jobs in its third of the day.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.pipeline import GPUS_PER_NODE

SHARES = (0.5, 0.25, 0.25)  # reservations, as shares of the reserved pool
SIZES = ((1, 40), (2, 35), (4, 25))  # GPUs per job and weight


@dataclass(frozen=True)
class TraceJob:
    index: int
    team: int
    at: float  # seconds after the replay's start
    gpus: int
    run_seconds: int
    soft: bool


def make_trace(jobs: int, day: float, soft_share: float, seed: int) -> list[TraceJob]:
    """The earlier trace (``--trace uniform``): `jobs` jobs, three quarters of a team's in its third of the day."""
    chooser = random.Random(seed)
    third = day / 3
    trace = []
    for index in range(jobs):
        team = chooser.choices(range(len(SHARES)), SHARES)[0]
        if chooser.random() < 0.75:
            at = team * third + chooser.uniform(0, third)
        else:  # off peak: one of the two other thirds
            other = chooser.choice([k for k in range(3) if k != team])
            at = other * third + chooser.uniform(0, third)
        trace.append(
            TraceJob(
                index=index,
                team=team,
                at=round(at, 2),
                gpus=chooser.choices([g for g, _ in SIZES], [w for _, w in SIZES])[0],
                run_seconds=max(5, round(third * chooser.uniform(0.6, 1.0))),
                soft=chooser.random() < soft_share,
            )
        )
    return sorted(trace, key=lambda job: (job.at, job.index))


RUN_SPAN = (0.6, 1.0)  # a job's run time, as a share of a sixth of the day


def make_shift_trace(
    reservations: list[int], day: float, peak_factor: float, night_load: float, soft_share: float, seed: int
) -> list[TraceJob]:
    """Seed 000's day (``--trace shifts``): team k works in the k-th third of the day. In each stretch of a team's
    day or night it submits jobs, at uniformly random moments of the stretch, until their GPU·s reach the stretch's
    load × its reservation × its length (`peak_factor` by day, `night_load` at night): the load is what the trace
    offers, the randomness is only in when, how big and how long."""
    chooser = random.Random(seed)
    third = day / 3
    run_base = day / 6
    trace = []
    for team, reserved in enumerate(reservations):
        for start, end, load in (
            (0.0, team * third, night_load),
            (team * third, (team + 1) * third, peak_factor),
            ((team + 1) * third, day, night_load),
        ):
            wanted = load * reserved * (end - start)
            offered = 0
            while offered < wanted:
                job = TraceJob(
                    index=0,
                    team=team,
                    at=round(chooser.uniform(start, end), 2),
                    gpus=chooser.choices([g for g, _ in SIZES], [w for _, w in SIZES])[0],
                    run_seconds=max(3, round(run_base * chooser.uniform(*RUN_SPAN))),
                    soft=chooser.random() < soft_share,
                )
                offered += job.gpus * job.run_seconds
                trace.append(job)
    trace.sort(key=lambda job: (job.at, job.team))
    return [TraceJob(index, j.team, j.at, j.gpus, j.run_seconds, j.soft) for index, j in enumerate(trace)]


def reservation_sizes(reserved_nodes: int) -> list[int]:
    """The teams' reservations: SHARES of the reserved pool, the rounding remainder to the first team."""
    contract = reserved_nodes * GPUS_PER_NODE
    gpus = [int(contract * share) for share in SHARES]
    gpus[0] += contract - sum(gpus)
    return gpus


def trace_summary(trace: list[TraceJob], day: float, reservations: list[int]) -> dict:
    """What the trace offers: GPU·s per team by its day and by its night, and what is submitted to run past the
    day (work that cannot count in the utilisation window, whatever the scheduling)."""
    third = day / 3
    teams = []
    for team, reserved in enumerate(reservations):
        jobs = [job for job in trace if job.team == team]
        by_day = sum(j.gpus * j.run_seconds for j in jobs if team * third <= j.at < (team + 1) * third)
        total = sum(j.gpus * j.run_seconds for j in jobs)
        teams.append(
            {
                "jobs": len(jobs),
                "reserved_gpus": reserved,
                "day_gpu_seconds": by_day,
                "night_gpu_seconds": total - by_day,
                "day_load_over_reservation": round(by_day / (reserved * third), 2) if reserved else None,
            }
        )
    past = sum(max(0.0, job.at + job.run_seconds - day) * job.gpus for job in trace)
    return {"teams": teams, "gpu_seconds_after_window_even_without_waiting": round(past, 1)}
