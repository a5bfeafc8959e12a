"""Alert rules: their defaults (PRODUCT.md "Alerts", seeds 000 and 003), which rule applies where, and the pure
state machine that turns "the condition holds now" into pending / firing / resolved.

The semantics are Prometheus': a condition must hold at every evaluation for the rule's "for" duration before
the alert fires; if it clears while pending, the alert is dropped and the clock starts again; a firing alert
resolves at the first evaluation where the condition no longer holds (or its subject is gone, or the rule was
disabled). Comparisons are strict (a temperature of exactly 85 °C does not breach "> 85 °C"). When the data
itself says since when a condition has held (a pod created ten minutes ago is pending since then), that time
starts the clock instead of the first evaluation that saw it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from enum import Enum

from django.utils.translation import gettext_lazy as _

from .choices import AlertKind, AlertState, Severity

ABOVE = "above"
BELOW = "below"


@dataclass(frozen=True)
class RuleDefault:
    threshold: Decimal
    for_seconds: int
    comparison: str
    unit: str  # or a lazily translated one
    severity: str
    meaning: str

    def describe(self, threshold: Decimal | float) -> str:
        sign = ">" if self.comparison == ABOVE else "<"
        return f"{self.meaning} {sign} {Decimal(str(threshold)).normalize():f}{self.unit}"


HOUR, MINUTE = 3600, 60
DEFAULT_RULES: dict[str, RuleDefault] = {
    AlertKind.GPU_UTILISATION_LOW: RuleDefault(
        Decimal(30), HOUR, BELOW, " %", Severity.WARNING, _("mean GPU utilisation")
    ),
    AlertKind.GPU_UTILISATION_HIGH: RuleDefault(
        Decimal(80), HOUR, ABOVE, " %", Severity.WARNING, _("mean GPU utilisation")
    ),
    AlertKind.QUEUE_WAIT: RuleDefault(Decimal(30), 0, ABOVE, _(" min"), Severity.WARNING, _("time waiting to start")),
    AlertKind.SPILL_RATIO: RuleDefault(
        Decimal(20), 0, ABOVE, " %", Severity.WARNING, _("share of the team's GPU-hours spilled this month")
    ),
    AlertKind.FAILURE_RATE: RuleDefault(
        Decimal(5), 0, ABOVE, " %", Severity.WARNING, _("jobs failed of those finished in the last 24 h")
    ),
    AlertKind.POD_PENDING: RuleDefault(
        Decimal(3), 0, ABOVE, _(" min"), Severity.CRITICAL, _("time the pod is Pending")
    ),
    AlertKind.GPU_MEMORY_HIGH: RuleDefault(
        Decimal(85), 5 * MINUTE, ABOVE, " %", Severity.WARNING, _("GPU memory used")
    ),
    AlertKind.GPU_TEMPERATURE_HIGH: RuleDefault(
        Decimal(85), 2 * MINUTE, ABOVE, " °C", Severity.WARNING, _("GPU temperature")
    ),
    AlertKind.RESERVATION_WASTED: RuleDefault(
        Decimal(30), 0, BELOW, " %", Severity.WARNING, _("reservation used this month, while the team spills,")
    ),
    AlertKind.CAPACITY_MISSING: RuleDefault(
        Decimal(0), 5 * MINUTE, ABOVE, _(" GPUs"), Severity.CRITICAL, _("contracted GPUs without a Ready node")
    ),
}


@dataclass(frozen=True)
class EffectiveRule:
    """The rule that applies to one subject: threshold, for, severity, and the row it came from (if any)."""

    kind: str
    threshold: Decimal
    for_seconds: int
    severity: str
    enabled: bool = True
    rule_id: int | None = None

    @property
    def default(self) -> RuleDefault:
        return DEFAULT_RULES[self.kind]

    def breached(self, value: float) -> bool:
        threshold = float(self.threshold)
        return value > threshold if self.default.comparison == ABOVE else value < threshold

    def describe(self) -> str:
        return self.default.describe(self.threshold)


def code_default(kind: str) -> EffectiveRule:
    default = DEFAULT_RULES[kind]
    return EffectiveRule(kind, default.threshold, default.for_seconds, default.severity)


class RuleBook:
    """Every rule row, looked up as team override > pool override > default row > the code default."""

    def __init__(self, rules):
        self._rules: dict[tuple, EffectiveRule] = {}
        for rule in rules:
            key = (rule.kind, "pool", rule.pool_id) if rule.pool_id else (rule.kind, "team", rule.team_id)
            if not rule.pool_id and not rule.team_id:
                key = (rule.kind, "default", None)
            self._rules[key] = EffectiveRule(
                rule.kind, rule.threshold, rule.for_seconds, rule.severity, rule.enabled, rule.pk
            )

    def for_subject(self, kind: str, *, pool_id: int | None = None, team_id: int | None = None) -> EffectiveRule:
        for key in ((kind, "team", team_id), (kind, "pool", pool_id), (kind, "default", None)):
            if key[2] is None and key[1] != "default":
                continue
            if key in self._rules:
                return self._rules[key]
        return code_default(kind)


@dataclass
class Observation:
    """One subject's current value for one kind of alert. `gate` is an extra condition that must hold too (the
    team spills, for a wasted reservation); `since` is when the condition began, when the data knows it."""

    kind: str
    subject_key: str
    subject: str
    value: float
    pool_id: int | None = None
    team_id: int | None = None
    job_id: int | None = None
    since: datetime | None = None
    gate: bool = True


class Action(Enum):
    NOTHING = "nothing"  # no open alert and the condition does not hold
    PENDING = "pending"  # create or keep a pending alert
    FIRE = "fire"  # pending (or new) → firing
    KEEP_FIRING = "keep_firing"
    DROP = "drop"  # pending, and the condition cleared before "for" passed
    RESOLVE = "resolve"  # firing → resolved


@dataclass(frozen=True)
class Decision:
    action: Action
    active_since: datetime | None = None


def decide(
    *,
    open_state: str | None,
    open_since: datetime | None,
    holds: bool,
    for_seconds: int,
    now: datetime,
    since: datetime | None = None,
) -> Decision:
    """What to do with one (kind, subject) at `now`, given its open alert's state (None when there is none)."""
    if not holds:
        if open_state == AlertState.FIRING:
            return Decision(Action.RESOLVE)
        if open_state == AlertState.PENDING:
            return Decision(Action.DROP)
        return Decision(Action.NOTHING)
    if open_state == AlertState.FIRING:
        return Decision(Action.KEEP_FIRING, open_since)
    active_since = open_since if open_state == AlertState.PENDING else now
    if since is not None and since < active_since:
        active_since = since
    if now - active_since >= timedelta(seconds=for_seconds):
        return Decision(Action.FIRE, active_since)
    return Decision(Action.PENDING, active_since)
