"""One holder at a time: a coordination.k8s.io/v1 Lease that a long-lived process holds while it writes.

The sync (`manage.py sync_cluster`) may run in several replicas for availability; only the one holding the Lease
watches the cluster and writes. The rules are those of Kubernetes' own leader election (client-go's
leaderelection, which the controller-manager and the scheduler use):

- The holder renews `spec.renewTime` every `retry_seconds`. If it has not renewed for `renew_deadline_seconds`
  (shorter than the lease), it gives up: `lost` is set and the caller stops writing, before anyone else may take
  over. The deadline counts from the moment its last successful renewal was sent (a standby can have seen it no
  earlier), and no attempt outlasts it: it is checked before each round and between the read and the write, and
  each request's timeout is at most the time left (client-go cancels a renewal attempt at the deadline likewise).
- A standby reads the Lease every `retry_seconds`. It takes the Lease over once it has seen the same record (holder,
  renew time, resourceVersion) unchanged for a whole `lease_seconds` on its own clock: no two machines' clocks are
  compared. A Lease released by its holder (no holderIdentity) is taken at once.
- Every write is an update with the resourceVersion that was read: of two standbys racing for one expired Lease, one
  update wins and the other gets 409 and stays a standby.

So after the holder dies without releasing (SIGKILL, node lost), a standby holds the Lease within
`lease_seconds + retry_seconds` (17 s with the defaults); after a clean stop (SIGTERM releases it) within
`retry_seconds`. Each call here is tried once: the loop's next round is its retry.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from kubernetes.client.exceptions import ApiException

from . import client
from .errors import describe

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

# The longest one call of a round may take (seconds); a renewal's calls also end by its renew deadline.
REQUEST_TIMEOUT = 5


def default_identity() -> str:
    """The pod's name (its hostname in Kubernetes) with the process id and a random suffix: unique per process."""
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:6]}"


def own_namespace(fallback: str = "default") -> str:
    """The namespace of the pod this runs in (from its ServiceAccount mount), else `fallback`."""
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE_FILE) as handle:
            return handle.read().strip() or fallback
    except OSError:
        return fallback


def _now() -> datetime:
    return datetime.now(UTC)


def _micro_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class _Record:
    holder: str
    renewed: str
    version: str


