"""`manage.py create_break_glass_admin <username>`: the first platform admin of an install (and any later
break-glass admin), which signs in with its password also when sign-in goes through the organization's provider.

Scriptable: the password is the first line of standard input, so it is in neither the command line nor the process
list, and `kubectl exec -i` (no terminal) is enough. With a terminal, it asks for the password twice instead. Django's
`createsuperuser` does neither: without a terminal it skips the creation and exits 0, and its account is not
break-glass, so local passwords being off (an issuer configured) would lock it out."""

import getpass
import sys

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from identity import services


class Command(BaseCommand):
    help = (
        "Create or update a break-glass platform admin; the password is read from standard input (asked twice on a "
        "terminal)."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--email", default="", help="The admin's e-mail address.")

    def handle(self, *args, username: str, email: str = "", **options):
        password = self._password()
        try:
            member, created = services.save_break_glass_admin(
                username=username, password=password, email=email, actor_name="manage.py create_break_glass_admin"
            )
        except ValidationError as error:
            raise CommandError(" ".join(error.messages)) from error
        done = "created" if created else "updated"
        self.stdout.write(self.style.SUCCESS(f'Break-glass platform admin "{member.username}" {done}.'))

    def _password(self) -> str:
        if sys.stdin.isatty():
            password = getpass.getpass("Password: ")
            if password != getpass.getpass("Password (again): "):
                raise CommandError("The two passwords differ.")
        else:
            password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise CommandError("No password: give it on standard input (e.g. kubectl exec -i ... < password-file).")
        return password
