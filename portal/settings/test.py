from .base import *  # noqa: F403

DEBUG = False
SECRET_KEY = "test-only-not-secret-reservoir"  # noqa: S105
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Tasks run eagerly unless a test opts into a real worker; on_commit still decides when they are sent.
CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
