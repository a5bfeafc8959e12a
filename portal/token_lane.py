"""API requests that carry a token skip the middleware only a browser needs (issue 30: CPU per API request).

A request to the REST API (`API_PREFIX`) with `Authorization: Bearer <secret>` (or `Token <secret>`) is
authenticated by its token, inside DRF: `ApiTokenAuthentication` comes first, so a session cookie beside the token is
never read, and a token that is not valid answers 401. For such a request the session, the CSRF check (DRF checks
CSRF only for session authentication), the messages, htmx, the session's lifetime and its user's language, allauth's
and django-axes's middleware have nothing to do, and the page throttle leaves API views to DRF. Running them cost a
token request about 0.4 ms of CPU on the benchmark's machine (docs/benchmarks.md, "REST API").

The application gunicorn serves (`portal.wsgi.application`) is two Django handlers: the whole `MIDDLEWARE` for every
request, and the same chain without `BROWSER_ONLY_MIDDLEWARE` for a token request to `API_PREFIX`. Both keep the
request metrics, the 503 on a lost database, the security headers, compression, the Content-Security-Policy, the
language from Accept-Language, the common middleware and X-Frame-Options.
"""

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.wsgi import WSGIHandler

from portal.authentication import KEYWORDS

# The REST API's routes, all DRF views (dashboard/api/urls.py); the schema and its docs page are pages.
API_PREFIX = "/api/v1/"
TOKEN_KEYWORDS = tuple(keyword.decode() for keyword in KEYWORDS)  # the token authentication's, lower case
BROWSER_ONLY_MIDDLEWARE = (
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "portal.middleware.SessionLifetimeMiddleware",
    "portal.middleware.UserLanguageMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "portal.middleware.HtmxSignInMiddleware",
    "portal.throttling.WriteThrottleMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "axes.middleware.AxesMiddleware",
)


def is_token_api_request(environ) -> bool:
    """Whether a WSGI request goes to the API with a token in its Authorization header (its first word)."""
    if not environ.get("PATH_INFO", "").startswith(API_PREFIX):
        return False
    keyword, _, _ = environ.get("HTTP_AUTHORIZATION", "").strip().partition(" ")
    return keyword.lower() in TOKEN_KEYWORDS


def token_lane_middleware(middleware) -> list[str]:
    """`middleware` (a MIDDLEWARE list) without the browser-only entries. Each of those must be in it: a name that
    no longer matches (a middleware renamed or replaced) is an error at start, not a lane that quietly keeps it."""
    missing = [path for path in BROWSER_ONLY_MIDDLEWARE if path not in middleware]
    if missing:
        raise ImproperlyConfigured(f"token lane: not in MIDDLEWARE: {', '.join(missing)}")
    return [path for path in middleware if path not in BROWSER_ONLY_MIDDLEWARE]


class _LaneHandler(WSGIHandler):
    """A Django handler whose chain is the token lane's. Django's handler reads `settings.MIDDLEWARE` while it loads
    its chain; it is given the lane's list for that moment only (at start, before any request is served)."""

    def load_middleware(self, is_async=False):
        full = settings.MIDDLEWARE
        settings.MIDDLEWARE = token_lane_middleware(full)
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = full


class PortalApplication:
    """The WSGI application: a token request to the API takes the lane, every other request the whole chain."""

    def __init__(self):
        self.full = WSGIHandler()
        self.lane = _LaneHandler()

    def __call__(self, environ, start_response):
        handler = self.lane if is_token_api_request(environ) else self.full
        return handler(environ, start_response)
