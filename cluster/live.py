"""The only reads of the cluster a page makes while a user waits: a pod's log tail and an object's events.

Everything else a page shows comes from rows the sync keeps. These two are read live because nobody stores them,
and both are bounded here, in one place, so a chatty pod or a storm of events cannot make a page slow or huge:
the log tail is read as a stream keeping only its last `max_bytes` (cut at a line boundary, with a note saying
so), events are capped in number and each message in bytes. Transient failures are retried once, briefly.
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from . import client
from .errors import with_retries

LOG_MAX_LINES = 200
LOG_MAX_BYTES = 64 * 1024
# What the apiserver may send for one tail at most (its `limitBytes`): the tail's lines are read as a stream and
# only the last `max_bytes` are kept, so this bounds the time spent reading, not the memory.
LOG_READ_BUDGET_BYTES = 8 * 1024 * 1024
EVENTS_MAX = 100
EVENTS_READ_MAX = 500  # events of one object are aggregated by the apiserver (`count`); more than this is a storm
EVENT_MESSAGE_MAX_BYTES = 1024
TIMEOUT_SECONDS = 10
ATTEMPTS = 2


def last_bytes_at_line_boundary(chunks: Iterable[bytes], max_bytes: int) -> tuple[bytes, bool]:
    """The end of the stream `chunks`, at most `max_bytes` long, starting at a line boundary; and whether
    anything before it was dropped. Holds at most about `max_bytes` plus one chunk in memory."""
    kept = bytearray()
    dropped = False
    for chunk in chunks:
        kept += chunk
        if len(kept) > max_bytes:
            del kept[: len(kept) - max_bytes]
            dropped = True
    if dropped:
        newline = kept.find(b"\n")
        # The first kept line is a fragment of a longer one: drop it (unless it is all there is).
        if newline != -1 and newline + 1 < len(kept):
            del kept[: newline + 1]
    return bytes(kept), dropped


def cut_note(max_bytes: int) -> str:
    return _("[earlier output cut: only the last %(kib)d KiB are shown]") % {"kib": max(1, max_bytes // 1024)}


def log_tail(namespace: str, pod_name: str, *, max_lines: int = LOG_MAX_LINES, max_bytes: int | None = None) -> str:
    """The last `max_lines` lines the pod wrote, at most `max_bytes` of them (default: settings.LOG_TAIL_MAX_BYTES;
    cut at a line boundary); when cut, the text opens with a note saying so."""
    if max_bytes is None:
        from django.conf import settings

        max_bytes = getattr(settings, "LOG_TAIL_MAX_BYTES", LOG_MAX_BYTES)

    def read() -> tuple[bytes, bool]:
        response = client.core().read_namespaced_pod_log(
            pod_name,
            namespace,
            tail_lines=max_lines,
            limit_bytes=LOG_READ_BUDGET_BYTES,
            _preload_content=False,
            _request_timeout=TIMEOUT_SECONDS,
        )
        try:
            return last_bytes_at_line_boundary(response.stream(64 * 1024), max_bytes)
        finally:
            response.release_conn()

    data, cut = with_retries(read, attempts=ATTEMPTS)
    text = data.decode("utf-8", errors="replace")
    return f"{cut_note(max_bytes)}\n{text}" if cut else text


@dataclass(frozen=True)
class ClusterEvent:
    at: datetime | None
    type: str  # Normal or Warning
    reason: str
    message: str  # at most EVENT_MESSAGE_MAX_BYTES of it
    object_kind: str
    count: int


def _clip(text: str, max_bytes: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    return data[: max_bytes - 3].decode("utf-8", errors="ignore") + "…"


def event_of(item: dict) -> ClusterEvent:
    """A core/v1 Event (raw JSON) as shown on the job page."""
    at = item.get("lastTimestamp") or item.get("eventTime") or item.get("firstTimestamp")
    return ClusterEvent(
        at=parse_datetime(at) if at else None,
        type=item.get("type") or "",
        reason=item.get("reason") or "",
        message=_clip(item.get("message") or "", EVENT_MESSAGE_MAX_BYTES),
        object_kind=(item.get("involvedObject") or {}).get("kind") or "",
        count=item.get("count") or 1,
    )


def events_for(namespace: str, kind: str, name: str, *, limit: int = EVENTS_MAX) -> list[ClusterEvent]:
    """Events about one object, at most `limit` of them (the newest), oldest first."""
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"

    def read() -> list[dict]:
        response = client.core().list_namespaced_event(
            namespace,
            field_selector=selector,
            limit=EVENTS_READ_MAX,
            _preload_content=False,
            _request_timeout=TIMEOUT_SECONDS,
        )
        try:
            return json.loads(response.data).get("items") or []
        finally:
            response.release_conn()

    return oldest_first(event_of(item) for item in with_retries(read, attempts=ATTEMPTS))[-limit:]


def oldest_first(events: Iterable[ClusterEvent]) -> list[ClusterEvent]:
    """Events in time order; those without a time last."""
    return sorted(events, key=lambda event: (event.at is None, event.at or datetime.min.replace(tzinfo=UTC)))
