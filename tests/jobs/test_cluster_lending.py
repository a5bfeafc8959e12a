"""Lending on the real local cluster with real Kueue: a reservation's idle GPUs are borrowed by another team beyond
the pool's unreserved ones; the lender takes them back by submitting (the borrower is preempted and requeued, saying
for whom), with a soft job too (it reclaims instead of spilling to the elastic pool), and the story's metering, from
the intervals the sync wrote, equals a hand computation, with the credit on the lender's draft invoice; protected GPUs
are never lent; lending none leaves borrowers the unreserved GPUs only. Within a team, a soft job preempts the team's
lower-priority job in the reservation, and spills when there is nothing to preempt.

The demo pool reserved-a800 has 32 contracted GPUs (4 KWOK nodes of 8), 24 of them reserved by the demo teams, whose
reservations are set to lend none here so that the only lender is the test's. The lender reserves 4: 4 GPUs are
left unreserved.
"""

import re
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import services as billing_services
from billing.choices import LineKind
from billing.metering import meter
from billing.models import UsageInterval
from billing.money import hourly_cost
from cluster import client
from cluster.kueue import KUEUE_GROUP, KUEUE_VERSION
from jobs.choices import JobState, Placement, Priority
from jobs.models import Job, Workload
from jobs.selectors import borrowed_gpus, pending_overview
from pools import services as pool_services
from pools.choices import Lending
from pools.lending import pool_lending
from pools.models import Pool, Reservation
from portal.models import User
from tests.clusterkit import integration_team, lend_none, set_quota, wait_for
from tests.jobs.test_kueue_admission import reserve, submit, wait_state

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def borrower(portal_cluster):
    yield from integration_team("Borrowers")


@pytest.fixture
def a800(portal_cluster):
    """The demo pool, its demo reservations lending none."""
    pool = Pool.objects.get(slug="reserved-a800")
    for reservation in Reservation.objects.filter(pool=pool):
        pool_services.set_lending(reservation=reservation, lending=Lending.NONE)
    return pool


def lending_limit(team) -> str:
    queue = client.custom_objects().get_cluster_custom_object(
        KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", f"team-{team.slug}"
    )
    [flavor] = [f for f in queue["spec"]["resourceGroups"][0]["flavors"] if f["name"] == "reserved-a800"]
    return str(next(r for r in flavor["resources"] if r["name"] == "nvidia.com/gpu").get("lendingLimit"))


def stays_queued(job, seconds: float = 8) -> Job:
    wait_for(lambda: Workload.objects.filter(job=job).exists(), what=f"job #{job.pk}'s Workload")
    time.sleep(seconds)  # several Kueue scheduling cycles
    job = Job.objects.get(pk=job.pk)
    assert job.state == JobState.QUEUED, (job.state, job.pending_reason)
    return job


def pending_numbers(job) -> tuple[list[int], list[int]]:
    """The GPU counts the pending page's reason and hint for `job` name, as an admin sees them."""
    [row] = [row for row in pending_overview(User.objects.get(username="admin")).page if row.job_id == job.pk]
    return (
        [int(n) for n in re.findall(r"(\d+) more GPUs? needed", row.reason)],
        [int(n) for n in re.findall(r"starts when (\d+) GPUs?", row.hint)],
    )


def seconds(delta: timedelta) -> Decimal:
    """A duration as exact Decimal seconds (PostgreSQL's `extract(epoch ...)` of it)."""
    return Decimal(delta.days * 86400 + delta.seconds) + Decimal(delta.microseconds) / Decimal(1_000_000)


def clipped(team, pool, start, now) -> list[tuple]:
    """The team's usage intervals in the pool as the sync wrote them, clipped to [start, now): (from, to, GPUs)."""
    rows = []
    for interval in UsageInterval.objects.filter(team=team, pool=pool):
        begin, end = max(interval.started_at, start), min(interval.ended_at or now, now)
        if begin < end:
            rows.append((begin, end, interval.gpus))
    return rows


