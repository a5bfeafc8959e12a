SCHEDULE = {
    "admit-queued-jobs": {"task": "jobs.admit_all_queued", "schedule": 30.0},
    "resend-unsubmitted-jobs": {"task": "jobs.resend_unsubmitted", "schedule": 300.0},
    "spill-stuck-jobs": {"task": "jobs.spill_stuck_jobs", "schedule": 15.0},
}
