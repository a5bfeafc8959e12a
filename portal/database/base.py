"""Django's PostgreSQL backend, whose health check of a kept connection makes no round trip while the server has
said nothing on it.

With CONN_HEALTH_CHECKS (portal/settings/base.py) Django checks a kept connection before the first query of each
request and each Celery task, with a `SELECT 1`: a round trip to PostgreSQL on every API request, about a twentieth
of a jobs-list request's CPU (bench/api.py). A server that ends an idle connection — a restart, an administrator's
`pg_terminate_backend`, an idle timeout — writes its error on it and closes it, so the socket has something to read.
An idle connection in no transaction whose socket has nothing to read is usable: no query is needed to know it. Any
other case (something to read, a transaction open or failed, a socket that cannot be polled) gets Django's own
`SELECT 1`, so the check answers as before wherever a query could tell it anything.

What neither check sees: a connection that breaks between the check and the request's first query, or a server gone
without a word (a host powered off: the `SELECT 1` would then wait for the network to give up). The request then
fails, answers 503 (portal/outage.py) and its connection is dropped, as before.
"""

import select

import psycopg2.extensions
from django.db.backends.postgresql import base

_IDLE = psycopg2.extensions.TRANSACTION_STATUS_IDLE


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self):
        connection = self.connection
        if connection is None or connection.closed:
            return False
        try:
            idle = connection.info.transaction_status == _IDLE
            poller = select.poll()
            poller.register(connection.fileno(), select.POLLIN | select.POLLPRI)
            quiet = not poller.poll(0)
        except (OSError, ValueError, psycopg2.Error):
            return super().is_usable()
        return True if idle and quiet else super().is_usable()
