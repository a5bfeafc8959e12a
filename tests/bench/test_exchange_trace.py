"""The lending benchmark's traces (bench/exchange_trace.py): pure functions, no cluster."""

from bench.exchange_trace import RUN_SPAN, SIZES, make_shift_trace, make_trace, reservation_sizes, trace_summary

DAY = 150.0


def test_reservations_are_the_shares_of_the_pool():
    assert reservation_sizes(4) == [16, 8, 8]
    assert sum(reservation_sizes(5)) == 40


def test_each_team_offers_the_peak_factor_times_its_reservation_in_its_third_of_the_day():
    reservations = [16, 8, 8]
    trace = make_shift_trace(reservations, DAY, peak_factor=2.0, night_load=0.1, soft_share=0.5, seed=7)
    third = DAY / 3
    biggest_job = max(g for g, _ in SIZES) * round(DAY / 6 * RUN_SPAN[1])
    for team, reserved in enumerate(reservations):
        jobs = [job for job in trace if job.team == team]
        by_day = [job for job in jobs if team * third <= job.at < (team + 1) * third]
        wanted = 2.0 * reserved * third
        offered = sum(job.gpus * job.run_seconds for job in by_day)
        assert wanted <= offered < wanted + biggest_job
        at_night = sum(job.gpus * job.run_seconds for job in jobs if job not in by_day)
        assert 0.1 * reserved * 2 * third <= at_night < 0.1 * reserved * 2 * third + 2 * biggest_job
    summary = trace_summary(trace, DAY, reservations)
    assert [team["day_load_over_reservation"] for team in summary["teams"]] == [
        round(team["day_gpu_seconds"] / (reserved * third), 2)
        for team, reserved in zip(summary["teams"], reservations, strict=True)
    ]
    assert all(2.0 <= team["day_load_over_reservation"] < 2.2 for team in summary["teams"])


def test_the_shift_trace_is_the_same_for_the_same_seed_and_in_time_order():
    one = make_shift_trace([16, 8, 8], DAY, 2.0, 0.1, 0.5, seed=3)
    assert one == make_shift_trace([16, 8, 8], DAY, 2.0, 0.1, 0.5, seed=3)
    assert one != make_shift_trace([16, 8, 8], DAY, 2.0, 0.1, 0.5, seed=4)
    assert [job.index for job in one] == list(range(len(one)))
    assert [job.at for job in one] == sorted(job.at for job in one)
    assert {job.gpus for job in one} <= {g for g, _ in SIZES}


def test_the_earlier_uniform_trace_is_still_reachable_and_unchanged():
    trace = make_trace(36, DAY, 0.5, 7)
    assert len(trace) == 36
    assert sum(job.gpus * job.run_seconds for job in trace) == 3025  # docs/benchmarks.md's earlier runs
