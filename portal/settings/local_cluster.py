"""Pod annotations the local cluster (devcluster: KWOK and its fake DCGM exporter) reads, allowed in development
and tests: how long a pod "runs" and the GPU telemetry the exporter reports for it."""

LOCAL_CLUSTER_ANNOTATIONS = [
    "pod-complete.stage.kwok.x-k8s.io/delay",
    "pod-complete.stage.kwok.x-k8s.io/jitter-delay",
    "pod-container-running-failed.stage.kwok.x-k8s.io/delay",
    "pod-container-running-failed.stage.kwok.x-k8s.io/exit-code",
    "dcgm.reservoir.dev/*",
]
