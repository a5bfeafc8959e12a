"""List-then-watch over raw JSON, the way informers do it.

`ListWatch.run()` lists a resource (in pages) and hands every object to `on_relist`, then watches from the list's
resourceVersion, handing each ADDED/MODIFIED/DELETED event to `on_event` — or, given `on_events`, every event that
has arrived while the previous ones were applied, and those arriving within `gather_seconds` of the batch's first,
as one batch in order. Bookmarks advance the resourceVersion without objects. A resourceVersion the apiserver has
compacted away (410 Gone) means events were missed: list again. Transient failures back off and resume from the last
version seen. A failure to apply what was read (the database unreachable) reads the same events again from the last
version fully applied: a relist would miss the objects that came and went meanwhile, and their usage with them. The
version is given to `save_version` so that a restarted process resumes where it stopped instead of listing
everything again: after a list, then at most once every `save_every_seconds` while events stream in, and when the
stream ends. A process that dies in between replays at most those seconds of events, which the handlers record
idempotently (saving after every event cost the sync three database round trips per event: bench/admission.py).

Objects stay plain dicts: deserialising tens of thousands of pods into client models costs more than the
listing itself. A `parse` function, when given, turns each object into what the handlers need (or None: not
needed) as it arrives, page by page, so that a full list never holds every raw object at once — a raw pod is
some 18 KB of Python objects, 50,000 of them most of a gigabyte.

Python's cyclic garbage collector is paused while a page or a watch event is decoded and parsed, until its raw
objects are dropped (`collector_paused`): decoding creates hundreds of thousands of containers, and each few hundred
of them set off a collection — the older generations scanning the whole heap again and again — although none of them
can form a cycle. At 12,500 pods that was nearly two thirds of the list's CPU time (2.0 s of CPU, 0.75 s with the
collector paused), and the list's length is what a relist's backlog of events grows with.
"""

import contextlib
import contextvars
import gc
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from .errors import backoff_seconds, is_transient

log = logging.getLogger(__name__)

PAGE_SIZE = 500

_collector_lock = threading.Lock()
_collector_pausers = 0
_collector_was_enabled = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic cyclic garbage collection inside (reference counting still frees everything at once); the
    collector's own state is restored when the last thread inside leaves. Only for decoding and parsing: what is
    allocated inside and kept is then scanned once, not at every few hundred allocations."""
    global _collector_pausers, _collector_was_enabled
    with _collector_lock:
        if _collector_pausers == 0:
            _collector_was_enabled = gc.isenabled()
            gc.disable()
        _collector_pausers += 1
    try:
        yield
    finally:
        with _collector_lock:
            _collector_pausers -= 1
            if _collector_pausers == 0 and _collector_was_enabled:
                gc.enable()


def _fetch(list_call: Callable, kwargs: dict) -> bytes:
    response = list_call(**kwargs)
    try:
        return response.data
    finally:
        response.release_conn()


def _continue_ahead(data: bytes) -> str | None:
    """A page's continue token read before the page is decoded, when its metadata comes before its items (as the
    apiserver writes built-in lists: kind, apiVersion, metadata, items); None otherwise (custom resources' lists
    have their keys sorted, items first) or when it is the last page."""
    head = data[:4096]
    start, items = head.find(b'"metadata":'), head.find(b'"items":')
    if start < 0 or 0 <= items < start:
        return None
    try:
        text = head[start + len(b'"metadata":') :].decode("utf-8", "ignore").lstrip()
        metadata, _end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None
    return metadata.get("continue") if isinstance(metadata, dict) else None


def iter_pages(
    list_call: Callable,
    list_kwargs: dict | None = None,
    parse: Callable[[dict], Any] | None = None,
    *,
    page_size: int = PAGE_SIZE,
    timeout: float = 120,
    prefetch: bool = True,
) -> Iterator[tuple[list, str]]:
    """The objects `list_call` lists, one page at a time (each object turned by `parse` as its page arrives, None
    dropped), with the collection's resourceVersion as of that page.

    With `prefetch`, the next page is asked for as soon as its continue token can be read (`_continue_ahead`), so that
    the apiserver prepares it while this one is decoded and parsed: the two share the machine's cores instead of
    taking turns."""

    def kwargs_for(token: str | None) -> dict:
        kwargs = dict(list_kwargs or {}, limit=page_size, _preload_content=False, _request_timeout=(5, timeout))
        if token:
            kwargs["_continue"] = token
        return kwargs

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="list-ahead") as ahead:
        data = _fetch(list_call, kwargs_for(None))
        while True:
            token_ahead = _continue_ahead(data) if prefetch else None
            # In the caller's context: a task's single attempt (cluster.errors.single_attempt) holds for it too.
            next_page = (
                ahead.submit(contextvars.copy_context().run, _fetch, list_call, kwargs_for(token_ahead))
                if token_ahead
                else None
            )
            with collector_paused():
                body = json.loads(data)
                del data
                page = body.get("items") or []
                if parse is not None:
                    page = [parsed for parsed in map(parse, page) if parsed is not None]
                metadata = body.get("metadata") or {}
                del body
            yield page, metadata.get("resourceVersion", "")
            token = metadata.get("continue")
            if not token:
                return
            if next_page is not None and token == token_ahead:
                data = next_page.result()
            else:
                data = _fetch(list_call, kwargs_for(token))


def list_pages(
    list_call: Callable, list_kwargs: dict | None = None, parse: Callable[[dict], Any] | None = None
) -> tuple[list, str]:
    """Every object `list_call` lists (`iter_pages`, gathered) and the collection's resourceVersion."""
    items: list = []
    version = ""
    for page, page_version in iter_pages(list_call, list_kwargs, parse):
        items.extend(page)
        version = page_version  # the last page's is the list's
    return items, version


