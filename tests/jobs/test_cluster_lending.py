"""Lending on the real local cluster with real Kueue: a reservation's idle GPUs are borrowed by another team beyond
the pool's unreserved ones; the lender takes them back by submitting (the borrower is preempted and requeued, saying
for whom), with a soft job too (it reclaims instead of spilling to the elastic pool); protected GPUs are never lent;
lending none leaves borrowers the unreserved GPUs only. Within a team, a soft job preempts the team's lower-priority
job in the reservation, and spills when there is nothing to preempt.

The demo pool reserved-a800 has 32 contracted GPUs (4 KWOK nodes of 8), 24 of them reserved by the demo teams, whose
reservations are set to lend none here so that the only lender is the test's. The lender reserves 4: 4 GPUs are
left unreserved.
"""

import time

import pytest

from cluster import client
from cluster.kueue import KUEUE_GROUP, KUEUE_VERSION
from jobs.choices import JobState, Placement, Priority
from jobs.models import Job, Workload
from jobs.selectors import borrowed_gpus
from pools import services as pool_services
from pools.choices import Lending
from pools.lending import pool_lending
from pools.models import Pool, Reservation
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


def test_a_borrower_runs_on_lent_gpus_until_the_lender_takes_them_back(cluster_sync, cluster_team, borrower, a800):
    lender = cluster_team
    reservation = reserve(lender, "reserved-a800", 4)
    set_quota(lender, a800, 4)
    set_quota(borrower, a800, 8)
    wait_for(lambda: lending_limit(lender) == "4", what="the lender's lendingLimit in Kueue")

    # 8 GPUs: the pool's 4 unreserved ones and the lender's 4 idle ones.
    borrowing = wait_state(submit(borrower, "reserved-a800", gpus=8, name="borrowing"), JobState.RUNNING)
    assert borrowed_gpus([borrowing]) == {borrowing.pk: 8}
    lending = pool_lending([a800.pk])[a800.pk]
    assert (lending.from_lenders, lending.lent_by_team) == (4, {lender.pk: 4})

    # The lender needs its GPUs: Kueue preempts the borrower at once, whatever the priorities.
    own = submit(lender, "reserved-a800", gpus=4, name="own")
    own = wait_state(own, JobState.RUNNING, timeout=90)
    borrowing = wait_state(borrowing, JobState.QUEUED, timeout=60)
    assert borrowing.preemptions == 1
    requeued = borrowing.events.filter(to_state=JobState.QUEUED).last()
    assert f"{lender.name} reclaimed GPUs of its reservation" in requeued.message
    assert borrowed_gpus([own]) == {}  # inside its own reservation
    # The borrower waits again: 8 GPUs no longer fit in the 4 unreserved ones.
    assert stays_queued(borrowing, seconds=5).state == JobState.QUEUED
    assert Job.objects.get(pk=own.pk).preemptions == 0
    assert reservation.lending == Lending.IDLE


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
