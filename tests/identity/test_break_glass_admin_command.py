"""`manage.py create_break_glass_admin`: the scriptable way to make the first platform admin of an install (NOTES.txt,
docs/running-in-a-cluster.md). The password comes on standard input (`kubectl exec -i`, no terminal), or is asked
twice on a terminal; the account is break-glass, so it signs in with local passwords off. It never exits 0 without
an admin: Django's createsuperuser, which the docs named before, skipped the creation without a terminal."""

import io
import sys

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from portal.models import AuditEntry, User
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
PASSWORD = "a-long-random-break-glass-password-5120"


def run(*arguments: str, stdin: str) -> str:
    out = io.StringIO()
    saved = sys.stdin
    sys.stdin = io.StringIO(stdin)  # a pipe, as kubectl exec -i gives it: no terminal
    try:
        call_command("create_break_glass_admin", *arguments, stdout=out)
    finally:
        sys.stdin = saved
    return out.getvalue()


def signs_in(client, username: str, password: str) -> bool:
    answer = client.post(reverse("portal:login"), {"username": username, "password": password}, REMOTE_ADDR="10.0.0.9")
    return answer.status_code == 302 and client.get("/").wsgi_request.user.username == username


def test_the_admin_made_from_standard_input_signs_in_with_local_passwords_off(client, settings):
    settings.LOCAL_PASSWORD_LOGIN = False
    said = run("admin", "--email", "admin@example.com", stdin=f"{PASSWORD}\n")

    assert 'Break-glass platform admin "admin" created.' in said
    admin = User.objects.get(username="admin")
    assert (admin.is_break_glass, admin.is_platform_admin, admin.is_staff, admin.is_superuser) == (True,) * 4
    assert admin.email == "admin@example.com"
    assert signs_in(client, "admin", PASSWORD)
    entry = AuditEntry.objects.get(action="user.create", object_id=str(admin.pk))
    assert entry.actor_username == "manage.py create_break_glass_admin" and entry.after["password"] == "(hidden)"


def test_positive_control_an_admin_that_is_not_break_glass_is_refused_with_local_passwords_off(client, settings):
    UserFactory(username="plain-admin", is_platform_admin=True, is_superuser=True)  # as createsuperuser makes one
    settings.LOCAL_PASSWORD_LOGIN = False
    assert not signs_in(client, "plain-admin", "pw-for-tests")
    settings.LOCAL_PASSWORD_LOGIN = True
    assert signs_in(client, "plain-admin", "pw-for-tests")


def test_run_again_it_makes_an_existing_account_break_glass_with_the_new_password(client, settings):
    settings.LOCAL_PASSWORD_LOGIN = False
    UserFactory(username="ops", is_platform_admin=False)

    said = run("ops", stdin=f"{PASSWORD}\r\n")

    assert 'Break-glass platform admin "ops" updated.' in said
    ops = User.objects.get(username="ops")
    assert ops.is_break_glass and ops.is_admin
    assert AuditEntry.objects.filter(action="user.update", object_id=str(ops.pk)).exists()
    assert signs_in(client, "ops", PASSWORD)


@pytest.mark.parametrize("stdin", ["", "\n"], ids=["no standard input", "an empty line"])
def test_without_a_password_it_fails_and_makes_no_one(stdin):
    with pytest.raises(CommandError, match="No password"):
        run("admin", stdin=stdin)
    assert not User.objects.filter(username="admin").exists()


def test_a_password_the_validators_refuse_makes_no_one():
    with pytest.raises(CommandError, match="too common"):
        run("admin", stdin="password\n")
    assert not User.objects.filter(username="admin").exists()


def test_on_a_terminal_it_asks_twice_and_refuses_two_different_passwords(monkeypatch):
    answers = iter([PASSWORD, PASSWORD + "x"])
    monkeypatch.setattr("getpass.getpass", lambda prompt: next(answers))
    monkeypatch.setattr(sys, "stdin", type("Terminal", (io.StringIO,), {"isatty": lambda self: True})())
    with pytest.raises(CommandError, match="differ"):
        call_command("create_break_glass_admin", "admin", stdout=io.StringIO())
    assert not User.objects.filter(username="admin").exists()
