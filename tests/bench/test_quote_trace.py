"""The calibration replay's traces and scoring (bench/quote_trace.py): pure functions, no cluster."""

import random

import pytest

from bench.quote_trace import (
    BASELINE_ADMISSIONS,
    GRACE_SECONDS,
    MAX_RUN_MINUTES,
    MEAN_RUN_FRACTION,
    SHAPES,
    STEADY_LOAD,
    TRACES,
    Outcome,
    baseline_start,
    clopper_pearson,
    make_trace,
    mean_time_between,
    reservations,
    run_fraction,
    score,
    trace_summary,
    warm_up_history,
    window_seconds,
)

RESERVED = 128


@pytest.mark.parametrize("kind", TRACES)
def test_a_trace_has_the_jobs_asked_for_in_time_order_each_ending_before_its_maximum(kind):
    trace = make_trace(kind, 300, RESERVED, seed=7)
    assert len(trace) == 300
    assert [job.index for job in trace] == list(range(300))
    assert [job.at for job in trace] == sorted(job.at for job in trace)
    assert all(0 < job.run_seconds < job.max_run_minutes * 60 for job in trace)
    assert {job.max_run_minutes for job in trace} <= {minutes for minutes, _ in MAX_RUN_MINUTES}
    assert trace == make_trace(kind, 300, RESERVED, seed=7)
    assert trace != make_trace(kind, 300, RESERVED, seed=8)
    # Runs end early by varying amounts: some far before their maximum, some near it.
    fractions = [job.run_seconds / (job.max_run_minutes * 60) for job in trace]
    assert min(fractions) < 0.15 and max(fractions) > 0.85
    assert abs(sum(fractions) / len(fractions) - MEAN_RUN_FRACTION) < 0.05


def test_the_steady_trace_stays_below_every_reservation():
    trace = make_trace("steady", 300, RESERVED, seed=7)
    summary = trace_summary(trace, "steady", RESERVED)
    for team in summary["teams"].values():
        assert 0.5 < team["load_over_reservation"] < 0.95
    assert summary["soft_jobs"] == 0 and summary["priorities"] == {"50": 300}
    assert window_seconds("steady", 300, RESERVED) == pytest.approx(summary["window_seconds"], rel=0.05)
    assert STEADY_LOAD < 1


def test_the_burst_overfills_team_a_early_and_team_b_comes_back_late():
    trace = make_trace("burst", 300, RESERVED, seed=7)
    window = window_seconds("burst", 300, RESERVED)
    a_gpus, b_gpus = reservations(SHAPES["burst"], RESERVED)
    early_a = sum(job.gpus * job.run_seconds for job in trace if job.team == 0 and job.at < 0.7 * window)
    assert early_a / (a_gpus * 0.7 * window) > 1.5  # well above its reservation: it borrows and spills
    assert any(job.soft for job in trace if job.team == 0) and not any(job.soft for job in trace if job.team == 1)
    late_b = [job for job in trace if job.team == 1 and job.at >= 0.4 * window]
    early_b = [job for job in trace if job.team == 1 and job.at < 0.4 * window]
    assert len(late_b) > 4 * len(early_b)  # B reclaims what it lent, while A still bursts
    assert any(job.team == 0 and 0.4 * window < job.at < 0.7 * window for job in trace)
    assert b_gpus == a_gpus


def test_the_priority_trace_mixes_priorities_in_one_team_above_its_reservation():
    trace = make_trace("priority", 300, RESERVED, seed=7)
    summary = trace_summary(trace, "priority", RESERVED)
    assert set(summary["priorities"]) == {"0", "50", "100"}
    assert {job.priority for job in trace if job.team == 1} == {50}
    assert summary["teams"]["a"]["load_over_reservation"] > 1


def test_a_smoke_scale_shrinks_the_runs_and_the_window_not_the_maximum():
    full = make_trace("steady", 30, RESERVED, seed=7)
    small = make_trace("steady", 30, RESERVED, seed=7, run_scale=0.05)
    assert [job.max_run_minutes for job in small] == [job.max_run_minutes for job in full]
    assert max(job.run_seconds for job in small) < 10
    assert max(job.at for job in small) < 0.1 * max(job.at for job in full)


def test_the_warm_up_history_is_drawn_from_the_same_distribution_with_a_seed_of_its_own():
    history = warm_up_history("steady", 0, 2000, seed=7)
    assert len(history) == 2000
    fractions = [seconds / (minutes * 60) for _gpus, minutes, seconds in history]
    assert abs(sum(fractions) / len(fractions) - MEAN_RUN_FRACTION) < 0.02
    trace = make_trace("steady", 30, RESERVED, seed=7)
    assert [round(s) for _g, _m, s in history[:30]] != [job.run_seconds for job in trace]
    assert warm_up_history("steady", 1, 30, seed=7) != warm_up_history("steady", 0, 30, seed=7)


def test_stopped_pods_exit_at_once_or_within_their_grace_period():
    trace = make_trace("priority", 300, RESERVED, seed=7)
    stops = [job.stop_seconds for job in trace]
    assert all(0 <= stop <= GRACE_SECONDS for stop in stops)
    assert 0.45 < stops.count(0) / len(stops) < 0.75
    assert max(stops) > 0.8 * GRACE_SECONDS


def test_run_fractions_stay_inside_the_maximum():
    chooser = random.Random(1)
    assert all(0 < run_fraction(chooser) < 1 for _ in range(5000))


