"""Request latency for the portal's own /metrics: one histogram observation per request, labelled by the
resolved route (never the raw path, which would make a series per object) and the method (a standard one, else
`other`: the request line may carry any token, which would make a series per invented method)."""

import time

from .metrics import REQUEST_LATENCY

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"})


class RequestMetricsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.route if match is not None and match.route else "unmatched"
        if route != "metrics":
            method = request.method if request.method in METHODS else "other"
            REQUEST_LATENCY.labels(method, route, str(response.status_code)).observe(time.perf_counter() - started)
        return response
