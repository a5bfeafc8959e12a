"""The quote's inputs from the database (jobs/quote_selectors.py), the quotes kept when the queue moves
(services.record_quotes), and the submit preview's alternatives."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone, translation

from jobs import services
from jobs.choices import JobState, Placement, Priority
from jobs.models import Job, JobEvent, JobQuote, Workload
from jobs.quote import DELAY_SIZE, STARTS_NOW_WITHIN
from jobs.quote_preview import preview_quote
from jobs.quote_selectors import (
    quotes_for,
    recent_submissions,
    run_fractions,
    start_delays,
    stop_fractions,
    team_queues,
    worded_quotes,
)
from jobs.specs import JobSpec
from pools.choices import Lending, PoolKind
from tests.factories import (
    JobFactory,
    NodeFactory,
    PodFactory,
    PoolFactory,
    QuotaFactory,
    ReservationFactory,
    TeamFactory,
    UsageIntervalFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def case(team):
    """Team's home pool (reserved, 16 contracted, 8 reserved by the team, quota 8) holds two running 4-GPU jobs
    started an hour ago with 4 h maximum; an elastic spill pool where the team has quota 8; ten finished jobs that
    ran half their maximum."""
    now = timezone.now()
    home = PoolFactory(slug="home", name="Home", kind=PoolKind.RESERVED, contracted_gpus=8)
    elastic = PoolFactory(
        slug="elastic", name="Elastic", kind=PoolKind.ELASTIC, contracted_gpus=None, gpus_per_node=8, max_nodes=1
    )
    home.spill_pools.set([elastic])
    QuotaFactory(team=team, pool=home, max_gpus=8)
    QuotaFactory(team=team, pool=elastic, max_gpus=8)
    ReservationFactory(team=team, pool=home, gpus=8, lending=Lending.NONE)
    for _ in range(2):
        JobFactory(
            team=team,
            pool=home,
            state=JobState.RUNNING,
            gpus=4,
            admitted_pool=home,
            started_at=now - timedelta(hours=1),
            max_run_minutes=240,
        )
    for index in range(10):
        JobFactory(
            team=team,
            pool=home,
            state=JobState.SUCCEEDED,
            started_at=now - timedelta(days=1, hours=index),
            finished_at=now - timedelta(days=1, hours=index) + timedelta(hours=2),
            max_run_minutes=240,
        )
    return home, elastic, now


def test_the_history_counts_only_jobs_finished_before_now(case, team):
    home, _elastic, now = case
    JobFactory(
        team=team,
        pool=home,
        state=JobState.SUCCEEDED,
        started_at=now - timedelta(hours=1),
        finished_at=now + timedelta(hours=1),
    )
    assert run_fractions([team.pk], now=now)[team.pk] == [0.5] * 10


def test_a_queued_job_waits_for_the_running_jobs_with_the_team_s_history(case, team):
    home, _elastic, now = case
    queued = JobFactory(team=team, pool=home, state=JobState.QUEUED, gpus=8, max_run_minutes=60)
    queue = team_queues([team.pk], now=now)[team.pk]
    assert queue.room[home.pk] == 0 and len(queue.holding) == 2 and queue.history.size == 10
    quote = quotes_for([queued], now=now)[queued.pk]
    assert not quote.starts_now
    # Past 25 % of their 4 hours already, both run to the end of the runs above that: 50 % (2 h), by now + 1 h.
    assert quote.estimate == now + timedelta(hours=1)
    assert quote.latest == now + timedelta(hours=3)


def test_admitted_jobs_start_now_and_running_ones_have_no_quote(case, team):
    home, _elastic, now = case
    admitted = JobFactory(team=team, pool=home, state=JobState.ADMITTED, gpus=1)
    running = JobFactory(team=team, pool=home, state=JobState.RUNNING, gpus=1)
    quotes = quotes_for([admitted, running], now=now)
    assert quotes[admitted.pk].starts_now and running.pk not in quotes
    # Running within a minute, as "starts now" promises: not the instant now, which no real start falls on.
    assert (quotes[admitted.pk].low, quotes[admitted.pk].high) == (now, now + STARTS_NOW_WITHIN)


def test_an_admitted_job_whose_pod_finds_no_node_waits_for_a_node_without_a_time(case, team):
    """Kueue gave it its GPUs, but the scheduler places none of its pods (a cordoned or broken node, taints): it does
    not "start now", and no time is made up for it; the basis says what the scheduler says."""
    home, _elastic, now = case
    placed = JobFactory(team=team, pool=home, state=JobState.PENDING, gpus=1)
    PodFactory(team=team, pool=home, job=placed, scheduled=True, node_name="gpu-1")
    unplaced = JobFactory(team=team, pool=home, state=JobState.PENDING, gpus=8)
    said = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    PodFactory(team=team, pool=home, job=unplaced, pending_reason=said)
    waiting = JobFactory(team=team, pool=home, state=JobState.ADMITTED, gpus=1)  # no pod made yet
    just_made = JobFactory(team=team, pool=home, state=JobState.PENDING, gpus=1)
    PodFactory(team=team, pool=home, job=just_made)  # the scheduler has not looked at it yet: no reason
    quotes = quotes_for([placed, unplaced, waiting, just_made], now=now)
    assert quotes[placed.pk].starts_now and quotes[waiting.pk].starts_now and quotes[just_made.pk].starts_now
    quote = quotes[unplaced.pk]
    assert quote.unplaced and not quote.starts_now and not quote.never
    assert (quote.estimate, quote.low, quote.high) == (None, None, None)
    with translation.override("en"):
        words = worded_quotes([unplaced.pk], now=now)[unplaced.pk]
    assert words.text == "waits for a node" and "3 Insufficient" not in words.basis
    assert "finds no node for its pods" in words.basis and "GPUs" in words.basis
    with translation.override("zh-hans"):
        assert worded_quotes([unplaced.pk], now=now)[unplaced.pk].text == "等待节点"


def test_quotes_are_kept_once_and_again_only_when_the_queue_moves(case, team):
    home, _elastic, now = case
    first = JobFactory(team=team, pool=home, state=JobState.QUEUED, gpus=8, created_at=now - timedelta(minutes=2))
    second = JobFactory(team=team, pool=home, state=JobState.QUEUED, gpus=8, created_at=now - timedelta(minutes=1))
    assert services.record_quotes(now=now) == 2
    assert services.record_quotes(now=now + timedelta(seconds=30)) == 0
    first.state = JobState.CANCELLED
    first.save()
    assert services.record_quotes(now=now + timedelta(minutes=1)) == 1  # one job fewer ahead of the second
    kept = list(JobQuote.objects.filter(job=second).order_by("at"))
    assert len(kept) == 2 and kept[-1].estimate < kept[0].estimate
    assert [item["say"] for item in kept[0].basis][0] == "ahead"


def test_a_job_still_quoted_starts_now_adds_no_quote_as_the_clock_moves(case, team):
    """Its quote follows the clock while Kueue has not admitted it: the first says it all (not one row per beat for
    as long as it waits)."""
    _home, elastic, now = case
    waiting = JobFactory(team=team, pool=elastic, state=JobState.QUEUED, gpus=1)  # room for it there now
    assert services.record_quotes(now=now) == 1
    assert JobQuote.objects.get(job=waiting).starts_now
    for hours in range(1, 25):
        assert services.record_quotes(now=now + timedelta(hours=hours)) == 0
    assert JobQuote.objects.filter(job=waiting).count() == 1


def test_the_quotes_kept_of_a_job_are_its_first_and_the_most_recent(case, team):
    home, _elastic, now = case
    queued = JobFactory(team=team, pool=home, state=JobState.QUEUED, gpus=8)
    old = [
        JobQuote(job=queued, at=now - timedelta(hours=60 - step), starts_now=False, estimate=now, low=now, high=now)
        for step in range(services.QUOTES_KEPT + 10)
    ]
    JobQuote.objects.bulk_create(old)
    first = JobQuote.objects.filter(job=queued).order_by("at").first()
    assert services.record_quotes(now=now) == 1  # an hour later than the last kept: it moved
    kept = list(JobQuote.objects.filter(job=queued).order_by("at", "id"))
    assert len(kept) == services.QUOTES_KEPT
    assert kept[0].pk == first.pk and kept[-1].at == now
    assert kept[1].at == now - timedelta(hours=48)  # the eleven after the first are the ones let go


def test_the_preview_offers_sooner_alternatives_with_their_price(case, team):
    home, elastic, now = case
    spec = JobSpec(name="train", image="registry.example.com/t:1", gpus=8, max_run_minutes=60)
    preview = preview_quote(team=team, pool=home, spec=spec, now=now)
    assert not preview.quote.starts_now
    labels = {tuple(alternative.changes.items()): alternative for alternative in preview.alternatives}
    # Soft placement and the elastic pool both start now there, at the elastic pool's hourly price for 8 GPUs.
    assert labels[(("placement", Placement.SOFT),)].quote.starts_now
    assert labels[(("pool", "elastic"),)].price_per_hour == Decimal("144.00")
    assert len(preview.alternatives) <= 3
    assert all(alternative.quote.estimate < preview.quote.estimate for alternative in preview.alternatives)
    # A shorter maximum run time never starts sooner (Kueue admits by quota and order): never offered.
    assert not any("max_run_minutes" in alternative.changes for alternative in preview.alternatives)


def test_fewer_gpus_offers_the_most_that_start_now(team):
    """6 GPUs with room for 4 now: halving tries 3 and 1, but 4 is what starts now, and the most."""
    now = timezone.now()
    pool = PoolFactory(slug="roomy")
    NodeFactory(pool=pool, gpu_allocatable=8)
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    ReservationFactory(team=team, pool=pool, gpus=8)
    JobFactory(team=team, pool=pool, state=JobState.RUNNING, gpus=4, admitted_pool=pool, started_at=now)
    spec = JobSpec(name="a", image="r.example.com/a:1", gpus=6, max_run_minutes=60)
    preview = preview_quote(team=team, pool=pool, spec=spec, now=now)
    assert not preview.quote.starts_now
    fewer = [each for each in preview.alternatives if "gpus" in each.changes]
    assert [each.changes for each in fewer] == [{"gpus": 4}] and fewer[0].quote.starts_now


def test_an_alternative_the_submit_would_refuse_is_not_offered(case, team):
    """The elastic pool's nodes have 4 GPUs: an 8-GPU job can never fit there, so "in Elastic" is not offered
    (its "Take this" would end in a refused form), nor soft placement into it."""
    home, elastic, now = case
    NodeFactory(pool=elastic, gpu_allocatable=4, gpu_capacity=4)
    spec = JobSpec(name="train", image="registry.example.com/t:1", gpus=8, max_run_minutes=60)
    preview = preview_quote(team=team, pool=home, spec=spec, now=now)
    assert not preview.quote.starts_now
    assert not any("pool" in each.changes or "placement" in each.changes for each in preview.alternatives)


def test_a_job_that_fits_has_no_alternatives(team):
    pool = PoolFactory()
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    ReservationFactory(team=team, pool=pool, gpus=8)
    preview = preview_quote(team=team, pool=pool, spec=JobSpec(name="a", image="r.example.com/a:1", gpus=2))
    assert preview.quote.starts_now and preview.alternatives == []


def test_the_reads_take_the_same_queries_for_one_team_or_many(django_assert_max_num_queries, case, team):
    home, _elastic, now = case
    JobFactory(team=team, pool=home, state=JobState.QUEUED, gpus=8)
    with django_assert_max_num_queries(16) as one:
        team_queues([team.pk], now=now)
    others = []
    for _ in range(5):
        other = TeamFactory()
        QuotaFactory(team=other, pool=home, max_gpus=4)
        JobFactory.create_batch(3, team=other, pool=home, state=JobState.QUEUED, gpus=2)
        others.append(other.pk)
    with django_assert_max_num_queries(len(one.captured_queries)):
        team_queues([team.pk, *others], now=now)


def _started(team, pool, *, submitted, workload_made, admitted, seen, **fields):
    """A job of `team` submitted, its Workload made and admitted, and its pod seen Running by the portal at those
    times."""
    job = JobFactory(team=team, pool=pool, created_at=submitted, started_at=seen, running_seen_at=seen, **fields)
    Workload.objects.create(
        uid=f"uid-{job.pk}",
        namespace="team-x",
        name=f"job-rsv-{job.pk}",
        job=job,
        created_at=workload_made,
        admitted=True,
        admitted_at=admitted,
    )
    return job


def test_the_start_delay_is_the_path_without_the_wait_for_room_on_the_platform_s_recent_starts(case, team):
    home, _elastic, now = case
    second = timedelta(seconds=1)
    base = now.replace(microsecond=0) - timedelta(minutes=30)
    # Started at once: submitted at .25, its Workload made in that second (the cluster's time, truncated) and
    # admitted in the next (Kueue's own work, the path's), seen Running 2.5 s after the submission.
    _started(
        team,
        home,
        submitted=base + timedelta(milliseconds=250),
        workload_made=base,
        admitted=base + second,
        seen=base + timedelta(milliseconds=2750),
        state=JobState.SUCCEEDED,
        finished_at=base + timedelta(minutes=5),
    )
    # Waited 10 minutes for room: only the path counts, 3 s.
    _started(
        team,
        home,
        submitted=base,
        workload_made=base + second,
        admitted=base + timedelta(minutes=10, seconds=1),
        seen=base + timedelta(minutes=10, seconds=3),
        state=JobState.RUNNING,
    )
    # Another team's job counts too (the path is the platform's): 1 s.
    other = TeamFactory()
    _started(other, home, submitted=base, workload_made=base, admitted=base, seen=base + second, state=JobState.RUNNING)
    # A second Workload later (spill-after widened its placement): its first one counts, 2 s.
    spilled = _started(
        other, home, submitted=base, workload_made=base, admitted=base, seen=base + 2 * second, state=JobState.RUNNING
    )
    Workload.objects.create(
        uid="uid-again",
        namespace="team-x",
        name="job-rsv-again",
        job=spilled,
        created_at=base + timedelta(minutes=20),
        admitted=True,
        admitted_at=base + timedelta(minutes=25),
    )
    # Preempted since: Kueue requeued its Workload and stamped the new admission on it, after the first start: not
    # counted (it would read as a negative delay).
    _started(
        other,
        home,
        submitted=base,
        workload_made=base,
        admitted=base + timedelta(minutes=3),
        seen=base + 2 * second,
        state=JobState.RUNNING,
        preemptions=1,
    )
    # Not counted: seen after now, and a start the portal never saw (a job started before it kept the time).
    _started(team, home, submitted=now, workload_made=now, admitted=now, seen=now + 9 * second, state=JobState.RUNNING)
    unseen = _started(
        team, home, submitted=base, workload_made=base, admitted=base, seen=base + second, state=JobState.RUNNING
    )
    Job.objects.filter(pk=unseen.pk).update(running_seen_at=None)
    clean, stopping = start_delays(now=now)
    assert sorted(clean) == [1.0, 2.0, 2.5, 3.0] and stopping == []  # none stopped another job to start
    assert team_queues([team.pk], now=now)[team.pk].delay.seconds == []  # fewer than ten: none assumed


def test_the_start_delay_is_read_off_the_platform_s_most_recent_starts_alone(case, team):
    home, _elastic, now = case
    base = now - timedelta(hours=2)
    for index in range(DELAY_SIZE + 5):
        # The older, the longer: only the DELAY_SIZE most recent (1 s to 50 s) count.
        seen = base + timedelta(minutes=index)
        delay = timedelta(seconds=DELAY_SIZE + 5 - index)
        _started(team, home, submitted=seen - delay, workload_made=seen - delay, admitted=seen - delay, seen=seen)
    assert sorted(start_delays(now=now)[0]) == [float(seconds) for seconds in range(1, DELAY_SIZE + 1)]
    assert team_queues([team.pk], now=now)[team.pk].delay.quantile(0.5) == 26.0


def test_starts_that_stopped_other_jobs_first_are_read_apart(case, team):
    home, elastic, now = case
    second = timedelta(seconds=1)
    base = now.replace(microsecond=0) - timedelta(minutes=30)
    other = TeamFactory()

    def evicted(pool, at, from_state=JobState.RUNNING):
        victim = JobFactory(team=other, pool=pool, state=JobState.QUEUED, preemptions=1)
        JobEvent.objects.create(job=victim, from_state=from_state, to_state=JobState.QUEUED, at=at)

    # Preempted for: a job of its pool went back to the queue 0.4 s after its submission; Kueue admitted it two
    # (truncated) seconds after its Workload was made: its preemption cycle, the path's, not a wait for room (a start
    # on free room with that gap would count 0 s).
    submitted = base + 0.5 * second
    _started(team, home, submitted=submitted, workload_made=base, admitted=base + 2 * second, seen=base + 2.5 * second)
    evicted(home, submitted + 0.4 * second)
    # The same with a wait of 40 s before it (its Workload admitted 40 s after it was made): the wait is left out.
    # Its victim was admitted, its pods not running yet (waiting for a node): Kueue took its quota back all the same.
    later = base + timedelta(minutes=1)
    _started(team, home, submitted=later, workload_made=later, admitted=later + 40 * second, seen=later + 41 * second)
    evicted(home, later + 39 * second, from_state=JobState.PENDING)
    # On free room: an eviction in another pool, one before its submission, and its own (a preempted job that ran
    # again counts by its first start) tell nothing of it.
    third = base + timedelta(minutes=2)
    own = _started(team, home, submitted=third, workload_made=third, admitted=third, seen=third + 0.25 * second)
    evicted(elastic, third + 0.1 * second)
    evicted(home, third - second)
    JobEvent.objects.create(job=own, from_state=JobState.RUNNING, to_state=JobState.QUEUED, at=third + 0.2 * second)
    # Two jobs of its pool went back for the fourth (one of them twice: counted once): how many it stopped is kept.
    fourth = base + timedelta(minutes=3)
    _started(team, home, submitted=fourth, workload_made=fourth, admitted=fourth, seen=fourth + 1.5 * second)
    evicted(home, fourth + 0.2 * second)
    twice = JobFactory(team=other, pool=home, state=JobState.QUEUED, preemptions=2)
    for at in (fourth + 0.3 * second, fourth + 0.6 * second):
        JobEvent.objects.create(job=twice, from_state=JobState.RUNNING, to_state=JobState.QUEUED, at=at)
    clean, stopping = start_delays(now=now)
    assert clean == [0.25] and sorted(stopping) == [(1.0, 1), (1.5, 2), (2.0, 1)]


def test_up_to_as_many_starts_that_stopped_others_are_read_as_of_the_others(case, team):
    home, _elastic, now = case
    base = now - timedelta(hours=3)
    victim = JobFactory(team=TeamFactory(), pool=home, state=JobState.QUEUED, preemptions=1)
    for index in range(12):  # the oldest twelve stopped a job of their pool: 2 s each
        at = base + timedelta(minutes=index)
        _started(team, home, submitted=at, workload_made=at, admitted=at, seen=at + timedelta(seconds=2))
        JobEvent.objects.create(
            job=victim, from_state=JobState.RUNNING, to_state=JobState.QUEUED, at=at + timedelta(seconds=1)
        )
    for index in range(DELAY_SIZE + 5):  # then more starts on free room than are read: 0.5 s each
        at = base + timedelta(hours=1, minutes=index)
        _started(team, home, submitted=at, workload_made=at, admitted=at, seen=at + timedelta(milliseconds=500))
    clean, stopping = start_delays(now=now)
    assert clean == [0.5] * DELAY_SIZE and stopping == [(2.0, 1)] * 12
    delay = team_queues([team.pk], now=now)[team.pk].delay
    assert delay.quantile(0.5) == 0.5 and delay.quantile(0.5, stopping=1) == 2.0


def _evicted(team, pool, *, at, grace, ended, from_state=JobState.RUNNING, started=None):
    """A job of `team` the portal saw go back to the queue at `at` (from `from_state`), whose pod's usage ended at
    `ended` (None: still stopping)."""
    job = JobFactory(team=team, pool=pool, state=JobState.QUEUED, termination_grace_seconds=grace, preemptions=1)
    JobEvent.objects.create(job=job, from_state=from_state, to_state=JobState.QUEUED, at=at)
    UsageIntervalFactory(
        team=team, pool=pool, job=job, started_at=started or at - timedelta(minutes=5), ended_at=ended, gpus=8
    )
    return job


def test_stop_times_are_the_fraction_of_their_grace_period_evicted_pods_took_to_exit(case, team, settings):
    home, _elastic, now = case
    settings.JOB_MAX_GRACE_SECONDS = 60
    at = now - timedelta(minutes=10)
    _evicted(team, home, at=at, grace=30, ended=at + timedelta(seconds=15))  # half its grace period
    # Its pod's own end, truncated by the cluster to the second, before the portal saw the eviction: at once.
    _evicted(team, home, at=at, grace=30, ended=at - timedelta(milliseconds=400))
    # Gone 2.5 s before the portal saw its Workload evicted (the pod's watch ran ahead of the Workload's): at once.
    _evicted(team, home, at=at, grace=30, ended=at - timedelta(milliseconds=2500))
    _evicted(team, home, at=at, grace=120, ended=at + timedelta(seconds=90))  # killed at the platform's cap
    # Not counted: still stopping, stopped after now, evicted before it ran, no grace period, and an earlier run's
    # pod (it ended long before this eviction).
    _evicted(team, home, at=at, grace=30, ended=None)
    _evicted(team, home, at=now - timedelta(seconds=5), grace=30, ended=now + timedelta(seconds=5))
    _evicted(team, home, at=at, grace=30, ended=at + timedelta(seconds=3), from_state=JobState.PENDING)
    _evicted(team, home, at=at, grace=0, ended=at + timedelta(seconds=1))
    _evicted(
        team,
        home,
        at=at,
        grace=30,
        ended=at - timedelta(minutes=3),
        started=at - timedelta(minutes=9),
    )
    # A pod of the run still stopping beside one that ended just before: the stop is not over.
    stopping = _evicted(team, home, at=at, grace=30, ended=at - timedelta(seconds=2))
    UsageIntervalFactory(
        team=team, pool=home, job=stopping, started_at=at - timedelta(minutes=5), ended_at=None, gpus=8
    )
    assert sorted(stop_fractions(now=now)) == [0.0, 0.0, 0.5, 1.0]
    assert team_queues([team.pk], now=now)[team.pk].stops.fractions == []  # fewer than ten: evenly, as before


def test_a_high_priority_job_starts_now_by_preempting_the_team_s_normal_jobs(case, team):
    home, _elastic, now = case
    high = JobFactory(team=team, pool=home, state=JobState.QUEUED, gpus=8, priority=Priority.HIGH)
    normal = JobFactory(team=team, pool=home, state=JobState.QUEUED, gpus=8, priority=Priority.NORMAL)
    queue = team_queues([team.pk], now=now)[team.pk]
    assert queue.reserved == {home.pk: 8}
    assert {holding.priority for holding in queue.holding} == {Priority.NORMAL}
    quotes = quotes_for([high, normal], now=now)
    assert quotes[high.pk].starts_now and not quotes[normal.pk].starts_now


def test_the_next_submissions_are_foreseen_from_the_team_s_recent_ones_whatever_became_of_them(case, team):
    home, _elastic, now = case
    # The fixture's jobs were made after its `now` (their submission is the factory's moment): never read. One job
    # queued a minute ago and a high one that finished are; one submitted after now is not.
    JobFactory(team=team, pool=home, state=JobState.QUEUED, gpus=2, created_at=now - timedelta(minutes=1))
    JobFactory(
        team=team,
        pool=home,
        state=JobState.SUCCEEDED,
        priority=Priority.HIGH,
        created_at=now - timedelta(minutes=2),
        started_at=now - timedelta(minutes=2),
        finished_at=now - timedelta(minutes=1),
    )
    JobFactory(team=team, pool=home, state=JobState.QUEUED, created_at=now + timedelta(minutes=1))
    submitted = recent_submissions([team.pk], now=now, spill={})[team.pk]
    assert len(submitted) == 2 and all(at <= now for at, _job in submitted)
    assert {job.priority for _at, job in submitted} == {Priority.NORMAL, Priority.HIGH}
    queue = team_queues([team.pk], now=now)[team.pk]
    assert sorted(at for at, _job in queue.arrivals)[0] == now + timedelta(minutes=1)
