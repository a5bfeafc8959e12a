"""The audit log (issue 15): entries keep who made them after that user is deleted, cannot be updated or deleted
(a database trigger, whoever writes), record job-template writes, and never hold environment values."""

import importlib
import json

import pytest
from django.db import IntegrityError, connection, transaction
from rest_framework.test import APIClient

from jobs import job_templates, services
from jobs.specs import JobSpec
from pools import teams as team_services
from portal.models import AuditEntry
from tests.factories import PoolFactory, QuotaFactory, UserFactory

SECRET = "hf_s3cr3t-value"


def spec(**kwargs) -> JobSpec:
    return JobSpec(name="train", image="registry.example.com/llm/train:1.0", gpus=1, **kwargs)


def test_an_entry_keeps_its_actors_username_after_the_user_is_deleted(team, platform_admin):
    temporary = UserFactory(username="temp-admin", is_platform_admin=True)
    team.description = "changed by someone who leaves"
    team_services.save_team(team=team, user=temporary)
    entry = AuditEntry.objects.get(action="team.update")
    temporary.delete()
    entry.refresh_from_db()
    assert entry.actor is None and entry.actor_username == "temp-admin"
    assert "temp-admin" in str(entry)
    client = APIClient()
    client.force_login(platform_admin)
    listed = client.get("/api/v1/audit/", {"actor": "temp-admin"}).json()["results"]
    assert [item["actor"] for item in listed] == ["temp-admin"]


def test_entries_cannot_be_updated_or_deleted(team, platform_admin):
    team_services.save_team(team=team, user=platform_admin)
    entry = AuditEntry.objects.get(action="team.update")
    for attempt in (
        lambda: AuditEntry.objects.filter(pk=entry.pk).update(action="nothing.happened"),
        lambda: AuditEntry.objects.filter(pk=entry.pk).update(actor=None, actor_username="someone-else"),
        lambda: AuditEntry.objects.filter(pk=entry.pk).delete(),
    ):
        with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
            attempt()
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM portal_auditentry")
    entry.refresh_from_db()
    assert entry.action == "team.update" and entry.actor_username == "ada"


def test_template_writes_are_audited_without_environment_values(team, researcher):
    pool = PoolFactory(slug="train")
    saved = job_templates.save_template(
        team=team, pool=pool, name="nightly", spec=spec(env={"HF_TOKEN": SECRET}), user=researcher
    )
    job_templates.save_template(
        team=team, pool=pool, name="nightly", spec=spec(env={"HF_TOKEN": SECRET, "EPOCHS": "3"}), user=researcher
    )
    job_templates.delete_template(template=saved, user=researcher)
    entries = list(AuditEntry.objects.filter(object_type="jobs.jobtemplate").order_by("id"))
    assert [e.action for e in entries] == ["jobtemplate.create", "jobtemplate.update", "jobtemplate.delete"]
    assert all(e.actor_username == "rita" and e.object_id == str(saved.pk) for e in entries)
    assert entries[1].after["spec"]["env"] == {"HF_TOKEN": "(redacted)", "EPOCHS": "(redacted)"}
    assert entries[2].before["name"] == "nightly" and entries[2].after is None
    assert SECRET not in json.dumps([[e.before, e.after] for e in entries])


def test_job_snapshots_keep_variable_names_but_not_their_values(team, researcher, monkeypatch):
    monkeypatch.setattr("reconcile.tasks.submit_job_to_cluster.delay", lambda job_id: None)
    monkeypatch.setattr("reconcile.tasks.reconcile_team_namespace.delay", lambda team_id: None)
    pool = PoolFactory(slug="train")
    QuotaFactory(team=team, pool=pool, max_gpus=4)
    job = services.submit_job(team=team, pool=pool, user=researcher, spec=spec(env={"HF_TOKEN": SECRET}))
    services.cancel_job(job=job, user=researcher)
    entries = AuditEntry.objects.filter(object_type="jobs.job")
    assert {e.action for e in entries} == {"job.submit", "job.cancel"}
    assert entries.get(action="job.submit").after["env"] == {"HF_TOKEN": "(redacted)"}
    assert SECRET not in json.dumps([[e.before, e.after] for e in entries])
    job.refresh_from_db()
    assert job.env == {"HF_TOKEN": SECRET}  # the job itself keeps its value: only the audit copy is redacted


def test_the_migration_redacts_what_older_entries_copied():
    migration = importlib.import_module("portal.migrations.0005_audit_actor_username_append_only")
    old = {"name": "x", "env": {"HF_TOKEN": SECRET}, "spec": {"env": {"A": "1"}, "gpus": 2}, "lines": [{"env": {}}]}
    assert migration._redact(old) == {
        "name": "x",
        "env": {"HF_TOKEN": "(redacted)"},
        "spec": {"env": {"A": "(redacted)"}, "gpus": 2},
        "lines": [{"env": {}}],
    }
