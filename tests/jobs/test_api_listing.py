"""The API's page of jobs read with one statement of its own (jobs/api/listing.py) answers what the ORM's path answers
(the FilterSet's queryset, Django's paginator), for every kind of user, filter, order and page: the same rows, count
and links, never a job of a team the user is not in; and a filter the SQL does not know sends the request down the
ORM's path rather than being dropped."""

from datetime import timedelta

import django_filters
import pytest
import time_machine
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.api import listing
from jobs.choices import JobState, Placement, Priority
from jobs.filters import JobFilterSet
from pools import services as pool_services
from tests.factories import JobFactory, MembershipFactory, PoolFactory, TeamFactory, UserFactory


@pytest.fixture(autouse=True)
def _no_cluster(monkeypatch):
    monkeypatch.setattr("reconcile.tasks.reconcile_kueue.delay", lambda version=None: None)
    monkeypatch.setattr("reconcile.tasks.reconcile_team_namespace.delay", lambda team_id: None)


@pytest.fixture
def world(team, other_team, researcher, outsider):
    """Jobs of three teams in two pools, in every state, with ties on created_at (a bulk of jobs made in one instant)
    so that pages must break them by id."""
    pool, elastic = PoolFactory(slug="a800"), PoolFactory(slug="elastic", kind="elastic", contracted_gpus=None)
    now = timezone.now()
    pool_services.create_reservation(
        team=team, pool=pool, gpus=2, starts_at=now - timedelta(days=1), ends_at=now + timedelta(days=30)
    )
    third = TeamFactory(slug="third")
    both = UserFactory(username="both")
    MembershipFactory(user=both, team=team)
    MembershipFactory(user=both, team=third)
    states = list(JobState)
    for n in range(23):
        JobFactory(
            team=(team, other_team, third)[n % 3],
            pool=(pool, elastic)[n % 2],
            submitted_by=(researcher, outsider, both)[n % 3],
            state=states[n % len(states)],
            gpus=1 + n % 4,
            priority=(Priority.NORMAL, Priority.HIGH)[n % 2],
            placement=(Placement.STRICT, Placement.SOFT)[n % 2],
        )
    from jobs.models import Job

    # Five jobs share one created_at, and a sixth is an hour old.
    tied = list(Job.objects.order_by("id").values_list("id", flat=True)[:5])
    Job.objects.filter(id__in=tied).update(created_at=now)
    Job.objects.filter(id=tied[-1] + 1).update(created_at=now - timedelta(hours=1))
    return {"researcher": researcher, "outsider": outsider, "both": both, "nobody": UserFactory(username="nobody")}


QUERIES = [
    "",
    "state=running",
    "state=running&state=queued&state=failed",
    "team=alpha",
    "pool=elastic",
    "submitted_by=both",
    "placement=soft",
    "ordering=gpus",
    "ordering=-priority&state=queued&state=running&state=succeeded",
    "ordering=id",
    "ordering=-created_at,gpus",
    "page_size=4",
    "page_size=4&page=2",
    "page_size=4&page=3&ordering=state_changed_at",
    "page_size=5&pool=a800&team=beta",
    "page=2&page_size=10",
    "page_size=600",
    "page_size=abc",
]


def answers(user, query: str, monkeypatch, *, orm: bool):
    client = APIClient()
    client.force_authenticate(user)
    with monkeypatch.context() as patch:
        if orm:
            patch.setattr(listing, "filter_conditions", lambda filterset: None)
        response = client.get(f"/api/v1/jobs/?{query}")
    return response.status_code, response.json()


