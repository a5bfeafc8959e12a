"""A small client for Prometheus' HTTP API: instant queries at a given time (https://prometheus.io/docs/prometheus/
latest/querying/api/#instant-queries). Nothing else in the portal talks to Prometheus."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import urllib3
from django.conf import settings

_pool: urllib3.PoolManager | None = None


class PrometheusError(Exception):
    """Prometheus could not be reached or refused the query."""


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


def _http() -> urllib3.PoolManager:
    global _pool
    if _pool is None:
        _pool = urllib3.PoolManager(num_pools=2, maxsize=4, retries=False)
    return _pool


def instant_query(expr: str, *, at: datetime, base_url: str | None = None, timeout: float | None = None) -> list:
    """The instant vector of `expr` at `at` as Samples (NaN values are left out)."""
    base_url = (base_url or settings.PROMETHEUS_URL or "").rstrip("/")
    if not base_url:
        raise PrometheusError("PROMETHEUS_URL is not set")
    timeout = timeout or settings.PROMETHEUS_TIMEOUT_SECONDS
    try:
        response = _http().request(
            "POST",
            f"{base_url}/api/v1/query",
            fields={"query": expr, "time": f"{at.timestamp():.3f}", "timeout": f"{timeout:g}s"},
            encode_multipart=False,
            timeout=urllib3.Timeout(connect=min(timeout, 3.0), read=timeout),
        )
    except urllib3.exceptions.HTTPError as error:
        raise PrometheusError(f"Prometheus at {base_url} did not answer: {error}") from error
    try:
        body = json.loads(response.data)
    except ValueError as error:
        raise PrometheusError(f"Prometheus answered HTTP {response.status} with no JSON") from error
    if response.status != 200 or body.get("status") != "success":
        raise PrometheusError(f"query {expr!r} failed: HTTP {response.status}: {body.get('error', body)}")
    data = body.get("data") or {}
    if data.get("resultType") != "vector":
        raise PrometheusError(f"query {expr!r} returned a {data.get('resultType')}, not a vector")
    samples = []
    for item in data.get("result") or []:
        try:
            value = float(item["value"][1])
        except (KeyError, IndexError, ValueError):
            continue
        if value != value:  # NaN
            continue
        samples.append(Sample(item.get("metric") or {}, value))
    return samples
