"""The portal's request-latency histogram took its `method` label straight from the request line: users saw anyone
(no sign-in needed) mint a new series per request by sending an invented HTTP method (`XMETHOD0 /`, `XMETHOD1 /`,
...), so /metrics, the worker's memory and Prometheus' series count grew without bound. Methods outside the
standard set are now labelled `other`; a standard method keeps its own label (the positive control)."""

import pytest

from monitoring.metrics import REGISTRY

STANDARD = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}


def _methods_in_exposition() -> set[str]:
    methods = set()
    for family in REGISTRY.collect():
        if family.name != "reservoir_http_request_duration_seconds":
            continue
        for sample in family.samples:
            methods.add(sample.labels["method"])
    return methods


@pytest.mark.django_db
def test_invented_http_methods_do_not_each_become_a_series(client):
    for n in range(5):
        client.generic(f"XMETHOD{n}", "/healthz")
    client.options("/healthz")
    methods = _methods_in_exposition()
    invented = {method for method in methods if method not in STANDARD and method != "other"}
    assert not invented, f"one histogram series per invented method: {sorted(invented)}"
    assert {"other", "OPTIONS"} <= methods
