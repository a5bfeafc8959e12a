"""One place per rule (issue 25, STYLE.md): the spellings the three rules used to have outside their one place are
gone from the code. This reads the source as text, so it catches those spellings only (a new, different spelling of
a rule is for review to catch); what each rule says is tested where it lives.

- GPUs in use: `JobQuerySet.in_use` / `gpus_in_use` (jobs/models/job.py);
- is a member: `MembershipQuerySet.of` (portal/models.py);
- a month's sums of the daily rollups: `DailyUsageQuerySet.month_sums` (billing/models.py).
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = [
    "bench",
    "billing",
    "cluster",
    "jobs",
    "monitoring",
    "pools",
    "portal",
    "teamdata",
    "identity",
    "dashboard",
    "reconcile",
]

RULES = {
    "GPUs in use": (
        "jobs/models/job.py",
        [r"\.holding_quota\(\)", r"state__in=ADMITTED_STATES", r"Coalesce\([^)]*admitted_pool"],
    ),
    "is a member": (
        "portal/models.py",
        [
            r"memberships__user\b",
            r"memberships__team__in",
            r"\.memberships\.filter\(",
            r"Membership\.objects\.filter\(\s*user=",
        ],
    ),
    "a month's sums": ("billing/models.py", [r"Sum\(\s*[\"'][a-z_]+_gpu_seconds"]),
}


def _sources():
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")) if (ROOT / app).is_dir() else []:
            if "migrations" not in path.parts:
                yield path.relative_to(ROOT).as_posix(), path.read_text()


def test_each_rule_is_spelled_only_in_its_one_place():
    found = []
    for relative, text in _sources():
        for rule, (home, patterns) in RULES.items():
            if relative == home:
                continue
            for pattern in patterns:
                for match in re.finditer(pattern, text):
                    line = text.count("\n", 0, match.start()) + 1
                    found.append(f"{rule}: {relative}:{line}: {match.group(0)}")
    assert found == []
