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

from django.utils.translation import gettext, gettext_noop

from jobs.models import Words

from .choices import AlertKind, AlertState, Severity

ABOVE = "above"
BELOW = "below"
AT_LEAST = "at_least"  # reached: the threshold itself counts (a budget 80 % used)
SIGNS = {ABOVE: ">", BELOW: "<", AT_LEAST: "≥"}


@dataclass(frozen=True)
class RuleDefault:
    """A kind's default threshold, "for" and severity, and how its value is said: `meaning_id` and `unit_id` are
    msgids (English), translated when shown, so that stored alert texts (`Words`) read in each reader's language."""

    threshold: Decimal
    for_seconds: int
    comparison: str
    unit_id: str
    severity: str
    meaning_id: str

    @property
    def meaning(self) -> str:
        return gettext(self.meaning_id)

    @property
    def unit(self) -> str:
        return gettext(self.unit_id)

    def describe_words(self, threshold: Decimal | float) -> Words:
        """The rule as words, e.g. "mean GPU utilisation < 30 %"."""
        return Words(
            gettext_noop("%(meaning)s %(sign)s %(threshold)s%(unit)s"),
            {
                "meaning": Words(self.meaning_id),
                "sign": SIGNS[self.comparison],
                "threshold": f"{Decimal(str(threshold)).normalize():f}",
                "unit": Words(self.unit_id),
            },
        )

    def describe(self, threshold: Decimal | float) -> str:
        return str(self.describe_words(threshold))

    def summary_words(self, subject: Words, value: float, threshold: Decimal | float) -> Words:
        """What an alert of this kind says about `subject` at `value`, e.g. "pool A: mean GPU utilisation 12 %
        (mean GPU utilisation < 30 %)"."""
        return Words(
            gettext_noop("%(subject)s: %(meaning)s %(value)s%(unit)s (%(rule)s)"),
            {
                "subject": subject,
                "meaning": Words(self.meaning_id),
                "value": f"{value:g}",
                "unit": Words(self.unit_id),
                "rule": self.describe_words(threshold),
            },
        )


HOUR, MINUTE = 3600, 60
# Units that read the same in every language (" %", " °C") are not messages; the others are.
DEFAULT_RULES: dict[str, RuleDefault] = {
    AlertKind.GPU_UTILISATION_LOW: RuleDefault(
        Decimal(30), HOUR, BELOW, " %", Severity.WARNING, gettext_noop("mean GPU utilisation")
    ),
    AlertKind.GPU_UTILISATION_HIGH: RuleDefault(
        Decimal(80), HOUR, ABOVE, " %", Severity.WARNING, gettext_noop("mean GPU utilisation")
    ),
    AlertKind.QUEUE_WAIT: RuleDefault(
        Decimal(30), 0, ABOVE, gettext_noop(" min"), Severity.WARNING, gettext_noop("time waiting to start")
    ),
    AlertKind.SPILL_RATIO: RuleDefault(
        Decimal(20), 0, ABOVE, " %", Severity.WARNING, gettext_noop("share of the team's GPU-hours spilled this month")
    ),
    AlertKind.FAILURE_RATE: RuleDefault(
        Decimal(5), 0, ABOVE, " %", Severity.WARNING, gettext_noop("jobs failed of those finished in the last 24 h")
    ),
    AlertKind.POD_PENDING: RuleDefault(
        Decimal(3), 0, ABOVE, gettext_noop(" min"), Severity.CRITICAL, gettext_noop("time the pod is Pending")
    ),
    AlertKind.GPU_MEMORY_HIGH: RuleDefault(
        Decimal(85), 5 * MINUTE, ABOVE, " %", Severity.WARNING, gettext_noop("GPU memory used")
    ),
    AlertKind.GPU_TEMPERATURE_HIGH: RuleDefault(
        Decimal(85), 2 * MINUTE, ABOVE, " °C", Severity.WARNING, gettext_noop("GPU temperature")
    ),
    AlertKind.RESERVATION_WASTED: RuleDefault(
        Decimal(30),
        0,
        BELOW,
        " %",
        Severity.WARNING,
        gettext_noop("reservation used this month, while the team spills,"),
    ),
    AlertKind.RESERVATION_NOT_LENT: RuleDefault(
        Decimal(0),
        10 * MINUTE,
        ABOVE,
        gettext_noop(" GPUs"),
        Severity.WARNING,
        gettext_noop("reserved GPUs idle and not lent while other teams' jobs wait"),
    ),
    AlertKind.BUDGET_USED: RuleDefault(
        Decimal(80),
        0,
        AT_LEAST,
        " %",
        Severity.WARNING,
        gettext_noop("share of this month's budget spent on the variable part"),
    ),
    AlertKind.CAPACITY_MISSING: RuleDefault(
        Decimal(0),
        5 * MINUTE,
        ABOVE,
        gettext_noop(" GPUs"),
        Severity.CRITICAL,
        gettext_noop("contracted GPUs without a Ready node"),
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
        if self.default.comparison == AT_LEAST:
            return value >= threshold
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
    subject: Words
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
