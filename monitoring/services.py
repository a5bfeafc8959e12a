"""Writes of monitoring: evaluating the alert rules into alerts, delivering their notifications, editing rules.

Evaluation is idempotent and stateless between runs: everything it needs (when a condition began, whether an
alert fired) is in the Alert rows, so a beat that runs twice, late or from another process decides the same.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from decimal import Decimal

import urllib3
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext

from portal import audit, outbox
from portal.mail import mail_leads

from .choices import OPEN_STATES, AlertKind, AlertState, NotificationStatus
from .evaluators import observe_all
from .models import Alert, AlertNotification, AlertRule
from .rules import BELOW, DEFAULT_RULES, Action, RuleBook, decide

log = logging.getLogger(__name__)


class WebhookError(Exception):
    """The webhook did not take the notification (connection failure, timeout, 5xx or 429): worth a retry."""


@transaction.atomic
def evaluate_alerts(*, now: datetime | None = None) -> dict[str, int]:
    """Evaluate every rule at `now`: open, fire, keep, drop or resolve alerts. Returns counts per action."""
    now = now or timezone.now()
    book = RuleBook(AlertRule.objects.all())
    observed = observe_all(now)
    known_kinds = [kind for kind, observations in observed.items() if observations is not None]
    open_alerts = {
        (alert.kind, alert.subject_key): alert
        for alert in Alert.objects.select_for_update().filter(state__in=OPEN_STATES, kind__in=known_kinds)
    }
    counts: dict[str, int] = {action.value: 0 for action in Action}
    fired, resolved = [], []
    seen = set()
    for kind in known_kinds:
        for observation in observed[kind]:
            key = (kind, observation.subject_key)
            seen.add(key)
            rule = book.for_subject(kind, pool_id=observation.pool_id, team_id=observation.team_id)
            holds = rule.enabled and observation.gate and rule.breached(observation.value)
            alert = open_alerts.get(key)
            decision = decide(
                open_state=alert.state if alert else None,
                open_since=alert.active_since if alert else None,
                holds=holds,
                for_seconds=rule.for_seconds,
                now=now,
                since=observation.since,
            )
            counts[decision.action.value] += 1
            if decision.action in (Action.NOTHING,):
                continue
            if decision.action == Action.DROP:
                alert.delete()
                continue
            if decision.action == Action.RESOLVE:
                _resolve(alert, now, value=observation.value)
                resolved.append(alert)
                continue
            if alert is None:
                alert = Alert(kind=kind, subject_key=observation.subject_key, peak_value=observation.value)
            alert.rule_id = rule.rule_id
            alert.pool_id, alert.team_id, alert.job_id = observation.pool_id, observation.team_id, observation.job_id
            alert.severity = rule.severity
            alert.value = observation.value
            # the worst value seen: the lowest for a rule that fires below its threshold, else the highest
            worse = observation.value > alert.peak_value
            if DEFAULT_RULES[kind].comparison == BELOW:
                worse = observation.value < alert.peak_value
            alert.peak_value = observation.value if worse else alert.peak_value
            alert.threshold = rule.threshold
            alert.for_seconds = rule.for_seconds
            alert.say(
                subject=observation.subject,
                summary=DEFAULT_RULES[kind].summary_words(observation.subject, observation.value, rule.threshold),
            )
            alert.active_since = decision.active_since
            alert.last_evaluated_at = now
            if decision.action == Action.FIRE:
                alert.state = AlertState.FIRING
                alert.fired_at = now
                fired.append(alert)
            alert.save()
    # Open alerts whose subject is gone (the pod was scheduled, the job started, the GPU left): the condition no
    # longer holds.
    for key, alert in open_alerts.items():
        if key in seen:
            continue
        if alert.state == AlertState.PENDING:
            alert.delete()
            counts[Action.DROP.value] += 1
        else:
            _resolve(alert, now, value=alert.value)
            resolved.append(alert)
            counts[Action.RESOLVE.value] += 1
    for alert, event in [(alert, AlertState.FIRING) for alert in fired] + [
        (alert, AlertState.RESOLVED) for alert in resolved
    ]:
        _queue_notification(alert, event)
    return counts


def _resolve(alert: Alert, now: datetime, *, value: float) -> None:
    alert.state = AlertState.RESOLVED
    alert.resolved_at = now
    alert.value = value
    alert.last_evaluated_at = now
    alert.save(update_fields=["state", "resolved_at", "value", "last_evaluated_at"])


# The money alerts of a team also go to its leads by e-mail when they fire (`email_alert`).
EMAILED_KINDS = frozenset(
    {AlertKind.BUDGET_USED, AlertKind.RESERVATION_WASTED, AlertKind.RESERVATION_NOT_LENT, AlertKind.SPILL_RATIO}
)


def _queue_notification(alert: Alert, event: str) -> None:
    if event == AlertState.FIRING and alert.team_id and alert.kind in EMAILED_KINDS:
        outbox.send("monitoring.email_alert", alert.pk)
    if not settings.ALERT_WEBHOOK_URL:
        AlertNotification.objects.get_or_create(
            alert=alert, event=event, defaults={"status": NotificationStatus.SKIPPED}
        )
        return
    notification, created = AlertNotification.objects.get_or_create(alert=alert, event=event)
    if created:
        outbox.send("monitoring.send_alert_notification", notification.pk)


def email_alert(alert_id: int) -> int:
    """E-mail a firing money alert to its team's leads, each in their language; how many were sent (0 when the
    alert is gone or no longer firing: a late retry sends nothing stale)."""
    alert = Alert.objects.select_related("team").filter(pk=alert_id, state=AlertState.FIRING).first()
    if alert is None or alert.team is None:
        return 0
    link = f"{settings.PORTAL_BASE_URL.rstrip('/')}{reverse('billing:team_billing', args=[alert.team.slug])}"

    def compose() -> tuple[str, str]:
        subject = gettext("Reservoir alert: %(kind)s (%(team)s)") % {
            "kind": alert.get_kind_display(),
            "team": alert.team.name,
        }
        body = "\n\n".join([str(alert.summary_in_words), gettext("The team's spend: %(link)s") % {"link": link}])
        return subject, body

    return mail_leads(alert.team, compose)


def webhook_payload(alert: Alert, event: str) -> dict:
    """Alertmanager's webhook format (version 4), so receivers written for Alertmanager take it as it is. Labels are
    codes; the texts meant for people (`summary`, `description`) are in `ALERT_WEBHOOK_LANGUAGE` (English by
    default: the receiver is a system whose readers the portal does not know)."""
    with translation.override(settings.ALERT_WEBHOOK_LANGUAGE):
        summary, description = str(alert.get_kind_display()), alert.summary_in_words
    labels = {"alertname": alert.kind, "severity": alert.severity, "subject": alert.subject_key}
    if alert.pool_id:
        labels["pool"] = alert.pool.slug
    if alert.team_id:
        labels["team"] = alert.team.slug
    if alert.job_id:
        labels["job_id"] = str(alert.job_id)
    ends = alert.resolved_at.isoformat() if event == AlertState.RESOLVED and alert.resolved_at else None
    return {
        "version": "4",
        "receiver": "reservoir",
        "status": "resolved" if event == AlertState.RESOLVED else "firing",
        "groupLabels": {"alertname": alert.kind},
        "commonLabels": labels,
        "externalURL": settings.PORTAL_BASE_URL,
        "alerts": [
            {
                "status": "resolved" if event == AlertState.RESOLVED else "firing",
                "labels": labels,
                "annotations": {
                    "summary": summary,
                    "description": description,
                    "value": f"{alert.value:g}",
                    "threshold": f"{alert.threshold:f}",
                },
                "startsAt": (alert.fired_at or alert.active_since).isoformat(),
                "endsAt": ends or "0001-01-01T00:00:00Z",
                "generatorURL": f"{settings.PORTAL_BASE_URL.rstrip('/')}/alerts/{alert.pk}/",
                "fingerprint": f"{alert.pk}",
            }
        ],
    }


def deliver_notification(notification_id: int, *, final_attempt: bool = False) -> str:
    """POST one notification to the webhook. Idempotent: a sent or skipped one is not sent again. Raises
    WebhookError on a transient failure (the task retries); a 4xx other than 429 fails it for good."""
    with transaction.atomic():
        notification = (
            AlertNotification.objects.select_for_update(of=("self",))
            .select_related("alert__pool", "alert__team")
            .get(pk=notification_id)
        )
        if notification.status != NotificationStatus.PENDING:
            return notification.status
        notification.attempts += 1
        notification.tried_at = timezone.now()
        notification.save(update_fields=["attempts", "tried_at"])
        # A firing notification retried after its alert resolved says so (status resolved, with its end): it may
        # reach the receiver after the resolution did, and must not leave the alert open there.
        alert = notification.alert
        payload = webhook_payload(
            alert, AlertState.RESOLVED if alert.state == AlertState.RESOLVED else notification.event
        )
    url = settings.ALERT_WEBHOOK_URL
    if not url:
        AlertNotification.objects.filter(pk=notification_id).update(status=NotificationStatus.SKIPPED)
        return NotificationStatus.SKIPPED
    try:
        response = urllib3.request(
            "POST",
            url,
            body=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json", "User-Agent": "reservoir-alerts"},
            timeout=urllib3.Timeout(connect=3.0, read=settings.ALERT_WEBHOOK_TIMEOUT_SECONDS),
            retries=False,
        )
    except urllib3.exceptions.HTTPError as error:
        return _failed(notification_id, f"{type(error).__name__}: {error}", None, transient=True, final=final_attempt)
    if 200 <= response.status < 300:
        AlertNotification.objects.filter(pk=notification_id).update(
            status=NotificationStatus.SENT, response_status=response.status, sent_at=timezone.now(), last_error=""
        )
        return NotificationStatus.SENT
    transient = response.status >= 500 or response.status == 429
    body = response.data[:300].decode(errors="replace")
    return _failed(notification_id, f"HTTP {response.status}: {body}", response.status, transient, final_attempt)


def _failed(notification_id: int, error: str, status: int | None, transient: bool, final: bool) -> str:
    done = not transient or final
    AlertNotification.objects.filter(pk=notification_id).update(
        last_error=error[:2000],
        response_status=status,
        status=NotificationStatus.FAILED if done else NotificationStatus.PENDING,
    )
    if not done:
        raise WebhookError(error)
    log.warning("alert notification %s not delivered: %s", notification_id, error)
    return NotificationStatus.FAILED


# A pending notification whose sending stopped (its retry lost with Redis's data or never published, the database
# failing inside the task) is sent again by `monitoring.resend_alert_notifications` (every minute) once nobody has
# tried it for `RESEND_AFTER` (longer than any pause between the task's own attempts), for a day (`GIVE_UP_AFTER`);
# then it is failed, saying so.
RESEND_AFTER = timedelta(minutes=10)
GIVE_UP_AFTER = timedelta(days=1)
RESEND_BATCH = 500


def notifications_due_again(*, now: datetime | None = None) -> list[int]:
    """Pending notifications made between `GIVE_UP_AFTER` and `RESEND_AFTER` ago and not tried for `RESEND_AFTER`,
    oldest first. Pending ones older than `GIVE_UP_AFTER` are failed, with why."""
    now = now or timezone.now()
    quiet = now - RESEND_AFTER
    pending = AlertNotification.objects.filter(status=NotificationStatus.PENDING)
    stale = pending.filter(created_at__lt=now - GIVE_UP_AFTER)
    for notification in stale.only("pk", "last_error"):
        given_up = f"not delivered within a day; last error: {notification.last_error or 'none'}"
        _failed(notification.pk, given_up, None, transient=False, final=True)
    due = pending.filter(
        Q(tried_at__isnull=True) | Q(tried_at__lt=quiet), created_at__gte=now - GIVE_UP_AFTER, created_at__lt=quiet
    )
    return list(due.order_by("created_at", "id").values_list("pk", flat=True)[:RESEND_BATCH])


def set_rule(
    *,
    kind: str,
    threshold: Decimal,
    for_seconds: int,
    pool=None,
    team=None,
    severity: str | None = None,
    enabled: bool = True,
    user=None,
) -> AlertRule:
    """Create or change the rule of `kind` for a pool, a team, or the default (neither). Audited."""
    default = DEFAULT_RULES[kind]
    with transaction.atomic():
        rule = AlertRule.objects.select_for_update().filter(kind=kind, pool=pool, team=team).order_by("pk").first()
        before = None
        if rule is None:
            rule = AlertRule(kind=kind, pool=pool, team=team)
        else:
            before = {"threshold": str(rule.threshold), "for_seconds": rule.for_seconds, "enabled": rule.enabled}
        rule.threshold = threshold
        rule.for_seconds = for_seconds
        rule.severity = severity or rule.severity or default.severity
        rule.enabled = enabled
        rule.updated_by = user
        rule.full_clean()
        try:
            rule.save()
        except IntegrityError:
            raise
        audit.record(
            actor=user,
            action="monitoring.rule_set",
            instance=rule,
            before=before,
            after={"threshold": str(threshold), "for_seconds": for_seconds, "enabled": enabled},
        )
    return rule


@transaction.atomic
def delete_rule(*, rule: AlertRule, user=None) -> None:
    """Remove a rule (Django admin): its subjects fall back to the next rule that applies (`RuleBook`: team, pool,
    default row, the code's default). Audited with the rule as it was; its alerts stay, without it."""
    rule = AlertRule.objects.select_for_update(of=("self",)).filter(pk=rule.pk).first()
    if rule is None:  # deleted meanwhile, and audited then
        return
    before, pk = audit.snapshot(rule), rule.pk
    rule.delete()
    rule.pk = pk
    audit.record(actor=user, action="monitoring.rule_delete", instance=rule, before=before, after=None)