class LeaderLease:
    """A Lease held by this process while it writes. `acquire(stop)` waits until held; `keep_renewing(stop)` renews
    in a thread and sets `lost` (and `stop`) when it cannot; `release()` hands it over at once."""

    def __init__(
        self,
        *,
        name: str,
        namespace: str,
        identity: str | None = None,
        lease_seconds: int = 15,
        renew_deadline_seconds: float | None = None,
        retry_seconds: float = 2.0,
    ):
        self.name = name
        self.namespace = namespace
        self.identity = identity or default_identity()
        self.lease_seconds = lease_seconds
        self.renew_deadline_seconds = renew_deadline_seconds or lease_seconds * 2 / 3
        self.retry_seconds = retry_seconds
        if not self.retry_seconds < self.renew_deadline_seconds < self.lease_seconds:
            raise ValueError("a Lease needs retry < renew deadline < lease duration")
        self.lost = threading.Event()
        self._observed: _Record | None = None
        self._observed_at = 0.0  # time.monotonic() when the record last changed, as this process saw it
        self._held_since = 0.0
        self._renewed_at: float | None = None  # time.monotonic() when the last successful write was sent

    # -- one round -------------------------------------------------------------------------------------------------
    def _body(self, *, transitions: int, acquired: datetime, version: str | None = None) -> dict:
        now = _micro_time(_now())
        metadata = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": {"app.kubernetes.io/part-of": "reservoir"},
        }
        if version is not None:
            metadata["resourceVersion"] = version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.lease_seconds,
                "acquireTime": _micro_time(acquired),
                "renewTime": now,
                "leaseTransitions": transitions,
            },
        }

    @staticmethod
    def _timeout(deadline: float | None) -> int | None:
        """A request's timeout: `REQUEST_TIMEOUT`, or the whole seconds left when `deadline` (a time.monotonic()
        moment) comes first; None when not one second is left. Whole seconds: the Kubernetes client bounds a call's
        total time only when its timeout is an int (a float would leave it unbounded)."""
        if deadline is None:
            return REQUEST_TIMEOUT
        left = int(deadline - time.monotonic())
        return min(REQUEST_TIMEOUT, left) if left >= 1 else None

    def try_acquire_or_renew(self, *, deadline: float | None = None) -> bool:
        """One round: True when this process holds the Lease after it (created, renewed or taken over). With
        `deadline` (a time.monotonic() moment), the round ends by then: False, without a call, when it has come
        before the read or before the write, and no request may last beyond it."""
        api = client.coordination()
        timeout = self._timeout(deadline)
        if timeout is None:
            return False
        try:
            lease = api.read_namespaced_lease(self.name, self.namespace, _request_timeout=timeout)
        except ApiException as error:
            if error.status != 404:
                raise
            timeout = self._timeout(deadline)
            if timeout is None:
                return False
            sent = time.monotonic()
            try:
                api.create_namespaced_lease(
                    self.namespace, self._body(transitions=0, acquired=_now()), _request_timeout=timeout
                )
            except ApiException as create_error:
                if create_error.status == 409:
                    return False  # another replica created it first
                raise
            self._renewed_at = sent
            log.info("lease %s/%s: created, held by %s", self.namespace, self.name, self.identity)
            return True
        spec = lease.spec
        holder = spec.holder_identity or ""
        record = _Record(holder, str(spec.renew_time), lease.metadata.resource_version)
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        transitions = spec.lease_transitions or 0
        if holder == self.identity:
            acquired = spec.acquire_time or _now()
        else:
            expired = time.monotonic() - self._observed_at > (spec.lease_duration_seconds or self.lease_seconds)
            if holder and not expired:
                return False
            transitions, acquired = transitions + 1, _now()
        timeout = self._timeout(deadline)
        if timeout is None:
            return False
        body = self._body(transitions=transitions, acquired=acquired, version=lease.metadata.resource_version)
        sent = time.monotonic()
        try:
            api.replace_namespaced_lease(self.name, self.namespace, body, _request_timeout=timeout)
        except ApiException as error:
            if error.status == 409:
                return False  # somebody else wrote it since our read
            raise
        self._renewed_at = sent
        if holder != self.identity:
            log.info("lease %s/%s: taken over from %r by %s", self.namespace, self.name, holder, self.identity)
        return True

    def _round(self, deadline: float | None = None) -> bool:
        try:
            return self.try_acquire_or_renew(deadline=deadline)
        except Exception as error:  # noqa: BLE001 - one failed round is retried by the next one
            log.warning("lease %s/%s: %s", self.namespace, self.name, describe(error))
            return False

    def taken_by_another(self) -> bool:
        """Whether the Lease, as last read, names another holder."""
        return self._observed is not None and self._observed.holder not in ("", self.identity)

    # -- the loops -------------------------------------------------------------------------------------------------
    def acquire(self, stop: threading.Event) -> bool:
        """Wait until this process holds the Lease (True) or `stop` is set (False)."""
        while not stop.is_set():
            if self._round():
                self._held_since = time.monotonic()
                return True
            stop.wait(self.retry_seconds)
        return False

    def keep_renewing(self, stop: threading.Event) -> threading.Thread:
        """Renew every `retry_seconds` in a daemon thread until `stop`; when no renewal succeeded within
        `renew_deadline_seconds` of the last one sent, set `lost` and `stop` at that deadline (the caller stops
        writing: another replica may take over once the lease runs out)."""

        def renew():
            if self._renewed_at is None:
                self._renewed_at = time.monotonic()
            pause = self.retry_seconds
            while not stop.wait(pause):
                deadline = self._renewed_at + self.renew_deadline_seconds
                if self._round(deadline):
                    pause = self.retry_seconds
                    continue
                if self.taken_by_another():
                    log.error("lease %s/%s: taken by %s", self.namespace, self.name, self._observed.holder)
                    self.lost.set()
                    stop.set()
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    log.error(
                        "lease %s/%s: not renewed for %.0f s: lost",
                        self.namespace,
                        self.name,
                        time.monotonic() - self._renewed_at,
                    )
                    self.lost.set()
                    stop.set()
                    return
                pause = min(self.retry_seconds, left)  # the next round no later than the deadline

        thread = threading.Thread(target=renew, name=f"lease-{self.name}", daemon=True)
        thread.start()
        return thread

    def release(self) -> None:
        """Hand the Lease over at once (a clean stop): clear the holder if it is still this process."""
        api = client.coordination()
        try:
            lease = api.read_namespaced_lease(self.name, self.namespace, _request_timeout=REQUEST_TIMEOUT)
            if lease.spec.holder_identity != self.identity:
                return
            body = self._body(
                transitions=lease.spec.lease_transitions or 0,
                acquired=lease.spec.acquire_time or _now(),
                version=lease.metadata.resource_version,
            )
            body["spec"]["holderIdentity"] = None
            body["spec"]["leaseDurationSeconds"] = 1
            api.replace_namespaced_lease(self.name, self.namespace, body, _request_timeout=REQUEST_TIMEOUT)
            log.info("lease %s/%s: released by %s", self.namespace, self.name, self.identity)
        except Exception as error:  # noqa: BLE001 - not released: the others take over when it runs out
            log.warning("lease %s/%s: not released: %s", self.namespace, self.name, describe(error))
