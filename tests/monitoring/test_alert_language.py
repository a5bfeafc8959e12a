"""An alert is written once, by the worker, in no reader's language: it keeps its subject and summary as English text
(the admin's search, the webhook, alerts raised before) and as words, so that the alerts page, its detail and the
API say it in each reader's own language, and the webhook in the one configured for it."""

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone, translation

from jobs.models import Pod
from monitoring import services, tasks
from monitoring.choices import AlertKind, AlertState
from monitoring.models import Alert
from portal.choices import Role
from tests.english import english_phrases
from tests.factories import MembershipFactory, PoolFactory, UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("compiled_translations")]
NOW = timezone.now().replace(microsecond=0)
CHINESE_SUMMARY = "Pod {pod}：Pod 处于 Pending 的时间 10 分钟（Pod 处于 Pending 的时间 > 3 分钟）"


@pytest.fixture
def pending_pod_alert(team):
    """A pod Pending for ten minutes: the worker's evaluation raises a firing alert about it."""
    pool = PoolFactory(name="Reserved A800", slug="reserved-a800")
    Pod.objects.create(
        uid="u1", namespace=team.namespace, name="train-0", team=team, pool=pool, gpus=1, phase="Pending",
        created_at=NOW - timedelta(minutes=10),
    )  # fmt: skip
    with time_machine.travel(NOW, tick=False):
        tasks.evaluate_alerts.delay()
    return Alert.objects.get(kind=AlertKind.POD_PENDING)


def reader(team, language):
    return MembershipFactory(team=team, role=Role.RESEARCHER, user=UserFactory(language=language)).user


def test_the_worker_stores_the_alert_in_english_with_its_words(pending_pod_alert, team):
    alert = pending_pod_alert
    assert alert.state == AlertState.FIRING
    pod = f"{team.namespace}/train-0"
    assert alert.subject == f"pod {pod}"
    assert alert.summary == f"pod {pod}: time the pod is Pending 10 min (time the pod is Pending > 3 min)"
    assert alert.subject_id == "pod %(pod)s" and alert.subject_args == {"pod": pod}
    with translation.override("zh-hans"):
        assert alert.subject_in_words == f"Pod {pod}"
        assert alert.summary_in_words == CHINESE_SUMMARY.format(pod=pod)


def test_a_chinese_reader_reads_the_alert_in_chinese_and_an_english_one_in_english(client, pending_pod_alert, team):
    alert, pod = pending_pod_alert, f"{team.namespace}/train-0"
    chinese = CHINESE_SUMMARY.format(pod=pod)
    english = f"pod {pod}: time the pod is Pending 10 min (time the pod is Pending &gt; 3 min)"

    client.force_login(reader(team, "zh-hans"))
    listing = client.get("/alerts/").content.decode()
    assert f"<td>Pod {pod} <span" in listing and f"pod {pod}" not in listing
    detail = client.get(f"/alerts/{alert.pk}/").content.decode()
    assert chinese.replace(">", "&gt;") in detail and "time the pod is Pending" not in detail
    data = (team.name, team.namespace, team.slug, "train-0")
    assert not english_phrases(detail.split("<main", 1)[1], data)
    api = client.get(f"/api/v1/alerts/{alert.pk}/").json()
    assert api["summary"] == chinese and api["subject"] == f"Pod {pod}"
    assert api["kind"] == "pod_pending" and api["subject_key"] == f"pod:{pod}"  # the codes stay codes

    client.force_login(reader(team, "en"))
    detail = client.get(f"/alerts/{alert.pk}/").content.decode()
    assert english in detail and "处于" not in detail
    api = client.get(f"/api/v1/alerts/{alert.pk}/").json()
    assert api["summary"] == english.replace("&gt;", ">") and api["subject"] == f"pod {pod}"


def test_the_webhook_speaks_its_configured_language(pending_pod_alert, team, settings):
    pod = f"{team.namespace}/train-0"
    with translation.override("zh-hans"):  # whoever triggers the delivery, the setting decides
        annotations = services.webhook_payload(pending_pod_alert, AlertState.FIRING)["alerts"][0]["annotations"]
    assert annotations["summary"] == "Pod pending"
    assert annotations["description"].startswith(f"pod {pod}: time the pod is Pending 10 min")
    settings.ALERT_WEBHOOK_LANGUAGE = "zh-hans"
    annotations = services.webhook_payload(pending_pod_alert, AlertState.FIRING)["alerts"][0]["annotations"]
    assert annotations["description"].startswith(f"Pod {pod}：Pod 处于 Pending 的时间 10 分钟")
    assert annotations["summary"] == "Pod 长时间等待"


def test_an_alert_raised_before_its_texts_kept_their_words_shows_what_was_stored(client, team):
    alert = Alert.objects.create(
        kind=AlertKind.QUEUE_WAIT, subject_key="job:1", subject="job old (#1)", team=team, state=AlertState.FIRING,
        value=40, peak_value=40, threshold=30, summary="job old (#1): time waiting to start 40 min (...)",
        active_since=NOW, fired_at=NOW, last_evaluated_at=NOW,
    )  # fmt: skip
    client.force_login(reader(team, "zh-hans"))
    assert "job old (#1): time waiting to start 40 min" in client.get(f"/alerts/{alert.pk}/").content.decode()
