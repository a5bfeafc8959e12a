"""What development and tests allow on the local cluster (devcluster): the pod annotations KWOK and its fake DCGM
exporter read (how long a pod "runs" and the GPU telemetry the exporter reports for it), and the storage class of
its team volumes."""

LOCAL_CLUSTER_ANNOTATIONS = [
    "pod-complete.stage.kwok.x-k8s.io/delay",
    "pod-complete.stage.kwok.x-k8s.io/jitter-delay",
    "pod-terminate.stage.kwok.x-k8s.io/delay",
    "pod-container-running-failed.stage.kwok.x-k8s.io/delay",
    "pod-container-running-failed.stage.kwok.x-k8s.io/exit-code",
    "dcgm.reservoir.dev/*",
]

# devcluster/topologies/demo.yaml's class (volumes made ahead of time, each assigned to a demo team).
LOCAL_CLUSTER_STORAGE_CLASSES = ["local-data"]
