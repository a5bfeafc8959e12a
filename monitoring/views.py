from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render

from portal.htmx import render_page_or_partial

from . import selectors
from .models import Alert


@login_required
def alert_list(request):
    """Firing, pending and past alerts the user may see; the active part refreshes itself every 10 s."""
    context = {
        **selectors.alerts_page(request.user, history_page=request.GET.get("page")),
        "rules": selectors.rules_in_effect(request.user),
    }
    return render_page_or_partial(
        request, "monitoring/alert_list.html", "monitoring/partials/active_alerts.html", context
    )


@login_required
def alert_detail(request, pk: int):
    alert = get_object_or_404(
        Alert.objects.visible_to(request.user).select_related("pool", "team", "job", "rule"), pk=pk
    )
    return render(
        request,
        "monitoring/alert_detail.html",
        {"alert": alert, "notifications": list(alert.notifications.all())},
    )
