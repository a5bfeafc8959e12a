"""A lead's pages for the team's volumes and secrets (platform admins too). They are listed on the team page;
registering, rotating and removing go through `teamdata.services`. A team the user does not lead is a 404."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables
from django.views.decorators.http import require_POST

from portal.models import Team

from . import services
from .forms import SecretForm, VolumeForm
from .models import TeamSecret, TeamVolume


def _led_team(request, slug: str) -> Team:
    return get_object_or_404(Team.objects.led_by(request.user), slug=slug)


@login_required
def volume_create(request, slug: str):
    team = _led_team(request, slug)
    form = VolumeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            volume = services.register_volume(
                team=team,
                user=request.user,
                name=data["name"],
                source=data["source"],
                size_gib=data["size_gib"],
                access_mode=data["access_mode"],
                storage_class=data["storage_class"],
                read_only_for_researchers=data["read_only_for_researchers"],
            )
        except ValidationError as error:
            form.add_service_errors(error)
        else:
            messages.success(
                request,
                _("Volume %(name)s registered; the portal is checking its claim in the cluster.")
                % {"name": volume.name},
            )
            return redirect(f"{team_url(team)}#team-data")
    status = 400 if request.method == "POST" else 200
    return render(request, "teamdata/volume_form.html", {"team": team, "form": form}, status=status)


@login_required
@require_POST
def volume_delete(request, slug: str, pk: int):
    team = _led_team(request, slug)
    volume = get_object_or_404(TeamVolume.objects.managed_by(request.user).filter(team=team), pk=pk)
    services.unregister_volume(volume=volume, user=request.user)
    messages.success(
        request, _("Volume %(name)s removed from the portal; the claim stays in the namespace.") % {"name": volume.name}
    )
    return redirect(f"{team_url(team)}#team-data")


@login_required
@require_POST
def volume_access(request, slug: str, pk: int):
    """Mark a volume read-only for researchers (`read_only=1`) or let them write again (`read_only=0`)."""
    team = _led_team(request, slug)
    volume = get_object_or_404(TeamVolume.objects.managed_by(request.user).filter(team=team), pk=pk)
    read_only = request.POST.get("read_only") == "1"
    services.set_read_only_for_researchers(volume=volume, user=request.user, read_only=read_only)
    text = (
        _("Volume %(name)s is read-only for researchers: their jobs mount it read-only.")
        if read_only
        else _("Researchers may write to volume %(name)s again.")
    )
    messages.success(request, text % {"name": volume.name})
    return redirect(f"{team_url(team)}#team-data")


def _secret_form_page(request, team: Team, *, rotating: TeamSecret | None):
    form = SecretForm(request.POST or None, rotating=rotating)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            secret = services.save_secret(
                team=team,
                user=request.user,
                name=rotating.name if rotating else data["name"],
                kind=rotating.kind if rotating else data["kind"],
                values=data["values"],
                registry=data["registry"],
                username=data["username"],
                password=data["password"],
                create_only=rotating is None,
            )
        except ValidationError as error:
            form.add_service_errors(error)
        else:
            text = (
                _("Secret %(name)s rotated: jobs started from now on get the new values.")
                if rotating
                else _("Secret %(name)s saved in the team namespace. Its values will not be shown again.")
            )
            messages.success(request, text % {"name": secret.name})
            return redirect(f"{team_url(team)}#team-data")
    form.blank_values()
    status = 400 if request.method == "POST" else 200
    context = {"team": team, "form": form, "rotating": rotating}
    return render(request, "teamdata/secret_form.html", context, status=status)


# The views that take a secret's values keep them out of error reports: the POST table (sensitive_post_parameters)
# and every frame's variables (sensitive_variables), even on a DEBUG 500 page (portal.error_reports).
SECRET_FIELDS = ("password", "values")


@login_required
@sensitive_post_parameters(*SECRET_FIELDS)
@sensitive_variables()
def secret_create(request, slug: str):
    return _secret_form_page(request, _led_team(request, slug), rotating=None)


@login_required
@sensitive_post_parameters(*SECRET_FIELDS)
@sensitive_variables()
def secret_rotate(request, slug: str, pk: int):
    team = _led_team(request, slug)
    secret = get_object_or_404(TeamSecret.objects.managed_by(request.user).filter(team=team), pk=pk)
    return _secret_form_page(request, team, rotating=secret)


@login_required
@require_POST
def secret_delete(request, slug: str, pk: int):
    team = _led_team(request, slug)
    secret = get_object_or_404(TeamSecret.objects.managed_by(request.user).filter(team=team), pk=pk)
    try:
        services.delete_secret(secret=secret, user=request.user)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, _("Secret %(name)s deleted.") % {"name": secret.name})
    return redirect(f"{team_url(team)}#team-data")


def team_url(team: Team) -> str:
    from django.urls import reverse

    return reverse("portal:team_detail", kwargs={"slug": team.slug})
