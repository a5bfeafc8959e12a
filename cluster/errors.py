"""Which cluster failures are worth retrying.

Transient: the apiserver could not be reached, timed out, throttled us (429) or failed on its side (5xx).
Everything else the apiserver answered (400, 403, 404, 409, 422) is a verdict on the request: retrying it cannot
help, so it is reported at once.
"""

import contextlib
import contextvars
import random
from collections.abc import Callable, Iterator
from typing import TypeVar

import tenacity
import urllib3
from kubernetes.client.exceptions import ApiException

T = TypeVar("T")
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


class ClusterError(Exception):
    """A request the apiserver refused; `status` is its HTTP status (0 when it never answered)."""

    def __init__(self, message: str, *, status: int = 0, transient: bool = False):
        super().__init__(message)
        self.status = status
        self.transient = transient


class TransientClusterError(ClusterError):
    def __init__(self, message: str, *, status: int = 0):
        super().__init__(message, status=status, transient=True)


class NamespaceNotMade(ClusterError):
    """A team namespace no reconcile has made yet, that the web process could not make (the chart gives that right to
    the worker only, which makes it a moment after the team is created): `reconcile.namespaces.ensure`."""


def is_transient(error: BaseException) -> bool:
    if isinstance(error, ClusterError):
        return error.transient
    if isinstance(error, ApiException):
        return error.status in TRANSIENT_STATUSES or error.status == 0
    return isinstance(error, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError | OSError)


def is_verdict(error: BaseException) -> bool:
    """The apiserver answered and refused the request (400, 403, 404, 409, 422). Anything else (a transient failure,
    an error of the portal's own such as a database one) says nothing about the request."""
    return isinstance(error, ClusterError | ApiException) and not is_transient(error)


def describe(error: BaseException) -> str:
    """A short sentence for people: what went wrong with the cluster call."""
    if isinstance(error, ApiException):
        reason = error.reason or ""
        body = error.body
        if isinstance(body, bytes):  # a call made with _preload_content=False (resources.create_job)
            body = body.decode("utf-8", "replace")
        body = body if isinstance(body, str) else ""
        message = ""
        if body:
            try:
                import json

                message = json.loads(body).get("message", "")
            except ValueError:
                message = body[:300]
        return f"apiserver answered {error.status} {reason}: {message}".strip().rstrip(":")
    if isinstance(error, urllib3.exceptions.MaxRetryError) and isinstance(
        error.reason, urllib3.exceptions.ReadTimeoutError
    ):  # connected, then no answer within the call's timeout (cluster/client.py)
        return "apiserver did not answer in time"
    if isinstance(error, urllib3.exceptions.MaxRetryError | urllib3.exceptions.NewConnectionError | ConnectionError):
        return f"apiserver unreachable: {error.__class__.__name__}"
    if isinstance(error, urllib3.exceptions.TimeoutError | TimeoutError):
        return "apiserver did not answer in time"
    return f"{error.__class__.__name__}: {error}"


def translate(error: BaseException) -> ClusterError:
    status = error.status if isinstance(error, ApiException) else 0
    if is_transient(error):
        return TransientClusterError(describe(error), status=status)
    return ClusterError(describe(error), status=status)


def backoff_seconds(attempt: int, *, base: float = 1.0, cap: float = 60.0) -> float:
    """Exponential backoff with full jitter: attempt 0 waits up to `base`, doubling up to `cap`."""
    return random.uniform(0, min(cap, base * (2**attempt)))


_single_attempt: contextvars.ContextVar[bool] = contextvars.ContextVar("cluster_single_attempt", default=False)


@contextlib.contextmanager
def single_attempt() -> Iterator[None]:
    """Inside this block every cluster call is tried once: the caller (a Celery task with `autoretry_for`) owns
    the retrying, so retries are never stacked inside retries."""
    token = _single_attempt.set(True)
    try:
        yield
    finally:
        _single_attempt.reset(token)


def with_retries(call: Callable[[], T], *, attempts: int | None = None, base: float = 0.5, cap: float = 10.0) -> T:
    """Run `call`, retrying transient failures with backoff (tenacity); a non-transient failure is raised at once.
    Within `single_attempt()` (tasks) it tries once."""
    if _single_attempt.get():
        attempts = 1
    elif attempts is None:
        from django.conf import settings

        attempts = settings.KUBE_CALL_ATTEMPTS
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts),
        wait=lambda state: backoff_seconds(state.attempt_number - 1, base=base, cap=cap),
        retry=tenacity.retry_if_exception(is_transient),
        reraise=True,
    )
    try:
        return retrying(call)
    except Exception as error:  # noqa: BLE001 - whatever the client raised is worded as a ClusterError
        raise translate(error) from error
