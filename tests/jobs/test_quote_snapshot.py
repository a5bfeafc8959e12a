"""The quote's reads agree with each other while the sync writes (portal/snapshot.py): a job Kueue admits between two
of `team_queues`' queries is either queued in both or holding GPUs in both. Found by the quote replay's smoke run
(tests/bench/test_smoke_cluster.py), whose job behind a just-admitted one was quoted "never starts" once in a few
runs: its queue read the job ahead as queued, the team's use (a later query) already counted its GPUs."""

import threading

import pytest
from django.db import connection

from jobs import quote_selectors
from jobs.choices import JobState
from jobs.models import Job
from jobs.quote_preview import preview_quote
from jobs.quote_selectors import quotes_for
from jobs.specs import JobSpec
from pools.choices import Lending, PoolKind
from portal.snapshot import one_snapshot
from tests.factories import JobFactory, PoolFactory, QuotaFactory, ReservationFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _committed_elsewhere(change) -> None:
    """Run `change` on a connection of its own and commit it (as the sync would, meanwhile)."""

    def run():
        try:
            change()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


@pytest.fixture
def admitted_meanwhile(team, monkeypatch):
    """The team's reserved pool (4 GPUs, all reserved and its quota), a queued 1-GPU job ahead and, behind it, a
    queued 4-GPU one; the job ahead is admitted — committed on another connection — just before the quote reads the
    team's use of its pools (after it read the queue and the jobs holding GPUs)."""
    pool = PoolFactory(slug="home", name="Home", kind=PoolKind.RESERVED, contracted_gpus=4, gpus_per_node=4)
    QuotaFactory(team=team, pool=pool, max_gpus=4)
    ReservationFactory(team=team, pool=pool, gpus=4, lending=Lending.NONE)
    ahead = JobFactory(team=team, pool=pool, state=JobState.QUEUED, gpus=1)
    behind = JobFactory(team=team, pool=pool, state=JobState.QUEUED, gpus=4)
    real_team_uses = quote_selectors.team_uses
    admitted = []

    def team_uses(*args, **kwargs):
        if not admitted:
            _committed_elsewhere(
                lambda: Job.objects.filter(pk=ahead.pk).update(state=JobState.ADMITTED, admitted_pool=pool)
            )
            admitted.append(ahead.pk)
        return real_team_uses(*args, **kwargs)

    monkeypatch.setattr(quote_selectors, "team_uses", team_uses)
    return pool, ahead, behind, admitted


def test_a_job_admitted_between_the_quote_s_reads_still_leaves_room_for_the_job_behind_it(team, admitted_meanwhile):
    _pool, ahead, behind, admitted = admitted_meanwhile
    quote = quotes_for([behind])[behind.pk]
    assert admitted == [ahead.pk]  # the admission did land between the reads
    assert Job.objects.get(pk=ahead.pk).state == JobState.ADMITTED
    # Read as of one moment: the job ahead queued (and its GPUs still in the team's room), so the job behind starts
    # once the job ahead has run; not "never".
    assert not quote.never
    assert not quote.starts_now
    assert {"say": "ahead", "jobs": 1, "gpus": 1} in quote.basis


def test_the_preview_reads_on_one_snapshot_too(team, admitted_meanwhile):
    pool, _ahead, _behind, admitted = admitted_meanwhile
    spec = JobSpec(name="preview", image="registry.example.com/t:1", gpus=4)
    preview = preview_quote(team=team, pool=pool, spec=spec)
    assert admitted
    assert not preview.quote.never


def test_inside_a_transaction_already_the_caller_s_stands(team):
    from django.db import transaction

    with transaction.atomic():
        Job.objects.count()  # the transaction has begun: its level can no longer change
        with one_snapshot():
            assert Job.objects.count() == 0
        with connection.cursor() as cursor:
            cursor.execute("SHOW transaction_isolation")
            assert cursor.fetchone()[0] == "read committed"
    with one_snapshot(), connection.cursor() as cursor:
        cursor.execute("SHOW transaction_isolation")
        assert cursor.fetchone()[0] == "repeatable read"
