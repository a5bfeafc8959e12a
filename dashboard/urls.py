"""The root URLs. The portal's own pages and the dashboard's keep the URL namespace `portal` (`portal:home`,
`portal:team_detail`...) they had before the dashboard was its own app; each app's pages and API are included."""

from django.contrib import admin
from django.contrib.auth.decorators import login_required
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from identity import views as identity_views
from monitoring.metrics import metrics_view
from portal import health
from portal import views as portal_views

from . import views

portal_patterns = (
    [
        path("", views.home, name="home"),
        path("login/", identity_views.LoginView.as_view(), name="login"),
        path("logout/", identity_views.logout_view, name="logout"),
        path("healthz", health.healthz, name="healthz"),
        path("readyz", health.readyz, name="readyz"),
        path("language/", portal_views.set_language, name="set_language"),
        path("preferences/", portal_views.preferences_page, name="preferences"),
        path("teams/", views.team_list, name="team_list"),
        path("teams/<slug:slug>/", views.team_detail, name="team_detail"),
        path("teams/<slug:slug>/quota-requests/", views.team_quota_request, name="team_quota_request"),
        path(
            "teams/<slug:slug>/reservations/<int:pk>/lending/",
            views.team_reservation_lending,
            name="team_reservation_lending",
        ),
        path(
            "teams/<slug:slug>/quota-requests/<int:pk>/withdraw/",
            views.team_quota_request_withdraw,
            name="team_quota_request_withdraw",
        ),
    ],
    "portal",
)

urlpatterns = [
    # The REST API first: its requests are the most frequent, and none of the pages' routes starts with api/v1/.
    path("api/v1/", include("dashboard.api.urls")),
    path("", include(portal_patterns)),
    # Sign-in through the OpenID Connect provider: identity's stricter views first, then allauth's own pages.
    path("", include("identity.urls")),
    path("accounts/", include("allauth.urls")),
    path("teams/", include("teamdata.urls")),
    path("pools/", include("pools.urls")),
    path("jobs/", include("jobs.urls")),
    path("billing/", include("billing.urls")),
    path("alerts/", include("monitoring.urls")),
    path("metrics", metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # Signed-in users only (a browser is sent to the log-in page); the split view serves its start-up script as a
    # file, so the Content-Security-Policy needs no inline script.
    path(
        "api/docs/",
        login_required(
            SpectacularSwaggerSplitView.as_view(url_name="api-schema", template_name="dashboard/api_docs.html")
        ),
        name="api-docs",
    ),
    path("i18n/", include("django.conf.urls.i18n")),
]
