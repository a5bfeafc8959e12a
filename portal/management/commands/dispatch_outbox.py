"""`manage.py dispatch_outbox`: the long-lived process that sends pending outbox messages to Celery's broker."""

import logging
import signal
import threading

from django.core.management.base import BaseCommand

from portal.outbox import run_dispatcher


class Command(BaseCommand):
    help = "Publish the outbox's pending task messages to the broker, continuously (see portal/outbox.py)."

    def add_arguments(self, parser):
        parser.add_argument("--interval", type=float, default=1.0, help="Seconds between two looks at the outbox.")

    def handle(self, *args, interval: float = 1.0, **options):
        logging.getLogger("portal.outbox").setLevel(logging.INFO)
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        self.stdout.write(f"dispatch_outbox: publishing pending messages every {interval:g}s")
        self.stdout.flush()
        run_dispatcher(stop, interval=interval)
        self.stdout.write("dispatch_outbox: stopped")
