"""No URL or query parameter takes a trailing newline for its end (issue 24): every route of the resolver that takes a
month, a date or a name, and every query parameter the pages and the API read, is sent its value with "\\n" after
it; none answers a 500 (a `$` in a pattern lets "2026-11\\n" through, and the usage export then failed writing it
into a header), and a month so written is refused like any other that is not YYYY-MM."""

import re
from urllib.parse import quote, urlencode

import pytest
from django.urls import get_resolver
from drf_spectacular.generators import SchemaGenerator

from jobs.filters import JobFilterSet
from tests.factories import JobFactory, NodeFactory, PoolFactory, QuotaFactory

# Path parameters that are ids (the int converter, DRF's pk) or DRF's format suffix: no month, date or name.
NOT_NAMES = {"pk", "object_id", "content_type_id", "format"}
SAMPLES = {
    "slug": "alpha",
    "team": "alpha",
    "month": "2026-11",
    "name": "node-a",
    "app_label": "jobs",
    "format": "json",
}
# Query parameters the pages read besides the API's (those come from its schema): the submit page's ?template= and
# ?from=, the pool cards' ?since=, the billing pages' ?month=.
PAGE_QUERY_PARAMETERS = {"template", "from", "since", "month", "page", "state", "pool"}


def _routes(resolver=None, prefix=""):
    """(format string, parameter names) of every route, e.g. ("billing/teams/%(slug)s/%(month)s/usage.csv", ...)."""
    resolver = resolver or get_resolver()
    for entries in resolver.reverse_dict.lists():
        for possibilities, _pattern, _defaults, _converters in entries[1]:
            for route, parameters in possibilities:
                yield prefix + route, tuple(parameters)
    for namespace_prefix, sub_resolver in resolver.namespace_dict.values():
        yield from _routes(sub_resolver, prefix + namespace_prefix)


ROUTES = sorted(set(_routes()))


def _url(route: str, parameters: tuple, newline_in: str | None = None) -> str:
    values = {name: SAMPLES.get(name, "1") + ("\n" if name == newline_in else "") for name in parameters}
    return "/" + route % {name: quote(value, safe="") for name, value in values.items()}


def _query_value(name: str) -> str:
    if name == "month":
        return "2026-11"
    if any(word in name for word in ("after", "before", "since", "until")):
        return "2026-11-01T00:00:00Z"
    return "1" if name in ("page", "page_size", "nodes", "gpus", "id", "template", "from") else "alpha"


@pytest.fixture
def world(team, other_team, platform_admin):
    pool = PoolFactory(slug="train", name="Train")
    NodeFactory(pool=pool, name="node-a")
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    JobFactory(team=team, pool=pool, name="one")
    return pool


def _api_query_urls():
    """Each GET of the API's schema with each query parameter it declares, given a trailing newline."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    for path, operations in schema["paths"].items():
        url = re.sub(r"{(\w+)}", lambda match: SAMPLES.get(match[1], "1"), path)
        for parameter in operations.get("get", {}).get("parameters", []):
            if parameter["in"] == "query":
                yield f"{url}?{urlencode({parameter['name']: _query_value(parameter['name']) + chr(10)})}"


def _page_query_urls():
    """Each page (GET, outside the API and Django's admin) with each query parameter the pages read."""
    names = PAGE_QUERY_PARAMETERS | set(JobFilterSet.base_filters)
    for route, parameters in ROUTES:
        if not route.startswith(("api/", "admin/")):
            for name in sorted(names):
                yield f"{_url(route, parameters)}?{urlencode({name: _query_value(name) + chr(10)})}"


def test_a_trailing_newline_in_any_url_or_query_parameter_never_answers_500(client, world, platform_admin):
    client.force_login(platform_admin)
    client.raise_request_exception = False
    urls = [
        _url(route, parameters, newline_in=name)
        for route, parameters in ROUTES
        for name in parameters
        if name not in NOT_NAMES
    ]
    urls += [*_api_query_urls(), *_page_query_urls()]
    answers = {url: client.get(url).status_code for url in urls}
    assert len(answers) > 300
    assert [url for url, status in answers.items() if status >= 500] == []
    # A month with a newline is not a month: refused like "2026-13" (was taken as November, or failed).
    for url in (
        "/billing/teams/alpha/2026-11%0A/usage.csv",
        "/billing/teams/alpha/2026-11%0A/usage.json",
        "/billing/teams/alpha/invoices/2026-11%0A/",
        "/api/v1/usage/?month=2026-11%0A",
        "/api/v1/usage/alpha/?month=2026-11%0A",
    ):
        assert answers[url] == 404, url
