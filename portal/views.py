from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.shortcuts import render

from . import selectors


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
