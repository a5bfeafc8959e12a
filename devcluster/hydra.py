"""A real OpenID Connect provider on this machine: ory/hydra (built by devcluster/hydra_build.py) with its own
PostgreSQL database, and the small login/consent app hydra asks to accept each sign-in (hydra is headless).

The login/consent app knows a few demo users with a password and groups (`DEMO_USERS`); it accepts a login with
hydra's admin API, and at consent puts `preferred_username`, `email`, `name` and `groups` into the ID token (hydra's
userinfo answers the same claims). Tests change a user's groups between two sign-ins by changing `users`.

Used by the tests (tests/identity/conftest.py) on free ports with a database of their own, and by `make dev`
(`python -m devcluster hydra up|down|env`), which keeps its processes' pids in the state directory.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from devcluster import hydra_build
from devcluster.processes import free_port

DEMO_PASSWORD = "reservoir-sso"
# username -> groups at the provider. The demo group rules (seed_demo) map gpu-<team>-leads and gpu-<team> to the
# team's lead and researcher roles, gpu-admins to platform admin; `nogroup` belongs to nothing the portal knows.
DEMO_USERS: dict[str, list[str]] = {
    "alice": ["gpu-llm-leads", "staff"],
    "bob": ["gpu-llm"],
    "carol": ["gpu-vision-leads"],
    "dan": ["gpu-speech", "gpu-vision"],
    "root": ["gpu-admins"],
    "nogroup": ["staff"],
}


class HydraError(RuntimeError):
    """hydra could not be started or answered an admin call with an error."""


def _call(method: str, url: str, body: dict | None = None, timeout: float = 10.0) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            text = answer.read()
    except urllib.error.HTTPError as error:
        raise HydraError(f"{method} {url}: {error.code} {error.read()[:300]!r}") from None
    return json.loads(text) if text else {}


# --- The login/consent app ----------------------------------------------------------------------------------------
LOGIN_PAGE = """<!doctype html><html><head><title>Demo identity provider</title></head><body>
<h1>Demo identity provider</h1><p>{error}</p>
<form method="post" action="/login"><input type="hidden" name="challenge" value="{challenge}">
<label>Username <input name="username" id="username" autofocus></label>
<label>Password <input name="password" id="password" type="password"></label>
<button type="submit" id="sign-in">Sign in</button></form></body></html>"""


@dataclass
class LoginConsentApp:
    """hydra's login, consent and logout URLs, served on 127.0.0.1:`port` in a thread."""

    admin_url: str
    users: dict[str, list[str]] = field(default_factory=lambda: {k: list(v) for k, v in DEMO_USERS.items()})
    password: str = DEMO_PASSWORD
    port: int = 0
    _server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def claims(self, username: str) -> dict:
        return {
            "preferred_username": username,
            "name": username.capitalize(),
            "email": f"{username}@sso.example.com",
            "email_verified": True,
            "groups": list(self.users.get(username, [])),
        }

    def accept_login(self, challenge: str, username: str) -> str:
        url = f"{self.admin_url}/admin/oauth2/auth/requests/login/accept?login_challenge={challenge}"
        return _call("PUT", url, {"subject": username, "remember": False})["redirect_to"]

    def accept_consent(self, challenge: str) -> str:
        query = f"consent_challenge={challenge}"
        consent = _call("GET", f"{self.admin_url}/admin/oauth2/auth/requests/consent?{query}")
        body = {
            "grant_scope": consent.get("requested_scope") or [],
            "grant_access_token_audience": consent.get("requested_access_token_audience") or [],
            "remember": False,
            # Read now, at each sign-in: a test that changes a user's groups sees the change at the next sign-in.
            "session": {"id_token": self.claims(consent["subject"]), "access_token": {}},
        }
        return _call("PUT", f"{self.admin_url}/admin/oauth2/auth/requests/consent/accept?{query}", body)["redirect_to"]

    def accept_logout(self, challenge: str) -> str:
        url = f"{self.admin_url}/admin/oauth2/auth/requests/logout/accept?logout_challenge={challenge}"
        return _call("PUT", url)["redirect_to"]

    def start(self) -> LoginConsentApp:
        app = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _redirect(self, location: str) -> None:
                self.send_response(302)
                self.send_header("Location", location)
                self.end_headers()

            def _page(self, body: str, status: int = 200) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                parsed = urllib.parse.urlparse(self.path)
                query = dict(urllib.parse.parse_qsl(parsed.query))
                try:
                    if parsed.path == "/login":
                        challenge = query.get("login_challenge", "")
                        self._page(LOGIN_PAGE.format(error="", challenge=html.escape(challenge)))
                    elif parsed.path == "/consent":
                        self._redirect(app.accept_consent(query.get("consent_challenge", "")))
                    elif parsed.path == "/logout":
                        self._redirect(app.accept_logout(query.get("logout_challenge", "")))
                    else:
                        self._page("not found", 404)
                except HydraError as error:
                    self._page(html.escape(str(error)), 502)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                username, challenge = form.get("username", ""), form.get("challenge", "")
                if username not in app.users or form.get("password") != app.password:
                    page = LOGIN_PAGE.format(error="Wrong username or password.", challenge=html.escape(challenge))
                    self._page(page, 200)
                    return
                try:
                    self._redirect(app.accept_login(challenge, username))
                except HydraError as error:
                    self._page(html.escape(str(error)), 502)

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, name="hydra-login-consent", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


