"""The job page's log tail is bounded in bytes as well as lines (issue 15): however long the lines, no answer the
portal asks for or shows is larger than the limit, and what it shows is the newest part of the log.

`read` stands in for the apiserver's pod log endpoint with its documented semantics (tailLines picks the last
lines, limitBytes stops the stream after that many bytes); the wiring test checks that the portal passes both."""

import pytest

from cluster import resources


def apiserver_log(lines: list[str], calls: list):
    def read(tail_lines: int, limit_bytes: int) -> str:
        calls.append((tail_lines, limit_bytes))
        return "".join(lines[-tail_lines:]).encode()[:limit_bytes].decode(errors="ignore")

    return read


def test_a_short_log_comes_back_whole_in_one_request():
    calls = []
    log = [f"step {n}\n" for n in range(50)]
    assert resources.bounded_tail(apiserver_log(log, calls), lines=200, max_bytes=64 * 1024) == "".join(log)
    assert calls == [(200, 64 * 1024)]


def test_long_lines_give_the_newest_lines_that_fit_and_every_request_is_bounded():
    calls = []
    log = [f"{n:04d} " + "x" * 995 + "\n" for n in range(1000)]  # 1000 lines of 1,000 bytes
    text = resources.bounded_tail(apiserver_log(log, calls), lines=200, max_bytes=64 * 1024)
    assert len(text.encode()) <= 64 * 1024
    assert text.endswith(log[-1]) and text.startswith(log[-len(text.splitlines())])
    assert len(text.splitlines()) >= 25  # at least half of the 64 lines that would fit
    assert all(limit == 64 * 1024 for _lines, limit in calls) and len(calls) <= 9


def test_one_enormous_line_is_cut_to_the_limit():
    calls = []
    text = resources.bounded_tail(apiserver_log(["y" * 10_000_000 + "\n"], calls), lines=200, max_bytes=4096)
    assert text == "y" * 4096


def test_the_portal_asks_the_apiserver_for_both_limits(monkeypatch, settings):
    settings.LOG_TAIL_MAX_BYTES = 2048
    asked = []

    class Core:
        def read_namespaced_pod_log(self, name, namespace, **kwargs):
            asked.append((name, namespace, kwargs["tail_lines"], kwargs["limit_bytes"]))
            return "ok\n"

    monkeypatch.setattr(resources.client, "core", lambda: Core())
    assert resources.pod_log_tail("team-a", "rsv-1-abc", lines=200) == "ok\n"
    assert asked == [("rsv-1-abc", "team-a", 200, 2048)]


@pytest.mark.parametrize("max_bytes", [1, 100, 65536])
def test_no_answer_is_ever_longer_than_the_limit(max_bytes):
    calls = []
    log = [("训练" * n) + "\n" for n in range(1, 300)]
    text = resources.bounded_tail(apiserver_log(log, calls), lines=200, max_bytes=max_bytes)
    assert len(text.encode()) <= max_bytes
