"""Job pages: list with filters, detail with live status, log tail and cluster events, submit with a live preview,
cancel and resubmit with confirmation, and the pending queue.

Every view reads through `Job.objects.visible_to(user)` (or `Team.objects.visible_to`), so a job outside the user's
teams answers 404 for pages and fragments alike; writes go through `jobs.services`.
"""

import logging
from urllib.parse import parse_qsl

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.core.validators import slug_re
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import pgettext
from django.views.decorators.http import require_POST

from cluster import live
from cluster.errors import ClusterError, describe
from pools.models import Pool
from portal import outage
from portal.choices import JobMail
from portal.htmx import render_page_or_partial
from portal.throttling import counts_as_submission, not_a_write
from teamdata.selectors import usable_by_team

from . import job_templates, notifications, quote_selectors, reasons, selectors, services
from .choices import FINAL_STATES, JobState
from .filters import JobFilterSet
from .forms import JobNotifyForm, JobSubmitForm
from .models import Job, JobTemplate
from .outlook import submit_outlook
from .quote_words import worded
from .specs import JobSpec

log = logging.getLogger(__name__)
JOBS_PER_PAGE = 25
LOG_LINES = 200
STATUS_POLL_SECONDS = 3
LIST_POLL_SECONDS = 10


def _visible_job(request, pk: int) -> Job:
    return get_object_or_404(
        Job.objects.visible_to(request.user).select_related("team", "pool", "submitted_by", "admitted_pool"), pk=pk
    )


def _querystring(request, **changes) -> str:
    query = request.GET.copy()
    for key, value in changes.items():
        query.pop(key, None)
        if value is not None:
            query[key] = value
    return query.urlencode()


# --- list --------------------------------------------------------------------------------------------------------


@login_required
def job_list(request):
    filterset = JobFilterSet(request.GET or None, queryset=selectors.jobs_for_list(request.user), request=request)
    page = Paginator(filterset.qs, JOBS_PER_PAGE).get_page(request.GET.get("page"))
    borrowed = selectors.borrowed_gpus(page.object_list)
    for job in page.object_list:
        job.borrowed_gpus = borrowed.get(job.pk, 0)
    context = {
        "filterset": filterset,
        "page": page,
        "querystring": _querystring(request, page=None),
        "state_choices": JobState.choices,
        "chosen_states": request.GET.getlist("state"),
        "now": timezone.now(),
        "refresh": LIST_POLL_SECONDS,
    }
    return render_page_or_partial(request, "jobs/job_list.html", "jobs/partials/job_table.html", context)


# --- detail and its fragments ----------------------------------------------------------------------------------


def _detail_context(job: Job) -> dict:
    steps, events = selectors.timeline(job)
    job.borrowed_gpus = selectors.borrowed_gpus([job]).get(job.pk, 0)
    return {
        "borrowed_note": reasons.borrowed_note(job.borrowed_gpus),
        "job": job,
        "steps": steps,
        "events": events,
        "placement": selectors.placement_of(job),
        "queue_position": services.queue_position(job),
        "pending_in_words": selectors.waiting_reason(job),
        "command_line": " ".join([*job.command, *job.args]),
        "now": timezone.now(),
        "poll": STATUS_POLL_SECONDS,
        "gang": selectors.pods_of(job),
        "quote": _quote_of(job),
    }


def _quote_of(job: Job):
    """The job's start-time quote in words while it is not running yet (None once it runs or is final)."""
    if job.state == JobState.RUNNING or job.state in FINAL_STATES:
        return None
    return quote_selectors.worded_quotes([job.pk]).get(job.pk)


@login_required
def job_detail(request, pk: int):
    from monitoring.selectors import job_gpu_utilisation

    job = _visible_job(request, pk)
    context = _detail_context(job)
    context["gpu_utilisation"] = job_gpu_utilisation(job)
    context["quote_history"] = quote_selectors.quote_history(job)
    context["mails_sent"] = notifications.sent(job)
    context["notify_words"] = pgettext("list separator", ", ").join(str(JobMail(kind).label) for kind in job.notify)
    if job.submitted_by_id == request.user.pk and not job.is_final:
        context["notify_form"] = JobNotifyForm(initial={"notify": job.notify})
    return render(request, "jobs/job_detail.html", context)


