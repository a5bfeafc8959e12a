"""Reads of monitoring for pages and API: a job's GPU utilisation, alerts a user may see, the rules in effect."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.paginator import Paginator
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from jobs.choices import JobState
from portal.models import Team

from .choices import AlertKind, AlertState, Scope, Severity
from .models import Alert, AlertRule, JobUtilisation, UtilisationSample
from .rules import DEFAULT_RULES, RuleBook

SPARK_WIDTH, SPARK_HEIGHT = 240, 40


@dataclass
class JobGpuUtilisation:
    """What the job page shows: current and mean utilisation, memory, whether the job is idle, a sparkline."""

    has_data: bool
    gpus: int = 0
    last_util_percent: float | None = None
    mean_util_percent: float | None = None
    memory_used_percent: float | None = None
    last_at: datetime | None = None
    idle: bool = False
    idle_since: datetime | None = None
    idle_threshold_percent: float = 0.0
    spark_points: str = ""
    samples: int = 0


def is_idle(summary: JobUtilisation | None, job_state: str, now: datetime | None = None) -> bool:
    """A running job whose GPUs have stayed below the idle threshold for the idle window."""
    if summary is None or summary.idle_since is None or job_state != JobState.RUNNING:
        return False
    now = now or timezone.now()
    return summary.last_at is not None and summary.last_at - summary.idle_since >= timedelta(
        seconds=settings.MONITORING_IDLE_AFTER_SECONDS
    )


def _spark(values: list[float]) -> str:
    if not values:
        return ""
    if len(values) == 1:
        values = values * 2
    step = SPARK_WIDTH / (len(values) - 1)
    return " ".join(
        f"{index * step:.1f},{SPARK_HEIGHT - min(100.0, max(0.0, value)) / 100 * SPARK_HEIGHT:.1f}"
        for index, value in enumerate(values)
    )


def job_gpu_utilisation(job, *, points: int = 60) -> JobGpuUtilisation:
    """The GPU utilisation of `job` from the rollups (never Prometheus). Two queries."""
    summary = JobUtilisation.objects.filter(job=job).first()
    if summary is None or not summary.samples:
        return JobGpuUtilisation(has_data=False, idle_threshold_percent=settings.MONITORING_IDLE_GPU_PERCENT)
    recent = list(
        UtilisationSample.objects.filter(scope=Scope.JOB, job=job, util_avg__isnull=False)
        .order_by("-at")
        .values_list("util_avg", flat=True)[:points]
    )
    return JobGpuUtilisation(
        has_data=True,
        gpus=summary.gpus,
        last_util_percent=round(summary.last_util, 1) if summary.last_util is not None else None,
        mean_util_percent=round(summary.util_avg, 1) if summary.util_avg is not None else None,
        memory_used_percent=(
            round(summary.last_memory_used_percent, 1) if summary.last_memory_used_percent is not None else None
        ),
        last_at=summary.last_at,
        idle=is_idle(summary, job.state),
        idle_since=summary.idle_since,
        idle_threshold_percent=settings.MONITORING_IDLE_GPU_PERCENT,
        spark_points=_spark(list(reversed(recent))),
        samples=summary.samples,
    )


def idle_job_ids(job_ids) -> set[int]:
    """Which of these jobs are flagged idle (one query), for lists."""
    rows = JobUtilisation.objects.filter(
        job_id__in=list(job_ids), idle_since__isnull=False, job__state=JobState.RUNNING
    ).select_related("job")
    return {row.job_id for row in rows if is_idle(row, row.job.state)}


def firing_count(user) -> int:
    """Firing alerts `user` may see (the navigation badge: one query)."""
    return Alert.objects.visible_to(user).firing().count()


HISTORY_PAGE_SIZE = 50


def alerts_page(user, *, history_page=1) -> dict:
    """Firing and pending alerts the user may see, and one page (`history_page`, clamped) of the resolved ones,
    newest first: every resolved alert is on some page."""
    visible = Alert.objects.visible_to(user).select_related("pool", "team", "job")
    resolved = visible.filter(state=AlertState.RESOLVED).order_by("-resolved_at", "-id")
    history = Paginator(resolved, HISTORY_PAGE_SIZE).get_page(history_page)
    return {
        "firing": list(visible.filter(state=AlertState.FIRING).order_by("-fired_at")),
        "pending": list(visible.filter(state=AlertState.PENDING).order_by("active_since")),
        "history": history,
    }


@dataclass
class RuleRow:
    kind: str
    label: str
    scope: str
    condition: str
    for_seconds: int
    severity: str
    enabled: bool

    @property
    def severity_label(self) -> str:
        return Severity(self.severity).label


def rules_in_effect(user) -> list[RuleRow]:
    """Every default (the row, or the code default when no row), every pool's override and the overrides of the
    teams `user` may see, in kind order."""
    rules = list(
        AlertRule.objects.filter(Q(team__isnull=True) | Q(team__in=Team.objects.visible_to(user))).select_related(
            "pool", "team"
        )
    )
    book = RuleBook(rules)
    rows = []
    for kind in AlertKind:
        default = book.for_subject(kind)
        rows.append(
            RuleRow(
                kind,
                kind.label,
                _("default"),
                DEFAULT_RULES[kind].describe(default.threshold),
                default.for_seconds,
                default.severity,
                default.enabled,
            )  # fmt: skip
        )
        for rule in rules:
            if rule.kind == kind and (rule.pool_id or rule.team_id):
                rows.append(
                    RuleRow(
                        kind,
                        kind.label,
                        rule.scope_label,
                        DEFAULT_RULES[kind].describe(rule.threshold),
                        rule.for_seconds,
                        rule.severity,
                        rule.enabled,
                    )  # fmt: skip
                )
    return rows
