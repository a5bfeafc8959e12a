"""Every write of what metering reads goes through the service that marks its days stale.

The days a write makes stale are marked by the service that writes (`billing.usage` for usage intervals,
`pools.services` for reservations and their lending changes); a write anywhere else would leave its days metered
as they were. So this test reads the source tree (every Python file but migrations) and fails on any write of
those models outside their service: a manager or queryset write (`create`, `bulk_create`, `update`, `delete`, …)
on the model or a related manager of it, `.save()` / `.delete()` of an instance made or fetched in the same
function, a factory of the model that does not record through the service, and raw SQL that inserts, updates,
deletes or truncates the table. Usage intervals are checked everywhere, tests and benchmarks included;
reservations and lending changes in the portal's code (tests and benchmarks build their worlds with factories).
"""

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

ROOT = Path(settings.BASE_DIR)
SKIPPED_DIRS = {".git", ".venv", "node_modules", ".state", "static", "migrations", "__pycache__"}
WRITE_METHODS = {"create", "bulk_create", "get_or_create", "update_or_create", "bulk_update", "update", "delete"}
INSTANCE_WRITES = {"save", "delete"}


@dataclass(frozen=True)
class Watched:
    model: str
    table: str
    related_names: tuple[str, ...]
    service: str
    everywhere: bool  # also in tests/ and bench/
    exceptions: dict[str, str]  # path: why it may write the table directly


WATCHED = [
    Watched(
        model="UsageInterval",
        table="billing_" + "usageinterval",
        related_names=("usage_intervals",),
        service="billing/usage.py",
        everywhere=True,
        exceptions={
            "bench/metering.py": "seeds millions of synthetic intervals in one INSERT … SELECT and meters every day "
            "itself, in a database of its own",
        },
    ),
    Watched(
        model="Reservation",
        table="pools_" + "reservation",
        related_names=("reservations",),
        service="pools/services.py",
        everywhere=False,
        exceptions={},
    ),
    Watched(
        model="LendingChange",
        table="pools_" + "lendingchange",
        related_names=("lending_changes",),
        service="pools/services.py",
        everywhere=False,
        exceptions={},
    ),
]


def python_files():
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if not SKIPPED_DIRS.intersection(relative.parts[:-1]):
            yield relative.as_posix(), path


def chain(node: ast.AST) -> tuple[str | None, list[str]]:
    """(root name, attribute names from the root outwards) of a call chain such as `A.objects.filter(x).update()`."""
    attributes = []
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Attribute):
            attributes.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return (node.id if isinstance(node, ast.Name) else None), attributes[::-1]


def factory_model(node: ast.ClassDef) -> str | None:
    """The model a factory_boy factory class makes (`class Meta: model = …`), if it is one."""
    if not any([chain(base)[0], *chain(base)[1]][-1] == "DjangoModelFactory" for base in node.bases):
        return None
    for item in node.body:
        if isinstance(item, ast.ClassDef) and item.name == "Meta":
            for statement in item.body:
                if isinstance(statement, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "model" for t in statement.targets
                ):
                    value = statement.value
                    if isinstance(value, ast.Constant) and isinstance(value.value, str):
                        return value.value.rsplit(".", 1)[-1]
                    if isinstance(value, ast.Name):
                        return value.id
    return None


def writes_in(source: str, watched: Watched) -> list[tuple[int, str]]:
    """(line, what) of each write of `watched` the source makes."""
    tree = ast.parse(source)
    found = []
    table = watched.table
    sql_write = re.compile(
        rf"\b(insert\s+into|update(\s+only)?|delete\s+from(\s+only)?|truncate(\s+table)?(\s+only)?(\s*\w+\s*,)*)\s*"
        rf"{table}\b",
        re.IGNORECASE,
    )
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            root, attributes = chain(node)
            method = attributes[-1]
            if method in WRITE_METHODS and (
                (root == watched.model and attributes[:-1] and attributes[0] in {"objects", "_default_manager"})
                or any(name in attributes[:-1] for name in watched.related_names)
            ):
                found.append((node.lineno, f"{root}.{'.'.join(attributes)}()"))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and sql_write.search(node.value):
            found.append((node.lineno, f"SQL writing {watched.table}"))
        if (
            isinstance(node, ast.ClassDef)
            and factory_model(node) == watched.model
            and not any(isinstance(item, ast.FunctionDef) and item.name == "_create" for item in node.body)
        ):
            found.append((node.lineno, f"factory {node.name} saves {watched.model} rows itself"))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.extend(_instance_writes(node, watched))
    return found


def _instance_writes(function: ast.FunctionDef, watched: Watched) -> list[tuple[int, str]]:
    """`x.save()` / `x.delete()` where `x` was assigned a `Model(…)`, a `Model.objects.get(…)` or a factory's
    instance in the same function."""
    instances = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            root, _attributes = chain(node.value)
            if root in {watched.model, f"{watched.model}Factory"}:
                instances.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return [
        (node.lineno, f"{node.func.value.id}.{node.func.attr}() of a {watched.model}")
        for node in ast.walk(function)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in INSTANCE_WRITES
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in instances
    ]


def writers(watched: Watched) -> list[str]:
    outside = []
    for relative, path in python_files():
        if relative in {watched.service, *watched.exceptions} or relative == "tests/billing/test_usage_writers.py":
            continue
        if not watched.everywhere and relative.split("/", 1)[0] in {"tests", "bench"}:
            continue
        outside += [f"{relative}:{line}: {what}" for line, what in writes_in(path.read_text(), watched)]
    return outside


def test_usage_intervals_are_written_only_by_billing_usage():
    assert writers(WATCHED[0]) == []


def test_reservations_and_lending_changes_are_written_only_by_pools_services():
    assert writers(WATCHED[1]) == []
    assert writers(WATCHED[2]) == []


def test_the_scan_sees_each_kind_of_write():
    """The scan itself: each way of writing an interval is caught, reads are not."""
    source = """
from billing.models import UsageInterval

class UsageIntervalFactory(DjangoModelFactory):
    class Meta:
        model = "billing.UsageInterval"

def writes(team, cursor):
    UsageInterval.objects.create(gpus=1)
    UsageInterval.objects.bulk_create([])
    UsageInterval.objects.filter(gpus=1).update(gpus=2)
    UsageInterval.objects.filter(gpus=1).exclude(gpus=3).delete()
    team.usage_intervals.all().delete()
    interval = UsageInterval(gpus=1)
    interval.save()
    fetched = UsageInterval.objects.get(pk=1)
    fetched.delete()
    cursor.execute("INSERT INTO billing_usageinterval (gpus) VALUES (1)")
    cursor.execute("TRUNCATE billing_staleday, billing_usageinterval CASCADE")

def reads():
    UsageInterval.objects.filter(gpus=1).count()
    UsageInterval.objects.overlapping(1, 2).values_list("gpus")
    interval = UsageInterval(gpus=1)
    interval.full_clean()
    cursor.execute("SELECT count(*) FROM billing_usageinterval WHERE ended_at IS NULL")
"""
    lines = [line for line, _what in writes_in(source, WATCHED[0])]
    assert sorted(lines) == [4, 9, 10, 11, 12, 13, 15, 17, 18, 19]
