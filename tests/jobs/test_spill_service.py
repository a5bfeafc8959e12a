"""Spill-after: the move to soft placement is one guarded edge of the job, written by `jobs.services` (issue 25):
taken once, with a note that says why; the spill check only patches the cluster and calls the service."""

from types import SimpleNamespace

from jobs import services, spill
from jobs.choices import JobState, Placement
from jobs.models import JobEvent
from tests.factories import JobFactory, PoolFactory


def test_a_spill_after_job_is_moved_once_with_a_note(team):
    job = JobFactory(team=team, placement=Placement.SPILL_AFTER, spill_after_minutes=5, state=JobState.QUEUED)
    assert services.mark_spilled(job_id=job.pk, spill_pools=["elastic"]) is True
    assert services.mark_spilled(job_id=job.pk, spill_pools=["elastic"]) is False
    job.refresh_from_db()
    assert job.spilled
    notes = [event.in_words for event in JobEvent.objects.filter(job=job)]
    assert notes == ["not admitted after 5 min: moved to soft placement (may run in elastic)"]


def test_a_job_that_is_not_spill_after_is_left_alone(team):
    job = JobFactory(team=team, placement=Placement.STRICT, state=JobState.QUEUED)
    assert services.mark_spilled(job_id=job.pk, spill_pools=["elastic"]) is False
    job.refresh_from_db()
    assert not job.spilled and not JobEvent.objects.filter(job=job).exists()


def test_the_spill_check_records_through_the_service(team, monkeypatch):
    home, elastic = PoolFactory(slug="home"), PoolFactory(slug="elastic")
    home.spill_pools.set([elastic])
    job = JobFactory(team=team, pool=home, placement=Placement.SPILL_AFTER, spill_after_minutes=1)
    patched = []
    monkeypatch.setattr(
        spill.resources, "read_job", lambda ns, name: SimpleNamespace(spec=SimpleNamespace(suspend=True))
    )
    monkeypatch.setattr(spill.resources, "patch_job", lambda ns, name, patch: patched.append(patch))
    assert spill.spill(job) is True
    assert patched and JobEvent.objects.filter(job=job).count() == 1
    job.refresh_from_db()
    assert job.spilled
