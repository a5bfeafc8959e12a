"""A real local Kubernetes control plane (etcd, kube-apiserver, controller-manager, scheduler) with KWOK's fake
GPU nodes, for development and tests. See devcluster/README.md."""
