"""The quote (jobs/quote.py), pure: a team's queue replayed in Kueue's order against its room, its running jobs'
deadlines, reclaims and its history of run times. No database."""

import random
from datetime import UTC, datetime, timedelta

from django.utils import translation

from jobs.quote import (
    ESTIMATE,
    HIGH,
    LOW,
    PRIOR,
    STARTS_NOW_WITHIN,
    STOPPING_ANY,
    Holding,
    RunHistory,
    StartDelay,
    StopTimes,
    TeamQueue,
    Waiting,
    arrivals,
    quantile_index,
    quote_queue,
)
from jobs.quote_words import basis_in_words, quote_in_words

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
HOUR = 3600
POOL, SPILL = 1, 2


def _history(*fractions):
    return RunHistory(fractions)


def _queue(
    *,
    room=None,
    holding=(),
    waiting=(),
    history=None,
    best_effort=False,
    reclaim=None,
    delay=None,
    reserved=None,
    arrivals=None,
):
    return TeamQueue(
        team_id=7,
        best_effort=best_effort,
        room=room if room is not None else {POOL: 0},
        holding=list(holding),
        waiting=list(waiting),
        history=history or RunHistory.fitted([]),
        reclaim=reclaim or {},
        pool_names={POOL: "a800", SPILL: "elastic"},
        delay=delay or StartDelay(),
        reserved=reserved or {},
        arrivals=arrivals or [],
    )


INSTANT = StartDelay.fitted([0.0] * 10)  # the path measured on ten starts, each Running at once


def test_a_job_that_fits_in_the_room_starts_now():
    waiting = [Waiting(1, 4, HOUR, (POOL,))]
    quotes = quote_queue(_queue(room={POOL: 8}, waiting=waiting, delay=INSTANT), now=NOW)
    assert quotes[1].starts_now and quotes[1].estimate == quotes[1].low == quotes[1].high == NOW
    with translation.override("en"):
        assert quote_in_words(quotes[1], now=NOW) == "starts now"
        assert basis_in_words(quotes[1].basis, now=NOW) == "your team has room for 8 more GPUs in a800 now"


def test_starts_now_before_any_start_is_measured_spans_its_promise_not_an_instant():
    # No start measured on the platform yet: how long the path takes is unknown. The interval was [now, now], which
    # no real start falls on (the first ten starts of every replay were misses); it is the promise, a minute.
    quotes = quote_queue(_queue(room={POOL: 8}, waiting=[Waiting(1, 4, HOUR, (POOL,))]), now=NOW)
    quote = quotes[1]
    assert quote.starts_now and (quote.low, quote.estimate) == (NOW, NOW)
    assert quote.high == NOW + STARTS_NOW_WITHIN
    with translation.override("en"):
        assert "no start measured on this platform yet: Running within 60 s" in basis_in_words(quote.basis, now=NOW)
        assert quote_in_words(quote, now=NOW) == "starts now"
    with translation.override("zh-hans"):
        assert "60" in basis_in_words(quote.basis, now=NOW) and "measured" not in basis_in_words(quote.basis, now=NOW)
    # A job that waits is quoted as before: its interval comes from the queue, not from the promise.
    busy = [Holding(POOL, 8, NOW - timedelta(minutes=10), HOUR)]
    waits = quote_queue(_queue(room={POOL: 0}, holding=busy, waiting=[Waiting(1, 4, HOUR, (POOL,))]), now=NOW)[1]
    assert not waits.starts_now and not any(item["say"] == "unmeasured" for item in waits.basis)


def test_the_interval_s_order_statistics_hold_a_new_draw_at_least_80_percent_of_the_time():
    # Of n values, a new draw from the same distribution falls below the k-th smallest with probability k/(n+1):
    # each bound leaves out at most 10 % (int(0.1 n) took the 6th of 50, leaving out 6/51 = 11.8 %).
    for size in range(9, 301):
        low, high = quantile_index(LOW, size) + 1, quantile_index(HIGH, size) + 1  # ranks, 1-based
        assert low / (size + 1) <= 0.1 and (size + 1 - high) / (size + 1) <= 0.1, size
        assert (high - low) / (size + 1) >= 0.8 - 1e-9, size
        assert quantile_index(ESTIMATE, size) == size // 2, size  # the median as before (an even count's upper)
    assert (quantile_index(LOW, 50), quantile_index(HIGH, 50)) == (4, 45)


