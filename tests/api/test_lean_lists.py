"""A saving of the API's lists (bench/api.py): every list builds only the filters its query string names
(`FilterBackend`), and must answer exactly what django-filter's full FilterSet answers: the same pages, counts,
links, errors and 404s."""

import pytest
import time_machine
from django.http import QueryDict
from django.utils import timezone, translation
from rest_framework.test import APIClient

from jobs.filters import JobFilterSet
from jobs.models import Job
from portal.api import base
from portal.api.base import named_filters
from portal.api.filters import TeamFilterSet
from portal.models import Team
from tests.factories import JobFactory, PoolFactory, UserFactory

# Query strings covering pages (in range, past the end, the last, malformed), page sizes, filters alone and
# together (one unknown name, one invalid value, a suffixed moment), and ordering.
QUERIES = [
    {},
    {"page": "2", "page_size": "3"},
    {"page": "4", "page_size": "3"},
    {"page": "5", "page_size": "3"},
    {"page": "99"},
    {"page": "0"},
    {"page": "-1"},
    {"page": "two"},
    {"page": "1.5"},
    {"page": "last", "page_size": "4"},
    {"page_size": "0"},
    {"page_size": "100000"},
    {"state": "running"},
    {"state": ["running", "queued"], "ordering": "gpus"},
    {"state": "exploded"},
    {"team": "alpha", "state": "queued"},
    {"team": "nobody"},
    {"pool": "train", "page": "2", "page_size": "2"},
    {"placement": "soft"},
    {"submitted_by": "rita", "created_after": "2020-01-01T00:00:00Z"},
    {"created_before": "not a moment"},
    {"created_after": "2020-01-01T00:00:00+16:00"},
    {"color": "blue", "state": "succeeded"},
    {"state": "cancelled"},
]


@pytest.fixture
def jobs(team, other_team, researcher):
    pool = PoolFactory(slug="train", name="Training", contracted_gpus=16)
    states = ["running", "queued", "succeeded", "running", "failed", "queued", "running"]
    rows = []
    for n in range(11):
        rows.append(
            JobFactory(
                team=team if n % 3 else other_team,
                pool=pool,
                submitted_by=researcher,
                state=states[n % len(states)],
                gpus=1 + n % 4,
                placement="soft" if n % 5 == 0 else "hard",
            )
        )
    return rows


def answers(client, monkeypatch, *, lean: bool) -> list[tuple[int, object]]:
    """The status and body of every query of QUERIES, with only the named filters built or with all of them."""
    with monkeypatch.context() as patch:
        if not lean:
            patch.setattr(base, "named_filters", lambda filterset_class, keys: filterset_class)
        responses = [client.get("/api/v1/jobs/", query) for query in QUERIES]
    return [(response.status_code, response.json()) for response in responses]


@pytest.mark.parametrize("who", ["admin", "member"])
def test_the_lean_list_answers_what_the_full_machinery_answers(jobs, platform_admin, researcher, monkeypatch, who):
    client = APIClient()
    client.force_authenticate(platform_admin if who == "admin" else researcher)
    with time_machine.travel(timezone.now(), tick=False):  # the quotes of queued jobs are worded from now
        lean, full = answers(client, monkeypatch, lean=True), answers(client, monkeypatch, lean=False)
    for query, mine, theirs in zip(QUERIES, lean, full, strict=True):
        assert mine == theirs, query
    statuses = {str(query): status for query, (status, _body) in zip(QUERIES, lean, strict=True)}
    # The grid holds pages and filters of every outcome, so that the equality above says something.
    assert statuses["{'page': '99'}"] == 404 and statuses["{'page': 'two'}"] == 404
    assert statuses["{'state': 'exploded'}"] == 400 and statuses["{'created_before': 'not a moment'}"] == 400
    first = dict(zip(map(str, QUERIES), lean, strict=True))["{'page': '2', 'page_size': '3'}"][1]
    assert first["count"] == len(jobs) if who == "admin" else first["count"] > 0
    assert first["next"] and first["previous"] and len(first["results"]) == 3


def test_only_the_named_filters_are_built(db):
    assert set(named_filters(JobFilterSet, ["state", "page", "ordering"]).base_filters) == {"state"}
    # A name with a suffix counts for its filter (fields of several inputs); an unknown name builds nothing.
    assert set(named_filters(JobFilterSet, ["team_min", "color"]).base_filters) == {"team"}
    assert named_filters(JobFilterSet, list(JobFilterSet.base_filters)) is JobFilterSet
    # One class per set of names, made once; the form keeps the FilterSet's name (its errors and schema read it).
    assert named_filters(JobFilterSet, ["pool"]) is named_filters(JobFilterSet, ["pool", "page"])
    assert named_filters(JobFilterSet, ["pool"]).__name__ == "JobFilterSet"


def test_filters_of_no_request_share_their_form_class_and_nothing_a_request_sets(team, other_team):
    """A FilterSet of filters whose fields depend on no request makes its form class once and copies its filters
    and fields shallowly (bench/api.py): each request still has its own filters, data, errors and language."""
    static = named_filters(JobFilterSet, ["state"])
    good = static(data=QueryDict("state=running&state=queued"), queryset=Job.objects.all())
    bad = static(data=QueryDict("state=exploded"), queryset=Job.objects.all())
    assert good.get_form_class() is bad.get_form_class()
    assert good.filters["state"] is not bad.filters["state"] and good.filters["state"].parent is good
    assert good.form.fields["state"] is not bad.form.fields["state"]
    assert good.is_valid() and good.form.cleaned_data == {"state": ["running", "queued"]}
    assert not bad.is_valid()
    with translation.override("zh-hans"):
        chinese = static(data=QueryDict("state=exploded"), queryset=Job.objects.all())
        assert not chinese.is_valid()
        chinese_error = str(chinese.errors["state"][0])
    english_error = str(bad.errors["state"][0])
    assert "exploded" in chinese_error and "exploded" in english_error and chinese_error != english_error
    assert good.is_valid() and not good.errors  # validating the others changed nothing of the first
    # A filter whose choices are the requester's (the visible teams) makes its field, and its form, per request; a
    # filter by a method of the FilterSet is copied whole, so that its method is its own FilterSet's.
    per_request = named_filters(JobFilterSet, ["team", "state"])
    first = per_request(data=QueryDict("team=alpha"), queryset=Job.objects.all())
    second = per_request(data=QueryDict("team=alpha"), queryset=Job.objects.all())
    assert first.get_form_class() is not second.get_form_class()
    by_method = named_filters(TeamFilterSet, ["q"])
    searched = by_method(data=QueryDict("q=alp"), queryset=Team.objects.all())
    assert searched.filters["q"].filter.f is searched.filters["q"] and searched.is_valid()
    assert list(searched.qs) == [team]


def test_a_member_filter_still_sees_only_visible_teams(jobs, researcher, other_team):
    """The team filter's choices are the requester's visible teams, built per request as before."""
    client = APIClient()
    client.force_authenticate(UserFactory(username="stranger"))
    answer = client.get("/api/v1/jobs/", {"team": other_team.slug})
    assert answer.status_code == 400 and "team" in answer.json()
    mine = APIClient()
    mine.force_authenticate(researcher)
    assert mine.get("/api/v1/jobs/", {"team": "alpha"}).status_code == 200