def test_a_borrower_runs_on_lent_gpus_until_the_lender_takes_them_back(cluster_sync, cluster_team, borrower, a800):
    lender = cluster_team
    reservation = reserve(lender, "reserved-a800", 4)
    start = timezone.now()
    set_quota(lender, a800, 4)
    set_quota(borrower, a800, 8)
    wait_for(lambda: lending_limit(lender) == "4", what="the lender's lendingLimit in Kueue")

    # 8 GPUs: the pool's 4 unreserved ones and the lender's 4 idle ones.
    borrowing = wait_state(submit(borrower, "reserved-a800", gpus=8, name="borrowing"), JobState.RUNNING)
    assert borrowed_gpus([borrowing]) == {borrowing.pk: 8}
    lending = pool_lending([a800.pk])[a800.pk]
    assert (lending.from_lenders, lending.lent_by_team) == (4, {lender.pk: 4})
    time.sleep(3)  # let it borrow for a while: pods' times are whole seconds, and the story is metered below

    # The lender needs its GPUs: Kueue preempts the borrower at once, whatever the priorities.
    own = submit(lender, "reserved-a800", gpus=4, name="own")
    own = wait_state(own, JobState.RUNNING, timeout=90)
    borrowing = wait_state(borrowing, JobState.QUEUED, timeout=60)
    assert borrowing.preemptions == 1
    requeued = borrowing.events.filter(to_state=JobState.QUEUED).last()
    assert f"{lender.name} reclaimed GPUs of its reservation" in requeued.message
    assert borrowed_gpus([own]) == {}  # inside its own reservation
    # The borrower waits again: 8 GPUs no longer fit in the 4 unreserved ones. The pending page's reason (Kueue's
    # "N more needed") and hint ("starts when N GPUs ... are freed") say the same N, from the same numbers.
    assert stays_queued(borrowing, seconds=5).state == JobState.QUEUED
    wait_for(
        lambda: pending_numbers(borrowing) == ([4], [4]),
        what=f"the pending page to agree with Kueue: {pending_numbers(borrowing)}",
    )
    assert Job.objects.get(pk=own.pk).preemptions == 0
    assert reservation.lending == Lending.IDLE

    # Metering of the whole story, from the intervals the sync wrote, against a hand computation. The pool has 4
    # unreserved GPUs; the demo teams lend none and use nothing above their reservations (checked below). So while
    # the borrower runs 8 GPUs, 4 are unreserved and 4 are the lender's, unless the lender's own job runs then
    # (its GPUs are not idle: nothing is lent, the formula counts all 8 as unreserved).
    wait_for(
        lambda: (
            UsageInterval.objects.filter(job=borrowing, ended_at__isnull=False).exists()
            and not UsageInterval.objects.filter(job=borrowing, ended_at__isnull=True).exists()
        ),
        what="the borrower's usage closed by the sync",
    )
    wait_for(lambda: UsageInterval.objects.filter(job=own).exists(), what="the lender's usage")
    now = timezone.now()
    borrowed_runs, own_runs = clipped(borrower, a800, start, now), clipped(lender, a800, start, now)
    assert {gpus for *_, gpus in borrowed_runs} == {8} and {gpus for *_, gpus in own_runs} == {4}
    both = Decimal(0)  # seconds when the borrower and the lender's own job both ran
    for b_from, b_to, _ in borrowed_runs:
        for o_from, o_to, _ in own_runs:
            if max(b_from, o_from) < min(b_to, o_to):
                both += seconds(min(b_to, o_to) - max(b_from, o_from))
    borrower_seconds = sum((seconds(to - begin) for begin, to, _ in borrowed_runs), Decimal(0))
    own_seconds = sum((seconds(to - begin) for begin, to, _ in own_runs), Decimal(0))
    lent = 4 * (borrower_seconds - both)
    rows = {row.team_id: row for row in meter(start=start, end=now, now=now) if row.pool_id == a800.pk}
    assert all(row.overage == 0 for team, row in rows.items() if team not in (lender.pk, borrower.pk))
    assert (rows[lender.pk].reserved, rows[lender.pk].in_reservation) == (4 * seconds(now - start), 4 * own_seconds)
    assert (rows[lender.pk].lent, rows[lender.pk].overage) == (lent, 0)
    assert (rows[borrower.pk].overage, rows[borrower.pk].borrowed) == (8 * borrower_seconds, lent)
    assert rows[borrower.pk].unreserved == 8 * borrower_seconds - lent
    assert lent > 0

    # The lender's draft invoice carries the credit: its month's lent GPU-hours at the pool's lending price.
    if (start.year, start.month) != (now.year, now.month):
        pytest.skip("the story crossed a month boundary: its credit is split over two invoices")
    billing_services.refresh_usage(now=now)
    month_start = start.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    [month_lent] = [
        row.lent
        for row in meter(start=month_start, end=now, now=now)
        if (row.team_id, row.pool_id) == (lender.pk, a800.pk)
    ]
    charges = billing_services.month_charges(month=now.date().replace(day=1), now=now, team_ids=[lender.pk])
    [credit] = [line for line in charges[lender.pk] if line.kind == LineKind.LENDING_CREDIT]
    assert credit.amount == -hourly_cost(month_lent, a800.lending_price_per_gpu) < 0


