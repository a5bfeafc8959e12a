"""The taints of each pool's nodes are put back every minute, as docs/architecture.md's reconciler table says (and as
the namespaces and Kueue's objects are: PRODUCT.md, the projection is "reconciled on every change and every minute").

Users saw: pools/beat.py reconciled taints every 120 s, so a node the autoscaler added without its pool's taint, or a
taint removed by hand, left the pool open to other teams' pods for up to two minutes, not one."""

from pools.beat import SCHEDULE


def test_pool_node_taints_are_reconciled_every_minute():
    schedules = {entry["task"]: entry["schedule"] for entry in SCHEDULE.values()}
    assert schedules["pools.reconcile_node_taints"] <= 60.0, schedules["pools.reconcile_node_taints"]