def test_a_job_waiting_for_running_jobs_gets_an_interval_from_the_history_and_the_deadline_as_latest():
    # Two running jobs of 8 GPUs, each started an hour ago with 10 h maximum; the team's jobs ran 20 %..100 %.
    started = NOW - timedelta(hours=1)
    history = _history(*[step / 10 for step in range(2, 11)] * 2)
    holding = [Holding(POOL, 8, started, 10 * HOUR), Holding(POOL, 8, started, 10 * HOUR)]
    quotes = quote_queue(_queue(holding=holding, waiting=[Waiting(5, 16, HOUR, (POOL,))], history=history), now=NOW)
    quote = quotes[5]
    assert not quote.starts_now
    assert NOW < quote.low <= quote.estimate <= quote.high <= quote.latest
    assert quote.latest == started + timedelta(hours=10)  # both must end: the later deadline
    assert quote.estimate == started + timedelta(hours=6)  # the median of runs longer than 10 %: 60 %
    with translation.override("en"):
        words = basis_in_words(quote.basis, now=NOW)
    assert "your team's running jobs free 16 GPUs by 21:00 UTC at the latest" in words
    assert "run times fitted on your team's 18 finished jobs" in words


def test_the_history_only_counts_runs_longer_than_what_a_job_has_run_already():
    history = _history(0.1, 0.2, 0.3, 0.9, 1.0)
    assert history.quantile(0.5) == 0.3
    assert history.quantile(0.5, after=0.5) == 1.0
    assert history.quantile(0.0, after=0.5) == 0.9
    assert history.quantile(0.5, after=1.0) == 1.0  # past every recorded run: the rest, spread evenly
    assert history.quantile(1.0) == 1.0
    # Fractions out of [0, 1] (a clock's skew) are held to it; in order whatever the order given.
    assert RunHistory([1.5, -0.2, 0.5]).fractions == [0.0, 0.5, 1.0]
    assert RunHistory([0.7, 0.2]).fractions == [0.2, 0.7]


def test_few_finished_jobs_give_the_wide_prior_and_say_so():
    history = RunHistory.fitted([0.5] * 3)
    assert history.prior and history.size == 0 and history.fractions == list(PRIOR)
    holding = [Holding(POOL, 4, NOW, 10 * HOUR)]
    quote = quote_queue(_queue(holding=holding, waiting=[Waiting(1, 4, HOUR, (POOL,))], history=history), now=NOW)[1]
    assert quote.high - quote.low >= timedelta(hours=7)
    with translation.override("en"):
        assert "few finished jobs yet" in basis_in_words(quote.basis, now=NOW)


def test_jobs_ahead_are_admitted_first_and_their_gpus_counted_in_the_basis():
    holding = [Holding(POOL, 8, NOW - timedelta(hours=2), 4 * HOUR)]  # ends by 14:00 at the latest
    waiting = [Waiting(1, 8, 2 * HOUR, (POOL,)), Waiting(2, 8, HOUR, (POOL,))]
    quotes = quote_queue(_queue(holding=holding, waiting=waiting, history=_history(*[1.0] * 10)), now=NOW)
    assert quotes[1].estimate == NOW + timedelta(hours=2)
    assert quotes[2].estimate == NOW + timedelta(hours=4)  # after job 1 has run its two hours
    with translation.override("en"):
        assert basis_in_words(quotes[2].basis, now=NOW).startswith("1 job ahead of you in your team's queue, 8 GPUs")


