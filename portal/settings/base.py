"""Settings shared by every environment; every value that differs between machines comes from the environment."""

import socket
from datetime import timedelta
from pathlib import Path

import environ
from csp.constants import NONE, SELF, UNSAFE_INLINE
from kombu import Queue

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()

SECRET_KEY = env("DJANGO_SECRET_KEY", default="")
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1"])
# The pod's own address is an allowed host too (the Helm chart sets it from the downward API): Prometheus scrapes each
# web pod's /metrics at http://<pod IP>:8000, with that address as Host. An IPv6 one is written in brackets there.
_POD_IP = env("RESERVOIR_POD_IP", default="")
if _POD_IP:
    ALLOWED_HOSTS = [*ALLOWED_HOSTS, f"[{_POD_IP}]" if ":" in _POD_IP else _POD_IP]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    "django_filters",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "csp",
    "portal",
    "pools",
    "jobs",
    "billing",
    "monitoring",
    "teamdata",
    "identity",
    "reconcile",
    "dashboard",
    "axes",
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
]

MIDDLEWARE = [
    "monitoring.middleware.RequestMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # gzip, after every middleware that reads or writes the body; see portal/compression.py for BREACH.
    "portal.compression.CompressionMiddleware",
    "portal.middleware.ContentSecurityPolicyMiddleware",
    # The frame and policy headers are set on every answer, the 503 of an outage below included.
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Outside every middleware that may touch the database or the cache (sessions, authentication, allauth, axes).
    "portal.outage.DatabaseUnavailableMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "portal.middleware.SessionLifetimeMiddleware",
    "portal.middleware.UserLanguageMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "portal.middleware.HtmxSignInMiddleware",
    # Every page's write throttled like the API's (after authentication and the CSRF check).
    "portal.throttling.WriteThrottleMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    # Last, as django-axes asks: it turns a lockout into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "dashboard.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.i18n",
                "dashboard.context_processors.navigation",
            ],
        },
    },
]

DATABASES = {
    "default": env.db("DATABASE_URL", default="postgres://reservoir:reservoir@127.0.0.1:5432/reservoir"),
}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
# A kept connection is checked before a request uses it: after a PostgreSQL restart the first request gets a new
# one instead of an error. The check makes a round trip only when the server has written something on the idle
# connection (portal/database/base.py: Django's PostgreSQL backend otherwise).
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"]["ENGINE"] = "portal.database"
    # A PostgreSQL that stops answering without refusing (its host powered off, a partition, a fail-over's old
    # address) fails a request, a task or /readyz in seconds instead of holding it for minutes: connecting gives up
    # after 3 s (the readiness probe's own timeout), a kept connection whose data goes unacknowledged for 10 s is
    # dropped, and idle kept connections are probed. Held web workers would otherwise leave none to answer /healthz,
    # and the kubelet would restart every web pod (docs/failures.md). What DATABASE_URL's query string sets wins.
    DATABASES["default"]["OPTIONS"] = {
        "connect_timeout": 3,
        "tcp_user_timeout": 10_000,  # milliseconds
        "keepalives": 1,
        "keepalives_idle": 30,
        "keepalives_interval": 10,
        "keepalives_count": 3,
        **DATABASES["default"].get("OPTIONS", {}),
    }
