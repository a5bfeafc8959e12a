"""While PostgreSQL cannot be reached, pages and the API answer 503 with Retry-After, never a traceback page; so
does a request that needed Redis's cache while it does not answer (signing in through the provider: django-allauth
records each ID token it accepts in the cache).

Django turns an exception raised anywhere below a middleware into a response before that middleware sees it (each
layer is wrapped), so one try/except cannot catch a database error raised in, say, the session lookup of another
middleware. Instead the `got_request_exception` signal, sent for every uncaught exception wherever it was raised,
marks the request when the exception says the database is unreachable, and `DatabaseUnavailableMiddleware`
replaces the error response of a marked request with a 503: JSON under /api/, a plain friendly page elsewhere,
rendered without touching the database. API views answer the same JSON through DRF's exception handler
(portal/api/base.py), which sees their exceptions first.
"""

import logging

from django.conf import settings
from django.core.signals import got_request_exception
from django.db import InterfaceError, OperationalError
from django.dispatch import receiver
from django.http import HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils.translation import gettext_lazy as _

log = logging.getLogger(__name__)

MESSAGE = _("The portal cannot reach its database right now. Please try again in a few seconds.")
CACHE_MESSAGE = _(
    "Signing in is not possible right now: the portal cannot reach its cache (Redis), which signing in or out through "
    "your organization's provider needs. Please try again in a few seconds."
)
MARK = "_reservoir_database_unavailable"
CACHE_MARK = "_reservoir_cache_unavailable"


def is_database_unavailable(error: BaseException | None) -> bool:
    """A connection that failed, broke, or was closed under us (PostgreSQL restarting or stopped)."""
    return isinstance(error, OperationalError | InterfaceError)


def is_cache_unavailable(error: BaseException | None) -> bool:
    """Redis's cache refused or timed out (Django's Redis cache raises redis-py's errors as they come)."""
    import redis

    return isinstance(error, redis.ConnectionError | redis.TimeoutError)


def retry_after() -> int:
    return settings.DATABASE_UNAVAILABLE_RETRY_AFTER_SECONDS


def wants_json(request) -> bool:
    return request.path.startswith("/api/") or "application/json" in request.headers.get("Accept", "")


def unavailable_response(request, cache: bool = False) -> HttpResponse:
    """The 503 of an outage. The cache's page does not reload itself: the request it failed (a provider's callback)
    cannot be sent again, so it links to the sign-in page instead."""
    seconds = retry_after()
    message = CACHE_MESSAGE if cache else MESSAGE
    if wants_json(request):
        response = JsonResponse({"detail": str(message), "retry_after": seconds}, status=503)
    else:
        context = {"message": message, "retry_after": seconds, "sign_in_again": cache}
        response = HttpResponse(render_to_string("503.html", context), status=503)
    response["Retry-After"] = str(seconds)
    response["Cache-Control"] = "no-store"
    return response


@receiver(got_request_exception)
def _mark_database_outage(sender, request=None, **kwargs):
    import sys

    error = sys.exc_info()[1]
    if request is not None and is_database_unavailable(error):
        setattr(request, MARK, True)
    elif request is not None and is_cache_unavailable(error):
        setattr(request, CACHE_MARK, True)


class DatabaseUnavailableMiddleware:
    """An error response caused by an unreachable database, or cache, becomes a 503. It sits inside the middlewares
    that write the security headers (so the 503 carries them too) and outside every one that may touch the database
    or the cache."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if getattr(request, MARK, False) and response.status_code >= 500:
            log.warning("database unavailable: %s %s answered 503", request.method, request.path)
            return unavailable_response(request)
        if getattr(request, CACHE_MARK, False) and response.status_code >= 500:
            log.warning("cache unavailable: %s %s answered 503", request.method, request.path)
            return unavailable_response(request, cache=True)
        return response