def test_the_baseline_is_the_jobs_ahead_times_the_recent_mean_time_between_admissions():
    admissions = [100.0, 110.0, 130.0]  # gaps 10 and 20: mean 15
    assert mean_time_between(admissions) == 15.0
    assert baseline_start(1000.0, 3, admissions) == 1045.0
    assert baseline_start(1000.0, 0, admissions) == 1000.0  # the head: now
    assert baseline_start(1000.0, 5, [100.0]) == 1000.0  # no rate yet: now
    many = [float(second) for second in range(0, 1000, 10)] + [1000.0 + 2 * k for k in range(BASELINE_ADMISSIONS)]
    assert mean_time_between(many) == 2.0  # only the most recent admissions count


def test_clopper_pearson_is_the_exact_binomial_interval():
    low, high = clopper_pearson(80, 100)
    assert low == pytest.approx(0.7082, abs=1e-4) and high == pytest.approx(0.8733, abs=1e-4)
    assert clopper_pearson(0, 10) == (0.0, pytest.approx(1 - 0.025**0.1, abs=1e-9))
    assert clopper_pearson(10, 10) == (pytest.approx(0.025**0.1, abs=1e-9), 1.0)
    assert clopper_pearson(0, 0) is None


def _outcome(*, started, low, estimate, high, baseline, submitted=0.0, starts_now=False):
    return Outcome(
        submitted=submitted,
        starts_now=starts_now,
        never=False,
        estimate=estimate,
        low=low,
        high=high,
        baseline=baseline,
        started=started,
    )


def test_a_real_start_is_the_middle_of_what_is_left_of_its_second():
    # started_at 10 (the cluster's second): the real start lay in [10, 11), taken as 10.5.
    assert _outcome(started=10, low=10.2, estimate=10.5, high=10.8, baseline=0).real_start == 10.5
    # started_at 10.4: the submission, later than the pod's truncated bind time: the real start lay in [10.4, 11).
    assert _outcome(started=10.4, low=0, estimate=0, high=0, baseline=0).real_start == pytest.approx(10.7)
    assert _outcome(started=10, low=10.2, estimate=10.5, high=10.8, baseline=0).held()
    assert not _outcome(started=10, low=10.6, estimate=11, high=12, baseline=0).held()
    assert not _outcome(started=10, low=5, estimate=7, high=10.4, baseline=0).held()
    assert not _outcome(started=None, low=5, estimate=7, high=10, baseline=0).held()
    # What a watch on the cluster saw (the millisecond clock) comes before it, and when the portal saw it Running
    # (what its pages say, what a quote promises) first.
    observed = Outcome(0.0, True, False, 0.5, 0.2, 0.8, 0.0, started=10, observed=10.73)
    assert observed.real_start == 10.73 and not observed.held()
    seen = Outcome(0.0, True, False, 0.5, 0.2, 0.8, 0.0, started=10, observed=10.73, seen=10.85)
    assert seen.real_start == 10.85
    assert score([seen, observed])["sync_lag_s"] == {"p50": 0.12, "p90": 0.12}


def test_score_gives_coverage_width_starts_now_and_the_error_against_the_baseline():
    outcomes = [
        # Quoted "starts now": one Running within 60 s, one not.
        _outcome(started=1, low=1, estimate=2, high=3, baseline=0, starts_now=True),
        _outcome(started=90, low=1, estimate=2, high=3, baseline=0, starts_now=True),
        # Queued: two held by their interval, one not.
        _outcome(started=99, low=90, estimate=100, high=120, baseline=160),
        _outcome(started=109, low=100, estimate=110, high=130, baseline=30),
        _outcome(started=299, low=150, estimate=200, high=250, baseline=0),
    ]
    figures = score(outcomes)
    assert figures["coverage"] == 0.6 and figures["quoted"] == 5
    assert figures["coverage_ci95"] == [round(b, 3) for b in clopper_pearson(3, 5)]
    assert figures["median_width_s"] == 30.0  # widths 2, 2, 30, 30, 100
    assert figures["starts_now_jobs"] == 2 and figures["starts_now_running_within_60s"] == 0.5
    assert figures["coverage_starts_now"] == 0.5 and figures["coverage_queued"] == round(2 / 3, 3)
    # Real starts are the middle of their second: 1.5, 90.5, 99.5, 109.5, 299.5. Errors |start - estimate|: 0.5,
    # 88.5, 0.5, 0.5, 99.5 -> median 0.5; the baseline's: 1.5, 90.5, 60.5, 79.5, 299.5 -> 79.5.
    assert figures["median_abs_error_s"] == 0.5 and figures["baseline_median_abs_error_s"] == 79.5
    assert figures["error_ratio"] == 0.006
    assert figures["queued_median_abs_error_s"] == 0.5 and figures["queued_baseline_median_abs_error_s"] == 79.5
    assert figures["targets_met"] == {"coverage": False, "starts_now": False, "error_vs_baseline": True}


def test_a_job_that_never_started_is_a_miss_and_a_job_that_cannot_start_is_not_scored():
    never = Outcome(0.0, False, True, None, None, None, 0.0, None)
    missing = _outcome(started=None, low=1, estimate=2, high=3, baseline=0)
    held = [_outcome(started=2, low=1, estimate=2.5, high=4, baseline=30) for _ in range(4)]
    figures = score([never, missing, *held])
    assert figures["cannot_start_quotes"] == 1 and figures["never_started"] == 1
    assert figures["coverage"] == 0.8
    assert figures["targets_met"]["coverage"] is True
