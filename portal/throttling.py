"""Every write is throttled, on the pages as in the API: one policy, one setting (`THROTTLE_RATES`), one count.

`WriteThrottleMiddleware` runs the API's own throttle classes (`portal.api.throttles`) before every page view that
takes a POST (PUT, PATCH, DELETE): each counts toward the user's write allowance, and a view marked
`@counts_as_submission` (submit, resubmit) toward the submission allowance too. The counters are the API's (same
scope, same user), so a user who spreads a flood over the browser and the API meets one limit. API views are left to
DRF, which applies the same classes itself; a POST that only renders (the submit form's live preview) is marked
`@not_a_write`.

Over the limit a page answers 429 with `Retry-After` and a page that says when to try again; an htmx request gets the
same words as a fragment, put at the top of the page (htmx is configured in base.html to swap a 429).
"""

import math

from django.shortcuts import render
from rest_framework.permissions import SAFE_METHODS
from rest_framework.views import APIView

from portal.api.throttles import SubmissionRateThrottle, WriteRateThrottle

TOO_MANY_REQUESTS = 429


def counts_as_submission(view):
    """Mark a page view whose POST submits a job: it also counts toward the user's submission allowance."""
    view.counts_as_submission = True
    return view


def not_a_write(view):
    """Mark a page view whose POST changes nothing (it only renders what was typed): it is not throttled."""
    view.not_a_write = True
    return view


def _is_api_view(view) -> bool:
    cls = getattr(view, "cls", None)
    return isinstance(cls, type) and issubclass(cls, APIView)


def too_many_requests(request, *, wait_seconds: float | None, scope: str):
    """The 429 answer: a page (a fragment for htmx) that says when to try again, and Retry-After."""
    seconds = max(1, math.ceil(wait_seconds or 1))
    context = {"retry_after": seconds, "submissions": scope == SubmissionRateThrottle.scope}
    if getattr(request, "htmx", False):
        response = render(request, "portal/partials/too_many_requests.html", context, status=TOO_MANY_REQUESTS)
        response["HX-Retarget"] = "#main"
        response["HX-Reswap"] = "afterbegin"
    else:
        response = render(request, "portal/too_many_requests.html", context, status=TOO_MANY_REQUESTS)
    response["Retry-After"] = str(seconds)
    return response


class WriteThrottleMiddleware:
    """After authentication and the CSRF check: throttles the pages' writes (see module docstring)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.method in SAFE_METHODS or _is_api_view(view_func) or getattr(view_func, "not_a_write", False):
            return None
        throttles = [WriteRateThrottle()]
        if getattr(view_func, "counts_as_submission", False):
            throttles.append(SubmissionRateThrottle())
        refused = [throttle for throttle in throttles if not throttle.allow_request(request, None)]
        if not refused:
            return None
        slowest = max(refused, key=lambda throttle: throttle.wait() or 0)
        return too_many_requests(request, wait_seconds=slowest.wait(), scope=slowest.scope)
