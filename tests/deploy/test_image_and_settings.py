"""What can be checked of the image, the chart and docker-compose.yml without a Docker engine (none runs on the
development machines): they run the processes `make dev` runs, set only variables the settings read, set the ones
production requires (secret ones from Secrets in the chart, never inline), and run as the image's non-root user."""

import re

import yaml

from tests.deploy.conftest import ROOT, helm_template, pod_specs
from tests.portal.test_docs_links import SETTINGS_ENV_READ

DEV_SCRIPT = ROOT / "scripts" / "dev.sh"
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
PROCESSES = {"web", "worker", "cluster-worker", "beat", "outbox", "sync"}
# Read outside portal/settings: by manage.py, wsgi and Celery (which settings module), and by cluster/client.py.
READ_ELSEWHERE = {"DJANGO_SETTINGS_MODULE", "KUBECONFIG"}
REQUIRED_IN_PRODUCTION = {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY"}
SECRET = REQUIRED_IN_PRODUCTION | {"RESERVOIR_METRICS_TOKEN", "RESERVOIR_OIDC_CLIENT_SECRET"}
WITH_SIGN_IN = ("--set", "oidc.issuer=https://idp.example.com", "--set", "oidc.clientId=reservoir")


def settings_read() -> set[str]:
    return {
        name
        for module in (ROOT / "portal" / "settings").glob("*.py")
        for name in SETTINGS_ENV_READ.findall(module.read_text(encoding="utf-8"))
    } | READ_ELSEWHERE


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def chart_env(rendered_chart) -> dict[str, list[dict]]:
    return {
        name: [entry for container in spec["containers"] for entry in container.get("env", [])]
        for name, spec in pod_specs(rendered_chart).items()
    }


def test_every_variable_the_chart_and_compose_set_is_one_the_settings_read(rendered_chart):
    read = settings_read()
    with_sign_in = helm_template(*WITH_SIGN_IN, "--set", "oidc.localPasswordLogin=true")
    for name, env in [*chart_env(rendered_chart).items(), *chart_env(with_sign_in).items()]:
        unknown = sorted({entry["name"] for entry in env} - read)
        assert not unknown, f"{name} sets variables nothing reads: {unknown}"
    for service, spec in compose()["services"].items():
        if not spec.get("build"):
            continue  # PostgreSQL's and Redis's own images
        unknown = sorted(set(spec.get("environment") or {}) - read)
        assert not unknown, f"docker-compose service {service} sets variables nothing reads: {unknown}"


def test_what_production_requires_is_set_and_secrets_come_from_secrets(rendered_chart):
    with_sign_in = chart_env(helm_template(*WITH_SIGN_IN))
    assert all("RESERVOIR_OIDC_CLIENT_SECRET" in {e["name"] for e in env} for env in with_sign_in.values())
    for name, env in [*chart_env(rendered_chart).items(), *with_sign_in.items()]:
        by_name = {entry["name"]: entry for entry in env}
        assert set(by_name) >= REQUIRED_IN_PRODUCTION, f"{name} lacks {REQUIRED_IN_PRODUCTION - set(by_name)}"
        assert by_name["DJANGO_SETTINGS_MODULE"]["value"] == "portal.settings.prod"
        for secret in SECRET & set(by_name):
            assert "value" not in by_name[secret], f"{name}: {secret} inline"
            assert by_name[secret]["valueFrom"]["secretKeyRef"]["key"] == secret
    portal_services = [spec for spec in compose()["services"].values() if spec.get("build")]
    assert portal_services
    for spec in portal_services:
        assert set(spec["environment"]) >= REQUIRED_IN_PRODUCTION
        assert spec["environment"]["DJANGO_SETTINGS_MODULE"] == "portal.settings.prod"
        assert spec["environment"]["DJANGO_SECRET_KEY"].startswith("${")  # from the shell, never in the file


def _dev_commands() -> dict[str, str]:
    """`start <name> <command...>` lines of scripts/dev.sh, by process name."""
    text = DEV_SCRIPT.read_text(encoding="utf-8")
    return {m.group(1): m.group(2) for m in re.finditer(r"^\s*start ([\w-]+) (.+)$", text, re.M)}


def _normalise(command: str) -> str:
    command = re.sub(r"\$PY |\.venv/bin/|python ", "", command)
    return re.sub(r"\s+", " ", command.replace('"', "")).strip()


def test_the_chart_and_compose_run_the_processes_make_dev_runs(rendered_chart):
    dev = _dev_commands()
    assert set(dev) == PROCESSES
    chart = {
        obj["metadata"]["labels"]["app.kubernetes.io/component"]: " ".join(
            obj["spec"]["template"]["spec"]["containers"][0]["command"]
        )
        for obj in rendered_chart
        if obj["kind"] == "Deployment"
    }
    services = {name: " ".join(spec["command"]) for name, spec in compose()["services"].items() if spec.get("build")}
    assert set(chart) == PROCESSES
    assert set(services) == PROCESSES | {"migrate"}
    assert [o for o in rendered_chart if o["kind"] == "Job"][0]["spec"]["template"]["spec"]["containers"][0][
        "command"
    ] == ["python", "manage.py", "migrate", "--noinput"]
    for process in PROCESSES - {"web"}:  # web: runserver under make dev, gunicorn in the image
        same = _normalise(dev[process]).split(" --schedule")[0].split(" -c ")[0]
        assert _normalise(chart[process]).startswith(same), (process, chart[process], dev[process])
        assert _normalise(services[process]).startswith(same), (process, services[process], dev[process])
    assert chart["web"].startswith("gunicorn portal.wsgi:application") and services["web"] == chart["web"]


def _queues(command: list[str]) -> set[str]:
    return set(command[command.index("-Q") + 1].split(",")) if "-Q" in command else set()


def test_each_task_queue_has_one_kind_of_worker_and_the_clusters_runs_a_thread_pool(rendered_chart, settings):
    """Every queue the tasks are routed to is served, by one process kind only, in the chart, compose and make dev;
    the cluster's tasks (which wait on the API server) in a thread pool, the others in prefork processes, where
    Celery's time limits apply."""
    queues = {queue.name for queue in settings.CELERY_TASK_QUEUES}
    deployments = {
        obj["metadata"]["labels"]["app.kubernetes.io/component"]: obj["spec"]["template"]["spec"]
        for obj in rendered_chart
        if obj["kind"] == "Deployment"
    }
    chart = {name: spec["containers"][0]["command"] for name, spec in deployments.items()}
    services = {name: spec["command"] for name, spec in compose()["services"].items() if spec.get("build")}
    dev = {name: command.split() for name, command in _dev_commands().items()}
    for where, commands in (("chart", chart), ("compose", services), ("make dev", dev)):
        served = {name: _queues(command) for name, command in commands.items() if "worker" in command}
        assert sorted(queue for names in served.values() for queue in names) == sorted(queues), (where, served)
        assert served["cluster-worker"] == {"cluster"}, where
        cluster = commands["cluster-worker"]
        assert cluster[cluster.index("-P") + 1] == "threads", where
        assert "-P" not in commands["worker"], where  # prefork, Celery's default
    # The cluster worker runs as the worker's ServiceAccount (its rights are the cluster tasks') with its token; the
    # worker, which never calls the API, mounts none.
    cluster_worker, worker = deployments["cluster-worker"], deployments["worker"]
    assert cluster_worker["serviceAccountName"] == worker["serviceAccountName"] == "rsv-reservoir-worker"
    assert cluster_worker["automountServiceAccountToken"] is True and worker["automountServiceAccountToken"] is False


def test_the_image_runs_as_the_non_root_user_the_chart_names_with_static_files_and_translations_built(
    rendered_chart,
):
    dockerfile = DOCKERFILE.read_text(encoding="utf-8")
    user = re.search(r"^USER (\d+):(\d+)$", dockerfile, re.M)
    assert user and user.group(1) != "0"
    assert "collectstatic --noinput" in dockerfile and "msgfmt --check" in dockerfile
    for name, spec in pod_specs(rendered_chart).items():
        assert str(spec["securityContext"]["runAsUser"]) == user.group(1), name
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert {".venv", "node_modules", ".state", ".git"} <= set(ignored)


def test_the_pods_are_written_for_the_restricted_pod_security_standard(rendered_chart):
    """The API server's own check is in tests/deploy/test_chart_cluster.py; this says which fields make it so."""
    for name, spec in pod_specs(rendered_chart).items():
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False and context["readOnlyRootFilesystem"] is True, name
            assert context["capabilities"] == {"drop": ["ALL"]}, name
            assert container["resources"]["requests"] and container["resources"]["limits"], name
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            assert "/tmp" in mounts, name
        tokens = spec.get("automountServiceAccountToken")
        component = name.split("/", 1)[1].removeprefix("rsv-reservoir-")
        calls_the_api = component in {"web", "cluster-worker", "sync"}
        assert tokens is calls_the_api, f"{name}: only those that call the API get a token"


def test_a_setting_that_holds_a_secret_comes_from_a_secret_never_inline():
    objects = helm_template(
        *("--set", "extraSecretEnv.EMAIL_URL.key=EMAIL_URL"),
        *("--set", "extraSecretEnv.ALERT_WEBHOOK_URL.secretName=alerts"),
        *("--set", "extraSecretEnv.ALERT_WEBHOOK_URL.key=url"),
    )
    for name, spec in pod_specs(objects).items():
        env = {each["name"]: each for each in spec["containers"][0]["env"]}
        assert env["EMAIL_URL"]["valueFrom"]["secretKeyRef"] == {"name": "reservoir", "key": "EMAIL_URL"}, name
        assert env["ALERT_WEBHOOK_URL"]["valueFrom"]["secretKeyRef"] == {"name": "alerts", "key": "url"}, name
        assert "value" not in env["EMAIL_URL"] and "value" not in env["ALERT_WEBHOOK_URL"]


def test_one_web_replica_gets_no_disruption_budget_that_would_hold_every_drain(rendered_chart):
    assert any(obj["kind"] == "PodDisruptionBudget" for obj in rendered_chart)  # two replicas by default
    single = helm_template("--set", "web.replicas=1")
    assert not any(obj["kind"] == "PodDisruptionBudget" for obj in single)
