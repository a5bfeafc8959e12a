"""Rate limits of writes: every write per user (per address when signed out), and job submissions per user on top.
Reads are not limited. DRF throttles of the API, and the same classes behind the pages' writes
(`portal.throttling`): a user's writes count against one allowance wherever they come from.

Rates come from settings at request time (`THROTTLE_RATES`; empty means unlimited). Counts live in the shared cache,
so every web process sees the same. A cache that cannot be reached lets the request through (logged): a limit exists
to protect the service, not to make it fail when Redis does."""

import logging

from django.conf import settings
from rest_framework.permissions import SAFE_METHODS
from rest_framework.throttling import UserRateThrottle

from portal.client_address import client_address

log = logging.getLogger(__name__)


class _SettingsRateThrottle(UserRateThrottle):
    def get_rate(self):
        return settings.THROTTLE_RATES.get(self.scope) or None

    def get_ident(self, request) -> str:
        """A signed-out caller's address as the login throttle reads it (behind trusted proxies only): DRF's own
        would take X-Forwarded-For as the client writes it, a new allowance per made-up address."""
        return client_address(request) or ""

    def allow_request(self, request, view) -> bool:
        try:
            return super().allow_request(request, view)
        except Exception as error:  # noqa: BLE001 - the cache (Redis) is down: do not refuse for it
            log.warning("throttle %s not applied, the cache failed: %s", self.scope, error)
            return True


class WriteRateThrottle(_SettingsRateThrottle):
    """POST, PUT, PATCH and DELETE of one user (or one address), across the API and the pages."""

    scope = "writes"

    def allow_request(self, request, view) -> bool:
        if request.method in SAFE_METHODS:
            return True
        return super().allow_request(request, view)


class SubmissionRateThrottle(_SettingsRateThrottle):
    """Job submissions (and resubmissions) of one user."""

    scope = "job_submissions"
