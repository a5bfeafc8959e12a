"""The reconcilers: one module per kind of cluster object the portal owns or mirrors, above the domain apps and below
the web shell (docs/architecture.md).

- namespaces.py: each team's Namespace, ResourceQuota, LimitRange and NetworkPolicies;
- kueue.py: Kueue's ResourceFlavors, WorkloadPriorityClasses, ClusterQueues and LocalQueues;
- taints.py: the taints of each pool's nodes;
- jobs.py: each portal job's Kubernetes Job (create, delete, converge);
- sync.py: the pods, Workloads, Jobs and nodes the cluster reports, mirrored into the database (the watch);
- volumes.py: each team volume's PersistentVolumeClaim.

Each is shaped the same way: the desired state read from the database (the domain's selectors and
`pools.projection`), the observed state from `cluster/`, one apply; the tasks that run them are in tasks.py, on the
one retry policy of `portal.retry`."""