@login_required
@require_POST
def job_notify(request, pk: int):
    """The submitter's choice of e-mails about the job (403 for anyone else who may see it)."""
    job = _visible_job(request, pk)
    form = JobNotifyForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(form.errors["notify"]))
        return redirect("jobs:job_detail", pk=job.pk)
    try:
        services.set_job_notify(job=job, user=request.user, notify=form.cleaned_data["notify"])
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, _("E-mails about job #%(id)d saved.") % {"id": job.pk})
    return redirect("jobs:job_detail", pk=job.pk)


@login_required
def job_status(request, pk: int):
    """The status panel, polled every few seconds while the job can still change; 286 stops the polling."""
    job = _visible_job(request, pk)
    return render_page_or_partial(
        request,
        "jobs/job_detail.html",
        "jobs/partials/job_status.html",
        _detail_context(job),
        stop_polling=job.is_final,
    )


@login_required
def job_logs(request, pk: int):
    """The last lines the job's pod wrote, read from the cluster; a clear message when there are none."""
    job = _visible_job(request, pk)
    placement = selectors.placement_of(job)
    context = {
        "job": job,
        "placement": placement,
        "lines": LOG_LINES,
        "log_text": None,
        "log_message": "",
        "cluster_says": "",
    }
    if not placement.pod_name:
        context["log_message"] = (
            _("The job never had a pod in the cluster, so there is no log.")
            if job.is_final
            else _("No pod yet: the log appears once the job's pod starts.")
        )
    else:
        try:
            text = live.log_tail(job.team.namespace, placement.pod_name, max_lines=LOG_LINES)
        except Exception as error:  # noqa: BLE001 - any failure of the cluster call is shown, not raised
            log.info("log tail of job %s unavailable: %s", job.pk, error)
            why = str(error) if isinstance(error, ClusterError) else describe(error)
            context["log_message"] = _("Logs are not available from the cluster.")
            context["cluster_says"] = why  # verbatim, on its own line
        else:
            if text:
                context["log_text"] = text
            else:
                context["log_message"] = _("The pod has not written any output yet.")
    return render_page_or_partial(request, "jobs/job_logs.html", "jobs/partials/job_logs.html", context)


@login_required
def job_cluster_events(request, pk: int):
    """Kubernetes events of the job's Job object and pod (scheduling, pulling, failures), newest last."""
    job = _visible_job(request, pk)
    placement = selectors.placement_of(job)
    events, message = [], ""
    try:
        events = live.events_for(job.team.namespace, "Job", job.job_name)
        if placement.pod_name:
            events = live.oldest_first(events + live.events_for(job.team.namespace, "Pod", placement.pod_name))
    except Exception as error:  # noqa: BLE001 - shown to the user instead of failing the page
        why = str(error) if isinstance(error, ClusterError) else describe(error)
        message = _("Cluster events are not available: %(why)s") % {"why": why}
    context = {"job": job, "cluster_events": events, "cluster_events_message": message}
    return render_page_or_partial(request, "jobs/job_events.html", "jobs/partials/job_cluster_events.html", context)


def _done(request, url: str):
    """After a write: htmx follows HX-Redirect, a plain form post a 302."""
    if getattr(request, "htmx", False):
        return HttpResponse(status=200, headers={"HX-Redirect": url})
    return redirect(url)


@login_required
def job_cancel(request, pk: int):
    job = _visible_job(request, pk)
    if request.method != "POST":
        return render(request, "jobs/job_confirm.html", {"job": job, "action": "cancel"})
    try:
        services.cancel_job(job=job, user=request.user)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, _("Job #%(id)d cancelled.") % {"id": job.pk})
    return _done(request, reverse("jobs:job_detail", args=[job.pk]))


@login_required
@counts_as_submission
def job_resubmit(request, pk: int):
    job = _visible_job(request, pk)
    if request.method != "POST":
        return render(request, "jobs/job_confirm.html", {"job": job, "action": "resubmit"})
    try:
        new_job = services.resubmit_job(job=job, user=request.user)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
        return _done(request, reverse("jobs:job_detail", args=[job.pk]))
    messages.success(request, _("Resubmitted as job #%(id)d.") % {"id": new_job.pk})
    return _done(request, reverse("jobs:job_detail", args=[new_job.pk]))


