import hashlib
from pathlib import Path

from .base import *  # noqa: F403
from .base import DATABASES
from .local_cluster import LOCAL_CLUSTER_ANNOTATIONS, LOCAL_CLUSTER_STORAGE_CLASSES

DEBUG = False
SECRET_KEY = "test-only-not-secret-reservoir"  # noqa: S105
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Tasks run eagerly unless a test opts into a real worker; on_commit still decides when they are sent.
CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
# Cluster tests drive the local cluster's run time and fake GPU telemetry through pod annotations.
POD_ANNOTATION_ALLOWLIST = LOCAL_CLUSTER_ANNOTATIONS
# The demo's class, and the classes cluster tests make for themselves (tests/teamdata).
VOLUME_STORAGE_CLASSES = [*LOCAL_CLUSTER_STORAGE_CLASSES, "rsv-test-*"]
# Each test process counts API rates in its own memory (cleared before every test, tests/conftest.py); the limits
# are set high so that only the tests about them meet them.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
THROTTLE_RATES = {"writes": "100000/minute", "job_submissions": "100000/minute"}
# The test database is named after the checkout too: a test session drops a test database of the same name when it
# starts (Django clobbers it without asking), so two checkouts on one machine (worktrees, a fresh CI clone beside a
# developer's) sharing `test_reservoir` dropped each other's in mid-run.
_CHECKOUT = hashlib.sha1(str(Path(__file__).resolve().parents[2]).encode()).hexdigest()[:8]  # noqa: S324 - a name
DATABASES["default"]["TEST"] = {"NAME": f"test_{DATABASES['default']['NAME']}_{_CHECKOUT}"}
