from django.urls import path

from . import views

app_name = "pools"
urlpatterns = [
    path("", views.pool_list, name="pool_list"),
    path("<slug:slug>/", views.pool_detail, name="pool_detail"),
]
