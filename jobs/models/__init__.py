"""The jobs app's models: a job and its timeline (`job`), what the sync mirrors of it from the cluster (`cluster`), and
what is kept around it — templates, start-time quotes, e-mails (`records`)."""

from .cluster import FINISHED_POD_PHASES, Pod, PodQuerySet, SyncState, Workload
from .job import TRANSITION_FIELDS, IllegalTransition, Job, JobEvent, JobQuerySet, Words, job_name_for
from .records import JobNotification, JobQuote, JobTemplate, JobTemplateQuerySet

__all__ = [
    "FINISHED_POD_PHASES",
    "IllegalTransition",
    "Job",
    "JobEvent",
    "JobNotification",
    "JobQuerySet",
    "JobQuote",
    "JobTemplate",
    "JobTemplateQuerySet",
    "Pod",
    "PodQuerySet",
    "SyncState",
    "TRANSITION_FIELDS",
    "Words",
    "Workload",
    "job_name_for",
]
