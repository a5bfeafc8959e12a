SCHEDULE = {
    # Stale runs (queued while the worker was away) are dropped: the next one comes 15 s later.
    "converge-cluster-jobs": {"task": "jobs.converge", "schedule": 15.0, "options": {"expires": 15}},
    "spill-stuck-jobs": {"task": "jobs.spill_stuck_jobs", "schedule": 15.0},
}
