"""When a watch saves its resourceVersion: not after every event (a database round trip each in the sync), but at
most once every `save_every_seconds`, and always when the stream ends, so a restart resumes where it stopped."""

import time

import pytest

from cluster.watch import Gone, HandlerFailed, ListWatch
from tests.cluster.fake_streams import PacedStream, Stream


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


def batched_watch(
    events: list[dict], *, batches: list, saved: list, fail_on: str | None = None, slow: float = 0
) -> ListWatch:
    def on_events(received):
        names = [obj["metadata"]["name"] for _kind, obj in received]
        if fail_on in names:
            raise RuntimeError("the database went away")
        batches.append(names)
        time.sleep(slow)  # meanwhile the reader takes in the rest of the stream

    return ListWatch(
        name="pods",
        list_call=lambda **kwargs: Stream(events),
        on_relist=lambda items, version: None,
        on_event=None,
        on_events=on_events,
        save_version=saved.append,
        save_every_seconds=60,
    )


def test_events_that_are_already_there_are_applied_as_one_batch_in_order():
    batches, saved = [], []
    events = [pod_event(v) for v in range(11, 14)]
    events.append({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "14"}}})
    events += [pod_event(v) for v in range(15, 18)]
    last = batched_watch(events, batches=batches, saved=saved, slow=0.3).watch_from("10")
    # What arrived while the first batch was applied is the second, whole: every event in the order sent, bookmarks
    # left out.
    assert [name for batch in batches for name in batch] == [f"pod-{v}" for v in (11, 12, 13, 15, 16, 17)]
    assert len(batches) <= 2
    assert last == "17"
    assert saved == ["17"]


def test_a_batch_is_never_larger_than_its_size():
    batches, saved = [], []
    watch = batched_watch([pod_event(v) for v in range(11, 31)], batches=batches, saved=saved)
    watch.batch_size = 7
    watch.watch_from("10")
    assert [name for batch in batches for name in batch] == [f"pod-{v}" for v in range(11, 31)]
    assert max(len(batch) for batch in batches) <= 7


def test_a_batch_that_fails_leaves_the_version_before_it_so_the_whole_batch_is_read_again():
    batches, saved = [], []
    watch = batched_watch([pod_event(v) for v in range(11, 21)], batches=batches, saved=saved, fail_on="pod-15")
    watch.batch_size = 4
    with pytest.raises(HandlerFailed):
        watch.watch_from("10")
    assert batches == [["pod-11", "pod-12", "pod-13", "pod-14"]]
    assert watch.applied_version == "14"  # the retry reads 15..18 again, none of which was recorded
    assert saved == ["14"]


def test_an_error_event_ends_the_stream_after_the_events_before_it_are_applied():
    batches, saved = [], []
    events = [pod_event(11), pod_event(12), {"type": "ERROR", "object": {"code": 410, "message": "too old"}}]
    watch = batched_watch(events, batches=batches, saved=saved)
    with pytest.raises(Gone):
        watch.watch_from("10")
    assert [name for batch in batches for name in batch] == ["pod-11", "pod-12"]


def paced_watch(paced: list[tuple[float, dict]], *, batches: list, gather: float) -> ListWatch:
    return ListWatch(
        name="pods",
        list_call=lambda **kwargs: PacedStream(paced),
        on_relist=lambda items, version: None,
        on_event=None,
        on_events=lambda received: batches.append([obj["metadata"]["name"] for _kind, obj in received]),
        save_version=lambda version: None,
        gather_seconds=gather,
    )


def test_events_that_arrive_soon_after_a_batchs_first_are_gathered_into_it():
    # Three events 50 ms apart, then a fourth a second later: the first three are one batch, the fourth its own.
    paced = [(0, pod_event(11)), (0.05, pod_event(12)), (0.05, pod_event(13)), (1.0, pod_event(14))]
    batches = []
    last = paced_watch(paced, batches=batches, gather=0.5).watch_from("10")
    assert batches == [["pod-11", "pod-12", "pod-13"], ["pod-14"]]
    assert last == "14"


def test_without_gathering_a_batch_is_only_what_is_already_there():
    paced = [(0, pod_event(11)), (0.5, pod_event(12)), (0.5, pod_event(13))]
    batches = []
    paced_watch(paced, batches=batches, gather=0).watch_from("10")
    assert batches == [["pod-11"], ["pod-12"], ["pod-13"]]


def test_gathering_never_makes_a_batch_larger_than_its_size():
    paced = [(0, pod_event(v)) for v in range(11, 21)]
    batches = []
    watch = paced_watch(paced, batches=batches, gather=0.5)
    watch.batch_size = 4
    watch.watch_from("10")
    assert [name for batch in batches for name in batch] == [f"pod-{v}" for v in range(11, 21)]
    assert max(len(batch) for batch in batches) <= 4