def test_strict_order_keeps_a_small_job_behind_a_large_head_and_best_effort_lets_it_pass():
    waiting = [Waiting(1, 8, HOUR, (POOL,)), Waiting(2, 2, HOUR, (POOL,))]
    holding = [Holding(POOL, 8, NOW, HOUR)]
    strict = quote_queue(_queue(room={POOL: 4}, holding=holding, waiting=waiting), now=NOW)
    best = quote_queue(_queue(room={POOL: 4}, holding=holding, waiting=waiting, best_effort=True), now=NOW)
    assert not strict[2].starts_now
    assert best[2].starts_now and not best[1].starts_now


def test_lent_gpus_come_back_within_the_grace_period():
    quote = quote_queue(
        _queue(room={POOL: 0}, reclaim={POOL: (8, 60)}, waiting=[Waiting(1, 8, HOUR, (POOL,))]), now=NOW
    )[1]
    assert not quote.starts_now
    # A stopped pod exits anywhere between at once and its grace period: the interval spans it, the latest is all.
    assert (quote.low, quote.estimate, quote.high) == tuple(NOW + timedelta(seconds=s) for s in (6, 30, 54))
    assert quote.latest == NOW + timedelta(seconds=60)
    with translation.override("en"):
        assert "8 borrowed GPUs of your reservation return within 60 s" in basis_in_words(quote.basis, now=NOW)


def test_lent_gpus_come_back_as_fast_as_the_platform_s_stopped_pods_exited():
    # Six in ten recent stops exited at once, the others late in their grace period.
    stops = StopTimes.fitted([0.0] * 6 + [0.5, 0.8, 0.9, 1.0])
    queue = _queue(room={POOL: 0}, reclaim={POOL: (8, 60)}, waiting=[Waiting(1, 8, HOUR, (POOL,))])
    queue.stops = stops
    quote = quote_queue(queue, now=NOW)[1]
    assert (quote.low, quote.estimate, quote.high) == (NOW, NOW, NOW + timedelta(seconds=60))
    assert quote.latest == NOW + timedelta(seconds=60)


def test_stop_times_need_ten_stops_and_the_latest_start_waits_the_whole_grace_period():
    assert StopTimes.fitted([0.0] * 9).fractions == []
    assert StopTimes().quantile(0.25) == 0.25  # evenly, without history
    measured = StopTimes.fitted([0.0] * 10)
    assert measured.quantile(0.9) == 0.0 and measured.quantile(1.0) == 1.0


def test_a_soft_job_starts_now_in_a_spill_pool_with_room():
    quote = quote_queue(_queue(room={POOL: 0, SPILL: 8}, waiting=[Waiting(1, 4, HOUR, (POOL, SPILL))]), now=NOW)[1]
    assert quote.starts_now and quote.pool_id == SPILL
    with translation.override("en"):
        assert "in elastic, a spill pool" in basis_in_words(quote.basis, now=NOW)


def test_a_job_larger_than_the_team_can_hold_never_starts_and_blocks_nobody():
    waiting = [Waiting(1, 64, HOUR, (POOL,)), Waiting(2, 4, HOUR, (POOL,))]
    quotes = quote_queue(_queue(room={POOL: 8}, waiting=waiting), now=NOW)
    assert quotes[1].never and quotes[1].sooner_than(quotes[2], by=timedelta(minutes=5)) is False
    assert quotes[2].starts_now and quotes[2].sooner_than(quotes[1], by=timedelta(minutes=5))
    with translation.override("en"):
        assert quote_in_words(quotes[1], now=NOW) == "cannot start with your team's quota"


def test_an_interval_reads_as_likely_with_its_bounds_in_english_and_chinese(compiled_translations):
    holding = [Holding(POOL, 8, NOW, 2 * HOUR)]
    quote = quote_queue(
        _queue(holding=holding, waiting=[Waiting(1, 8, HOUR, (POOL,))], history=_history(*[0.5] * 5, *[1.0] * 5)),
        now=NOW,
    )[1]
    with translation.override("en"):
        assert quote_in_words(quote, now=NOW) == "likely 14:00 UTC (80 %: 13:00–14:00)"
    with translation.override("zh-hans"):
        words = quote_in_words(quote, now=NOW)
    assert "14:00" in words and "likely" not in words


