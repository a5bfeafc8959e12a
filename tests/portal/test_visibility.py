"""Role scoping of `visible_to`: a user sees their teams' things, an admin everything, nobody else anything."""

import pytest
from django.contrib.auth.models import AnonymousUser

from jobs.models import Job
from pools.models import Pool, Quota, Reservation
from portal.choices import Role
from portal.models import Team
from tests.factories import JobFactory, MembershipFactory, PoolFactory, QuotaFactory, ReservationFactory, UserFactory


@pytest.fixture
def world(team, other_team):
    pool = PoolFactory()
    return {
        "pool": pool,
        "jobs": {t.slug: JobFactory(team=t, pool=pool) for t in (team, other_team)},
        "reservations": {t.slug: ReservationFactory(team=t, pool=pool) for t in (team, other_team)},
        "quotas": {t.slug: QuotaFactory(team=t, pool=pool) for t in (team, other_team)},
    }


ROLE_MATRIX = [
    ("researcher", {"alpha"}),
    ("lead", {"alpha"}),
    ("outsider", {"beta"}),
    ("platform_admin", {"alpha", "beta"}),
]


@pytest.mark.parametrize(("who", "teams"), ROLE_MATRIX)
def test_team_scoped_querysets_follow_membership(request, world, who, teams):
    user = request.getfixturevalue(who)
    assert {t.slug for t in Team.objects.visible_to(user)} == teams
    assert set(Job.objects.visible_to(user).values_list("team__slug", flat=True)) == teams
    assert set(Reservation.objects.visible_to(user).values_list("team__slug", flat=True)) == teams
    assert set(Quota.objects.visible_to(user).values_list("team__slug", flat=True)) == teams
    # Pool occupancy is for everyone signed in.
    assert Pool.objects.visible_to(user).count() == 1


def test_anonymous_sees_nothing(world):
    anonymous = AnonymousUser()
    assert not Team.objects.visible_to(anonymous).exists()
    assert not Job.objects.visible_to(anonymous).exists()
    assert not Pool.objects.visible_to(anonymous).exists()


def test_a_user_in_several_teams_sees_each_once(team, other_team, world):
    user = UserFactory(username="both")
    MembershipFactory(user=user, team=team, role=Role.RESEARCHER)
    MembershipFactory(user=user, team=other_team, role=Role.LEAD)
    assert Team.objects.visible_to(user).count() == 2
    assert Job.objects.visible_to(user).count() == 2


@pytest.mark.parametrize(
    ("who", "led"), [("researcher", set()), ("lead", {"alpha"}), ("platform_admin", {"alpha", "beta"})]
)
def test_billing_scope_is_led_teams(request, world, who, led):
    user = request.getfixturevalue(who)
    assert {t.slug for t in Team.objects.led_by(user)} == led
