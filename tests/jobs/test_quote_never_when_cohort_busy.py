"""A queued job within its team's quota, waiting for GPUs another team borrows in the pool's cohort, is not quoted
"cannot start with your team's quota": the most the team could ever hold is its quota less what the cohort cannot
give (`pools.lending.most_available_to`), not its room now. No time is quoted for it (the replay does not foresee the
other team's jobs ending), and in a StrictFIFO queue the jobs behind it wait too."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.choices import JobState
from jobs.quote_selectors import quotes_for
from jobs.quote_words import quote_in_words
from jobs.services import record_quotes
from pools.choices import Lending, PoolKind
from tests.factories import JobFactory, PoolFactory, QuotaFactory, ReservationFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def borrowed_cohort(team, other_team):
    """A reserved pool P of 16 GPUs: 8 reserved by the team (quota 16: its reservation plus 8 it may borrow), 8
    unreserved, which another team borrows for the next two hours at most."""
    now = timezone.now()
    pool = PoolFactory(slug="p", name="P", kind=PoolKind.RESERVED, contracted_gpus=16)
    QuotaFactory(team=team, pool=pool, max_gpus=16)
    ReservationFactory(team=team, pool=pool, gpus=8, lending=Lending.NONE)
    QuotaFactory(team=other_team, pool=pool, max_gpus=8)
    JobFactory(
        team=other_team,
        pool=pool,
        admitted_pool=pool,
        state=JobState.RUNNING,
        gpus=8,
        started_at=now - timedelta(minutes=10),
        max_run_minutes=120,
    )
    return pool, now


def test_a_job_within_quota_is_not_quoted_never_while_another_team_borrows_the_cohort(team, borrowed_cohort):
    pool, now = borrowed_cohort
    # The team's 16-GPU job: inside its quota of 16, admitted by Kueue once the other team's job ends.
    job = JobFactory(team=team, pool=pool, state=JobState.QUEUED, gpus=16, max_run_minutes=60)
    assert job.total_gpus == 16
    quote = quotes_for([job], now=now)[job.pk]
    assert not quote.never, quote.basis
    assert quote.waits_for_others and quote.estimate is None
    assert quote_in_words(quote, now=now) == "waits for GPUs other teams borrow"
    assert quote.basis == [{"say": "others", "pool": "P"}]

    # The job page's history keeps it as such (not as "cannot start").
    assert record_quotes(now=now) == 1
    assert job.quotes.get().as_quote().waits_for_others

    # Above its quota it never starts, whatever others hold (the control: the rule above is not "never say never").
    above = JobFactory(team=team, pool=pool, state=JobState.QUEUED, gpus=17, max_run_minutes=60)
    assert quotes_for([above], now=now)[above.pk].never
    assert not above.quotes.exists() and record_quotes(now=now) == 1 and above.quotes.get().as_quote().never


def test_in_a_strict_queue_the_job_behind_it_is_held_back_not_quoted_starts_now(team, borrowed_cohort):
    """Team.queueing_strategy StrictFIFO (the default): "a job that does not fit yet holds back the jobs queued after
    it". The head waits for the cohort's GPUs, and so does the job behind it (it was quoted "starts now")."""
    pool, now = borrowed_cohort
    head = JobFactory(team=team, pool=pool, state=JobState.QUEUED, gpus=16, max_run_minutes=60)
    behind = JobFactory(team=team, pool=pool, state=JobState.QUEUED, gpus=4, max_run_minutes=60)
    assert head.created_at <= behind.created_at
    quotes = quotes_for([head, behind], now=now)
    assert not quotes[behind.pk].starts_now
    assert quotes[behind.pk].waits_for_others
    assert {"say": "ahead", "jobs": 1, "gpus": 16} in quotes[behind.pk].basis