# While PostgreSQL cannot be reached, pages and the API answer 503 with this Retry-After (portal/outage.py).
DATABASE_UNAVAILABLE_RETRY_AFTER_SECONDS = env.int("RESERVOIR_DB_RETRY_AFTER_SECONDS", default=10)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_USER_MODEL = "portal.User"
# django-axes first: it refuses a locked-out username and address before the password is even checked.
# The password backend refuses local passwords (but for break-glass accounts) when RESERVOIR_LOCAL_PASSWORD_LOGIN is
# off; sign-in through the identity provider goes through django-allauth (identity/, docs/sign-in.md).
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "identity.backends.PasswordBackend"]
# Login throttling (django-axes): after this many failures in a row for one username from one address, that pair
# is locked out for the cool-off time; a success resets the count. Admins unlock in Django admin (Axes).
AXES_FAILURE_LIMIT = env.int("RESERVOIR_LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("RESERVOIR_LOGIN_LOCKOUT_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False
AXES_LOCKOUT_CALLABLE = "portal.views.locked_out"
# The client's address: REMOTE_ADDR, or behind N trusted proxies the Nth address from the right of
# X-Forwarded-For (RESERVOIR_TRUSTED_PROXY_COUNT).
AXES_CLIENT_IP_CALLABLE = "portal.client_address.client_address"
TRUSTED_PROXY_COUNT = env.int("RESERVOIR_TRUSTED_PROXY_COUNT", default=0)
SESSION_ENGINE = "portal.sessions"
LOGIN_URL = "portal:login"
LOGIN_REDIRECT_URL = "portal:home"
LOGOUT_REDIRECT_URL = "portal:login"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
# Dates and numbers follow the reader's language (USE_L10N is always on in Django 5): pages name a format
# (SHORT_DATE_FORMAT, SHORT_DATETIME_FORMAT, DATETIME_FORMAT, YEAR_MONTH_FORMAT), these modules say what it is per
# language. No USE_THOUSAND_SEPARATOR: ids and counts stay ungrouped; money is grouped by billing's `money` filter.
FORMAT_MODULE_PATH = ["portal.formats"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# Project CSS/JS live in static/; third-party JS comes from npm (node_modules) and is served under vendor/.
STATICFILES_DIRS = [
    BASE_DIR / "static",
    ("vendor/htmx", BASE_DIR / "node_modules" / "htmx.org" / "dist"),
]

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # portal's API tokens, also refused when their provider user has lost every team (identity/authentication.py)
        "identity.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "portal.api.base.Pagination",
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "portal.api.negotiation.ContentNegotiation",
    "EXCEPTION_HANDLER": "portal.api.base.exception_handler",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "portal.api.base.FilterBackend",
        "portal.api.base.OrderingFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "portal.api.schema.PortalAutoSchema",
    "DEFAULT_THROTTLE_CLASSES": ["portal.api.throttles.WriteRateThrottle"],
}
# Writes per user (POST/PUT/PATCH/DELETE anywhere, API and pages alike; per address when signed out) and job
# submissions per user on top, as "N/second|minute|hour|day"; empty: unlimited. One policy for the API (DRF throttles)
# and the pages (portal.throttling), counted together; read at request time by portal.api.throttles.
THROTTLE_RATES = {
    "writes": env("RESERVOIR_WRITE_RATE", default="120/minute"),
    "job_submissions": env("RESERVOIR_SUBMIT_RATE", default="30/minute"),
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Reservoir API",
    "DESCRIPTION": "Reserved GPU node pools on Kubernetes: pools, reservations, quotas, jobs, usage.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "jobs.choices.JobState",
        "SecretKindEnum": "teamdata.choices.SecretKind",
        "VolumeStateEnum": "teamdata.choices.VolumeState",
        "VolumeSourceEnum": "teamdata.choices.VolumeSource",
        "AccessModeEnum": "teamdata.choices.AccessMode",
        "MembershipSourceEnum": "portal.choices.MembershipSource",
    },
    # The schema and Swagger UI are for signed-in users, and Swagger UI is served from our own static files
    # (drf-spectacular-sidecar), never a CDN.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Security ---------------------------------------------------------------------------------------------------
# Content-Security-Policy (django-csp): scripts, styles, images and requests only from the portal itself; no inline
# script and no <style> element (the pages use none); inline style *attributes* stay allowed for the meters'
# widths. The portal may not be framed.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "style-src-attr": [UNSAFE_INLINE],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}
# Error reports (the DEBUG 500 page too) hide the POST parameters and variables views mark as sensitive.
DEFAULT_EXCEPTION_REPORTER_FILTER = "portal.error_reports.AlwaysSafeExceptionReporterFilter"
# How long a browser session lasts (seconds; default 12 hours), from the log-in.
SESSION_COOKIE_AGE = env.int("RESERVOIR_SESSION_AGE_SECONDS", default=12 * 3600)
# /metrics without RESERVOIR_METRICS_TOKEN: open (development), or refused (production, settings/prod.py).
METRICS_REQUIRE_TOKEN = False

# --- Sign-in through the organization's OpenID Connect provider (identity/, docs/sign-in.md) -----------------------
# Empty issuer: no provider, local passwords only. The redirect URI to register at the provider is
# https://<portal host>/accounts/oidc/sso/login/callback/ (built from the request: behind a TLS proxy, set
# DJANGO_SECURE_PROXY_SSL_HEADER).
OIDC_ISSUER = env("RESERVOIR_OIDC_ISSUER", default="")
OIDC_CLIENT_ID = env("RESERVOIR_OIDC_CLIENT_ID", default="")
OIDC_CLIENT_SECRET = env("RESERVOIR_OIDC_CLIENT_SECRET", default="")
OIDC_SCOPES = env.list("RESERVOIR_OIDC_SCOPES", default=["openid", "profile", "email"])
OIDC_LABEL = env("RESERVOIR_OIDC_LABEL", default="single sign-on")
# The ID token (or userinfo) claim holding the user's groups, which identity's group rules map to teams and roles.
OIDC_GROUPS_CLAIM = env("RESERVOIR_OIDC_GROUPS_CLAIM", default="groups")
# Local passwords: unset or empty, on without a provider and off with one (break-glass accounts always keep theirs).
LOCAL_PASSWORD_LOGIN = (
    env.bool("RESERVOIR_LOCAL_PASSWORD_LOGIN") if env("RESERVOIR_LOCAL_PASSWORD_LOGIN", default="") else not OIDC_ISSUER
)
SOCIALACCOUNT_PROVIDERS = {
    "openid_connect": {
        # Adds the nonce, checks the ID token's signature against the JWKS every time, pins the issuer.
        "provider_class": "identity.oidc.ReservoirOIDCProvider",
        "OAUTH_PKCE_ENABLED": True,
        "APPS": [],
    }
}
if OIDC_ISSUER:
    SOCIALACCOUNT_PROVIDERS["openid_connect"]["APPS"] = [
        {
            "provider_id": "sso",
            "name": OIDC_LABEL,
            "client_id": OIDC_CLIENT_ID,
            "secret": OIDC_CLIENT_SECRET,
            "settings": {"server_url": OIDC_ISSUER, "scope": OIDC_SCOPES, "oauth_pkce_enabled": True},
        }
    ]
SOCIALACCOUNT_ADAPTER = "identity.adapter.SocialAccountAdapter"
ACCOUNT_ADAPTER = "identity.adapter.AccountAdapter"
SOCIALACCOUNT_AUTO_SIGNUP = True
# The provider's button is a link: a form's redirect chain to the provider (and its own login pages) would be stopped
# by the Content-Security-Policy's form-action 'self'. State, nonce and PKCE guard the flow whichever way it starts.
SOCIALACCOUNT_LOGIN_ON_GET = True
# Never attach a provider sign-in to an existing local account by its e-mail address.
SOCIALACCOUNT_EMAIL_AUTHENTICATION = False
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = False
SOCIALACCOUNT_EMAIL_REQUIRED = False
SOCIALACCOUNT_QUERY_EMAIL = False
ACCOUNT_EMAIL_VERIFICATION = "none"
SOCIALACCOUNT_STORE_TOKENS = False
# Each call to the provider (discovery, the token exchange, its keys, userinfo) may take this long. allauth's 5 s is
# tight for a provider whose database waits for its disk; a code is single-use, so a timed-out exchange means
# starting over.
SOCIALACCOUNT_REQUESTS_TIMEOUT = env.float("RESERVOIR_OIDC_TIMEOUT_SECONDS", default=10.0)

# --- Redis and Celery -------------------------------------------------------------------------------------------
REDIS_URL = env("REDIS_URL", default="redis://127.0.0.1:6379/0")
# The shared cache: API rate-limit counters, seen alike by every web process.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": env("RESERVOIR_CACHE_URL", default=REDIS_URL),
        "KEY_PREFIX": "reservoir",
        "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
    }
}
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TIMEZONE = "UTC"
# A task is acknowledged only after it ran, and is given back to the queue when its worker dies mid-task:
# every task must therefore be idempotent (STYLE.md, conventions 5).
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fixup closes a worker's database connection before and after every task unless this is set: a new
# PostgreSQL connection (a backend forked, authenticated, its time zone set) for every task was a tenth of the submit
# task's time under load (bench/admission.py), and forked a PostgreSQL backend on the same cores as everything else.
# A connection now serves up to this many tasks of its thread; each task starts and ends as a Django request does
# (portal/celery.py), dropping a connection that is broken or older than CONN_MAX_AGE.
CELERY_DB_REUSE_MAX = env.int("CELERY_DB_REUSE_MAX", default=100)
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=300)
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=240)
# The longest countdown a task gives its own retry (the backoff caps in the apps' tasks.py stay within it).
TASK_MAX_COUNTDOWN_SECONDS = 300
# Redis hands a message that was not acknowledged within `visibility_timeout` to another worker. A message stays
# unacknowledged while it waits for its countdown and while its task runs (acks_late), so the timeout must exceed
# both together, or a healthy task would run twice. Longer only delays the redelivery of a dead worker's task,
# and nothing waits for that: convergence (reconcile/jobs.py) resends what did not reach the cluster.
# Every read and connect on the broker's connections is bounded, as the cache's are: a Redis that takes the connection
# and never answers (hung, or a pooled connection left half-open when its node went away) fails a publish after
# `socket_timeout` instead of holding the request or the outbox dispatcher for good. A pooled connection idle longer
# than `health_check_interval` is PINGed before use, and TCP keepalives probe idle ones. The worker's BRPOP is not cut
# short: kombu sends it with a server-side timeout of 1 s (its `brpop_timeout`) and reads the reply only once the
# socket is readable, so a live Redis always answers within the socket timeout; a BRPOP whose reply is overdue by
# `health_check_interval` is dropped and made again by kombu itself.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": TASK_MAX_COUNTDOWN_SECONDS + CELERY_TASK_TIME_LIMIT + 60,
    "socket_timeout": 2,
    "socket_connect_timeout": 2,
    "socket_keepalive": True,
    "socket_keepalive_options": {
        getattr(socket, name): value
        for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3))
        if hasattr(socket, name)  # the names Linux has; elsewhere the system's defaults
    },
    "health_check_interval": 10,
}
# A publish to an unreachable broker gives up within about a second (one that never answers within a few seconds):
# messages after a commit wait in the outbox (portal/outbox.py), so a request never hangs on Redis.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = "default"
# Cluster I/O and billing get queues of their own so that one cannot starve the other: the cluster worker serves
# `cluster` in a thread pool, the worker `default` and `billing` (docs/running-in-a-cluster.md).
CELERY_TASK_QUEUES = (Queue("default"), Queue("cluster"), Queue("billing"))
CELERY_TASK_ROUTES = {
    # Mail, not cluster I/O (an exact name wins over the patterns).
    "jobs.send_job_mail": {"queue": "default"},
    "jobs.resend_job_mails": {"queue": "default"},
    "jobs.*": {"queue": "cluster"},
    "pools.*": {"queue": "cluster"},
    "teamdata.*": {"queue": "cluster"},
    "billing.check_budgets": {"queue": "cluster"},  # the budget's AdmissionCheck: cluster I/O (reconcile/budget.py)
    "billing.*": {"queue": "billing"},
}
CELERY_BEAT_SCHEDULE: dict = {}  # filled by each app's beat.py (see portal/celery.py)

