"""The provider's sign-in and callback, served by identity's stricter adapter (identity/oidc.py) on the paths
allauth would use (`/accounts/oidc/<provider_id>/login/` and `.../login/callback/`); listed before allauth's own.

allauth's account-management pages are not the portal's, and each would let a provider user step out of the
provider's control: set a local password (a provider user's is unusable, so no old one is asked), then disconnect the
provider (allowed once a password exists: the group rules would then never apply again), add e-mail addresses nobody
checks, or reset the break-glass password by e-mail. They answer 404 here; what stays of allauth is the sign-in
flow's own pages (cancelled, error, inactive, logout). Its sign-up form for a provider user (shown when another
account has their e-mail address) is replaced by a page that says so: an admin resolves it."""

from django.urls import path, re_path
from django.views.generic import RedirectView

from . import oidc, views

urlpatterns = [
    # allauth's own sign-in and sign-up pages are not the portal's: its sign-in page is /login/.
    path("accounts/login/", RedirectView.as_view(pattern_name="portal:login", query_string=True)),
    path("accounts/signup/", RedirectView.as_view(pattern_name="portal:login", query_string=True)),
    path("accounts/oidc/<str:provider_id>/login/", oidc.login, name="openid_connect_login"),
    path("accounts/oidc/<str:provider_id>/login/callback/", oidc.callback, name="openid_connect_callback"),
    re_path(r"^accounts/(?:3rdparty|social)/signup/\Z", views.provider_signup_refused),
    re_path(
        r"^accounts/(?:password/|email/|confirm-email/|reauthenticate/|login/code/|3rdparty/\Z|social/connections/)",
        views.not_here,
    ),
]