def test_the_start_delay_moves_a_job_that_starts_now_by_its_quantiles():
    # The path took 1..10 s from submission to a running pod on the team's recent starts (without waiting for room).
    delay = StartDelay.fitted(range(1, 11))
    quotes = quote_queue(_queue(room={POOL: 8}, waiting=[Waiting(1, 4, HOUR, (POOL,))], delay=delay), now=NOW)
    quote = quotes[1]
    assert quote.starts_now  # Kueue admits it at once: it still starts now, a few seconds later
    # Of ten values, the 1st and the 10th bound the interval (each leaves out 1/11 of new draws), the 6th the median.
    assert (quote.low, quote.estimate, quote.high) == tuple(NOW + timedelta(seconds=s) for s in (1, 6, 10))
    # Too few starts measured: no delay assumed.
    assert StartDelay.fitted([3] * 9).quantile(0.5) == 0.0
    assert StartDelay([-1, 2]).seconds == [0.0, 2.0]  # clocks a little apart never make it negative


def test_a_submitted_job_that_starts_now_counts_the_path_s_delay_from_its_submission():
    delay = StartDelay.fitted([0.5] * 10)
    just = Waiting(1, 4, HOUR, (POOL,), submitted_at=NOW - timedelta(milliseconds=300))
    long_ago = Waiting(2, 2, HOUR, (POOL,), submitted_at=NOW - timedelta(seconds=2))
    preview = Waiting(None, 2, HOUR, (POOL,))
    quotes = quote_queue(_queue(room={POOL: 8}, waiting=[just, long_ago, preview], delay=delay), now=NOW)
    assert all(quote.starts_now for quote in quotes.values())
    # 0.5 s from its submission, 0.3 s ago; one past its delay already is due now; the preview's path begins now.
    assert quotes[1].estimate == quotes[1].high == NOW + timedelta(milliseconds=200)
    assert quotes[2].low == quotes[2].estimate == NOW
    assert quotes[None].estimate == NOW + timedelta(milliseconds=500)


def test_each_job_admitted_on_the_way_runs_from_its_start_after_the_delay():
    # One running job of 8 GPUs ends at NOW + 1 h at every level (its deadline: its runs all went to the end);
    # two 8-GPU jobs of an hour wait. With a delay of 30 s the first starts 30 s after the room frees, runs its
    # hour from then, and the second starts 30 s after that: each generation adds one delay.
    history = _history(*[1.0] * 10)
    holding = [Holding(POOL, 8, NOW - timedelta(hours=1), 2 * HOUR)]
    waiting = [Waiting(1, 8, HOUR, (POOL,)), Waiting(2, 8, HOUR, (POOL,))]
    delay = StartDelay.fitted([30] * 10)
    quotes = quote_queue(_queue(holding=holding, waiting=waiting, history=history, delay=delay), now=NOW)
    assert quotes[1].estimate == NOW + timedelta(hours=1, seconds=30) and not quotes[1].starts_now
    assert quotes[2].estimate == NOW + timedelta(hours=2, seconds=60)
    without = quote_queue(_queue(holding=holding, waiting=waiting, history=history), now=NOW)
    assert without[2].estimate == NOW + timedelta(hours=2)


def test_a_higher_priority_job_starts_now_by_preempting_a_lower_one_of_its_team_within_its_reservation():
    # The team's 8 reserved GPUs are held by a low-priority job (10 minutes into its hour; its runs go to the end).
    history = _history(*[1.0] * 10)
    holding = [Holding(POOL, 8, NOW - timedelta(minutes=10), HOUR, priority=0)]
    high = Waiting(1, 8, HOUR, (POOL,), priority=100)
    low = Waiting(2, 8, HOUR, (POOL,), priority=0)
    queue = _queue(holding=holding, waiting=[high, low], history=history, reserved={POOL: 8})
    quotes = quote_queue(queue, now=NOW)
    assert quotes[1].starts_now
    # The low job queued before the preemption goes first; the preempted one is requeued behind it.
    assert quotes[2].estimate == NOW + timedelta(hours=1)
    # Without preemption the high job would wait for the low one to end (50 minutes), and the low one after it.
    same = quote_queue(
        _queue(
            holding=holding, waiting=[Waiting(1, 8, HOUR, (POOL,), priority=0)], history=history, reserved={POOL: 8}
        ),
        now=NOW,
    )
    assert not same[1].starts_now and same[1].estimate == NOW + timedelta(minutes=50)


