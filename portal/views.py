from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from . import preferences, selectors
from .models import Team


class LoginView(auth_views.LoginView):
    template_name = "portal/login.html"
    redirect_authenticated_user = True


class LogoutView(auth_views.LogoutView):
    pass


@login_required
def home(request):
    return render(request, "portal/home.html", {"teams": selectors.teams_for_overview(request.user)})


def healthz(request):
    """Liveness for process supervisors: answers without touching the database."""
    return JsonResponse({"status": "ok"})


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


@login_required
def team_list(request):
    teams = list(Team.objects.led_by(request.user).order_by("name"))
    if not teams:
        raise Http404("no team you lead")
    if len(teams) == 1:
        return redirect("portal:team_detail", slug=teams[0].slug)
    return render(request, "portal/team_list.html", {"teams": teams})


@login_required
def team_detail(request, slug: str):
    """A lead's page of their team: usage against quota and reservation, members, and the way to billing."""
    team = get_object_or_404(Team.objects.led_by(request.user), slug=slug)
    context = {"team": team, **selectors.team_usage(team, now=timezone.now())}
    return render(request, "portal/team_detail.html", context)
