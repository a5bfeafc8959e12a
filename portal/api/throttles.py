"""Rate limits of the API's writes (DRF throttles): every write per user (per address when anonymous), and job
submissions per user on top. Reads are not limited here.

Rates come from settings at request time (`API_THROTTLE_RATES`; empty means unlimited). Counts live in the
shared cache, so every web process sees the same. A cache that cannot be reached lets the request through (logged):
a limit exists to protect the service, not to make it fail when Redis does."""

import logging

from django.conf import settings
from rest_framework.permissions import SAFE_METHODS
from rest_framework.throttling import UserRateThrottle

log = logging.getLogger(__name__)


class _SettingsRateThrottle(UserRateThrottle):
    def get_rate(self):
        return settings.API_THROTTLE_RATES.get(self.scope) or None

    def allow_request(self, request, view) -> bool:
        try:
            return super().allow_request(request, view)
        except Exception as error:  # noqa: BLE001 - the cache (Redis) is down: do not refuse for it
            log.warning("API throttle %s not applied, the cache failed: %s", self.scope, error)
            return True


class WriteRateThrottle(_SettingsRateThrottle):
    """POST, PUT, PATCH and DELETE of one user (or one address) across the whole API."""

    scope = "writes"

    def allow_request(self, request, view) -> bool:
        if request.method in SAFE_METHODS:
            return True
        return super().allow_request(request, view)


class SubmissionRateThrottle(_SettingsRateThrottle):
    """Job submissions (and resubmissions) of one user."""

    scope = "job_submissions"
