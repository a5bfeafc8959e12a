from .base import *  # noqa: F403
from .base import env
from .local_cluster import LOCAL_CLUSTER_ANNOTATIONS, LOCAL_CLUSTER_STORAGE_CLASSES

DEBUG = env.bool("DJANGO_DEBUG", default=True)
SECRET_KEY = env("DJANGO_SECRET_KEY", default="dev-only-not-secret-reservoir")
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
# The local cluster reads a job's run time and its fake GPU telemetry from pod annotations (devcluster/README.md).
POD_ANNOTATION_ALLOWLIST = env.list("RESERVOIR_POD_ANNOTATION_ALLOWLIST", default=LOCAL_CLUSTER_ANNOTATIONS)
VOLUME_STORAGE_CLASSES = env.list("RESERVOIR_VOLUME_STORAGE_CLASSES", default=LOCAL_CLUSTER_STORAGE_CLASSES)
