"""Build the control-plane binaries from Go modules into a versioned cache outside the repository.

Nothing is downloaded but Go modules: each component is built from its own small wrapper module in the cache, so
the three dependency graphs never mix.

- Kubernetes: k8s.io/kubernetes requires its staging modules (k8s.io/api, k8s.io/client-go, ...) at v0.0.0 and
  replaces them with ./staging/...; those replace lines do not apply to a dependency, so the wrapper module
  replaces every staging module with its published v0.<minor>.<patch> release. The list is read from the
  upstream go.mod, so a version bump needs no edit here.
- etcd: the server module's own replace lines are relative too, so it gets a wrapper module as well.
- KWOK and Kueue: a plain `go install module/cmd/<name>@version` each (no replace lines in their go.mod). Kueue's
  own files (CRDs, webhook manifests) are read at run time from the module cache the download leaves behind.
- Helm (for the portal's chart, deploy/helm/reservoir): a plain `go install` too; `ensure_helm` builds it alone
  (`python -m devcluster helm`), for `make test` against a cluster of one's own, which needs no control plane.

The build runs only when a binary is missing, or the stamp file (written last, after every binary is in place) is
missing or names another Kueue version; each component is built only when its binary is missing, so a cache built
before Kueue was added gets Kueue alone. A file lock keeps two concurrent builds (say `make dev` and a test run)
from stepping on each other.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from devcluster import versions

STAMP_NAME = ".built.json"


class BuildError(RuntimeError):
    """The binaries could not be built; the message names the module or step that failed."""


def cache_root() -> Path:
    """Root of Reservoir's cache: ``$RESERVOIR_CACHE`` or ``~/.cache/reservoir``."""
    configured = os.environ.get("RESERVOIR_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "reservoir"


def versioned_dir() -> Path:
    return cache_root() / versions.cache_dir_name()


def bin_dir() -> Path:
    """Directory holding etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok and kueue."""
    return versioned_dir() / "bin"


def binary(name: str) -> Path:
    return bin_dir() / name


def go_module_cache() -> Path:
    """GOMODCACHE of the build (shared by every versioned directory)."""
    return cache_root() / "go" / "mod"


def kueue_module_dir() -> Path:
    """Kueue's module in the module cache: its CRDs, webhook manifests and sample configuration live there."""
    return go_module_cache() / f"{versions.KUEUE_MODULE}@{versions.KUEUE_VERSION}"


def kueue_files_present() -> bool:
    module = kueue_module_dir()
    return (module / "config/components/crd/bases").is_dir() and (
        module / "config/components/webhook/manifests.yaml"
    ).is_file()


def read_stamp() -> dict:
    try:
        return json.loads((bin_dir() / STAMP_NAME).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def is_built() -> bool:
    """True when every binary, Kueue's module files and a stamp written after a successful build of this Kueue
    version are present."""
    directory = bin_dir()
    if read_stamp().get("kueue") != versions.KUEUE_VERSION:
        return False
    return all(os.access(directory / name, os.X_OK) for name in versions.BINARIES) and kueue_files_present()


def _default_progress(message: str) -> None:
    print(f"[devcluster build] {message}", file=sys.stderr, flush=True)


class _Builder:
    def __init__(self, progress: Callable[[str], None]):
        self.progress = progress
        self.root = cache_root()
        self.work = versioned_dir()
        self.bin = self.work / "bin"
        self.log_path = self.work / "build.log"
        self.env = self._go_env()

    def _go_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "GOMODCACHE": str(go_module_cache()),
                "GOCACHE": str(self.root / "go" / "build"),
                "GOPATH": str(self.root / "go" / "path"),
                "CGO_ENABLED": "0",
                # Two cores: keep the build from starving everything else on the machine.
                "GOFLAGS": "-mod=mod -buildvcs=false -trimpath -p=2",
                "GOTOOLCHAIN": "local",
            }
        )
        env.pop("GOBIN", None)
        return env

    # -- helpers ---------------------------------------------------------------------------------------------------
    def go(self, args: Sequence[str], *, cwd: Path, what: str, stream_packages: bool = False) -> str:
        """Run ``go args`` in ``cwd``; log everything; raise BuildError naming ``what`` on failure."""
        command = ["go", *args]
        started = time.monotonic()
        with self.log_path.open("a") as log:
            log.write(f"\n$ (cd {cwd}) {' '.join(command)}\n")
            log.flush()
            process = subprocess.Popen(
                command, cwd=cwd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            assert process.stdout is not None
            lines: list[str] = []
            compiled = 0
            last_report = started
            for line in process.stdout:
                log.write(line)
                lines.append(line)
                if stream_packages and line and not line.startswith(("go: ", "#")) and " " not in line.strip():
                    compiled += 1
                    now = time.monotonic()
                    if now - last_report >= 15:
                        last_report = now
                        self.progress(f"  {what}: {compiled} packages compiled, {now - started:.0f}s")
            code = process.wait()
        if code != 0:
            tail = "".join(lines[-25:]).strip()
            raise BuildError(f"{what} failed (go {' '.join(args[:2])} ...; full log: {self.log_path}):\n{tail}")
        return "".join(lines)

    def fetch(self, module: str, version: str) -> dict:
        """Download one module; the error names it when the proxy or the version is unreachable."""
        self.progress(f"fetching {module}@{version}")
        result = subprocess.run(
            ["go", "mod", "download", "-json", f"{module}@{version}"],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
        )
        try:
            info = json.loads(result.stdout) if result.stdout.strip() else {}
        except json.JSONDecodeError:
            info = {}
        if result.returncode != 0 or info.get("Error"):
            proxy = self.env.get("GOPROXY") or "the Go module proxy (GOPROXY)"
            reason = info.get("Error") or result.stderr.strip() or f"go exited {result.returncode}"
            raise BuildError(f"cannot fetch Go module {module}@{version} from {proxy}: {reason}")
        return info

    @staticmethod
    def write_module(directory: Path, name: str, body: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        # Start from a clean go.mod/go.sum so a half-finished earlier run cannot leave a wrong graph behind.
        (directory / "go.sum").unlink(missing_ok=True)
        (directory / "go.mod").write_text(f"module {name}\n\n{body}")

    # -- components ------------------------------------------------------------------------------------------------
    def build_etcd(self) -> None:
        target = self.bin / "etcd"
        if target.exists():
            self.progress("etcd: already built")
            return
        self.fetch(versions.ETCD_MODULE, versions.ETCD_VERSION)
        module_dir = self.work / "src" / "etcd"
        self.write_module(
            module_dir,
            "reservoir.local/devcluster/etcd",
            f"go 1.26.0\n\nrequire {versions.ETCD_MODULE} {versions.ETCD_VERSION}\n",
        )
        self.progress(f"etcd {versions.ETCD_VERSION}: building")
        started = time.monotonic()
        self.go(
            ["build", "-v", "-ldflags", "-s -w", "-o", str(target), versions.ETCD_MODULE],
            cwd=module_dir,
            what=f"building etcd ({versions.ETCD_MODULE}@{versions.ETCD_VERSION})",
            stream_packages=True,
        )
        self.progress(f"etcd: built in {time.monotonic() - started:.0f}s")

    def install(self, module: str, version: str, command: str, ldflags: str) -> None:
        """``go install <module>/cmd/<command>@<version>`` into the bin directory. Modules installed this way are
        built with their own go.mod as it is, so GOFLAGS goes without -mod=mod."""
        saved = self.env
        self.env = {**saved, "GOBIN": str(self.bin), "GOFLAGS": saved["GOFLAGS"].replace("-mod=mod ", "")}
        try:
            self.go(
                ["install", "-v", "-ldflags", ldflags, f"{module}/cmd/{command}@{version}"],
                cwd=self.work,
                what=f"building {command} ({module}@{version})",
                stream_packages=True,
            )
        finally:
            self.env = saved

    def build_kwok(self) -> None:
        target = self.bin / "kwok"
        if target.exists():
            self.progress("kwok: already built")
            return
        self.fetch(versions.KWOK_MODULE, versions.KWOK_VERSION)
        self.progress(f"kwok {versions.KWOK_VERSION}: building")
        started = time.monotonic()
        self.install(
            versions.KWOK_MODULE,
            versions.KWOK_VERSION,
            "kwok",
            f"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version={versions.KWOK_VERSION}",
        )
        self.progress(f"kwok: built in {time.monotonic() - started:.0f}s")

    def module_version_of(self, target: Path) -> str | None:
        """The main module version a Go binary was built from (its embedded build info), None if unreadable."""
        result = subprocess.run(["go", "version", "-m", str(target)], capture_output=True, text=True, env=self.env)
        match = re.search(r"^\s*mod\s+\S+\s+(v\S+)", result.stdout, re.M)
        return match.group(1) if result.returncode == 0 and match else None

    def build_kueue(self) -> None:
        # Always fetched: the launcher reads the CRDs and webhook manifests from the module cache at run time.
        self.fetch(versions.KUEUE_MODULE, versions.KUEUE_VERSION)
        target = self.bin / "kueue"
        if target.exists():
            found = self.module_version_of(target)
            if found == versions.KUEUE_VERSION:
                self.progress("kueue: already built")
                return
            self.progress(f"kueue: the binary in the cache is {found or 'of an unknown version'}; rebuilding")
        self.progress(f"kueue {versions.KUEUE_VERSION}: building (5-9 minutes on 2 cores with a cold Go cache)")
        started = time.monotonic()
        self.install(
            versions.KUEUE_MODULE,
            versions.KUEUE_VERSION,
            "kueue",
            f"-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion={versions.KUEUE_VERSION}",
        )
        self.progress(f"kueue: built in {time.monotonic() - started:.0f}s")

    def build_helm(self) -> None:
        target = self.bin / "helm"
        if target.exists():
            self.progress("helm: already built")
            return
        info = self.fetch(versions.HELM_MODULE, versions.HELM_VERSION)
        # As helm's own Makefile does: the Kubernetes version `helm template` and `helm lint` assume by default is
        # the one of the client-go it is built with (without it, 1.20, and a chart's kubeVersion constraint fails).
        client_go = re.search(r"^\s*k8s\.io/client-go v0\.(\d+)\.", Path(info["GoMod"]).read_text(), re.M)
        if client_go is None:
            raise BuildError(f"found no k8s.io/client-go requirement in {versions.HELM_MODULE}'s go.mod")
        flags = [f"-s -w -X helm.sh/helm/v3/internal/version.version={versions.HELM_VERSION}"]
        for package in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
            flags += [f"-X {package}.k8sVersionMajor=1", f"-X {package}.k8sVersionMinor={client_go.group(1)}"]
        self.progress(f"helm {versions.HELM_VERSION}: building (about 3 minutes on 2 cores with a cold Go cache)")
        started = time.monotonic()
        self.install(versions.HELM_MODULE, versions.HELM_VERSION, "helm", " ".join(flags))
        self.progress(f"helm: built in {time.monotonic() - started:.0f}s")

    def kubernetes_wrapper(self) -> Path:
        info = self.fetch(versions.KUBERNETES_MODULE, versions.KUBERNETES_VERSION)
        upstream_go_mod = Path(info["GoMod"]).read_text()
        staging = sorted(set(re.findall(r"^\s*(k8s\.io/[\w.\-/]+)\s+=>\s+\./staging/", upstream_go_mod, re.M)))
        if not staging:
            raise BuildError(f"found no staging replace lines in {versions.KUBERNETES_MODULE}'s go.mod")
        godebug = "\n".join(re.findall(r"^godebug\s+.*$", upstream_go_mod, re.M))
        replaces = "\n".join(f"\t{path} => {path} {versions.KUBERNETES_STAGING_VERSION}" for path in staging)
        module_dir = self.work / "src" / "kubernetes"
        self.write_module(
            module_dir,
            "reservoir.local/devcluster/kubernetes",
            f"go 1.26.0\n\n{godebug}\n\nrequire {versions.KUBERNETES_MODULE} {versions.KUBERNETES_VERSION}\n\n"
            f"replace (\n{replaces}\n)\n",
        )
        self.progress(f"kubernetes: wrapper module replaces {len(staging)} staging modules with their releases")
        return module_dir

    def kubernetes_ldflags(self) -> str:
        version = versions.KUBERNETES_VERSION
        major, minor = version.lstrip("v").split(".")[:2]
        flags = ["-s", "-w"]
        for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            flags += [
                f"-X {package}.gitVersion={version}",
                f"-X {package}.gitMajor={major}",
                f"-X {package}.gitMinor={minor}",
                f"-X {package}.gitTreeState=clean",
            ]
        return " ".join(flags)

    def build_kubernetes(self) -> None:
        missing = [name for name in versions.KUBERNETES_COMMANDS if not (self.bin / name).exists()]
        if not missing:
            self.progress("kubernetes: already built")
            return
        module_dir = self.kubernetes_wrapper()
        self.progress("kubernetes: resolving the module graph (downloads a few hundred modules on a cold cache)")
        started = time.monotonic()
        self.go(
            ["mod", "download", versions.KUBERNETES_MODULE],
            cwd=module_dir,
            what=f"resolving {versions.KUBERNETES_MODULE}@{versions.KUBERNETES_VERSION}",
        )
        for name in missing:
            self.progress(f"kubernetes {versions.KUBERNETES_VERSION}: building {name}")
            step_started = time.monotonic()
            self.go(
                [
                    "build",
                    "-v",
                    "-ldflags",
                    self.kubernetes_ldflags(),
                    "-o",
                    str(self.bin / name),
                    f"{versions.KUBERNETES_MODULE}/cmd/{name}",
                ],
                cwd=module_dir,
                what=f"building {name} ({versions.KUBERNETES_MODULE}@{versions.KUBERNETES_VERSION})",
                stream_packages=True,
            )
            self.progress(f"{name}: built in {time.monotonic() - step_started:.0f}s")
        self.progress(f"kubernetes: built in {time.monotonic() - started:.0f}s")

    def run(self) -> None:
        self.check_go()
        self.bin.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        self.progress(f"building into {self.bin} (log: {self.log_path})")
        self.build_etcd()
        self.build_kwok()
        self.build_kubernetes()
        self.build_kueue()
        self.build_helm()
        stamp = {
            "kubernetes": versions.KUBERNETES_VERSION,
            "etcd": versions.ETCD_VERSION,
            "kwok": versions.KWOK_VERSION,
            "kueue": versions.KUEUE_VERSION,
            "helm": versions.HELM_VERSION,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(time.monotonic() - started, 1),
        }
        (self.bin / STAMP_NAME).write_text(json.dumps(stamp, indent=2) + "\n")
        self.progress(f"done in {time.monotonic() - started:.0f}s")

    def check_go(self) -> None:
        if shutil.which("go") is None:
            raise BuildError("the Go toolchain (go) is not on PATH; Go >= 1.26 is needed to build the control plane")
        self.check_go_version()

    def check_go_version(self) -> None:
        output = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, env=self.env).stdout
        match = re.match(r"go(\d+)\.(\d+)", output.strip())
        if match and (int(match.group(1)), int(match.group(2))) < versions.GO_MINIMUM:
            wanted = ".".join(map(str, versions.GO_MINIMUM))
            raise BuildError(
                f"Go {wanted} or newer is needed to build Kubernetes {versions.KUBERNETES_VERSION}; found {output}"
            )


@contextlib.contextmanager
def build_lock(directory: Path, report: Callable[[str], None], what: str = "build") -> Iterator[None]:
    """One build into `directory` at a time, across processes (an flock on its `.build.lock`); a second one says it
    waits, then waits. The caller checks again, inside, whether the build is still needed."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".build.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            report(f"another {what} is running; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure_built(progress: Callable[[str], None] | None = None) -> Path:
    """Build the binaries if any is missing; return the directory holding them."""
    if is_built():
        return bin_dir()
    report = progress or _default_progress
    with build_lock(versioned_dir(), report):
        if not is_built():
            _Builder(report).run()
    return bin_dir()


def ensure_helm(progress: Callable[[str], None] | None = None) -> Path:
    """Build helm alone if it is missing (no control plane needed); return its path."""
    target = binary("helm")
    if os.access(target, os.X_OK):
        return target
    report = progress or _default_progress
    with build_lock(versioned_dir(), report):
        if not os.access(target, os.X_OK):
            builder = _Builder(report)
            builder.check_go()
            builder.bin.mkdir(parents=True, exist_ok=True)
            builder.build_helm()
    return target
