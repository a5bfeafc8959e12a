"""The submit preview's "Expected start" (`jobs.outlook.submit_outlook`) and its "Likely start" (the start-time quote,
`jobs.quote_preview`) say the same thing. Users saw "Queued at position 1: Kueue admits it when the team's quota has
room" above "starts now … in Elastic, a spill pool" for a soft job whose home pool's quota was full, and "Queued at
position 2" for a small job of a BestEffortFIFO team that Kueue admits past a larger waiting one: the outlook read
only the home pool's quota and counted every queued job as ahead, whatever the team's queueing strategy."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs.choices import JobState, Placement
from jobs.outlook import submit_outlook
from jobs.quote_preview import preview_quote
from jobs.specs import JobSpec
from pools.choices import Lending, PoolKind
from portal.choices import QueueingStrategy
from tests.factories import JobFactory, NodeFactory, PodFactory, PoolFactory, QuotaFactory, ReservationFactory

pytestmark = pytest.mark.django_db


def _running(team, pool, *, gpus: int, now):
    return JobFactory(
        team=team,
        pool=pool,
        admitted_pool=pool,
        state=JobState.RUNNING,
        gpus=gpus,
        started_at=now - timedelta(minutes=5),
        max_run_minutes=240,
    )


@pytest.fixture
def home_full(team):
    """The team's quota of 8 in Home is held by its running 8-GPU job; it has a quota of 8 in Elastic, Home's spill
    pool, whose one node is free."""
    now = timezone.now()
    home = PoolFactory(slug="home", name="Home", kind=PoolKind.RESERVED, contracted_gpus=8)
    elastic = PoolFactory(
        slug="elastic", name="Elastic", kind=PoolKind.ELASTIC, contracted_gpus=None, gpus_per_node=8, max_nodes=1
    )
    home.spill_pools.set([elastic])
    NodeFactory(pool=home, name="home-1")
    NodeFactory(pool=elastic, name="elastic-1")
    QuotaFactory(team=team, pool=home, max_gpus=8)
    QuotaFactory(team=team, pool=elastic, max_gpus=8)
    ReservationFactory(team=team, pool=home, gpus=8, lending=Lending.NONE)
    _running(team, home, gpus=8, now=now)
    return home, elastic


def _spec(**changes) -> JobSpec:
    fields = {"name": "small", "image": "registry.example.com/t:1", "gpus": 4, "max_run_minutes": 60}
    return JobSpec(**(fields | changes))


def test_a_soft_job_with_room_in_a_spill_pool_is_not_told_it_queues(team, home_full):
    home, elastic = home_full
    spec = _spec(placement=Placement.SOFT)

    quote = preview_quote(team=team, pool=home, spec=spec).quote
    assert quote.starts_now and quote.pool_id == elastic.pk  # the quote: starts now, in the spill pool

    outlook = submit_outlook(team=team, pool=home, spec=spec)
    assert outlook.start == "now_spill", outlook.start_text
    assert outlook.start_text == "Starts now in Elastic, a spill pool: the team has no room for it in Home."


def test_a_soft_job_admitted_in_a_spill_pool_whose_node_is_full_waits_for_a_node(team, home_full):
    """Positive control: Kueue admits it in Elastic at once, but Elastic's node has no free GPUs: Pending there."""
    home, elastic = home_full
    # Another team's pod of 6 GPUs on Elastic's node: the team's quota there still has room, the node has 2 GPUs.
    PodFactory(pool=elastic, node_name="elastic-1", gpus=6, phase="Running", scheduled=True)
    outlook = submit_outlook(team=team, pool=home, spec=_spec(placement=Placement.SOFT))
    assert outlook.start == "pending", outlook.start_text
    assert "largest free block in Elastic is 2 GPUs" in outlook.start_text


def test_a_strict_job_of_a_full_home_pool_still_queues(team, home_full):
    """Positive control: a strict job may not spill: it queues for the team's quota in Home, as its quote says."""
    home, _elastic = home_full
    spec = _spec(placement=Placement.STRICT)
    assert not preview_quote(team=team, pool=home, spec=spec).quote.starts_now
    outlook = submit_outlook(team=team, pool=home, spec=spec)
    assert (outlook.start, outlook.position) == ("queued", 1)
    assert outlook.start_text == "Queued at position 1: Kueue admits it when the team's quota has room."


@pytest.fixture
def one_waits(team):
    """Pool P: the team's quota of 8, 4 GPUs held by its running job, and a queued 8-GPU job that waits for them."""
    now = timezone.now()
    pool = PoolFactory(slug="p", name="P", kind=PoolKind.RESERVED, contracted_gpus=8)
    NodeFactory(pool=pool, name="p-1")
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    ReservationFactory(team=team, pool=pool, gpus=8, lending=Lending.NONE)
    _running(team, pool, gpus=4, now=now)
    JobFactory(team=team, pool=pool, state=JobState.QUEUED, gpus=8, max_run_minutes=60)
    return pool


def test_in_a_best_effort_queue_a_job_that_fits_is_not_told_it_queues_behind_one_that_does_not(team, one_waits):
    """BestEffortFIFO: "a later job that fits may start before an earlier one"."""
    team.queueing_strategy = QueueingStrategy.BEST_EFFORT_FIFO
    team.save()
    spec = _spec(gpus=2)

    assert preview_quote(team=team, pool=one_waits, spec=spec).quote.starts_now  # Kueue admits it past the 8-GPU job

    outlook = submit_outlook(team=team, pool=one_waits, spec=spec)
    assert outlook.start == "now", outlook.start_text


def test_in_a_strict_queue_a_job_that_fits_queues_behind_the_one_that_does_not(team, one_waits):
    """Positive control: StrictFIFO (the default) holds it behind the waiting head, at position 2."""
    spec = _spec(gpus=2)
    assert not preview_quote(team=team, pool=one_waits, spec=spec).quote.starts_now
    outlook = submit_outlook(team=team, pool=one_waits, spec=spec)
    assert (outlook.start, outlook.position) == ("queued", 2), outlook.start_text


def test_the_preview_page_says_the_same_start_twice(client, researcher, team, home_full):
    from tests.jobs.test_job_views import login

    form = {
        "team": team.slug,
        "pool": "home",
        "name": "soft",
        "image": "registry.example.com/t:1",
        "command": "python train.py",
        "gpus": "4",
        "cpu": "4",
        "memory_gib": "16",
        "placement": Placement.SOFT,
        "priority": "50",
        "max_run_minutes": "60",
    }
    response = login(client, researcher).post(reverse("jobs:job_submit_preview"), form, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert "Starts now in Elastic, a spill pool" in html
    assert "Queued" not in html


def test_a_job_its_quote_says_cannot_start_is_not_told_the_quota_will_have_room(team):
    """A quota of 16 in a pool whose cohort holds 8 GPUs: a 2 × 8-GPU job is within the quota but can never be
    admitted, as its quote says; the expected start says so too."""
    pool = PoolFactory(slug="p", name="P", kind=PoolKind.RESERVED, contracted_gpus=8)
    NodeFactory(pool=pool, name="p-1")
    NodeFactory(pool=pool, name="p-2")
    QuotaFactory(team=team, pool=pool, max_gpus=16)
    spec = _spec(gpus=8, nodes=2)
    assert preview_quote(team=team, pool=pool, spec=spec).quote.never
    outlook = submit_outlook(team=team, pool=pool, spec=spec)
    assert (outlook.start, outlook.position) == ("queued", 1)
    assert outlook.start_text == (
        "Queued at position 1, but it cannot start: it needs 16 GPUs, more than the team can ever hold in P."
    )
