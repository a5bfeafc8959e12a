from django.urls import path

from . import views

app_name = "teamdata"
urlpatterns = [
    path("<slug:slug>/volumes/new/", views.volume_create, name="volume_create"),
    path("<slug:slug>/volumes/<int:pk>/delete/", views.volume_delete, name="volume_delete"),
    path("<slug:slug>/volumes/<int:pk>/access/", views.volume_access, name="volume_access"),
    path("<slug:slug>/secrets/new/", views.secret_create, name="secret_create"),
    path("<slug:slug>/secrets/<int:pk>/rotate/", views.secret_rotate, name="secret_rotate"),
    path("<slug:slug>/secrets/<int:pk>/delete/", views.secret_delete, name="secret_delete"),
]
