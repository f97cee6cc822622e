"""kube-rs's own cluster tests: the `#[ignore]`d tests inside the `kube-client` and
`kube-runtime` crates as published on crates.io (the version shardplane's workspace uses, so
cargo has already downloaded them), run against the endpoint KUBECONFIG names.

Those tests live in the crates' library test modules, so they only run by compiling the crates
themselves as test targets. The sources are copied from cargo's registry into
`target/kube-rs-tests/` with a workspace around them and this directory's Cargo.lock (`--locked`,
so every run builds the same dependency versions). One edit is made, and only to the manifests:
crates.io drops path dev-dependencies when publishing, and both crates' tests import `kube`
(the facade crate), so it is added back as the dev-dependency kube-rs's own workspace has.

Each ignored test is one pytest test, found by listing the compiled test binaries, so a test
kube-rs adds is run without being named here."""

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VERSION = "5.0.0"
CRATES = ["kube-client", "kube-runtime"]
# Every feature the tests are gated on that builds without system libraries (openssl-tls needs
# libssl-dev; its one test is the rustls one's twin).
FEATURES = ["rustls-tls", "ws", "kubelet-debug", "jsonpatch", "unstable-client", "gzip"]
WORK = ROOT / "target" / "kube-rs-tests"
DEV_DEPENDENCY = f"""
[dev-dependencies.kube]
version = "={VERSION}"
default-features = false
features = ["client", "derive", "runtime", "ws", "rustls-tls"]
"""
WORKSPACE = """[workspace]
members = ["kube-client", "kube-runtime"]
resolver = "2"

[patch.crates-io]
kube-client = { path = "kube-client" }
kube-runtime = { path = "kube-runtime" }
"""


def registry_source(crate):
    """The unpacked crates.io source of `crate`, fetching it through the main workspace (whose
    lock pins the same version) if cargo has not unpacked it yet."""
    home = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
    pattern = f"{home}/registry/src/*/{crate}-{VERSION}"
    if not glob.glob(pattern):
        subprocess.run(["cargo", "fetch", "--locked"], cwd=ROOT, check=True, timeout=600)
        for archive in glob.glob(f"{home}/registry/cache/*/{crate}-{VERSION}.crate"):
            dest = Path(archive).parent.parent.parent / "src" / Path(archive).parent.name
            dest.mkdir(parents=True, exist_ok=True)
            subprocess.run(["tar", "-xzf", archive, "-C", str(dest)], check=True)
    found = glob.glob(pattern)
    if not found:
        raise RuntimeError(f"{crate} {VERSION} is not in cargo's registry ({pattern})")
    return Path(found[0])


def prepare():
    """Lays out the workspace under target/ (fresh copies, so a stale edit never survives)."""
    WORK.mkdir(parents=True, exist_ok=True)
    for crate in CRATES:
        dest = WORK / crate
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(registry_source(crate), dest)
        with open(dest / "Cargo.toml", "a") as f:
            f.write(DEV_DEPENDENCY)
    (WORK / "Cargo.toml").write_text(WORKSPACE)
    shutil.copy(HERE / "Cargo.lock", WORK / "Cargo.lock")


_binaries = None


def binaries():
    """{crate: test binary}, building them once per session (sharing the repository's target
    directory, so the dependencies the workspace already built are reused)."""
    global _binaries
    if _binaries is None:
        prepare()
        args = ["cargo", "test", "--locked", "--lib", "--no-run", "--message-format=json"]
        for crate in CRATES:
            args += ["-p", crate]
        args += ["--features", ",".join(f"kube-client/{f}" for f in FEATURES)]
        env = {**os.environ, "CARGO_TARGET_DIR": str(ROOT / "target")}
        out = subprocess.run(args, cwd=WORK, env=env, capture_output=True, text=True, timeout=1800)
        if out.returncode != 0:
            raise RuntimeError(f"building kube-rs's tests failed:\n{out.stderr[-4000:]}")
        _binaries = {}
        for line in out.stdout.splitlines():
            msg = json.loads(line)
            if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["profile"]["test"]:
                _binaries[msg["target"]["name"].replace("_", "-")] = msg["executable"]
        missing = set(CRATES) - set(_binaries)
        if missing:
            raise RuntimeError(f"no test binary for {sorted(missing)}")
    return _binaries


def ignored_tests():
    """(crate, test path) of every `#[ignore]`d test in the built binaries."""
    found = []
    for crate, exe in sorted(binaries().items()):
        out = subprocess.run([exe, "--list", "--ignored", "--format=terse"], capture_output=True, text=True, check=True, timeout=60)
        found += [(crate, line.removesuffix(": test")) for line in out.stdout.splitlines() if line.endswith(": test")]
    if not found:
        raise RuntimeError("kube-rs's test binaries list no ignored tests")
    return found


def pytest_generate_tests(metafunc):
    if "kube_rs_test" in metafunc.fixturenames:
        tests = ignored_tests()
        metafunc.parametrize("kube_rs_test", tests, ids=[f"{c}::{t}" for c, t in tests])


def test_kube_rs_cluster_test(kube_rs_test):
    crate, name = kube_rs_test
    exe = binaries()[crate]
    out = subprocess.run([exe, "--ignored", "--exact", name, "--test-threads=1"], env={**os.environ, "RUST_BACKTRACE": "0"}, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{crate} {name} failed:\n{out.stdout[-3000:]}\n{out.stderr[-2000:]}"
    assert "1 passed" in out.stdout, f"{crate} {name} did not run:\n{out.stdout[-2000:]}"