# --- submit ------------------------------------------------------------------------------------------------------


def _initial(request) -> dict:
    """Start from a saved template (?template=<id>) or another job's spec (?from=<job id>) the user may see."""
    if template_id := request.GET.get("template", "").strip():
        template = get_object_or_404(
            selectors.templates_for(request.user), pk=template_id if template_id.isdigit() else 0
        )
        return JobSubmitForm.initial_from(spec=template.spec, team=template.team, pool=template.pool)
    if job_id := request.GET.get("from", "").strip():
        job = get_object_or_404(
            Job.objects.visible_to(request.user).select_related("team", "pool"), pk=job_id if job_id.isdigit() else 0
        )
        return JobSubmitForm.initial_from(spec=JobSpec.from_job(job).as_model_fields(), team=job.team, pool=job.pool)
    teams = list(request.user.teams.order_by("name")[:2]) if not request.user.is_admin else []
    return {"team": teams[0].slug} if len(teams) == 1 else {}


def _outlook(form: JobSubmitForm, user):
    if not form.is_valid():
        return None
    data = form.cleaned_data
    return submit_outlook(team=data["team"], pool=data["pool"], spec=form.spec(), user=user)


def _preview_quote(outlook) -> dict | None:
    """When the typed job would start (`quote_preview.preview_quote`, which the outlook read its start off) and the
    alternatives that start sooner, in words; None while the form is incomplete or the job can never fit."""
    preview = outlook.preview if outlook is not None else None
    if preview is None:
        return None
    return {
        "quote": worded(preview.quote),
        "alternatives": [
            {"label": each.label, "take": each.take_value, "price": each.price_words, "quote": worded(each.quote)}
            for each in preview.alternatives
        ],
    }


def _preview_notes(form: JobSubmitForm) -> tuple[str, list[str]]:
    """What the preview says while the form is incomplete: the fields still to fill in (never an error for a field
    nobody has typed in yet) and the problems of what was typed. Form-wide problems wait until nothing is missing."""
    if not form.is_bound or form.is_valid():
        return "", []
    to_fill, problems = [], []
    for name, errors in form.errors.as_data().items():
        if name == "__all__":
            continue
        field = form.fields[name]
        if all(error.code == "required" for error in errors):
            to_fill.append(str(field.label))
        else:
            problems.extend(f"{field.label}: {message}" for error in errors for message in error.messages)
    if not to_fill:
        problems.extend(form.non_field_errors())
    return pgettext("list separator", ", ").join(to_fill), problems


def _answer_committed_submit(request, job: Job, *, data: dict, spec: JobSpec) -> None:
    """The messages of a submit that has committed: the template asked for, then the job's queue position. Should the
    database fail meanwhile (or anything else), the job still stands: say it is saved, rather than an error page that
    would have the user submit it again (as the API's `_committed`). Messages live in a cookie, not the database."""
    template_name = data["save_as_template"]
    try:
        if template_name:
            job_templates.save_template(
                team=data["team"], pool=data["pool"], name=template_name, spec=spec, user=request.user
            )
            messages.info(request, _("Saved as template “%(name)s”.") % {"name": template_name})
            template_name = ""
        if job.state == JobState.QUEUED:
            text = _("Job #%(id)d queued at position %(k)d: Kueue admits it when the quota has room.") % {
                "id": job.pk,
                "k": services.queue_position(job) or 1,
            }
        else:
            text = _("Job #%(id)d submitted to the cluster.") % {"id": job.pk}
    except Exception as error:  # noqa: BLE001 - whatever failed, the job stands: an error would be submitted again
        if not outage.is_database_unavailable(error):
            log.exception("job %s: the submit committed, what followed failed", job.pk)
        text = _("Job #%(id)d saved; its details are unavailable for a moment.") % {"id": job.pk}
        if template_name:
            messages.warning(
                request,
                _("The template “%(name)s” was not saved: save it again in a moment.") % {"name": template_name},
            )
    messages.success(request, text)