# --- Kubernetes --------------------------------------------------------------------------------------------------
# Path of the kubeconfig the portal uses; empty means in-cluster configuration, then ~/.kube/config.
KUBECONFIG = env("KUBECONFIG", default="")
# Clusters whose scheduler reads the seed-000 annotations (scheduling.eks.ebcloud.com/*) get them on every Job.
KUBE_WRITE_EBCLOUD_ANNOTATIONS = env.bool("RESERVOIR_EBCLOUD_ANNOTATIONS", default=False)
# Prefix of the namespace the portal owns for each team.
TEAM_NAMESPACE_PREFIX = env("RESERVOIR_TEAM_NAMESPACE_PREFIX", default="team-")
# Team namespaces' NetworkPolicies (cluster/namespaces.py): pods accept traffic from their own namespace and from these
# namespaces (e.g. the one a metrics scraper runs in); other teams reach nothing. Egress is open unless closed: then
# pods reach their own namespace, the cluster DNS and the CIDRs listed.
NETWORK_INGRESS_NAMESPACES = env.list("RESERVOIR_NETWORK_INGRESS_NAMESPACES", default=[])
NETWORK_EGRESS_OPEN = env.bool("RESERVOIR_NETWORK_EGRESS_OPEN", default=True)
NETWORK_EGRESS_CIDRS = env.list("RESERVOIR_NETWORK_EGRESS_CIDRS", default=[])
# Storage classes new team volumes may use: exact names, or patterns ending in "*" (prefix match). Empty: none but
# the cluster's default class (a volume that names no class). The namespace quota closes the cluster's other classes.
VOLUME_STORAGE_CLASSES = env.list("RESERVOIR_VOLUME_STORAGE_CLASSES", default=[])

