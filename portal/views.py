"""The portal's own pages: log-in (identity/views.py adds the provider's button, and signs out), the lock-out
answer, the language switch and a user's preferences (the probes are in portal/health.py). The pages that gather
several apps (home, a team's page) are the dashboard's (`dashboard/views.py`)."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import HttpResponseRedirect
from django.shortcuts import redirect, render
from django.utils import translation
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from . import preferences
from .forms import PreferencesForm


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
    # A path of this site only: anything else (another host, or a word `redirect` would take for a view's name and
    # fail to reverse) goes home.
    if not next_url.startswith("/") or not url_has_allowed_host_and_scheme(
        next_url, allowed_hosts={request.get_host()}
    ):
        next_url = "/"
    response = HttpResponseRedirect(next_url)
    if language in dict(settings.LANGUAGES):
        preferences.set_user_language(user=request.user, language=language)
        response.set_cookie(settings.LANGUAGE_COOKIE_NAME, language, samesite="Lax")
    return response


@login_required
def preferences_page(request):
    """The user's own preferences: the portal's language, and the e-mails new jobs ask for (jobs/notifications.py),
    beside the address they go to (the identity provider's, or the one an admin set)."""
    user = request.user
    initial = {"language": user.language, "notify_default": user.notify_default}
    form = PreferencesForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            with transaction.atomic():
                preferences.set_user_language(user=user, language=form.cleaned_data["language"])
                preferences.set_notify_default(user=user, notify=form.cleaned_data["notify_default"])
        except ValidationError as error:
            form.add_service_errors(error)
        else:
            translation.activate(user.language)
            messages.success(request, _("Preferences saved."))
            response = redirect("portal:preferences")
            response.set_cookie(settings.LANGUAGE_COOKIE_NAME, user.language, samesite="Lax")
            return response
    return render(request, "portal/preferences.html", {"form": form}, status=400 if form.errors else 200)
