"""API tokens (portal/authentication.py), also refused on each request when their user signs in through the provider
and has lost every team (their groups map to nothing any more); a deactivated user's token is refused by portal's
check already."""

from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions

from portal import authentication

from . import selectors


class ApiTokenAuthentication(authentication.ApiTokenAuthentication):
    def authenticate(self, request):
        result = super().authenticate(request)
        if result is not None and selectors.has_lost_every_team(result[0]):
            raise exceptions.AuthenticationFailed(_("The token's user is no longer a member of any team."))
        return result
