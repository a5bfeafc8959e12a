"""The REST API's routes answer a request that misses them like an API, not like a web page.

A URL without its trailing slash (`POST /api/v1/jobs`, as CI scripts write it) routes like the one with it: Django's
APPEND_SLASH would answer it `301 Moved Permanently`, which HTTP clients follow as a GET, so a submission became a read
of the list. The slashless spelling is a second, unnamed pattern of each route, tried after every named one: URLs are
still reversed with the slash, a request written with it finds its view as fast as before, and the schema lists each
route once. A path under the API that no route takes answers DRF's JSON 404 (`{"detail": ...}`), not the HTML page.
"""

from django.urls import URLPattern, re_path
from rest_framework import exceptions, routers
from rest_framework.views import APIView


class NotFoundView(APIView):
    """Any method on a path no route takes: 404 in the API's format, after the API's authentication (a caller who is
    not signed in is told so first, as on every other route)."""

    schema = None

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        raise exceptions.NotFound()


class Router(routers.DefaultRouter):
    """DRF's DefaultRouter whose routes also take their URL without the trailing slash, and whose last pattern answers
    every other path with a JSON 404."""

    def get_urls(self):
        urls = super().get_urls()
        slashless = [_without_slash(url) for url in urls if isinstance(url, URLPattern) and _ends_with_slash(url)]
        return [*urls, *slashless, re_path(r"", NotFoundView.as_view())]


def _ends_with_slash(url: URLPattern) -> bool:
    return str(url.pattern).endswith("/$")


def _without_slash(url: URLPattern) -> URLPattern:
    """`url` without its trailing slash, unnamed (reversing gives the slashed URL) and left out of the schema."""
    view = url.callback
    slashless = view.cls.as_view(view.actions, **{**view.initkwargs, "schema": None})
    return re_path(str(url.pattern).removesuffix("/$") + "$", slashless, url.default_args)
