"""Who lends and who borrows in a pool right now (pools.lending): the pure rule, checked by hand-worked cases and
against its invariants, and the database reading of it."""

from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from jobs.choices import JobState
from jobs.outlook import borrowable_gpus
from pools import services as pool_services
from pools.choices import Lending
from pools.lending import TeamUse, pool_lending, reservation_lending, split_pool
from tests.factories import JobFactory, PoolFactory, TeamFactory


def test_borrowers_are_served_by_the_unreserved_gpus_first_then_by_lenders_pro_rata_to_their_idle_gpus():
    uses = [
        TeamUse(team_id=1, reserved=8, lendable=8, used=2),  # 6 idle, all lent
        TeamUse(team_id=2, reserved=4, lendable=2, used=0),  # 4 idle, 2 of them protected: 2 lendable idle
        TeamUse(team_id=3, reserved=0, lendable=0, used=10),  # borrows 10
    ]
    split = split_pool(unreserved=4, uses=uses)
    assert split.borrowed_by_team == {3: 10}
    assert split.from_lenders == 6  # 10 borrowed − 4 unreserved
    assert split.lent_by_team == {1: 5, 2: 1}  # 6 × 6/8 = 4.5 and 6 × 2/8 = 1.5: the larger remainder by team id
    # The cohort: 4 unreserved + 10 lendable = 14. In use above the teams' local quotas (reserved − lendable):
    # team 1 keeps none, so its own 2 count; team 2 keeps 2 and uses 0; team 3 keeps none and uses 10.
    assert split.borrowable == 14 - 2 - 0 - 10
    assert split.borrowers_other_than(1) == 1 and split.borrowers_other_than(3) == 0


def test_lending_none_leaves_borrowers_the_unreserved_gpus_only():
    uses = [TeamUse(team_id=1, reserved=8, lendable=0, used=0), TeamUse(team_id=2, reserved=0, lendable=0, used=4)]
    split = split_pool(unreserved=4, uses=uses)
    assert (split.from_lenders, split.lent_by_team, split.borrowable) == (0, {}, 0)


@given(
    st.integers(min_value=0, max_value=16),
    st.lists(
        st.tuples(st.integers(0, 16), st.integers(0, 16), st.integers(0, 24)).map(
            lambda t: (t[0], min(t[1], t[0]), t[2])
        ),
        max_size=6,
    ),
)
def test_lenders_never_lend_more_than_their_idle_gpus_and_lent_equals_borrowed_from_lenders(unreserved, rows):
    uses = [TeamUse(team_id=i, reserved=r, lendable=lend, used=u) for i, (r, lend, u) in enumerate(rows)]
    split = split_pool(unreserved=unreserved, uses=uses)
    idle = {use.team_id: use.idle_lent for use in uses}
    assert all(0 < gpus <= idle[team] for team, gpus in split.lent_by_team.items())
    # Kueue admits nothing beyond the cohort, so whenever lenders could cover the borrowers, they do exactly.
    assert sum(split.lent_by_team.values()) == min(split.from_lenders, sum(idle.values()))


@pytest.mark.django_db
def test_a_reservation_lends_its_idle_gpus_to_the_teams_borrowing_beyond_the_unreserved_ones(monkeypatch):
    monkeypatch.setattr("reconcile.tasks.reconcile_kueue.delay", lambda version=None: None)
    monkeypatch.setattr("reconcile.tasks.reconcile_team_namespace.delay", lambda team_id: None)
    pool = PoolFactory(slug="a800", contracted_gpus=16)
    lender, borrower, other = TeamFactory(slug="lender"), TeamFactory(slug="borrower"), TeamFactory(slug="other")
    now = timezone.now()
    reservation = pool_services.create_reservation(
        team=lender, pool=pool, gpus=12, starts_at=now - timedelta(days=1), ends_at=now + timedelta(days=30)
    )
    JobFactory(team=lender, pool=pool, state=JobState.RUNNING, gpus=2, admitted_pool=pool)
    JobFactory(team=borrower, pool=pool, state=JobState.RUNNING, gpus=6, admitted_pool=pool)
    JobFactory(team=other, pool=pool, state=JobState.RUNNING, gpus=1, admitted_pool=pool)
    JobFactory(team=other, pool=pool, state=JobState.QUEUED, gpus=8)  # holds nothing
    lending = pool_lending([pool.pk])
    assert lending[pool.pk].from_lenders == 3  # 7 borrowed − 4 unreserved
    rows = reservation_lending([reservation], lending)
    assert rows[reservation.pk] == {"lent_gpus": 3, "borrowing_teams": 2}
    assert borrowable_gpus(pool) == 4 + 12 - 2 - 7  # cohort quota − its use (the lender's 2 are its own)

    pool_services.set_lending(reservation=reservation, lending=Lending.PROTECT, protected_gpus=9)
    assert borrowable_gpus(pool) == 4 + 3 - 7 + 0  # the 3 lent are all in use; the 9 protected are not the cohort's