def test_preemption_never_goes_beyond_the_team_s_reservation():
    # Reserved 8, the low job holds 8 borrowed GPUs beside them (room 0): a 16-GPU high job cannot start by
    # preempting (it would need to borrow, and a job that borrows never preempts); an 8-GPU one can.
    history = _history(*[1.0] * 10)
    holding = [Holding(POOL, 8, NOW, HOUR, priority=0), Holding(POOL, 8, NOW, HOUR, priority=0)]
    big = quote_queue(
        _queue(holding=holding, waiting=[Waiting(1, 16, HOUR, (POOL,), 100)], history=history, reserved={POOL: 8}),
        now=NOW,
    )
    assert not big[1].starts_now and big[1].estimate == NOW + timedelta(hours=1)
    small = quote_queue(
        _queue(holding=holding, waiting=[Waiting(1, 8, HOUR, (POOL,), 100)], history=history, reserved={POOL: 8}),
        now=NOW,
    )
    assert small[1].starts_now


def test_a_job_that_preempts_starts_once_the_stopped_pods_have_exited_within_their_grace_period():
    history = _history(*[1.0] * 10)
    holding = [Holding(POOL, 8, NOW - timedelta(minutes=10), HOUR, priority=0, grace_seconds=60)]
    waiting = [Waiting(1, 8, HOUR, (POOL,), priority=100), Waiting(2, 8, HOUR, (POOL,), priority=0)]
    queue = _queue(holding=holding, waiting=waiting, history=history, reserved={POOL: 8}, delay=INSTANT)
    quotes = quote_queue(queue, now=NOW)
    quote = quotes[1]
    assert quote.starts_now  # Kueue admits it at once; its pods follow the stopped ones
    assert (quote.low, quote.estimate, quote.high) == tuple(NOW + timedelta(seconds=s) for s in (6, 30, 54))
    assert quotes[2].estimate == NOW + timedelta(hours=1, seconds=30)  # after the high job's hour from its start


def test_a_job_that_preempts_starts_at_once_on_a_node_with_room_while_the_stopped_pods_still_exit():
    history = _history(*[1.0] * 10)
    holding = [Holding(POOL, 8, NOW - timedelta(minutes=10), HOUR, priority=0, grace_seconds=60)]
    waiting = [Waiting(1, 8, HOUR, (POOL,), priority=100), Waiting(2, 8, HOUR, (POOL,), priority=100)]
    queue = _queue(holding=holding, waiting=waiting, history=history, reserved={POOL: 16}, delay=INSTANT)
    queue.room = {POOL: 8}
    queue.free_blocks = {POOL: 8}  # one node has 8 GPUs free now: the first job to need them takes them
    quotes = quote_queue(queue, now=NOW)
    assert (quotes[1].low, quotes[1].estimate, quotes[1].high) == (NOW, NOW, NOW)  # fits without preempting
    # The second preempts the low job and finds no node free now: it waits for the stopped pods.
    assert (quotes[2].low, quotes[2].high) == (NOW + timedelta(seconds=6), NOW + timedelta(seconds=54))
    queue.free_blocks = {POOL: 16}
    quotes = quote_queue(queue, now=NOW)
    assert quotes[2].starts_now and quotes[2].high == NOW


