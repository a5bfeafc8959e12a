"""django-allauth's hooks: no local sign-up, sign-up from the provider, the nonce check, and the group rules applied
at every sign-in through the provider (before the session starts: a user whose groups give nothing is not signed
in and sees why)."""

import logging

from allauth.account.adapter import DefaultAccountAdapter
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from django.shortcuts import render

from portal.models import User

from . import oidc, services

logger = logging.getLogger(__name__)


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request) -> bool:
        return False  # local accounts are made by admins; provider users by the provider's sign-in

    def pre_login(self, request, user, **kwargs):
        response = super().pre_login(request, user, **kwargs)
        sociallogin = (kwargs.get("signal_kwargs") or {}).get("sociallogin")
        if response is not None or sociallogin is None:
            return response
        groups = oidc.groups_claim(sociallogin.account.extra_data)
        access = services.apply_groups(member=user, groups=groups, provider=oidc.actor_name())
        if access.anything:
            return None
        from allauth.account.internal.stagekit import clear_login

        clear_login(request)
        context = {"username": user.get_username(), "groups": groups, "provider": oidc.provider_label()}
        return render(request, "identity/no_access.html", context, status=403)


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    def is_open_for_signup(self, request, sociallogin) -> bool:
        return True

    def pre_social_login(self, request, sociallogin):
        if (sociallogin.state or {}).get("process") not in (None, "login"):
            # never joined to the account signed in now (`ReservoirOIDCProvider.redirect` starts sign-ins only)
            raise ImmediateHttpResponse(self._refused(request, "connect", status=400))
        if not sociallogin.is_existing and self._address_taken(sociallogin):
            raise ImmediateHttpResponse(self._refused(request, "email-in-use", status=403))
        expected = (sociallogin.state or {}).get("nonce")
        received = (sociallogin.account.extra_data.get("id_token") or {}).get("nonce")
        if not expected or received != expected:
            raise ImmediateHttpResponse(
                render(
                    request,
                    "socialaccount/authentication_error.html",
                    {"provider": oidc.provider_label(), "reason": "nonce"},
                    status=400,
                )
            )

    @staticmethod
    def _refused(request, reason: str, *, status: int):
        context = {"provider": oidc.provider_label(), "reason": reason}
        return render(request, "socialaccount/authentication_error.html", context, status=status)

    @staticmethod
    def _address_taken(sociallogin) -> bool:
        """Whether another account has the address the provider gave, in any case: allauth compares it lowercased
        with the stored one, and Django keeps an address's local part as it was typed (Eve.Smith@…)."""
        addresses = {address.email for address in sociallogin.email_addresses} | {sociallogin.user.email or ""}
        addresses.discard("")
        return any(User.objects.filter(email__iexact=address).exists() for address in addresses)

    def on_authentication_error(self, request, provider, error=None, exception=None, extra_context=None):
        """Say in the log why a sign-in through the provider failed: the page the user sees only says that it did."""
        logger.warning(
            "sign-in through %s failed: error=%s, provider said %r (%r), exception=%r",
            getattr(provider, "id", provider),
            error,
            request.GET.get("error", ""),
            request.GET.get("error_description", "")[:300],
            exception,
            exc_info=exception,
        )
        super().on_authentication_error(request, provider, error, exception, extra_context)
