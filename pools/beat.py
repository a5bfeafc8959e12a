# A reservation that starts or ends reaches Kueue within this many seconds (see reconcile.kueue).
KUEUE_BOUNDARY_CHECK_SECONDS = 5.0

# Each run only repeats the next one: a run that waited in the queue longer than its period (the cluster worker away)
# is dropped instead of delaying new work when the worker is back.
SCHEDULE = {
    "reconcile-team-namespaces": {
        "task": "pools.reconcile_all_namespaces",
        "schedule": 60.0,
        "options": {"expires": 60},
    },
    "reconcile-node-taints": {"task": "pools.reconcile_node_taints", "schedule": 60.0, "options": {"expires": 60}},
    "reconcile-kueue": {"task": "pools.reconcile_kueue", "schedule": 60.0, "options": {"expires": 60}},
    "reconcile-kueue-at-reservation-boundary": {
        "task": "pools.reconcile_kueue_at_reservation_boundary",
        "schedule": KUEUE_BOUNDARY_CHECK_SECONDS,
        "options": {"expires": KUEUE_BOUNDARY_CHECK_SECONDS},
    },
}