def test_a_job_on_reclaimed_gpus_starts_at_once_on_a_node_with_room_while_the_borrowers_still_stop():
    # 4 GPUs of room, 8 lent out (the borrowers take up to 60 s to stop): two jobs of 8 GPUs wait.
    waiting = [Waiting(1, 8, HOUR, (POOL,)), Waiting(2, 8, HOUR, (POOL,))]
    queue = _queue(room={POOL: 4}, reclaim={POOL: (8, 60)}, waiting=waiting, delay=INSTANT)
    queue.free_blocks = {POOL: 8}  # one node has 8 GPUs free now
    quotes = quote_queue(queue, now=NOW)
    # The first takes 4 of the lent GPUs back and runs on the free node at once.
    assert quotes[1].starts_now and (quotes[1].low, quotes[1].high) == (NOW, NOW)
    with translation.override("en"):
        assert "4 borrowed GPUs of your reservation return within 60 s" in basis_in_words(quotes[1].basis, now=NOW)
    # The second needs more than is left to reclaim (4): it waits for its team's jobs, the first's hour.
    assert not quotes[2].starts_now and quotes[2].low >= NOW + timedelta(minutes=1)
    # Without a node free for it now, the first waits for the borrowers' pods to exit, as before.
    queue.free_blocks = {POOL: 4}
    quotes = quote_queue(queue, now=NOW)
    assert not quotes[1].starts_now
    assert (quotes[1].low, quotes[1].high) == (NOW + timedelta(seconds=6), NOW + timedelta(seconds=54))


def test_the_team_s_next_submissions_are_its_recent_ones_again_as_far_ahead_as_they_go_back():
    job = Waiting(None, 8, HOUR, (POOL,), priority=100)
    submitted = [(NOW - timedelta(minutes=m), job) for m in (30, 20, 10)] + [(NOW + timedelta(minutes=1), job)]
    foreseen = arrivals(submitted, now=NOW, count=2, repeats=1)
    assert [at for at, _job in foreseen] == [NOW + timedelta(minutes=10), NOW + timedelta(minutes=20)]
    # Again and again: the next stretches of 20 minutes look like the last one.
    foreseen = arrivals(submitted, now=NOW, count=2, repeats=3)
    assert [at for at, _job in foreseen] == [NOW + timedelta(minutes=m) for m in (10, 20, 30, 40, 50, 60)]
    assert arrivals(submitted, now=NOW, count=0) == []


def test_the_foreseen_submissions_come_in_time_order_ties_in_the_order_they_were_made():
    # Stretch after stretch without sorting them all: the same list as sorting every foreseen submission by time
    # (a stable sort), with equal times, a submission at now itself and repeats.
    rng = random.Random(5)
    for _case in range(200):
        submitted = [
            (
                NOW - timedelta(seconds=rng.choice([0, 0, 5, 5, 30, 60, 90, 600])),
                Waiting(None, rng.randint(1, 8), HOUR, (POOL,)),
            )
            for _job in range(rng.randint(1, 25))
        ]
        count, repeats = rng.randint(1, 20), rng.randint(1, 5)
        recent = sorted(submitted, key=lambda pair: pair[0])[-count:]
        span = NOW - recent[0][0]
        stretches = repeats if span > timedelta(0) else 1
        every = [(NOW + (NOW - at) + k * span, job) for k in range(stretches) for at, job in recent]
        assert arrivals(submitted, now=NOW, count=count, repeats=repeats) == sorted(every, key=lambda pair: pair[0])