@login_required
@counts_as_submission
def job_submit(request):
    if request.method == "POST":
        form = JobSubmitForm(request.POST, user=request.user)
        if form.is_valid():
            data = form.cleaned_data
            spec = form.spec()
            try:
                job = services.submit_job(
                    team=data["team"], pool=data["pool"], user=request.user, spec=spec, notify=data["notify"]
                )
            except ValidationError as error:
                form.add_spec_errors(error)
            else:
                _answer_committed_submit(request, job, data=data, spec=spec)
                return redirect("jobs:job_detail", pk=job.pk)
        outlook = None
    else:
        form = JobSubmitForm(initial=_initial(request), user=request.user)
        outlook = None
    context = {"form": form, "outlook": outlook, "templates": selectors.templates_for(request.user)}
    context["team_data"] = usable_by_team(request.user)
    return render(request, "jobs/job_submit.html", context, status=400 if form.errors else 200)


@login_required
@require_POST
@not_a_write
def job_submit_preview(request):
    """The manifest, the quota after submission and the expected start, for what is typed so far."""
    form = JobSubmitForm(request.POST, user=request.user)
    to_fill, problems = _preview_notes(form)
    outlook = _outlook(form, request.user)
    context = {
        "form": form,
        "outlook": outlook,
        "quote": _preview_quote(outlook),
        "to_fill": to_fill,
        "problems": problems,
        "templates": selectors.templates_for(request.user),
    }
    if not request.htmx:
        context["team_data"] = usable_by_team(request.user)
    return render_page_or_partial(request, "jobs/job_submit.html", "jobs/partials/submit_preview.html", context)


# What an alternative of the preview may change: the fields `quote_preview.preview_quote` varies.
TAKEABLE_FIELDS = ("gpus", "placement", "pool", "max_run_minutes")


@login_required
@require_POST
@not_a_write
def job_submit_take(request):
    """One click on an alternative of the preview: the submit form again, as typed, with the alternative's change
    (`take`, e.g. "placement=soft") filled in. Nothing is submitted: the researcher reviews and submits."""
    data = request.POST.copy()
    for name, value in parse_qsl(request.POST.get("take", "")):
        if name in TAKEABLE_FIELDS:
            data[name] = value
    data.pop("take", None)
    form = JobSubmitForm(data, user=request.user)
    context = {"form": form, "outlook": None, "templates": selectors.templates_for(request.user)}
    context["team_data"] = usable_by_team(request.user)
    return render(request, "jobs/job_submit.html", context)


@login_required
@require_POST
def template_delete(request, pk: int):
    template = get_object_or_404(JobTemplate.objects.visible_to(request.user), pk=pk)
    job_templates.delete_template(template=template, user=request.user)
    messages.success(request, _("Template “%(name)s” deleted.") % {"name": template.name})
    return redirect("jobs:job_submit")


# --- pending -----------------------------------------------------------------------------------------------------


@login_required
def pending(request):
    pool = None
    if slug := request.GET.get("pool"):
        if not slug_re.fullmatch(slug):  # no pool has it (and a NUL byte would not reach the database)
            raise Http404
        pool = get_object_or_404(Pool.objects.visible_to(request.user), slug=slug)
    overview = selectors.pending_overview(request.user, pool=pool, page_number=request.GET.get("page"))
    # Quotes for the viewer's own queued jobs (other teams' rows carry no job id: nothing of theirs), read for every
    # such job, not only this page's: the same queries whichever rows the page shows.
    quotes = quote_selectors.worded_quotes(
        [row.job_id for row in overview.page.paginator.object_list if row.kind == "queued" and row.job_id],
        shown=[row.job_id for row in overview.page if row.job_id],
    )
    for row in overview.page:
        row.quote = quotes.get(row.job_id)
    context = {
        "overview": overview,
        "pool": pool,
        "querystring": _querystring(request, page=None),
        "refresh": LIST_POLL_SECONDS,
        "now": timezone.now(),
    }
    return render_page_or_partial(request, "jobs/pending.html", "jobs/partials/pending_table.html", context)