# --- What a job spec may ask for (jobs.specs, jobs.policy) ----------------------------------------------------------
# Pod annotations users may set: exact keys, or patterns ending in "*" (prefix match). Keys under reserved prefixes
# (kubernetes.io, reservoir.io, kueue.x-k8s.io, ...) are refused even when listed. Empty: no user annotations.
POD_ANNOTATION_ALLOWLIST = env.list("RESERVOIR_POD_ANNOTATION_ALLOWLIST", default=[])
# Total size in bytes of a job's environment (names and values), pod annotations, and command with arguments.
JOB_ENV_MAX_BYTES = env.int("RESERVOIR_JOB_ENV_MAX_BYTES", default=32 * 1024)
JOB_ANNOTATIONS_MAX_BYTES = env.int("RESERVOIR_JOB_ANNOTATIONS_MAX_BYTES", default=16 * 1024)
JOB_COMMAND_MAX_BYTES = env.int("RESERVOIR_JOB_COMMAND_MAX_BYTES", default=32 * 1024)
# Jobs of one team that may wait at once (every state but Running and the final ones); more are refused.
MAX_WAITING_JOBS_PER_TEAM = env.int("RESERVOIR_MAX_WAITING_JOBS_PER_TEAM", default=200)
# The longest grace period (seconds between the stop signal and the kill) a job may ask for: a lender whose GPUs are
# reclaimed waits for the borrowers' pods to stop, so this bounds the reclaim. At most 3600.
JOB_MAX_GRACE_SECONDS = env.int("RESERVOIR_MAX_GRACE_SECONDS", default=60)
# Registries jobs may pull images from (hosts, with the port where the registry has one; images without a registry
# are docker.io's). Empty: any.
JOB_IMAGE_REGISTRIES = env.list("RESERVOIR_IMAGE_REGISTRIES", default=[])

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env("DJANGO_LOG_LEVEL", default="INFO")},
    # django-axes logs every log-in at INFO; lockouts are warnings.
    "loggers": {"axes": {"level": "WARNING"}},
}
# Tasks that call the cluster retry transient failures this many times (backoff 2 s doubling to 5 min, jittered)
# before they give up and say so (a job is then Failed with the reason).
CLUSTER_TASK_MAX_RETRIES = env.int("RESERVOIR_CLUSTER_TASK_MAX_RETRIES", default=8)
# The job page's log tail: at most this many bytes (besides its line count).
LOG_TAIL_MAX_BYTES = env.int("RESERVOIR_LOG_TAIL_MAX_BYTES", default=64 * 1024)
# Convergence (reconcile/jobs.py): a job nobody has tried to send for this long is sent again, and a job final
# for this long whose Job still runs in the cluster has it deleted.
CONVERGENCE_GRACE_SECONDS = env.int("RESERVOIR_CONVERGENCE_GRACE_SECONDS", default=20)
# Attempts of one cluster call on transient failures outside tasks (the sync, pages, commands); tasks try once.
KUBE_CALL_ATTEMPTS = env.int("RESERVOIR_KUBE_CALL_ATTEMPTS", default=4)
# The longest wait for each read of the API server's answer to a call that names no timeout of its own
# (cluster/client.py); connecting waits at most 5 s.
KUBE_REQUEST_TIMEOUT_SECONDS = env.float("RESERVOIR_KUBE_REQUEST_TIMEOUT_SECONDS", default=30.0)
# Installed by the Helm chart (deploy/helm/reservoir): the ClusterRoles the namespace reconciler binds in each team
# namespace, as "<clusterrole>=<namespace>/<serviceaccount>" entries (empty: none, e.g. with an admin kubeconfig);
# and the Lease the sync replicas share (cluster/lease.py; namespace empty: the pod's own, else "default").
TEAM_ROLE_BINDINGS = env.list("RESERVOIR_TEAM_ROLE_BINDINGS", default=[])
SYNC_LEASE_NAME = env("RESERVOIR_SYNC_LEASE_NAME", default="reservoir-sync")
SYNC_LEASE_NAMESPACE = env("RESERVOIR_SYNC_LEASE_NAMESPACE", default="")
SYNC_LEASE_SECONDS = env.int("RESERVOIR_SYNC_LEASE_SECONDS", default=15)
# The sync applies the pod and Workload events that arrive within this long of a batch's first as one batch (one
# transaction, its queries made once): the portal sees a change up to this much later.
SYNC_GATHER_SECONDS = env.float("RESERVOIR_SYNC_GATHER_SECONDS", default=0.2)

