SCHEDULE = {
    # Stale runs (queued while the worker was away) are dropped: the next one comes 15 s later.
    "converge-cluster-jobs": {"task": "jobs.converge", "schedule": 15.0, "options": {"expires": 15}},
    "spill-stuck-jobs": {"task": "jobs.spill_stuck_jobs", "schedule": 15.0, "options": {"expires": 15}},
    # Keeps each queued job's start-time quote when the queue moved it (the job page's history); pages quote live.
    "record-quotes": {"task": "jobs.record_quotes", "schedule": 30.0, "options": {"expires": 30}},
    # Job e-mails whose task gave up or was lost (jobs/notifications.py): sent again, once each, for a day.
    "resend-job-mails": {"task": "jobs.resend_job_mails", "schedule": 60.0, "options": {"expires": 60}},
}
