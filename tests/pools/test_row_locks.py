"""Row locks take only the rows they name. Quota's and Membership's default ordering join the team (and the pool):
`select_for_update()` without `of` would lock those rows FOR UPDATE too, and with them every insert of a row that
references them (a job's foreign keys are checked under FOR KEY SHARE, which FOR UPDATE blocks)."""

import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from identity import services as identity_services
from jobs.choices import JobState
from jobs.models import Job
from pools import quota_floor, services
from tests.factories import JobFactory, MembershipFactory, PoolFactory, QuotaFactory, UserFactory


@pytest.mark.django_db(transaction=True)
def test_a_quota_change_in_progress_lets_the_team_submit_jobs(team, monkeypatch):
    pool = PoolFactory()
    QuotaFactory(team=team, pool=pool, max_gpus=4)
    locked, release = threading.Event(), threading.Event()
    real_check = quota_floor.check_jobs_fit
    errors = []

    def check_then_wait(**kwargs):
        in_use = real_check(**kwargs)
        locked.set()  # the team's and the quota's rows are locked now, until the change commits
        release.wait(timeout=30)
        return in_use

    def change_quota():
        try:
            services.set_quota(team=team, pool=pool, max_gpus=8)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connection.close()

    monkeypatch.setattr(quota_floor, "check_jobs_fit", check_then_wait)
    changer = threading.Thread(target=change_quota)
    changer.start()
    try:
        assert locked.wait(timeout=30)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '3s'")  # blocked, this insert would fail after 3 s
        job = JobFactory(team=team, pool=pool, state=JobState.QUEUED, gpus=1)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = 0")
    finally:
        release.set()
        changer.join(timeout=30)
    assert not errors
    assert Job.objects.filter(pk=job.pk).exists()
    assert pool.quotas.get(team=team).max_gpus == 8


def _joined_locks(statements) -> list[str]:
    """Statements that lock rows of a join without naming the table whose rows they mean."""
    return [
        sql
        for sql in statements
        if " JOIN " in sql and (sql.endswith(" FOR UPDATE") or sql.endswith(" FOR NO KEY UPDATE"))
    ]


@pytest.mark.django_db
def test_the_quota_lock_names_the_quota_alone(team):
    pool = PoolFactory()
    QuotaFactory(team=team, pool=pool, max_gpus=4)
    with CaptureQueriesContext(connection) as captured:
        services.set_quota(team=team, pool=pool, max_gpus=6)
    statements = [query["sql"] for query in captured.captured_queries]
    assert any('FOR UPDATE OF "pools_quota"' in sql for sql in statements)
    assert _joined_locks(statements) == []


@pytest.mark.django_db
def test_applying_a_member_s_groups_locks_their_memberships_not_their_teams(team):
    member = UserFactory()
    MembershipFactory(team=team, user=member)
    with CaptureQueriesContext(connection) as captured:
        identity_services.apply_groups(member=member, groups=[], provider="test")
    statements = [query["sql"] for query in captured.captured_queries]
    assert any('FOR UPDATE OF "portal_membership"' in sql for sql in statements)
    assert _joined_locks(statements) == []
