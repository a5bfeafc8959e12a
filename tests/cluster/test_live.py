"""The bounds of the job page's live reads (pure parts; the reads against the real cluster: tests/jobs)."""

from cluster.live import EVENT_MESSAGE_MAX_BYTES, event_of, last_bytes_at_line_boundary, oldest_first


def chunks(data: bytes, size: int):
    return [data[i : i + size] for i in range(0, len(data), size)]


def test_a_tail_within_the_limit_is_kept_whole():
    data = b"line 1\nline 2\nline 3\n"
    assert last_bytes_at_line_boundary(chunks(data, 4), 100) == (data, False)
    assert last_bytes_at_line_boundary(chunks(data, 4), len(data)) == (data, False)


def test_a_longer_tail_keeps_its_end_cut_at_a_line_boundary():
    lines = [f"step {i} loss {1 / (i + 1):.4f}\n".encode() for i in range(1000)]
    data = b"".join(lines)
    kept, cut = last_bytes_at_line_boundary(chunks(data, 333), 1024)
    assert cut
    assert len(kept) <= 1024
    assert data.endswith(kept)
    assert kept.startswith(b"step ")  # a whole line, not the tail of one
    assert len(kept) > 1024 - max(len(line) for line in lines)  # nothing more than the partial line was dropped


def test_a_single_line_longer_than_the_limit_keeps_its_last_bytes():
    data = b"x" * 5000 + b"END"
    kept, cut = last_bytes_at_line_boundary(chunks(data, 700), 100)
    assert cut and len(kept) == 100 and kept.endswith(b"END")


def test_multibyte_text_cut_at_a_line_boundary_decodes_cleanly():
    data = ("训练步骤 完成\n" * 500).encode()
    kept, cut = last_bytes_at_line_boundary(chunks(data, 64), 2000)
    assert cut and kept.decode("utf-8").startswith("训练")


def test_event_messages_are_clipped_and_events_ordered_with_the_undated_last():
    events = [
        event_of({"type": "Warning", "reason": "BackOff", "message": "é" * 5000, "count": 3}),
        event_of({"lastTimestamp": "2026-03-01T10:00:05Z", "reason": "Started", "involvedObject": {"kind": "Pod"}}),
        event_of({"eventTime": "2026-03-01T10:00:01.5Z", "reason": "Scheduled", "involvedObject": {"kind": "Pod"}}),
    ]
    assert len(events[0].message.encode()) <= EVENT_MESSAGE_MAX_BYTES and events[0].message.endswith("…")
    assert [e.reason for e in oldest_first(events)] == ["Scheduled", "Started", "BackOff"]
    assert events[1].count == 1 and events[1].object_kind == "Pod"
