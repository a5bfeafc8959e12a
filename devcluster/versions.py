"""The pinned versions of everything the local control plane is built from: the one place to change them."""

KUBERNETES_VERSION = "v1.36.3"
# The staging modules of k8s.io/kubernetes (k8s.io/api, k8s.io/client-go, ...) are published as v0.<minor>.<patch>.
KUBERNETES_STAGING_VERSION = "v0.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
# Kueue, the admission engine; the newest version the Go module proxy serves here (go 1.25, k8s libraries v0.35).
KUEUE_VERSION = "v0.17.0"
# Helm renders and lints the portal's own chart (deploy/helm/reservoir); built into the same cache as kubectl.
HELM_VERSION = "v3.22.0"

KUBERNETES_MODULE = "k8s.io/kubernetes"
ETCD_MODULE = "go.etcd.io/etcd/server/v3"
KWOK_MODULE = "sigs.k8s.io/kwok"
KUEUE_MODULE = "sigs.k8s.io/kueue"
HELM_MODULE = "helm.sh/helm/v3"

# The Go toolchain these versions build with (their go.mod files say `go 1.26.0`).
GO_MINIMUM = (1, 26)

KUBERNETES_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
BINARIES = ("etcd", *KUBERNETES_COMMANDS, "kwok", "kueue", "helm")


def cache_dir_name() -> str:
    """Name of the versioned directory in the cache; a version bump of the control plane builds into a new one.

    Kueue's version is not part of the name: it was added to caches that already held the control plane, and it
    is rebuilt in place (alone) when the stamp or the binary's own build info names another version."""
    return f"k8s-{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}-kwok-{KWOK_VERSION}"
