"""Build ory/hydra (a real OpenID Connect provider) from Go modules into the cache outside the repository.

`go install github.com/ory/hydra/v2@<version>` is refused: hydra's go.mod has replace directives, which a plain
install ignores. So hydra gets a small wrapper module of its own in the cache, as etcd does (devcluster/build.py):
it requires hydra as a tool and repeats the two replace lines hydra's own go.mod carries. The build runs only when
the binary is missing; a file lock keeps two concurrent builds (a test run and `make dev`) apart.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from devcluster.build import BuildError, build_lock, cache_root

HYDRA_MODULE = "github.com/ory/hydra/v2"
HYDRA_VERSION = "v2.3.0"
# The replace lines of hydra's own go.mod at this version, which a dependent module must repeat.
HYDRA_REPLACES = (
    "github.com/gobuffalo/pop/v6 => github.com/ory/pop/v6 v6.2.1-0.20241121111754-e5dfc0f3344b",
    "github.com/ory/hydra-client-go/v2 => github.com/ory/hydra-client-go/v2 v2.2.1",
)


def hydra_dir() -> Path:
    return cache_root() / f"hydra-{HYDRA_VERSION}"


def hydra_binary() -> Path:
    return hydra_dir() / "bin" / "hydra"


def is_built() -> bool:
    return os.access(hydra_binary(), os.X_OK)


def _go_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "GOMODCACHE": str(root / "go" / "mod"),
            "GOCACHE": str(root / "go" / "build"),
            "GOPATH": str(root / "go" / "path"),
            "CGO_ENABLED": "0",
            "GOFLAGS": "-mod=mod -buildvcs=false -trimpath -p=2",
            "GOTOOLCHAIN": "local",
        }
    )
    env.pop("GOBIN", None)
    return env


def _build(progress: Callable[[str], None]) -> None:
    if shutil.which("go") is None:
        raise BuildError("the Go toolchain (go) is not on PATH; it is needed to build hydra")
    work = hydra_dir()
    module_dir = work / "src"
    module_dir.mkdir(parents=True, exist_ok=True)
    log_path = work / "build.log"
    env = _go_env(cache_root())
    (module_dir / "go.sum").unlink(missing_ok=True)
    replaces = "\n".join(f"\t{line}" for line in HYDRA_REPLACES)
    (module_dir / "go.mod").write_text(
        f"module reservoir.local/devcluster/hydra\n\ngo 1.26.0\n\nreplace (\n{replaces}\n)\n"
    )
    steps = (
        (["get", "-tool", f"{HYDRA_MODULE}@{HYDRA_VERSION}"], f"fetching {HYDRA_MODULE}@{HYDRA_VERSION}"),
        (["mod", "tidy"], "resolving hydra's module graph"),
        (
            ["build", "-ldflags", "-s -w", "-o", str(hydra_binary()), HYDRA_MODULE],
            "building hydra (a few minutes on 2 cores with a cold Go cache)",
        ),
    )
    started = time.monotonic()
    with log_path.open("a") as log:
        for args, what in steps:
            progress(f"hydra {HYDRA_VERSION}: {what}")
            log.write(f"\n$ (cd {module_dir}) go {' '.join(args)}\n")
            log.flush()
            result = subprocess.run(["go", *args], cwd=module_dir, env=env, stdout=log, stderr=subprocess.STDOUT)
            if result.returncode != 0:
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
                raise BuildError(f"{what} failed (full log: {log_path}):\n{tail}")
    progress(f"hydra: built in {time.monotonic() - started:.0f}s")


def ensure_built(progress: Callable[[str], None] | None = None) -> Path:
    """Build hydra if its binary is missing; return the binary's path."""
    if is_built():
        return hydra_binary()

    def report(message: str) -> None:
        (progress or (lambda text: print(f"[hydra build] {text}", file=sys.stderr, flush=True)))(message)

    with build_lock(hydra_dir(), report, "hydra build"):
        if not is_built():
            (hydra_dir() / "bin").mkdir(parents=True, exist_ok=True)
            _build(report)
    return hydra_binary()
