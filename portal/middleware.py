"""Each signed-in user sees the portal in their own language (`User.language`), whatever the browser asks for; a
session ends `SESSION_COOKIE_AGE` after its sign-in, however it is used, and a page left open then goes to the sign-in
page whole; the Content-Security-Policy header written once per policy rather than on each response."""

import time
from http import HTTPStatus

from csp.constants import HEADER
from csp.middleware import CheckableLazyObject, CSPMiddleware
from csp.utils import build_policy
from django.conf import settings
from django.contrib.auth import logout
from django.shortcuts import resolve_url
from django.utils import translation
from django.utils.http import urlencode
from django_htmx.http import HttpResponseClientRedirect

SIGNED_IN_AT = "_reservoir_signed_in_at"  # the session's sign-in, seconds since the epoch


def note_sign_in(sender, request, user, **kwargs):
    """`user_logged_in`: the session's lifetime counts from now (a new sign-in in the same session too)."""
    request.session[SIGNED_IN_AT] = time.time()


class SessionLifetimeMiddleware:
    """Runs after AuthenticationMiddleware: a session signed in longer ago than `SESSION_COOKIE_AGE` is signed out.
    Django's own expiry slides: it is set anew each time the session is saved, and a signed-in user who opens the
    provider's sign-in URL has allauth save a state into it, so a user disabled at the provider could otherwise keep a
    session (and the memberships it was signed in with) for ever. A session from before this rule is counted from
    the first request that sees it."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            signed_in_at = request.session.get(SIGNED_IN_AT)
            now = time.time()
            if signed_in_at is None:
                request.session[SIGNED_IN_AT] = now
            elif now - signed_in_at > settings.SESSION_COOKIE_AGE:
                logout(request)
        return self.get_response(request)


class HtmxSignInMiddleware:
    """Runs after HtmxMiddleware: an htmx request sent to the sign-in page (its session ended while a page polled) makes
    the whole page go there, and back to that page after signing in. The browser follows a 302 itself, so htmx would
    otherwise get the sign-in page's HTML and swap it into the fragment, a page inside the page."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code != HTTPStatus.FOUND or not getattr(request, "htmx", False):
            return response
        login = resolve_url(settings.LOGIN_URL)
        if response["Location"].split("?", 1)[0] != login:
            return response
        return HttpResponseClientRedirect(f"{login}?{urlencode({'next': request.htmx.current_url_abs_path or '/'})}")


class UserLanguageMiddleware:
    """Runs after AuthenticationMiddleware: activates the user's language for the request (LocaleMiddleware,
    earlier in the chain, has already chosen one from the cookie or Accept-Language for anonymous visitors)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated and user.language:
            translation.activate(user.language)
            request.LANGUAGE_CODE = translation.get_language()
        return self.get_response(request)


class ContentSecurityPolicyMiddleware(CSPMiddleware):
    """django-csp's middleware, which builds the policy's header anew for every response (two policies, about a
    fortieth of an API list request's CPU, bench/api.py). A response that changes nothing of the policy — no nonce
    asked for, no view's own policy, no report-only policy, not an excluded path nor a debug error page — gets the
    header built once from CONTENT_SECURITY_POLICY (again when the setting is replaced, as tests do); every other
    response goes through django-csp as before."""

    _built: tuple[object, str] | None = None

    def process_response(self, request, response):
        policy = getattr(settings, "CONTENT_SECURITY_POLICY", None)
        if not policy or not self._unchanged(request, response, policy):
            return super().process_response(request, response)
        built = ContentSecurityPolicyMiddleware._built
        if built is None or built[0] is not policy:
            built = ContentSecurityPolicyMiddleware._built = (policy, build_policy())
        if HEADER not in response:
            response[HEADER] = built[1]
        # As django-csp does: a nonce asked for after the header is written is an error, not a silent gap.
        request.csp_nonce = CheckableLazyObject(self._csp_nonce_post_response)
        return response

    @staticmethod
    def _unchanged(request, response, policy) -> bool:
        if getattr(request, "_csp_nonce", None) is not None:
            return False
        if getattr(settings, "CONTENT_SECURITY_POLICY_REPORT_ONLY", None):
            return False
        if settings.DEBUG and response.status_code in (HTTPStatus.NOT_FOUND, HTTPStatus.INTERNAL_SERVER_ERROR):
            return False
        if request.path_info.startswith(tuple(policy.get("EXCLUDE_URL_PREFIXES") or ())):
            return False
        overrides = ("_csp_exempt", "_csp_config", "_csp_update", "_csp_replace")
        return not any(getattr(response, name, None) for name in overrides) and not any(
            getattr(response, f"{name}_ro", None) for name in overrides
        )
