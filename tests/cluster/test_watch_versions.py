"""When a watch saves its resourceVersion: not after every event (a database round trip each in the sync), but at
most once every `save_every_seconds`, and always when the stream ends, so a restart resumes where it stopped."""

import json

import pytest

from cluster.watch import HandlerFailed, ListWatch


class Stream:
    """A watch response: one JSON event per line."""

    def __init__(self, events: list[dict]):
        self.body = "".join(json.dumps(event) + "\n" for event in events).encode()

    def stream(self, amt=None, decode_content=False):
        yield self.body

    def close(self):
        pass

    def release_conn(self):
        pass


def pod_event(version: int, kind: str = "MODIFIED") -> dict:
    return {"type": kind, "object": {"metadata": {"name": f"pod-{version}", "resourceVersion": str(version)}}}


def watch_with(events: list[dict], *, every: float, handled: list, saved: list, fail_on: str | None = None):
    def on_event(kind, obj):
        if obj["metadata"]["name"] == fail_on:
            raise RuntimeError("the database went away")
        handled.append(obj["metadata"]["resourceVersion"])

    return ListWatch(
        name="pods",
        list_call=lambda **kwargs: Stream(events),
        on_relist=lambda items, version: None,
        on_event=on_event,
        save_version=saved.append,
        save_every_seconds=every,
    )


def test_a_burst_of_events_saves_the_version_once_when_the_stream_ends():
    handled, saved = [], []
    events = [pod_event(version) for version in range(11, 21)]
    last = watch_with(events, every=60, handled=handled, saved=saved).watch_from("10")
    assert handled == [str(version) for version in range(11, 21)]
    assert last == "20"
    assert saved == ["20"]


def test_without_a_pause_every_new_version_is_saved():
    handled, saved = [], []
    events = [pod_event(11), {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}}, pod_event(13)]
    watch_with(events, every=0, handled=handled, saved=saved).watch_from("10")
    assert handled == ["11", "13"]
    assert saved == ["11", "12", "13"]


def test_a_handler_that_fails_leaves_the_version_before_its_event_saved():
    handled, saved = [], []
    events = [pod_event(11), pod_event(12), pod_event(13)]
    watch = watch_with(events, every=60, handled=handled, saved=saved, fail_on="pod-12")
    with pytest.raises(HandlerFailed):
        watch.watch_from("10")
    assert handled == ["11"]
    assert watch.applied_version == "11"  # the retry reads event 12 again
    assert saved == ["11"]  # and so does a restarted process


def test_a_failure_to_save_the_version_ends_the_stream_as_a_handler_failure():
    handled, saved = [], []

    def save(version):
        saved.append(version)
        raise ConnectionError("database unreachable")

    watch = watch_with([pod_event(11), pod_event(12)], every=0, handled=handled, saved=[])
    watch.save_version = save
    with pytest.raises(HandlerFailed):
        watch.watch_from("10")
    assert handled == ["11"]
    assert saved == ["11", "11"]  # tried in the stream, then once more as it ended (quietly)
