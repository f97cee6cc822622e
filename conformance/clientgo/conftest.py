"""Builds the client-go program once, when pytest starts and before any test's timeout runs:
`go build` of client-go from source takes minutes on a busy two-core machine, and timing it as
part of the first test made that test fail on build speed instead of behaviour."""

import os
import subprocess
from pathlib import Path

import pytest

GO = "/usr/lib/go-1.24/bin/go"
HERE = Path(__file__).resolve().parent
# Shared with the Rust client-go test, so the client-go packages compile once.
CACHE = HERE.parent.parent / "target" / "tmp" / "clientgo"
BINARY = CACHE / "informers"


def pytest_configure(config):
    if not os.path.exists(GO):
        raise RuntimeError("Go 1.24 missing: run deploy/local/install-deps.sh")
    CACHE.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": "/usr/share/gocode", "GOCACHE": str(CACHE / "cache"), "GOFLAGS": ""}
    subprocess.run([GO, "build", "-o", str(BINARY), str(HERE / "main.go")], env=env, check=True, timeout=1800)


@pytest.fixture(scope="session")
def binary():
    """The program pytest_configure built."""
    return BINARY