def test_a_higher_priority_submission_foreseen_passes_a_waiting_job_but_not_the_latest():
    # An 8-GPU job holds the team's room until NOW + 1 h (its runs go to the end); a low job waits for it. The team
    # submitted a high job of an hour ten minutes ago: one is foreseen at NOW + 10 min, and goes first.
    history = _history(*[1.0] * 10)
    holding = [Holding(POOL, 8, NOW - timedelta(hours=1), 2 * HOUR)]
    waiting = [Waiting(1, 8, HOUR, (POOL,), priority=0)]
    coming = arrivals(
        [(NOW - timedelta(minutes=10), Waiting(None, 8, HOUR, (POOL,), priority=100))], now=NOW, count=20, repeats=1
    )
    quote = quote_queue(_queue(holding=holding, waiting=waiting, history=history, arrivals=coming), now=NOW)[1]
    assert quote.estimate == NOW + timedelta(hours=2)
    # Level 1 foresees no submission: the latest start the jobs there now can cause (the interval's top beyond it).
    assert quote.latest == quote.high == NOW + timedelta(hours=2)
    alone = quote_queue(_queue(holding=holding, waiting=waiting, history=history), now=NOW)[1]
    assert alone.estimate == alone.latest == NOW + timedelta(hours=1)
    # A submission of the same priority queues behind it.
    same = arrivals([(NOW - timedelta(minutes=10), Waiting(None, 8, HOUR, (POOL,), priority=0))], now=NOW, count=20)
    assert quote_queue(_queue(holding=holding, waiting=waiting, history=history, arrivals=same), now=NOW)[
        1
    ].estimate == NOW + timedelta(hours=1)


def test_a_start_that_stops_others_first_takes_the_delay_of_such_starts():
    # Starts on free room took 0.2 s, starts that preempted or reclaimed 1.2 s (Kueue evicts, waits, then admits).
    delay = StartDelay.fitted([0.2] * 10, [(1.2, 1)] * 10)
    assert delay.quantile(0.5) == 0.2 and delay.quantile(0.5, stopping=1) == 1.2
    history = _history(*[1.0] * 10)
    holding = [Holding(POOL, 8, NOW - timedelta(minutes=10), HOUR, priority=0, grace_seconds=60)]
    waiting = [Waiting(1, 8, HOUR, (POOL,), priority=100), Waiting(2, 8, HOUR, (POOL,), priority=100)]
    queue = _queue(holding=holding, waiting=waiting, history=history, reserved={POOL: 16}, delay=delay)
    queue.room = {POOL: 8}
    queue.free_blocks = {POOL: 16}  # room on the nodes for both now
    quotes = quote_queue(queue, now=NOW)
    # The first fits in the team's room: the path of a start on free room.
    assert quotes[1].starts_now and quotes[1].estimate == NOW + timedelta(milliseconds=200)
    # The second preempts the low job: Kueue's cycle more.
    assert quotes[2].starts_now and quotes[2].estimate == NOW + timedelta(milliseconds=1200)
    with translation.override("en"):
        words = basis_in_words(quotes[2].basis, now=NOW)
    assert "Kueue stops 1 lower-priority job of your team for it, 8 GPUs" in words
    assert "room" not in words  # it has none: it starts by preempting
    with translation.override("zh-hans"):
        assert "Kueue 为它停下你团队中 1 个优先级更低的作业，共 8 个 GPU" in basis_in_words(quotes[2].basis, now=NOW)
    # A job on reclaimed GPUs stops the borrowers first: the same.
    reclaiming = _queue(room={POOL: 4}, reclaim={POOL: (8, 60)}, waiting=[Waiting(3, 8, HOUR, (POOL,))], delay=delay)
    reclaiming.free_blocks = {POOL: 8}
    quote = quote_queue(reclaiming, now=NOW)[3]
    assert quote.starts_now and quote.estimate == NOW + timedelta(milliseconds=1200)


def test_with_few_starts_that_stopped_others_such_a_start_takes_the_other_starts_delay():
    delay = StartDelay.fitted([0.2] * 10, [(1.2, 1)] * 9)
    assert delay.stopping == [] and delay.quantile(0.5, stopping=1) == 0.2
    # None on free room measured: none assumed.
    assert StartDelay.fitted([0.2] * 9, [(1.2, 1)] * 10).quantile(0.5) == 0.0


