"""The sign-in page (the provider's button, and the password form when local passwords are allowed or for
break-glass accounts) and sign-out (the portal session ends; a link to the provider's RP-initiated logout when it
offers one)."""

from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth import logout
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from portal import views as portal_views

from . import oidc


class LoginView(portal_views.LoginView):
    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        app = oidc.configured_app()
        context["sso_label"] = app["name"] if app else ""
        sso_url = reverse("openid_connect_login", kwargs={"provider_id": app["provider_id"]}) if app else ""
        next_url = context.get("next")
        context["sso_login_url"] = f"{sso_url}?{urlencode({'next': next_url})}" if sso_url and next_url else sso_url
        context["local_password_login"] = settings.LOCAL_PASSWORD_LOGIN
        return context


@require_POST
def logout_view(request):
    """End the portal session; when the user came through a provider that offers RP-initiated logout, say so and
    link to it (id_token_hint, post_logout_redirect_uri back to the login page)."""
    id_token = request.session.get(oidc.ID_TOKEN_SESSION_KEY, "")
    logout(request)
    endpoint = oidc.end_session_endpoint() if id_token else ""
    if not endpoint:
        return redirect(settings.LOGOUT_REDIRECT_URL)
    app = oidc.configured_app()
    query = {
        "id_token_hint": id_token,
        "client_id": app["client_id"],
        "post_logout_redirect_uri": request.build_absolute_uri(reverse("portal:login")),
    }
    separator = "&" if "?" in endpoint else "?"
    context = {"provider": app["name"], "provider_logout_url": f"{endpoint}{separator}{urlencode(query)}"}
    return render(request, "identity/signed_out.html", context)


def not_here(request, *args, **kwargs):
    """allauth's account-management pages (identity/urls.py says why none is the portal's)."""
    raise Http404


def provider_signup_refused(request):
    """Where allauth would ask a new provider user to sign up by hand: another account already has their e-mail
    address, and linking the two by it would hand that account to whoever controls the address at the provider."""
    context = {"provider": oidc.provider_label(), "reason": "email-in-use"}
    return render(request, "socialaccount/authentication_error.html", context, status=403)