@pytest.mark.parametrize("who", ["admin", "researcher", "outsider", "both", "nobody"])
@pytest.mark.parametrize("query", QUERIES)
def test_the_page_read_with_its_own_sql_is_the_orm_page(
    world, platform_admin, team, other_team, who, query, monkeypatch
):
    assert (team.slug, other_team.slug) == ("alpha", "beta"), "the queries name these slugs"
    user = platform_admin if who == "admin" else world[who]
    with time_machine.travel(timezone.now(), tick=False):  # the quotes of jobs not started count from now
        sql = answers(user, query, monkeypatch, orm=False)
        orm = answers(user, query, monkeypatch, orm=True)
    assert sql[0] == orm[0]
    if sql[0] == 200:
        assert [row["id"] for row in sql[1]["results"]] == [row["id"] for row in orm[1]["results"]]
        for mine, theirs in zip(sql[1]["results"], orm[1]["results"], strict=True):
            assert mine == theirs
    assert sql == orm
    status, body = sql
    if status == 200 and who == "admin" and not query:
        assert body["count"] == 23 and len(body["results"]) == 23
        # Jobs holding GPUs of the reserved pool beyond alpha's 2 reserved GPUs there borrow them, some in part.
        borrowed = {row["borrowed_gpus"] for row in body["results"]}
        assert len(borrowed) > 2 and 0 in borrowed


def test_a_member_never_sees_another_teams_jobs_and_counts_only_their_own(world, monkeypatch):
    status, body = answers(world["researcher"], "page_size=2", monkeypatch, orm=False)
    assert status == 200
    assert body["count"] == 8  # alpha's 8 jobs of the 23
    assert {row["team"] for row in body["results"]} == {"alpha"}
    assert "page=2" in body["next"] and body["previous"] is None
    status, body = answers(world["nobody"], "", monkeypatch, orm=False)
    assert (status, body["count"], body["results"]) == (200, 0, [])


def test_asking_for_another_teams_jobs_is_refused_as_the_filter_refuses_it(world, monkeypatch):
    status, body = answers(world["researcher"], "team=beta", monkeypatch, orm=False)
    assert status == 400 and "team" in body


@pytest.mark.parametrize("page", ["4", "0", "-1", "abc", "1.0", "9" * 40])
def test_a_page_that_does_not_exist_is_404(world, platform_admin, page, monkeypatch):
    status, body = answers(platform_admin, f"page_size=10&page={page}", monkeypatch, orm=False)
    assert status == 404, body
    assert body == answers(platform_admin, f"page_size=10&page={page}", monkeypatch, orm=True)[1]


def test_the_last_page_and_links(world, platform_admin, monkeypatch):
    status, body = answers(platform_admin, "page_size=10&page=last", monkeypatch, orm=False)
    assert status == 200 and len(body["results"]) == 3 and body["next"] is None
    status, body = answers(platform_admin, "page_size=10&page=2", monkeypatch, orm=False)
    assert body["previous"].endswith("/api/v1/jobs/?page_size=10") and "page=3" in body["next"]
    status, body = answers(platform_admin, "page_size=10&page=3", monkeypatch, orm=False)
    assert "page=2" in body["previous"] and body["next"] is None


def test_every_filter_of_the_jobs_filterset_is_written_as_sql(world, platform_admin, team, researcher):
    from django.test import RequestFactory

    request = RequestFactory().get("/")
    request.user = platform_admin
    now = timezone.now().isoformat()
    data = {
        "team": team.slug,
        "pool": "a800",
        "state": ["running", "queued"],
        "submitted_by": researcher.username,
        "placement": "soft",
        "created_after": now,
        "created_before": now,
    }
    assert set(data) == set(JobFilterSet.base_filters), "a new filter: give it a value here"
    filterset = JobFilterSet(data=data, queryset=None, request=request)
    assert filterset.is_valid(), filterset.errors
    conditions, params = listing.filter_conditions(filterset)
    assert len(conditions) == len(data) and len(params) == len(data)


def test_a_filter_the_sql_does_not_know_sends_the_request_down_the_orm_path(db, platform_admin):
    class Searching(JobFilterSet):
        q = django_filters.CharFilter(method="search")

        def search(self, queryset, name, value):
            return queryset.filter(name__icontains=value)

    filterset = Searching(data={"q": "x"}, queryset=None)
    assert filterset.is_valid()
    assert listing.filter_conditions(filterset) is None
    filterset = Searching(data={"state": ["running"]}, queryset=None)
    assert filterset.is_valid()
    assert listing.filter_conditions(filterset) is not None


def test_the_order_always_ends_on_the_id():
    assert listing.ordered(["gpus"]) == ["gpus", "-id"]
    assert listing.ordered(["-created_at", "-id"]) == ["-created_at", "-id"]
    assert listing.ordered(["id", "gpus"]) == ["id", "gpus"]
