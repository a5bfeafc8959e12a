"""Leader election (cluster/lease.py): the sync holding the Lease must give up (`lost`) before a standby may take the
Lease over, i.e. within `lease_seconds` of the last renewal the standby saw, or two syncs write at once.

What was seen: the holder checked its renew deadline only after a round returned, and a round is two API calls of up
to 5 s each. With the defaults (lease 15 s, deadline 10 s, retry 2 s): the holder renews at t=0; the apiserver then
refuses its calls for ten seconds (rounds at 2..10 s fail at once, 10 s is not yet past the deadline); the round at 12
s gets its read answered slowly and its replace times out, returning at ~22 s, and only then did the holder give up. A
standby that saw the t=0 renewal took the Lease at ~16 s: from 16 s to 22 s both believed they held it and both wrote.
Now the deadline counts from when the last successful renewal was sent, it is checked before each round and between
the read and the write, and no request may last beyond it (as client-go cancels a renewal attempt at the deadline).

No cluster and no real time: the Kubernetes client's answers are faked and the module's monotonic clock is a fake one
that the faked calls advance by the time they take."""

import threading
from types import SimpleNamespace

from kubernetes.client.exceptions import ApiException

from cluster import client
from cluster import lease as lease_module
from cluster.lease import LeaderLease

LEASE = 15
RENEW_DEADLINE = 10  # the default: two thirds of the lease


class Clock:
    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now


class FakeStop(threading.Event):
    """`stop.wait(t)` passes `t` seconds of fake time at once; it is set once the fake time reaches `until`."""

    def __init__(self, clock, until=float("inf")):
        super().__init__()
        self.clock = clock
        self.until = until

    def wait(self, timeout=None):
        if not self.is_set() and timeout:
            self.clock.now += timeout
        if self.clock.now >= self.until:
            self.set()
        return self.is_set()


class RecordingEvent(threading.Event):
    def __init__(self, clock):
        super().__init__()
        self.clock = clock
        self.set_at = None

    def set(self):
        if self.set_at is None:
            self.set_at = self.clock.now
        super().set()


class FakeCoordination:
    """The apiserver as the holder sees it. `answer(call, now, timeout)` says how a call made at `now` goes: the
    seconds it takes and whether it succeeds (a failure takes its time, then raises). Every call's timeout is kept."""

    def __init__(self, clock, identity, answer):
        self.clock = clock
        self.answer = answer
        self.calls: list[tuple[str, float, float | None]] = []
        self.version = 1
        self.lease = SimpleNamespace(
            spec=SimpleNamespace(
                holder_identity=identity,
                renew_time="t0",
                lease_duration_seconds=LEASE,
                lease_transitions=0,
                acquire_time=None,
            ),
            metadata=SimpleNamespace(resource_version="1"),
        )

    def _call(self, call, timeout):
        self.calls.append((call, self.clock.now, timeout))
        took, succeeds = self.answer(call, self.clock.now, timeout)
        self.clock.now += took
        if not succeeds:
            if took:
                raise TimeoutError("read timed out")
            raise ApiException(status=503, reason="Service Unavailable")

    def read_namespaced_lease(self, name, namespace, _request_timeout=None):
        self._call("read", _request_timeout)
        return self.lease

    def replace_namespaced_lease(self, name, namespace, body, _request_timeout=None):
        self._call("replace", _request_timeout)
        self.version += 1
        self.lease.metadata.resource_version = str(self.version)
        self.lease.spec.renew_time = body["spec"]["renewTime"]
        return self.lease


def hold(monkeypatch, answer, *, until=float("inf")):
    """A holder that renewed at t=0, left renewing against `answer` until `until` (fake time) or until it gives up."""
    clock = Clock()
    monkeypatch.setattr(lease_module, "time", clock)
    holder = LeaderLease(name="sync", namespace="reservoir", identity="holder", lease_seconds=LEASE)
    api = FakeCoordination(clock, "holder", lambda call, now, timeout: (0, True))
    monkeypatch.setattr(client, "coordination", lambda: api)
    holder.lost = RecordingEvent(clock)
    assert holder.try_acquire_or_renew() is True  # renewed at t=0: a standby may take over once t > 15
    api.answer = answer
    thread = holder.keep_renewing(FakeStop(clock, until))
    thread.join(timeout=10)
    assert not thread.is_alive()
    return holder, api


def test_a_holder_that_cannot_renew_gives_up_before_a_standby_may_take_over(monkeypatch):
    def answer(call, now, timeout):
        """Refused at once until t=11; then reads answered slowly (4.9 s) and writes timing out."""
        if now < 11:
            return 0, False
        return (min(4.9, timeout), True) if call == "read" else (timeout, False)

    holder, api = hold(monkeypatch, answer)

    assert holder.lost.is_set()
    assert holder.lost.set_at <= RENEW_DEADLINE < LEASE, (
        f"the holder gave up only at t={holder.lost.set_at:.1f} s, after its {LEASE} s lease had run out: "
        "a standby holds the Lease meanwhile and both write"
    )
    # No call may last beyond the deadline; a whole number of seconds is what the Kubernetes client bounds.
    assert all(isinstance(timeout, int) and at + timeout <= RENEW_DEADLINE for _call, at, timeout in api.calls)


def test_the_deadline_counts_from_when_the_last_renewal_was_sent(monkeypatch):
    def answer(call, now, timeout):
        """The renewal at t=2 is written, but its answer takes 4 s; from then on every call is refused."""
        if now < 3:
            return (4, True) if call == "replace" else (0, True)
        return 0, False

    holder, _api = hold(monkeypatch, answer)

    # A standby may have seen that renewal as early as t=2: it may take over at t=17, so the holder goes by t=12.
    assert holder.lost.set_at <= 2 + RENEW_DEADLINE, holder.lost.set_at


def test_a_holder_whose_renewals_are_slow_but_succeed_keeps_the_lease(monkeypatch):
    holder, api = hold(monkeypatch, lambda call, now, timeout: (min(1.5, timeout), True), until=120)

    assert not holder.lost.is_set()
    assert len([call for call in api.calls if call[0] == "replace"]) > 20
