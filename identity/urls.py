"""The provider's sign-in and callback, served by identity's stricter adapter (identity/oidc.py) on the paths
allauth would use (`/accounts/oidc/<provider_id>/login/` and `.../login/callback/`); listed before allauth's own."""

from django.urls import path
from django.views.generic import RedirectView

from . import oidc

urlpatterns = [
    # allauth's own sign-in and sign-up pages are not the portal's: its sign-in page is /login/.
    path("accounts/login/", RedirectView.as_view(pattern_name="portal:login", query_string=True)),
    path("accounts/signup/", RedirectView.as_view(pattern_name="portal:login", query_string=True)),
    path("accounts/oidc/<str:provider_id>/login/", oidc.login, name="openid_connect_login"),
    path("accounts/oidc/<str:provider_id>/login/callback/", oidc.callback, name="openid_connect_callback"),
]
