"""The names and labels the portal gives its objects in a cluster, shared by every renderer in `cluster/`."""

GPU_RESOURCE = "nvidia.com/gpu"
LABEL_TEAM = "reservoir.io/team"
LABEL_POOL = "reservoir.io/pool"
LABEL_JOB_ID = "reservoir.io/job-id"
LABEL_ANTI_AFFINITY = "reservoir.io/anti-affinity-group"
# Carried by the pods of a multi-node job: they listen on the rendezvous port (see `render_network_policies`).
LABEL_GANG = "reservoir.io/gang"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "reservoir"
EBCLOUD_NODE_POOL = "scheduling.eks.ebcloud.com/node-pool"
EBCLOUD_ALLOW_SOFT = "scheduling.eks.ebcloud.com/allow-soft-placement"
RESOURCE_QUOTA_NAME = "reservoir-quota"
LIMIT_RANGE_NAME = "reservoir-limits"
PRIORITY_CLASSES = {0: "reservoir-low", 50: "reservoir-normal", 100: "reservoir-high"}
# Kueue: the LocalQueue every team namespace holds, and the labels that put a Job in it with a priority (the
# WorkloadPriorityClasses carry the same names and values as the PriorityClasses).
LOCAL_QUEUE_NAME = "reservoir"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
PRIORITY_VALUES = {"reservoir-low": 1000, "reservoir-normal": 5000, "reservoir-high": 10000}
# Every pod of a portal Job carries this finalizer (the Job's pod template sets it; the Job controller copies a
# template's finalizers to each pod, as it adds its own `batch.kubernetes.io/job-tracking` for the same reason): the
# pod cannot leave the apiserver until the cluster sync has recorded its end and takes the finalizer off
# (reconcile/sync.py). A pod that finishes and is deleted while nobody watches is still there, terminated, at the next
# list, so its GPU time ends at its own finish time, never at the time the portal happened to look.
USAGE_FINALIZER = "reservoir.io/usage"
# Set on a portal Job that Kueue has not taken (no Workload) a while after it was made: the change makes Kueue's Job
# controller look at it again (reconcile/jobs.py, "Jobs Kueue skipped").
NUDGED_ANNOTATION = "reservoir.io/nudged-at"
# The port of a gang's rendezvous (torchrun's TCPStore on pod 0), and the per-job token its pods are given.
RENDEZVOUS_PORT = 29500
RENDEZVOUS_TOKEN_ENV = "RESERVOIR_RENDEZVOUS_TOKEN"
