SCHEDULE = {
    "spill-stuck-jobs": {"task": "jobs.spill_stuck_jobs", "schedule": 15.0},
}