@pytest.mark.parametrize(
    ("lending", "protected", "lent"),
    [(Lending.NONE, 0, 0), (Lending.PROTECT, 2, 2)],
    ids=["lend-none", "two-protected"],
)
def test_a_borrower_never_gets_gpus_the_lender_does_not_lend(
    cluster_sync, cluster_team, borrower, a800, lending, protected, lent
):
    lender = cluster_team
    reservation = reserve(lender, "reserved-a800", 4)
    set_quota(lender, a800, 4)
    set_quota(borrower, a800, 8)
    pool_services.set_lending(reservation=reservation, lending=lending, protected_gpus=protected)
    wait_for(lambda: lending_limit(lender) == str(lent), what=f"the lender's lendingLimit {lent} in Kueue")

    fits = wait_state(submit(borrower, "reserved-a800", gpus=4 + lent, name="fits"), JobState.RUNNING)
    assert borrowed_gpus([fits]) == {fits.pk: 4 + lent}
    one_more = stays_queued(submit(borrower, "reserved-a800", gpus=1, name="one-more"))
    assert "Waiting for its team's quota" in one_more.pending_reason
    # The lender's own jobs still have all 4 GPUs, protected or not.
    wait_state(submit(lender, "reserved-a800", gpus=4, name="own"), JobState.RUNNING, timeout=90)


def test_a_lenders_soft_job_takes_its_lent_gpus_back_rather_than_spilling(cluster_sync, cluster_team, borrower, a800):
    """A soft job (home pool first, may spill) of a lender whose reservation is lent out reclaims it: it does not
    go to the elastic pool, where its team would pay for GPUs while its own reserved ones serve another team."""
    lender = cluster_team
    reserve(lender, "reserved-a800", 4)
    set_quota(lender, a800, 4)
    set_quota(lender, Pool.objects.get(slug="elastic"), 8)  # room to spill, were it allowed to
    set_quota(borrower, a800, 8)
    wait_for(lambda: lending_limit(lender) == "4", what="the lender's lendingLimit in Kueue")
    borrowing = wait_state(submit(borrower, "reserved-a800", gpus=8, name="borrowing"), JobState.RUNNING)
    assert borrowed_gpus([borrowing]) == {borrowing.pk: 8}

    own = submit(lender, "reserved-a800", gpus=4, name="own-soft", placement=Placement.SOFT)
    own = wait_state(own, JobState.RUNNING, timeout=90)
    assert own.admitted_pool.slug == "reserved-a800", [w.flavors for w in own.workloads.all()]
    assert own.pods.get().pool.slug == "reserved-a800"
    borrowing = Job.objects.get(pk=borrowing.pk)
    assert borrowing.preemptions == 1
    assert (
        f"{lender.name} reclaimed GPUs of its reservation"
        in borrowing.events.filter(to_state=JobState.QUEUED).last().message
    )


def test_a_soft_job_still_spills_when_its_reservation_is_full_of_its_own_jobs(cluster_sync, cluster_team, a800):
    """Stopping at the home pool when preemption could make room (the rule above) holds only where Kueue finds a job to
    preempt: a reservation full of the team's own jobs of the same priority has none, so the soft job spills."""
    lend_none(a800)
    reserve(cluster_team, "reserved-a800", 4)
    set_quota(cluster_team, a800, 4)
    set_quota(cluster_team, Pool.objects.get(slug="elastic"), 8)
    wait_state(submit(cluster_team, "reserved-a800", gpus=4, name="filler"), JobState.RUNNING)
    soft = wait_state(
        submit(cluster_team, "reserved-a800", gpus=2, name="soft", placement=Placement.SOFT), JobState.RUNNING
    )
    assert soft.admitted_pool.slug == "elastic"


def test_a_soft_job_preempts_its_own_teams_lower_priority_job_in_the_reservation(cluster_sync, cluster_team, a800):
    """Within a team, a soft job that fits in the reservation by preempting a lower-priority job of the same team
    does so (as a strict job does) instead of spilling to paid elastic GPUs."""
    lend_none(a800)
    reserve(cluster_team, "reserved-a800", 4)
    set_quota(cluster_team, a800, 4)
    set_quota(cluster_team, Pool.objects.get(slug="elastic"), 8)
    low = wait_state(submit(cluster_team, "reserved-a800", gpus=4, name="low", priority=Priority.LOW), JobState.RUNNING)
    soft = submit(cluster_team, "reserved-a800", gpus=4, name="soft", placement=Placement.SOFT)
    soft = wait_state(soft, JobState.RUNNING, timeout=90)
    assert soft.admitted_pool.slug == "reserved-a800"
    low = wait_state(low, JobState.QUEUED)
    assert low.preemptions == 1