def test_a_start_that_stops_more_jobs_takes_the_delay_of_starts_that_stopped_as_many():
    """Kueue evicts each victim in a step of its own: starts that stopped one job and starts that stopped more are
    read apart once ten of each kind were measured; fewer, and all stopping starts are read together."""
    delay = StartDelay.fitted([0.2] * 10, [(0.8, 1)] * 10 + [(1.6, 2)] * 6 + [(1.8, 3)] * 4)
    assert delay.quantile(0.5, stopping=1) == 0.8
    assert delay.quantile(0.5, stopping=2) == delay.quantile(0.5, stopping=5) == 1.6  # two or more: one kind
    assert delay.quantile(0.5, stopping=STOPPING_ANY) == 1.6  # a reclaim: how many not known, all of them
    few = StartDelay.fitted([0.2] * 10, [(0.8, 1)] * 11 + [(1.6, 2)] * 9)
    assert few.quantile(0.5, stopping=2) == few.quantile(0.5, stopping=STOPPING_ANY) == 0.8
    # In the queue: two high jobs of 4 GPUs; Kueue stops the most recently started low jobs first: the two of 2 GPUs
    # for the first, the one of 4 for the second.
    holding = [
        Holding(POOL, 4, NOW - timedelta(minutes=10), HOUR, priority=0, grace_seconds=0),
        Holding(POOL, 2, NOW - timedelta(minutes=9), HOUR, priority=0, grace_seconds=0),
        Holding(POOL, 2, NOW - timedelta(minutes=8), HOUR, priority=0, grace_seconds=0),
    ]
    waiting = [Waiting(1, 4, HOUR, (POOL,), priority=100), Waiting(2, 4, HOUR, (POOL,), priority=100)]
    queue = _queue(holding=holding, waiting=waiting, history=_history(*[1.0] * 10), reserved={POOL: 8}, delay=delay)
    queue.room = {POOL: 0}
    queue.free_blocks = {POOL: 8}
    quotes = quote_queue(queue, now=NOW)
    stopped = [item["jobs"] for job_id in (1, 2) for item in quotes[job_id].basis if item["say"] == "preempts"]
    assert stopped == [2, 1]
    assert quotes[1].starts_now and quotes[1].estimate == NOW + timedelta(milliseconds=1600)
    assert quotes[2].starts_now and quotes[2].estimate == NOW + timedelta(milliseconds=800)


def test_a_job_that_preempts_jobs_with_long_grace_periods_does_not_start_now():
    """Kueue admits it at once, but its pods wait for the stopped ones to exit, up to ten minutes: "starts now" would
    promise a Running pod within the minute. It is quoted as any other start, and says why."""
    history = _history(*[1.0] * 10)
    holding = [Holding(POOL, 8, NOW - timedelta(minutes=10), HOUR, priority=0, grace_seconds=600)]
    waiting = [Waiting(1, 8, HOUR, (POOL,), priority=100)]
    quote = quote_queue(_queue(holding=holding, waiting=waiting, history=history, reserved={POOL: 8}), now=NOW)[1]
    assert not quote.starts_now
    assert (quote.low, quote.estimate, quote.high) == tuple(NOW + timedelta(seconds=s) for s in (60, 300, 540))
    with translation.override("en"):
        assert quote_in_words(quote, now=NOW) == "likely 12:05 UTC (80 %: 12:01–12:09)"
        assert "Kueue stops 1 lower-priority job of your team for it, 8 GPUs" in basis_in_words(quote.basis, now=NOW)


def test_a_job_on_several_nodes_is_not_judged_by_one_node_s_free_gpus():
    """Two pods of 2 GPUs need two nodes: a node with 4 GPUs free says nothing of a second one, so reclaiming lent
    GPUs for it is not taken to start it at once; one pod of 4 GPUs fits that node and is."""

    def quote(job):
        queue = _queue(room={POOL: 0}, reclaim={POOL: (8, 60)}, waiting=[job])
        queue.free_blocks = {POOL: 4}
        return quote_queue(queue, now=NOW)[1]

    assert quote(Waiting(1, 4, HOUR, (POOL,), per_node=4)).starts_now
    gang = quote(Waiting(1, 4, HOUR, (POOL,), per_node=2))
    assert not gang.starts_now and gang.high > NOW  # it waits for the borrowers' pods to stop