# --- hydra itself -------------------------------------------------------------------------------------------------
def database_url(base_url: str, name: str) -> str:
    """`base_url` (a postgres:// URL) with its database replaced by `name`, as hydra's DSN."""
    parts = urllib.parse.urlsplit(base_url)
    return urllib.parse.urlunsplit(("postgres", parts.netloc, f"/{name}", "sslmode=disable", ""))


def _force_drop(cursor, name: str, *, attempts: int = 40) -> None:
    """DROP DATABASE ... WITH (FORCE), again while it is refused: FORCE may not end an autovacuum worker that is at
    work in the database (hydra's migrations just filled it) unless the role is a superuser; the worker ends soon."""
    import psycopg2

    for attempt in range(attempts):
        try:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            return
        except psycopg2.errors.InsufficientPrivilege:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)


def _server(base_url: str):
    import psycopg2

    parts = urllib.parse.urlsplit(base_url)
    connection = psycopg2.connect(
        host=parts.hostname, port=parts.port or 5432, user=parts.username, password=parts.password, dbname="postgres"
    )
    connection.autocommit = True
    return connection


def create_database(base_url: str, name: str, *, drop_first: bool = False, durable: bool = True) -> None:
    """Create database `name` (dropped first if asked). Not `durable`: its commits do not wait for the disk
    (`synchronous_commit = off`), for a provider whose data nothing needs after a crash."""
    connection = _server(base_url)
    with connection.cursor() as cursor:
        if drop_first:
            _force_drop(cursor, name)
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        if cursor.fetchone() is None:
            cursor.execute(f'CREATE DATABASE "{name}"')
        if not durable:
            cursor.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
    connection.close()


def drop_database(base_url: str, name: str) -> None:
    connection = _server(base_url)
    with connection.cursor() as cursor:
        _force_drop(cursor, name)
    connection.close()


