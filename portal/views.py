"""The portal's own pages: log-in (identity/views.py adds the provider's button, and signs out), the lock-out
answer and the language switch (the probes are in portal/health.py). The pages that gather several apps (home, a
team's page) are the dashboard's (`dashboard/views.py`)."""

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from . import preferences


class LoginView(auth_views.LoginView):
    template_name = "portal/login.html"
    redirect_authenticated_user = True


def locked_out(request, response=None, credentials=None):
    """django-axes' answer to a username and address locked out after too many failed log-ins (429)."""
    context = {
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "cooloff_minutes": max(1, int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)),
    }
    return render(request, "portal/locked_out.html", context, status=429)


@login_required
@require_POST
def set_language(request):
    """The language switcher: stored on the user (and in the cookie, for the login page)."""
    language = request.POST.get("language", "")
    next_url = request.POST.get("next") or "/"
    if not url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()}):
        next_url = "/"
    response = redirect(next_url)
    if language in dict(settings.LANGUAGES):
        preferences.set_user_language(user=request.user, language=language)
        response.set_cookie(settings.LANGUAGE_COOKIE_NAME, language, samesite="Lax")
    return response
