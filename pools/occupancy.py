"""Occupancy and fragmentation of pools, computed in one SQL query from synced state.

Per node: allocatable GPUs (0 unless Ready and schedulable) minus the GPUs of pods bound to it that have not
terminated = free GPUs. Allocated GPUs are those of Ready nodes, of the same live capacity; pods still bound to a
NotReady node (they stay until it returns or they are deleted) are counted apart (`held_not_ready`). A k-GPU job
needs k free GPUs on one node, so the pool fits Σ ⌊free/k⌋ such jobs; the
free GPUs left over, Σ free − k·fits(k), are *stranded* for size k: free, but useless to a k-GPU job.

A multi-node job of N nodes × G GPUs (a gang: one pod per node, all or none) fits now when at least N nodes each have
G free GPUs: `nodes_with_free(G)` is the largest such N, per size it is the largest gang of G-GPU pods that would
start now (`gang_fit` says it for one job). The query keeps every node's free GPUs for that (`node_free`).
"""

from dataclasses import dataclass, field

from django.db import connection

JOB_SIZES = (1, 2, 4, 8)

_SQL = """
WITH used AS (
    SELECT node_name, SUM(gpus) AS gpus
    FROM jobs_pod
    WHERE scheduled AND phase IN ('Pending', 'Running') AND node_name <> ''
    GROUP BY node_name
), nodes AS (
    SELECT n.pool_id,
           n.ready,
           n.gpu_allocatable AS allocatable,
           COALESCE(u.gpus, 0) AS used,
           CASE WHEN n.ready AND NOT n.unschedulable
                THEN GREATEST(n.gpu_allocatable - COALESCE(u.gpus, 0), 0) ELSE 0 END AS free
    FROM pools_node n
    LEFT JOIN used u ON u.node_name = n.name
    WHERE n.pool_id IS NOT NULL
)
SELECT pool_id,
       COUNT(*) FILTER (WHERE ready) AS nodes_ready,
       COUNT(*) FILTER (WHERE NOT ready) AS nodes_not_ready,
       COALESCE(SUM(allocatable) FILTER (WHERE ready), 0) AS live_gpus,
       COALESCE(SUM(used) FILTER (WHERE ready), 0) AS allocated,
       COALESCE(SUM(used) FILTER (WHERE NOT ready), 0) AS held_not_ready,
       COALESCE(SUM(free), 0) AS free,
       COALESCE(MAX(free), 0) AS largest_free_block,
       {fits},
       COALESCE(ARRAY_AGG(free ORDER BY free DESC) FILTER (WHERE free > 0), '{{}}') AS node_free
FROM nodes
GROUP BY pool_id
"""


@dataclass(frozen=True)
class Occupancy:
    pool_id: int
    nodes_ready: int = 0
    nodes_not_ready: int = 0
    live_gpus: int = 0
    allocated: int = 0  # GPUs of pods bound to Ready nodes: of `live_gpus`, as `free` is
    free: int = 0
    largest_free_block: int = 0
    fits: dict[int, int] = field(default_factory=lambda: dict.fromkeys(JOB_SIZES, 0))
    node_free: tuple[int, ...] = ()  # free GPUs of each node that has some, largest first
    held_not_ready: int = 0  # GPUs of pods still bound to NotReady nodes (lost with them until they return)

    def nodes_with_free(self, gpus: int) -> int:
        """Nodes with at least `gpus` free GPUs: the largest N for which an N × `gpus` job fits now."""
        return nodes_with_free(self.node_free, gpus)

    @property
    def gang_nodes_by_size(self) -> dict[int, int]:
        return {size: self.nodes_with_free(size) for size in JOB_SIZES}

    def stranded(self, size: int) -> int:
        """Free GPUs that a job of `size` GPUs cannot use."""
        return self.free - size * self.fits[size]

    @property
    def stranded_by_size(self) -> dict[int, int]:
        return {size: self.stranded(size) for size in JOB_SIZES}


def pool_occupancy(pool_ids: list[int] | None = None) -> dict[int, Occupancy]:
    """Occupancy of every pool with nodes (pools without nodes are absent: callers default to zeros)."""
    fits = ", ".join(f"COALESCE(SUM(free / {size}), 0) AS fits_{size}" for size in JOB_SIZES)
    sql = _SQL.format(fits=fits)
    params: list = []
    if pool_ids is not None:
        sql = sql.replace("WHERE n.pool_id IS NOT NULL", "WHERE n.pool_id = ANY(%s)")
        params.append(list(pool_ids))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        columns = [c.name for c in cursor.description]
        rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    result = {}
    for row in rows:
        result[row["pool_id"]] = Occupancy(
            pool_id=row["pool_id"],
            nodes_ready=row["nodes_ready"],
            nodes_not_ready=row["nodes_not_ready"],
            live_gpus=int(row["live_gpus"]),
            allocated=int(row["allocated"]),
            held_not_ready=int(row["held_not_ready"]),
            free=int(row["free"]),
            largest_free_block=int(row["largest_free_block"]),
            fits={size: int(row[f"fits_{size}"]) for size in JOB_SIZES},
            node_free=tuple(int(free) for free in row["node_free"]),
        )
    return result


def nodes_with_free(node_free: "tuple[int, ...] | list[int]", gpus: int) -> int:
    """How many of the nodes (their free GPUs `node_free`) have at least `gpus` free."""
    return sum(1 for free in node_free if free >= gpus)


@dataclass(frozen=True)
class GangFit:
    """Whether a job of `nodes` pods of `gpus` GPUs each (one pod per node) fits a pool now."""

    nodes: int
    gpus: int
    nodes_with_room: int  # nodes with at least `gpus` free GPUs

    @property
    def fits(self) -> bool:
        return self.nodes_with_room >= self.nodes

    @property
    def nodes_missing(self) -> int:
        return max(self.nodes - self.nodes_with_room, 0)


def gang_fit(occupancy: Occupancy, *, nodes: int, gpus: int) -> GangFit:
    return GangFit(nodes=nodes, gpus=gpus, nodes_with_room=occupancy.nodes_with_free(gpus))