@dataclass
class Hydra:
    """One hydra process (`serve all --dev`) on free loopback ports, with its database migrated first."""

    dsn: str
    login_url: str
    log_path: Path
    public_port: int = 0
    admin_port: int = 0
    process: subprocess.Popen | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.public_port}/"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SERVE_", "URLS_", "DSN"))}
        env.update(
            {
                "DSN": self.dsn,
                "SECRETS_SYSTEM": secrets.token_hex(24),
                "SERVE_PUBLIC_HOST": "127.0.0.1",
                "SERVE_PUBLIC_PORT": str(self.public_port),
                "SERVE_ADMIN_HOST": "127.0.0.1",
                "SERVE_ADMIN_PORT": str(self.admin_port),
                "URLS_SELF_ISSUER": self.issuer,
                "URLS_LOGIN": f"{self.login_url}/login",
                "URLS_CONSENT": f"{self.login_url}/consent",
                "URLS_LOGOUT": f"{self.login_url}/logout",
                "URLS_POST_LOGOUT_REDIRECT": f"{self.login_url}/logged-out",
                "STRATEGIES_ACCESS_TOKEN": "opaque",
                "LOG_LEVEL": "warn",
            }
        )
        return env

    def start(self, timeout: float = 60.0) -> Hydra:
        binary = str(hydra_build.ensure_built())
        self.public_port = self.public_port or free_port()
        self.admin_port = self.admin_port or free_port()
        env = self.environment()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a") as log:
            migrated = subprocess.run(
                [binary, "migrate", "sql", "up", "-e", "--yes"], env=env, stdout=log, stderr=subprocess.STDOUT
            )
            if migrated.returncode != 0:
                raise HydraError(f"hydra's migrations failed; see {self.log_path}")
            self.process = subprocess.Popen(
                [binary, "serve", "all", "--dev"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise HydraError(f"hydra exited with {self.process.returncode}; see {self.log_path}")
            try:
                _call("GET", f"{self.admin_url}/health/ready", timeout=2)
                _call("GET", f"{self.issuer}.well-known/openid-configuration", timeout=2)
                return self
            except (OSError, HydraError):
                time.sleep(0.3)
        self.stop()
        raise HydraError(f"hydra did not become ready in {timeout:.0f}s; see {self.log_path}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def create_client(
        self, *, client_id: str, client_secret: str, redirect_uris: list[str], post_logout_redirect_uris: list[str]
    ) -> dict:
        """Register (again) an authorization-code client that sends its secret in the token request."""
        with contextlib.suppress(HydraError):
            _call("DELETE", f"{self.admin_url}/admin/clients/{client_id}")
        body = {
            "client_id": client_id,
            "client_secret": client_secret,
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "scope": "openid profile email offline_access",
            "redirect_uris": redirect_uris,
            "post_logout_redirect_uris": post_logout_redirect_uris,
            "token_endpoint_auth_method": "client_secret_post",
        }
        return _call("POST", f"{self.admin_url}/admin/clients", body)


# --- `make dev`: python -m devcluster hydra up|down|env -----------------------------------------------------------
DEV_CLIENT_ID = "reservoir-dev"


def _state_file(state_dir: Path) -> Path:
    return state_dir / "hydra.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def _ours(pid: int) -> bool:
    """Whether `pid` is still hydra or the login app `make dev` started: a pid from a stale state file (after a reboot)
    may belong to another program by now, which must be left alone."""
    try:
        cmdline = " ".join(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0"))
    except OSError:
        return False
    return "hydra" in cmdline


def dev_env(state_dir: Path) -> str:
    state = json.loads(_state_file(state_dir).read_text())
    return "\n".join(
        [
            f"export RESERVOIR_OIDC_ISSUER={state['issuer']}",
            f"export RESERVOIR_OIDC_CLIENT_ID={DEV_CLIENT_ID}",
            f"export RESERVOIR_OIDC_CLIENT_SECRET={state['client_secret']}",
            "export RESERVOIR_OIDC_LABEL='the demo provider'",
        ]
    )


DEV_DATABASE = "reservoir_hydra"


def dev_up(state_dir: Path, *, database_base_url: str, portal_url: str, database: str = DEV_DATABASE) -> str:
    """Start hydra and the login/consent app for `make dev` (unless running), register the portal; print env.

    The demo provider's database is made anew on each start: hydra encrypts its signing keys with SECRETS_SYSTEM,
    a new secret each start (`Hydra.environment`), and would refuse the keys a start before made (its discovery
    answering 500: "Could not ensure that signing keys ... exist"); the database outlives a checkout, which
    `make stop` and a fresh clone both leave behind. Nothing in it is kept on purpose: the portal's client is
    registered again below, and the demo users live in the login/consent app; so its commits need not wait for the
    disk either."""
    state_dir.mkdir(parents=True, exist_ok=True)
    state_file = _state_file(state_dir)
    if state_file.exists():
        state = json.loads(state_file.read_text())
        if all(_alive(pid) for pid in state["pids"]):
            return dev_env(state_dir)
        dev_down(state_dir)
    create_database(database_base_url, database, drop_first=True, durable=False)
    login_port = free_port()
    hydra = Hydra(
        dsn=database_url(database_base_url, database),
        login_url=f"http://127.0.0.1:{login_port}",
        log_path=state_dir / "logs" / "hydra.log",
    )
    hydra.start()
    with (state_dir / "logs" / "hydra-login.log").open("a") as log:
        login_app = subprocess.Popen(
            [sys.executable, "-m", "devcluster.hydra", "serve-login", hydra.admin_url, str(login_port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    secret = secrets.token_urlsafe(24)
    portal = portal_url.rstrip("/")
    hydra.create_client(
        client_id=DEV_CLIENT_ID,
        client_secret=secret,
        redirect_uris=[f"{portal}/accounts/oidc/sso/login/callback/"],
        post_logout_redirect_uris=[f"{portal}/login/"],
    )
    state = {"issuer": hydra.issuer, "client_secret": secret, "pids": [hydra.process.pid, login_app.pid]}
    state_file.write_text(json.dumps(state))
    state_file.chmod(0o600)
    return dev_env(state_dir)


def dev_down(state_dir: Path) -> list[int]:
    state_file = _state_file(state_dir)
    if not state_file.exists():
        return []
    stopped = []
    for pid in json.loads(state_file.read_text())["pids"]:
        if _alive(pid) and _ours(pid):
            os.kill(pid, signal.SIGTERM)
            stopped.append(pid)
    state_file.unlink()
    return stopped


def dev_logins() -> str:
    lines = [f"Single sign-on through the demo provider (password for all: {DEMO_PASSWORD}):"]
    for username, groups in DEMO_USERS.items():
        lines.append(f"  {username:<20} {', '.join(groups)}")
    return "\n".join(lines)


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "serve-login":
    # The login/consent app of `make dev`, as a process of its own.
    served = LoginConsentApp(admin_url=sys.argv[2], port=int(sys.argv[3])).start()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)
