"""Jobs: list and filter (the page's JobFilterSet), submit (201, queued or submitted, with the queue position),
cancel (202: the cluster's Job and pods are deleted by a task), resubmit, and the submitter's choice of e-mails
(PATCH `notify`). Members act on their teams' jobs; platform admins on all; anything else is 404."""

import logging

from django.db import DatabaseError
from django.db.models import Prefetch
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.filters import OrderingFilter
from rest_framework.response import Response

from portal import outage
from portal.api.base import FilterBackend
from portal.api.throttles import SubmissionRateThrottle

from .. import selectors, services
from ..choices import NOT_STARTED_STATES
from ..filters import JobFilterSet
from ..models import Job, JobEvent
from ..quote_selectors import worded_quotes
from . import listing
from .serializers import (
    LIST_ID,
    LIST_STATE,
    JobDetailSerializer,
    JobNotifySerializer,
    JobSerializer,
    JobSubmitSerializer,
    job_list_rows,
    job_list_values,
)

logger = logging.getLogger(__name__)


def _detail(job: Job) -> dict:
    job = (
        Job.objects.select_related("team", "pool", "submitted_by", "admitted_pool")
        .prefetch_related(Prefetch("events", queryset=JobEvent.objects.select_related("actor").order_by("at", "id")))
        .get(pk=job.pk)
    )
    job.queue_position = services.queue_position(job)
    gang = selectors.pods_of(job)
    job.pods_running, job.pod_rows = gang.running, gang.pods
    context = {"borrowed_gpus": selectors.borrowed_gpus([job]), "quotes": worded_quotes([job.pk])}
    return JobDetailSerializer(job, context=context).data


def _committed(job: Job, status_code: int) -> Response:
    """The answer to a submit, cancel or resubmit that has committed. Should the database fail while the details are
    read back, or anything else while they are put together (the quote, say), the write has still succeeded: answer
    so, with what is known, rather than an error that would make the caller try again and submit twice."""
    try:
        return Response(_detail(job), status=status_code)
    except Exception as error:  # noqa: BLE001 - whatever failed, the write stands: a 500 would be submitted again
        if not (isinstance(error, DatabaseError) and outage.is_database_unavailable(error)):
            logger.exception("job %s: the write committed, reading its details back failed", job.pk)
        return Response(
            {"id": job.pk, "state": job.state, "detail": _("Saved; details are unavailable for a moment.")},
            status=status_code,
        )


class JobViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    filterset_class = JobFilterSet
    ordering_fields = ["created_at", "state_changed_at", "priority", "gpus", "id"]
    ordering = ["-created_at", "-id"]

    def get_queryset(self):
        return (
            Job.objects.visible_to(self.request.user)
            .select_related("team", "pool", "submitted_by", "admitted_pool")
            .order_by("-created_at", "-id")
        )

    def get_throttles(self):
        throttles = super().get_throttles()
        if self.action in ("create", "resubmit"):
            throttles.append(SubmissionRateThrottle())
        return throttles

    def get_serializer_class(self):
        if self.action == "create":
            return JobSubmitSerializer
        return JobSerializer if self.action == "list" else JobDetailSerializer

    def list(self, request, *args, **kwargs):
        """The page of jobs as JobSerializer writes them (`job_list_rows`), each with the GPUs it borrows and, not
        running yet, its start-time quote (one computation each for the page).

        A JSON page is read with one statement of its own (jobs/api/listing.py: the page, its count and its borrowed
        GPUs, the same rows as the ORM's); the browsable API's page (its page controls need Django's paginator),
        `?page=last` and a filter the SQL does not know take the ORM's path, `_orm_page`."""
        # The FilterSet validates the query string; its queryset (the visible jobs) is built only on the ORM's path.
        unscoped = Job.objects.all()
        filterset = FilterBackend().valid_filterset(request, unscoped, self)
        filters = listing.filter_conditions(filterset) if filterset is not None else ([], [])
        requested = self.paginator.requested_page(request)
        if filters is None or requested is None or request.accepted_renderer.format != "json":
            return self._orm_page(self.filter_queryset(self.get_queryset()))
        number, size = requested
        ordering = OrderingFilter().get_ordering(request, unscoped, self)
        found = listing.jobs_page(
            request.user, conditions=filters[0], params=filters[1], ordering=ordering, number=number, size=size
        )
        data = self._rows(found.rows, found.borrowed_gpus)
        return self.paginator.known_page(number=number, size=size, count=found.count, results=data)

    def _orm_page(self, queryset):
        """`queryset` filtered and ordered by the filter backends, the id breaking ties as on the SQL path."""
        queryset = job_list_values(queryset.order_by(*listing.ordered(list(queryset.query.order_by))))
        rows = self.paginate_queryset(queryset)
        return self.get_paginated_response(self._rows(rows))

    def _rows(self, rows, borrowed=None):
        if borrowed is None:
            borrowed = selectors.borrowed_gpus([row[LIST_ID] for row in rows])
        quotes = worded_quotes(row[LIST_ID] for row in rows if row[LIST_STATE] in NOT_STARTED_STATES)
        return job_list_rows(rows, borrowed, quotes)

    def retrieve(self, request, *args, **kwargs):
        return Response(_detail(self.get_object()))

    @extend_schema(
        request=JobSubmitSerializer,
        responses={201: JobDetailSerializer},
        description=gettext_lazy(
            "Submit a job: it is saved as queued and sent to the cluster, where Kueue admits it when the team's "
            "quota has room (see queue_position and pending_reason)."
        ),
    )
    def create(self, request, *args, **kwargs):
        serializer = JobSubmitSerializer(data=request.data, context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        job = services.submit_job(
            team=data["team"], pool=data["pool"], user=request.user, spec=serializer.spec(), notify=data.get("notify")
        )
        return _committed(job, status.HTTP_201_CREATED)

    @extend_schema(
        request=JobNotifySerializer,
        responses={200: JobDetailSerializer},
        description=gettext_lazy(
            "Choose anew when the job's submitter is e-mailed about it (`notify`, the one field that can change): "
            "for its submitter only (403 for anyone else), while the job is not finished. It counts for the "
            "transitions still to come."
        ),
    )
    def partial_update(self, request, *args, **kwargs):
        serializer = JobNotifySerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        job = services.set_job_notify(
            job=self.get_object(), user=request.user, notify=serializer.validated_data["notify"]
        )
        return Response(_detail(job))

    @extend_schema(
        request=None,
        responses={202: JobDetailSerializer},
        description=gettext_lazy(
            "Cancel the job. Answers 202: a job already in the cluster has its Job and pods deleted by a task."
        ),
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        job = services.cancel_job(job=self.get_object(), user=request.user)
        return _committed(job, status.HTTP_202_ACCEPTED)

    @extend_schema(
        request=None, responses={201: JobDetailSerializer}, description=gettext_lazy("Submit a finished job again.")
    )
    @action(detail=True, methods=["post"])
    def resubmit(self, request, pk=None):
        job = services.resubmit_job(job=self.get_object(), user=request.user)
        return _committed(job, status.HTTP_201_CREATED)
