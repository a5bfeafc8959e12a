SCHEDULE = {
    "reconcile-team-namespaces": {"task": "pools.reconcile_all_namespaces", "schedule": 60.0},
    "reconcile-node-taints": {"task": "pools.reconcile_node_taints", "schedule": 120.0},
}