class StreamReader:
    """Reads a watch stream's lines in a thread of its own, into a bounded queue: `batches` gives every line that
    has arrived, without waiting for more once it has one. The watch stream's own end, or its failure, ends
    `batches` (re-raising the failure)."""

    _END = object()

    def __init__(self, response, stop: threading.Event, *, capacity: int):
        self._lines: queue.Queue = queue.Queue(maxsize=capacity)
        self._stop = stop
        self._finished = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(response,), name="watch-reader", daemon=True)
        self._thread.start()

    def _put(self, item) -> bool:
        while not (self._finished.is_set() or self._stop.is_set()):
            try:
                self._lines.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    def _read(self, response) -> None:
        try:
            for line in iter_resp_lines(response):
                if not self._put(line):
                    return
            self._put(self._END)
        except BaseException as error:  # noqa: BLE001 - handed to the consuming thread, which raises it
            self._put(error)

    def _next(self):
        while not self._stop.is_set():
            try:
                return self._lines.get(timeout=0.5)
            except queue.Empty:
                continue
        return None

    def batches(self, size: int, gather_seconds: float = 0.0) -> Iterator[list[str]]:
        """Batches of at most `size` lines: every line already there; with `gather_seconds`, also those that arrive
        within that long of the batch's first line (the batch's first event waits that much longer)."""
        while True:
            item = self._next()
            if item is None:
                return  # stopping: close() cut the stream
            batch: list[str] = []
            deadline = time.monotonic() + gather_seconds
            while True:
                if item is self._END:
                    if batch:
                        yield batch
                    return
                if isinstance(item, BaseException):
                    if batch:
                        yield batch
                    raise item
                batch.append(item)
                if len(batch) >= size:
                    break
                try:
                    item = self._lines.get_nowait()
                except queue.Empty:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or self._stop.is_set():
                        break
                    try:
                        item = self._lines.get(timeout=remaining)
                    except queue.Empty:
                        break
            yield batch

    def finish(self) -> None:
        """The consumer is done: let the reader go (it ends when its stream is closed)."""
        self._finished.set()


class Gone(Exception):
    """The resourceVersion to watch from is too old (HTTP 410): relist."""


class HandlerFailed(Exception):
    """Applying what the apiserver sent failed on our side (e.g. the database is unreachable). The events are still
    there to read again: retry from the last version fully applied, never relist for it (a relist cannot see the
    objects that came and went meanwhile)."""


