"""The keys the documents quote from the benchmarks' summaries are keys the benchmarks declare (SUMMARY_KEYS), which
their smoke runs check they print; every benchmark has a smoke run; the harness's check of a summary itself."""

import ast
import importlib
import re
from pathlib import Path

import pytest

from bench.harness import HARNESS_KEYS, NUMBER, NUMBER_OR_NONE, REPO_ROOT, summary_problems
from tests.bench.smoke import SMOKE_ARGS, benchmark_names

BENCHMARKS = benchmark_names()
SKIPPED_DIRS = {".git", ".venv", "node_modules", ".state", "staticfiles"}
# A quoted summary key: snake_case with an underscore, or a dotted path of lower-case names; maybe `: value` after it.
KEY = re.compile(r"^([a-z][a-z0-9]*(?:_[a-z0-9]+)+|[a-z][a-z0-9_]*(?:\.[a-z0-9_*]+)+)(?::\s*\S+)?$")
FILE_SUFFIXES = {"json", "yaml", "yml", "toml", "py", "md", "txt", "log", "sh", "cfg", "ini", "html", "css", "js"}
BENCH_SCRIPT = re.compile(r"bench/(\w+)\.py")


def _documents() -> list[Path]:
    return [
        path for path in sorted(REPO_ROOT.rglob("*.md")) if not SKIPPED_DIRS & set(path.relative_to(REPO_ROOT).parts)
    ]


def _code_names() -> set[str]:
    """Names of the code (modules, functions, classes): a quoted name that is one of them is not a summary key."""
    names = set()
    for path in REPO_ROOT.rglob("*.py"):
        if SKIPPED_DIRS & set(path.relative_to(REPO_ROOT).parts):
            continue
        names.add(path.stem)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
    return names


def quoted_keys(text: str, code_names: set[str]) -> list[tuple[str, str, int]]:
    """(benchmark, key, line number) of each summary key `text` quotes in a benchmark's context: from a line that
    names `bench/<name>.py` (a heading or a table row) to the next heading, the keys quoted belong to <name>."""
    found = []
    benchmark = None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("#"):
            benchmark = None
        scripts = BENCH_SCRIPT.findall(line)
        if scripts:
            benchmark = scripts[-1]
        if benchmark is None:
            continue
        for token in re.findall(r"`([^`]+)`", line):
            match = KEY.match(token.strip())
            if not match:
                continue
            key = match[1]
            parts = key.split(".")
            if parts[-1] in FILE_SUFFIXES or parts[0] in code_names or parts[-1] in code_names:
                continue
            found.append((benchmark, key, number))
    return found


def declares(declared: dict, key: str) -> bool:
    """Whether `key` (a leaf, a parent or a dotted run of names) is part of a declared path (``*`` matches any name,
    but one name of the key at least must be there as it is)."""
    wanted = key.split(".")
    for path in {**HARNESS_KEYS, **declared}:
        parts = path.split(".")
        for start in range(len(parts) - len(wanted) + 1):
            run = parts[start : start + len(wanted)]
            if all(part in ("*", name) for part, name in zip(run, wanted, strict=True)) and any(
                part == name for part, name in zip(run, wanted, strict=True)
            ):
                return True
    return False


def test_every_benchmark_declares_its_summary_keys_and_has_a_smoke_run():
    assert set(BENCHMARKS) == set(SMOKE_ARGS), "a benchmark without a smoke run (tests/bench/smoke.py), or the reverse"
    for name in BENCHMARKS:
        keys = importlib.import_module(f"bench.{name}").SUMMARY_KEYS
        assert keys, name
        for path, kind in keys.items():
            assert isinstance(path, str) and path, (name, path)
            assert isinstance(kind, type | tuple), (name, path, kind)


@pytest.mark.parametrize("document", _documents(), ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_the_summary_keys_a_document_quotes_are_declared(document):
    code_names = _code_names()
    undeclared = []
    for benchmark, key, line in quoted_keys(document.read_text(), code_names):
        if benchmark not in BENCHMARKS:
            undeclared.append(f"line {line}: bench/{benchmark}.py is not a benchmark")
        elif not declares(importlib.import_module(f"bench.{benchmark}").SUMMARY_KEYS, key):
            undeclared.append(f"line {line}: `{key}` is not in bench/{benchmark}.py's SUMMARY_KEYS")
    assert not undeclared, undeclared


def test_quoted_keys_are_read_in_their_benchmarks_context():
    text = "\n".join(
        [
            "## Metering",
            "the `in_reservation` column, `month_charges`",
            "### Lending (`python bench/exchange.py`)",
            "the summary's `trace.gpu_seconds_after_window_even_without_waiting`; `credits_equal_x: false`",
            '`set_lending(lending="none")`, `cluster.json`, `sync_cluster`, `ListWatch.on_events`',
            "## Next",
            "| row | `up_seconds` | `python bench/cluster_up.py` |",
            "| row | `rss_mib_after_up` | |",
        ]
    )
    assert quoted_keys(text, {"month_charges", "sync_cluster"}) == [
        ("exchange", "trace.gpu_seconds_after_window_even_without_waiting", 4),
        ("exchange", "credits_equal_x", 4),
        ("cluster_up", "up_seconds", 7),
        ("cluster_up", "rss_mib_after_up", 8),
    ]


def test_a_key_is_declared_as_a_leaf_a_parent_or_a_path():
    declared = {"replays.*.queue_wait_s.p95": NUMBER, "invoice.credits_equal": bool}
    assert declares(declared, "credits_equal")
    assert declares(declared, "replays")
    assert declares(declared, "queue_wait_s.p95")
    assert declares(declared, "replays.on.queue_wait_s")
    assert declares(declared, "noisy")  # the harness's own
    assert not declares(declared, "queue_wait_s.p99")
    assert not declares(declared, "lent_gpu_seconds")


def test_a_summary_is_checked_for_every_key_with_its_type():
    load = {"start": [1.0, 0.5, 0.2], "end": [1.0, 0.5, 0.2]}
    harness_part = {"benchmark": "x", "cores": 2, "load_average": load, "beside": [], "noisy": False}
    keys = {"pages.*.p95_ms": NUMBER, "ratio": NUMBER_OR_NONE, "met": bool}
    good = {**harness_part, "pages": {"a": {"p95_ms": 1.5}, "b": {"p95_ms": 2}}, "ratio": None, "met": True}
    assert summary_problems(good, keys) == []
    bad = {**harness_part, "pages": {"a": {"p95_ms": "1.5"}}, "met": 1}
    assert summary_problems(bad, keys) == [
        "pages.*.p95_ms: str '1.5', wanted int/float",
        "ratio: missing",
        "met: int 1, wanted bool",
    ]
    assert summary_problems({"pages": {}}, {"pages.*.p95_ms": NUMBER})[-1] == "pages.*.p95_ms: missing"
