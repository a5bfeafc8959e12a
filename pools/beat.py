# A reservation that starts or ends reaches Kueue within this many seconds (see reconcile.kueue).
KUEUE_BOUNDARY_CHECK_SECONDS = 5.0

SCHEDULE = {
    "reconcile-team-namespaces": {"task": "pools.reconcile_all_namespaces", "schedule": 60.0},
    "reconcile-node-taints": {"task": "pools.reconcile_node_taints", "schedule": 60.0},
    "reconcile-kueue": {"task": "pools.reconcile_kueue", "schedule": 60.0},
    "reconcile-kueue-at-reservation-boundary": {
        "task": "pools.reconcile_kueue_at_reservation_boundary",
        "schedule": KUEUE_BOUNDARY_CHECK_SECONDS,
    },
}