@dataclass
class ListWatch:
    name: str
    list_call: Callable  # e.g. CoreV1Api().list_pod_for_all_namespaces
    on_relist: Callable[[list, str], None]  # the listed objects (parsed) and the list's resourceVersion
    on_event: Callable[[str, Any], None] | None  # ADDED / MODIFIED / DELETED and the object (parsed)
    save_version: Callable[[str], None] = lambda version: None
    stop: threading.Event | None = None
    watch_timeout_seconds: int = 240
    list_kwargs: dict | None = None
    parse: Callable[[dict], Any] | None = None  # raw object -> what the handlers take; None: the object is skipped
    save_every_seconds: float = 1.0
    # When given, the events that are already there are handed over together, in order (at most `batch_size`).
    on_events: Callable[[list[tuple[str, Any]]], None] | None = None
    batch_size: int = 500
    # With `on_events`: how long a batch waits after its first event for more to arrive. Each batch costs its handler a
    # few queries and a commit whatever its size, so under a steady stream a short wait saves most of them.
    gather_seconds: float = 0.0
    # Called just before a list asks for its first page: what `on_relist` then receives is a snapshot taken no earlier.
    on_list_start: Callable[[], None] | None = None

    def __post_init__(self):
        self.stop = self.stop or threading.Event()
        self.list_kwargs = self.list_kwargs or {}
        self._response = None
        self.applied_version: str | None = None  # the last version whose events were all applied

    @staticmethod
    def _apply(handler: Callable, *args) -> None:
        try:
            handler(*args)
        except Exception as error:
            raise HandlerFailed(f"{type(error).__name__}: {error}") from error

    def close(self) -> None:
        """Stop now: set the stop flag and cut the open watch stream, if any."""
        self.stop.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()  # unblocks the reading thread (urllib3 >= 2.3)
                response.close()
            except Exception:  # noqa: BLE001 - closing a half-dead stream may fail; we are stopping anyway
                log.debug("%s: closing the watch stream failed", self.name, exc_info=True)

    def list_all(self) -> tuple[list[dict], str]:
        return list_pages(self.list_call, self.list_kwargs, self.parse)

    def relist(self) -> str:
        if self.on_list_start is not None:
            self._apply(self.on_list_start)
        started = time.monotonic()
        items, version = self.list_all()
        listed = time.monotonic()
        self._apply(self.on_relist, items, version)
        self._apply(self.save_version, version)
        log.info(
            "%s: listed %d objects at resourceVersion %s in %.2f s, recorded in %.2f s",
            self.name,
            len(items),
            version,
            listed - started,
            time.monotonic() - listed,
        )
        return version

    def watch_from(self, version: str) -> str:
        """Watch until the server closes the stream; return the last resourceVersion seen.

        A reader thread takes lines off the stream while the handlers work, so that the events which piled up
        meanwhile — after a long list, thousands — are applied as one batch (`on_events`) instead of one
        transaction each. Without `on_events`, each event goes to `on_event` in turn."""
        response = self.list_call(
            **self.list_kwargs,
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout_seconds,
            _preload_content=False,
            _request_timeout=(5, self.watch_timeout_seconds + 30),
        )
        self._response = response
        self.applied_version = version
        saved, saved_at = version, time.monotonic()
        lines = StreamReader(response, self.stop, capacity=self.batch_size * 2)
        try:
            gather = self.gather_seconds if self.on_events is not None else 0.0
            for batch in lines.batches(self.batch_size, gather):
                if self.stop.is_set():
                    break
                events: list[tuple[str, Any]] = []
                for line in batch:
                    kind, parsed, new_version, error = self._decode(line)
                    new_version = new_version or version
                    if kind == "ERROR":
                        self._apply_batch(events)  # what came before the error is good
                        if error.get("code") == 410:
                            raise Gone(error.get("message", "gone"))
                        raise ApiException(status=error.get("code", 500), reason=error.get("message", "watch error"))
                    if self.on_events is None:
                        if parsed is not None:
                            self._apply(self.on_event, kind, parsed)
                        version = self.applied_version = new_version
                        if version != saved and time.monotonic() - saved_at >= self.save_every_seconds:
                            self._apply(self.save_version, version)
                            saved, saved_at = version, time.monotonic()
                    else:
                        if parsed is not None:
                            events.append((kind, parsed))
                        version = new_version
                if self.on_events is not None:
                    self._apply_batch(events)
                    self.applied_version = version
                    if version != saved and time.monotonic() - saved_at >= self.save_every_seconds:
                        self._apply(self.save_version, version)
                        saved, saved_at = version, time.monotonic()
        finally:
            self._response = None
            lines.finish()
            response.close()
            response.release_conn()
            if self.applied_version != saved:
                # Every event up to `applied_version` was applied (a handler that failed left it before its event).
                self._save_quietly(self.applied_version)
        return version

    def _decode(self, line: str) -> tuple[str, Any, str, dict]:
        """One line of the watch stream: its type, the object parsed (None for a bookmark, an error or an object
        `parse` skips), its resourceVersion and, for an ERROR, the status it carries — the raw object dropped before
        the collector runs again."""
        with collector_paused():
            event = json.loads(line)
            kind, obj = event.get("type"), event.get("object") or {}
            version = (obj.get("metadata") or {}).get("resourceVersion") or ""
            if kind == "ERROR":
                return kind, None, version, {"code": obj.get("code", 500), "message": obj.get("message", "")}
            parsed = None if kind == "BOOKMARK" else obj if self.parse is None else self.parse(obj)
            del event, obj
            return kind, parsed, version, {}

    LOG_BATCHES_FROM = 100  # events: a batch this large (a backlog being worked off) is logged with its time

    def _apply_batch(self, events: list[tuple[str, Any]]) -> None:
        if events:
            started = time.monotonic()
            self._apply(self.on_events, events)
            if len(events) >= self.LOG_BATCHES_FROM:
                log.info("%s: applied %d events in %.2f s", self.name, len(events), time.monotonic() - started)

    def _save_quietly(self, version: str) -> None:
        try:
            self.save_version(version)
        except Exception:  # noqa: BLE001 - saved again after the next events; never mask the error that ended the stream
            log.warning("%s: could not save resourceVersion %s", self.name, version, exc_info=True)

    RELIST_AFTER_FAILURES = 3

    def _after_failure(self, version: str | None, failures: int) -> str | None:
        """Back off; after repeated failures from one version, list again. A version the apiserver cannot serve
        (e.g. "Too large resource version" after the cluster's storage was replaced) fails forever otherwise."""
        self.stop.wait(backoff_seconds(failures, base=0.5, cap=30))
        if failures % self.RELIST_AFTER_FAILURES == 0:
            log.info("%s: %d failures in a row from resourceVersion %s; listing again", self.name, failures, version)
            return None
        return version

    def current_version(self) -> str:
        """The collection's resourceVersion now (a one-item list)."""
        response = self.list_call(**self.list_kwargs, limit=1, _preload_content=False, _request_timeout=(5, 30))
        try:
            return json.loads(response.data)["metadata"]["resourceVersion"]
        finally:
            response.release_conn()

    def usable(self, version: str) -> bool:
        """False when `version` is ahead of the cluster: its storage was replaced (a new cluster behind the same
        address) and a watch from it would wait for revisions that never come. resourceVersions are opaque to
        clients in principle; in every apiserver backed by etcd they are its revision numbers, and only then is
        this comparison made."""
        current = self.current_version()
        return not (version.isdigit() and current.isdigit() and int(version) > int(current))

    def run(self, *, start_version: str | None = None) -> None:
        version = start_version
        failures = 0  # the apiserver's: repeated ones from one version lead to a relist
        apply_failures = 0  # ours (HandlerFailed): never a reason to relist
        if version:
            try:
                if not self.usable(version):
                    log.info("%s: resourceVersion %s is ahead of the cluster; listing again", self.name, version)
                    version = None
            except Exception:  # noqa: BLE001 - the watch below retries and reports
                log.warning("%s: could not check resourceVersion %s", self.name, version, exc_info=True)
        while not self.stop.is_set():
            try:
                if not version:
                    version = self.relist()
                version = self.watch_from(version)
                failures = apply_failures = 0
            except Gone:
                log.info("%s: resourceVersion %s is gone; listing again", self.name, version)
                version = None
            except HandlerFailed as error:
                # Our side failed, not the apiserver: back off and read the same events again.
                apply_failures += 1
                version = self.applied_version if version else None
                log.warning("%s: could not apply (%s); retrying from resourceVersion %s", self.name, error, version)
                self.stop.wait(backoff_seconds(apply_failures, base=0.5, cap=10))
            except ApiException as error:
                if error.status == 410:
                    version = None
                    continue
                if not is_transient(error):
                    log.exception("%s: watch refused", self.name)
                failures += 1
                version = self._after_failure(version, failures)
            except Exception:  # noqa: BLE001 - connection failures: back off and resume from `version`
                if self.stop.is_set():
                    break  # close() cut the stream on purpose
                failures += 1
                log.warning("%s: watch interrupted (attempt %d); resuming", self.name, failures, exc_info=True)
                version = self._after_failure(version, failures)
        log.info("%s: stopped", self.name)


def run_forever(
    watches: list[ListWatch], *, versions: dict[str, str | None], on_exit: Callable[[], None] | None = None
) -> list[threading.Thread]:
    """Run each watch in a thread of its own; `on_exit` runs in each thread as it ends (e.g. to close its
    database connection)."""

    def target(watch: ListWatch) -> None:
        try:
            watch.run(start_version=versions.get(watch.name))
        finally:
            if on_exit is not None:
                on_exit()

    threads = []
    for watch in watches:
        thread = threading.Thread(target=target, args=(watch,), name=f"watch-{watch.name}", daemon=True)
        thread.start()
        threads.append(thread)
    return threads
