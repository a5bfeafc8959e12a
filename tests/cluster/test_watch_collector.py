"""The cyclic garbage collector is paused while a list page or a watch event is decoded and parsed (its raw objects
never form a cycle, and a collection every few hundred of them scanned the whole heap again and again), and only
then: the handlers, which write to the database, run with it as it was."""

import gc
import json
import threading

import pytest

from cluster.watch import ListWatch, collector_paused, iter_pages
from tests.cluster.fake_streams import Stream


class Page:
    def __init__(self, body: dict):
        self.data = json.dumps(body).encode()

    def release_conn(self):
        pass


@pytest.fixture(autouse=True)
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def pages_of(items: list[dict]):
    def list_call(limit, _continue=None, **kwargs):
        start = int(_continue or 0)
        end = start + limit
        metadata = {"resourceVersion": "7", **({"continue": str(end)} if end < len(items) else {})}
        return Page({"metadata": metadata, "items": items[start:end]})

    return list_call


def test_list_pages_are_parsed_with_the_collector_paused_and_it_runs_again_between_pages():
    seen = []

    def parse(item: dict) -> str:
        seen.append(gc.isenabled())
        return item["metadata"]["name"]

    pages = []
    for page, version in iter_pages(
        pages_of([{"metadata": {"name": f"pod-{i}"}} for i in range(5)]), parse=parse, page_size=2
    ):
        pages.append((page, version, gc.isenabled()))
    assert [page for page, _version, _on in pages] == [["pod-0", "pod-1"], ["pod-2", "pod-3"], ["pod-4"]]
    assert all(on for _page, _version, on in pages)  # the caller gets each page with the collector running again
    assert seen == [False] * 5
    assert gc.isenabled()


def test_watch_events_are_parsed_with_the_collector_paused_and_handled_with_it_running():
    parsed_with, handled_with = [], []

    def parse(obj: dict) -> str:
        parsed_with.append(gc.isenabled())
        return obj["metadata"]["name"]

    def on_events(events):
        handled_with.append(gc.isenabled())

    events = [
        {"type": "MODIFIED", "object": {"metadata": {"name": f"pod-{v}", "resourceVersion": str(v)}}} for v in (11, 12)
    ]
    watch = ListWatch(
        name="pods",
        list_call=lambda **kwargs: Stream(events),
        parse=parse,
        on_relist=lambda items, version: None,
        on_event=None,
        on_events=on_events,
    )
    assert watch.watch_from("10") == "12"
    assert parsed_with == [False, False]
    assert handled_with and all(handled_with)
    assert gc.isenabled()


def test_a_parse_that_fails_leaves_the_collector_running():
    def parse(item: dict):
        raise ValueError("not a pod")

    with pytest.raises(ValueError):
        list(iter_pages(pages_of([{"metadata": {"name": "pod-0"}}]), parse=parse))
    assert gc.isenabled()


def test_the_collector_runs_again_only_when_the_last_thread_inside_leaves():
    inside, leave = threading.Event(), threading.Event()

    def other_thread():
        with collector_paused():
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=other_thread)
    thread.start()
    inside.wait(10)
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread is still decoding
    leave.set()
    thread.join(10)
    assert gc.isenabled()


def test_a_collector_someone_turned_off_stays_off():
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


# --- the next page asked for while this one is parsed ------------------------------------------------------------


def test_the_next_page_is_asked_for_while_this_one_is_parsed():
    asked: list[str | None] = []
    page_asked = {token: threading.Event() for token in ("2", "4")}
    items = [{"metadata": {"name": f"pod-{i}"}} for i in range(5)]
    pages = pages_of(items)

    def list_call(**kwargs):
        asked.append(kwargs.get("_continue"))
        if kwargs.get("_continue") in page_asked:
            page_asked[kwargs["_continue"]].set()
        return pages(**kwargs)

    next_asked_while_parsing = []

    def parse(item: dict) -> str:
        name = item["metadata"]["name"]
        if name in ("pod-0", "pod-2"):  # the first object of a page that has a next one
            next_asked_while_parsing.append(page_asked["2" if name == "pod-0" else "4"].wait(10))
        return name

    listed = [name for page, _version in iter_pages(list_call, parse=parse, page_size=2) for name in page]
    assert listed == [f"pod-{i}" for i in range(5)]
    assert asked == [None, "2", "4"]
    assert next_asked_while_parsing == [True, True]


def test_a_list_whose_items_come_first_is_read_page_after_page():
    asked: list[str | None] = []

    def list_call(limit, _continue=None, **kwargs):
        asked.append(_continue)
        start = int(_continue or 0)
        end = start + limit
        # The apiserver writes a custom resource's list with its keys sorted: items before metadata.
        body = json.dumps({"apiVersion": "x/v1", "items": [{"n": i} for i in range(start, min(end, 5))], "kind": "L"})
        body = body[:-1] + ', "metadata": ' + json.dumps({"continue": str(end)} if end < 5 else {}) + "}"
        page = Page({})
        page.data = body.encode()
        return page

    listed = [item["n"] for page, _version in iter_pages(list_call, page_size=2) for item in page]
    assert listed == [0, 1, 2, 3, 4]
    assert asked == [None, "2", "4"]


def test_the_next_page_is_asked_for_in_the_callers_context():
    """A task's cluster calls are tried once (cluster.errors.single_attempt, a context variable): the call that
    asks for the next page ahead, in a thread of its own, runs in the caller's context too."""
    from cluster.errors import _single_attempt, single_attempt

    seen = []
    pages = pages_of([{"metadata": {"name": f"pod-{i}"}} for i in range(5)])

    def list_call(**kwargs):
        seen.append(_single_attempt.get())
        return pages(**kwargs)

    with single_attempt():
        listed = [item for page, _version in iter_pages(list_call, page_size=2) for item in page]
    assert len(listed) == 5
    assert seen == [True, True, True]
