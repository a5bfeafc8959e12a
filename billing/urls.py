from django.urls import path

from . import views

app_name = "billing"
urlpatterns = [
    path("", views.billing_home, name="home"),
    path("pools/", views.pool_usage, name="pool_usage"),
    path("teams/<slug:slug>/", views.team_billing, name="team_billing"),
    path("teams/<slug:slug>/budget/", views.team_budget_set, name="team_budget_set"),
    path("teams/<slug:slug>/<str:month>/usage.csv", views.team_usage_csv, name="team_usage_csv"),
    path("teams/<slug:slug>/<str:month>/usage.json", views.team_usage_json, name="team_usage_json"),
    path("teams/<slug:slug>/invoices/<str:month>/", views.invoice_detail, name="invoice_detail"),
]
