"""The address a request came from, for login throttling: REMOTE_ADDR, or behind `settings.TRUSTED_PROXY_COUNT`
proxies that each append to X-Forwarded-For, the address the outermost trusted proxy saw (entries further left
are whatever the client wrote, and are never trusted)."""

from django.conf import settings


def client_address(request) -> str | None:
    proxies = settings.TRUSTED_PROXY_COUNT
    if proxies > 0:
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
        if len(forwarded) >= proxies:
            return forwarded[-proxies]
    return request.META.get("REMOTE_ADDR")
