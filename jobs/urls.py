from django.urls import path

from . import views

app_name = "jobs"
urlpatterns = [
    path("", views.job_list, name="job_list"),
    path("pending/", views.pending, name="pending"),
    path("submit/", views.job_submit, name="job_submit"),
    path("submit/preview/", views.job_submit_preview, name="job_submit_preview"),
    path("submit/take/", views.job_submit_take, name="job_submit_take"),
    path("templates/<int:pk>/delete/", views.template_delete, name="template_delete"),
    path("<int:pk>/", views.job_detail, name="job_detail"),
    path("<int:pk>/status/", views.job_status, name="job_status"),
    path("<int:pk>/logs/", views.job_logs, name="job_logs"),
    path("<int:pk>/events/", views.job_cluster_events, name="job_cluster_events"),
    path("<int:pk>/cancel/", views.job_cancel, name="job_cancel"),
    path("<int:pk>/resubmit/", views.job_resubmit, name="job_resubmit"),
    path("<int:pk>/notify/", views.job_notify, name="job_notify"),
]