# --- Monitoring: GPU telemetry from Prometheus (DCGM exporter) and alerts ------------------------------------------
# Prometheus' base URL (`python -m devcluster monitoring env` prints the local one); empty: no telemetry.
PROMETHEUS_URL = env("PROMETHEUS_URL", default="")
PROMETHEUS_TIMEOUT_SECONDS = env.float("PROMETHEUS_TIMEOUT_SECONDS", default=10.0)
# Firing and resolved alerts are POSTed here (Alertmanager's webhook JSON); empty: recorded, not sent.
ALERT_WEBHOOK_URL = env("ALERT_WEBHOOK_URL", default="")
ALERT_WEBHOOK_TIMEOUT_SECONDS = env.float("ALERT_WEBHOOK_TIMEOUT_SECONDS", default=5.0)
# The language of the texts meant for people in webhook notifications (one of LANGUAGES): the receiver is a
# system, not a user whose language the portal knows.
ALERT_WEBHOOK_LANGUAGE = env("ALERT_WEBHOOK_LANGUAGE", default="en")
# Where people reach the portal (links in notifications).
PORTAL_BASE_URL = env("RESERVOIR_BASE_URL", default="http://127.0.0.1:8000")
# E-mail to team leads (budget alerts, the monthly spend summary) and to job submitters who ask for it
# (jobs/notifications.py): Django's backend from a URL
# (smtp+tls://user:password@host:587, consolemail://, dummymail://); who it comes from.
EMAIL_CONFIG = env.email_url("EMAIL_URL", default="consolemail://")
vars().update(EMAIL_CONFIG)
DEFAULT_FROM_EMAIL = env("RESERVOIR_EMAIL_FROM", default="reservoir@localhost")
# A mail server that does not answer within this many seconds fails the send (its task retries): a task never hangs.
EMAIL_TIMEOUT = env.int("RESERVOIR_EMAIL_TIMEOUT_SECONDS", default=10)
# The currency sign of the text a held Workload carries in the cluster ("budget for November reached: ¥X of ¥Y").
RESERVOIR_CURRENCY_SIGN = env("RESERVOIR_CURRENCY_SIGN", default="¥")
# Telemetry is collected at steps aligned to this many seconds; alert rules are evaluated this often.
MONITORING_STEP_SECONDS = env.int("RESERVOIR_MONITORING_STEP_SECONDS", default=60)
MONITORING_EVALUATION_SECONDS = env.int("RESERVOIR_ALERT_EVALUATION_SECONDS", default=30)
# A running job is flagged idle once its GPUs stay below this utilisation (percent) for this long.
MONITORING_IDLE_GPU_PERCENT = env.float("RESERVOIR_IDLE_GPU_PERCENT", default=5.0)
MONITORING_IDLE_AFTER_SECONDS = env.int("RESERVOIR_IDLE_GPU_AFTER_SECONDS", default=1800)
MONITORING_FAILURE_WINDOW_HOURS = env.int("RESERVOIR_FAILURE_WINDOW_HOURS", default=24)
MONITORING_SAMPLE_RETENTION_DAYS = env.int("RESERVOIR_SAMPLE_RETENTION_DAYS", default=400)
MONITORING_JOB_SAMPLE_RETENTION_DAYS = env.int("RESERVOIR_JOB_SAMPLE_RETENTION_DAYS", default=30)
# When set, /metrics wants "Authorization: Bearer <token>".
METRICS_BEARER_TOKEN = env("RESERVOIR_METRICS_TOKEN", default="")
