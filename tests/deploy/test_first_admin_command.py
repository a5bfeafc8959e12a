"""The first platform admin, made as the chart's NOTES and docs/running-in-a-cluster.md say, exists and signs in
with the organization's provider configured.

They used to give `kubectl exec deploy/<release>-web -- python manage.py createsuperuser`: without a terminal
Django's createsuperuser creates nothing ("Superuser creation skipped due to not running in a TTY") and exits 0, and
the account it makes is not break-glass, so with an issuer set (local passwords off) that admin's password was
refused: nobody could sign in to write the group rule that makes a provider user an admin. Each command they give
now is run here as `kubectl exec` would run it (standard input forwarded with -i, no terminal), and its admin signs
in with local passwords off."""

import io
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml
from django.core.management import call_command
from django.urls import reverse

from devcluster import build
from portal.models import User
from tests.deploy.conftest import CHART, ROOT

# NOTES.txt is not rendered by `helm template`: a copy of the chart renders it into a ConfigMap instead.
NOTES_AS_CONFIGMAP = """apiVersion: v1
kind: ConfigMap
metadata: {name: notes}
data:
  notes: {{ include "reservoir/templates/NOTES.txt" . | quote }}
"""
WITH_SIGN_IN = ("--set", "oidc.issuer=https://idp.example.com", "--set", "oidc.clientId=reservoir")


def rendered_notes(tmp_path, *args: str) -> str:
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "zz-notes.yaml").write_text(NOTES_AS_CONFIGMAP, encoding="utf-8")
    result = subprocess.run(
        [str(build.ensure_helm()), "template", "reservoir", str(chart), "--namespace", "reservoir"]
        + ["--show-only", "templates/zz-notes.yaml", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)["data"]["notes"]


def first_admin_commands(text: str) -> list[str]:
    return re.findall(r"kubectl [^`\n]*(?:createsuperuser|create_break_glass_admin)[^`\n]*", text)


def remote_command(command: str) -> list[str]:
    """What `command` runs in the pod, after checking that kubectl forwards standard input (the password) to it."""
    words = shlex.split(command)
    if "<" in words:  # the shell's redirection of kubectl's standard input
        words = words[: words.index("<")]
    kubectl, remote = words[: words.index("--")], words[words.index("--") + 1 :]
    flags = "".join(w.lstrip("-") for w in kubectl if w.startswith("-") and not w.startswith("--"))
    assert "i" in flags or "--stdin" in kubectl, f"{command!r}: kubectl gives the command no standard input"
    assert remote[:2] == ["python", "manage.py"], command
    return remote[2:]


@pytest.mark.django_db
def test_the_notes_and_docs_command_for_the_first_admin_makes_one_who_signs_in(tmp_path, client, settings, monkeypatch):
    notes = rendered_notes(tmp_path, *WITH_SIGN_IN)
    docs = (ROOT / "docs" / "running-in-a-cluster.md").read_text(encoding="utf-8")
    commands = first_admin_commands(notes) + first_admin_commands(docs)
    assert len(commands) >= 2, commands
    settings.LOCAL_PASSWORD_LOGIN = False  # an issuer is set: local passwords off but for break-glass accounts
    for number, command in enumerate(commands):
        name, *arguments = remote_command(command)
        password = f"first-admin-long-random-password-{number}-8472"
        monkeypatch.setattr(sys, "stdin", io.StringIO(f"{password}\n"))  # kubectl exec -i: a pipe, no terminal
        call_command(name, *arguments, stdout=io.StringIO())

        admin = User.objects.get(username=arguments[0])
        assert admin.is_break_glass and admin.is_platform_admin and admin.is_superuser, command
        login = {"username": admin.username, "password": password}
        answer = client.post(reverse("portal:login"), login, REMOTE_ADDR="10.0.0.9")
        assert answer.status_code == 302, f"{command!r}: the first platform admin's password is refused"
        assert client.get("/").wsgi_request.user == admin
        client.logout()
