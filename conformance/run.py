#!/usr/bin/env python3
"""Runs the conformance suites against one or more topologies and writes conformance/RESULTS.md.

    python3 conformance/run.py                        # shard, router-1 and router-4 on real etcd
    python3 conformance/run.py --topology router-4    # one topology
    python3 conformance/run.py --kubeconfig PATH      # any Kubernetes API endpoint (e.g. a real cluster)

For shardplane's own topologies it builds `shard-router`, starts etcd 3.5 on a free loopback
port with its data on /dev/shm, and starts one shard over the whole hash range, or the router
over K shard processes. Every suite is a pytest run with KUBECONFIG set; the results come from
its JUnit XML. Tests listed in deselected.txt are not run (each with its reason, reported);
tests listed in expected-failures.txt may fail (each with its reason). The exit status is 1 if
any other test failed, so CI fails on a regression; an expected failure that passes is
reported so the list can shrink.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
KUBECTL_DIR = Path("/usr/lib/google-cloud-sdk/bin")


def site_dir(module):
    out = subprocess.run([sys.executable, "-c", f"import {module}, os; print(os.path.dirname({module}.__file__))"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def suites():
    """name -> (description, pytest arguments)."""
    kr8s = site_dir("kr8s")
    k8s = site_dir("kubernetes")
    return {
        "upstream": ("Upstream [Conformance] checks that need only an API server, reproduced with the PyPI kubernetes client", [str(HERE / "upstream")]),
        "hostile": ("Hostile input: malformed, oversized and encoded-to-trick requests get upstream's Status; the server keeps serving and canary objects stay intact", [str(HERE / "hostile")]),
        "validation": ("Invalid objects of every served kind and changes to immutable fields, each answered with upstream's 422 causes", [str(HERE / "validation")]),
        "security": ("Identity and access: anonymous callers, view/edit/admin with upstream's 403s, escalation, bound ServiceAccount tokens and TokenReview, kubectl auth can-i --list and whoami, impersonation", [str(HERE / "security")]),
        "shardplane": ("shardplane checks: KEP-5866 shardSelector and the invariants I2-I5 from outside", [str(HERE / "shardplane")]),
        "kubectl": ("kubectl 1.27-1.33 scenario matrix, a fresh HOME per run", [str(HERE / "kubectl")]),
        "client-go": ("client-go 0.32 (Debian): protobuf writes while SharedInformers (list-watch and WatchList) follow; each must see every acknowledged write and end equal to a LIST", [str(HERE / "clientgo")]),
        "kube-rs": ("kube-rs's own #[ignore]d cluster tests (kube-client, kube-runtime 5.0.0 from crates.io), built from the published sources", [str(HERE / "kube_rs")]),
        "python-kubernetes": (
            "Tests shipped in the PyPI kubernetes wheel (dynamic client, discovery) through a kubernetes.e2e_test.base shim",
            ["-p", "e2e_shim", "--rootdir", k8s, "--confcutdir", k8s, f"{k8s}/dynamic/test_client.py", f"{k8s}/dynamic/test_discovery.py"],
        ),
        "kr8s": (
            "Integration tests shipped in the PyPI kr8s wheel, with our k8s_cluster fixture",
            # kr8s's per-test namespace is `kr8s-pytest-<4 hex>-<4 hex>`: with ~130 tests and
            # deleted namespaces lingering a second or two, two tests draw the same name about
            # once in fifty runs (upstream on kind too). Only that setup collision is rerun.
            ["-p", "cluster_fixture", "-p", "pytest_asyncio", "--reruns", "1",
             "--only-rerun", r'namespaces "kr8s-pytest-[0-9a-f-]+" already exists',
             "-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function", "--rootdir", kr8s, "--confcutdir", kr8s, f"{kr8s}/tests/test_api.py", f"{kr8s}/tests/test_objects.py"],
        ),
    }


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, within=90, context=None):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2, context=context) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready within {within}s")


def kubeconfig(server, path):
    path.write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: " + server
        + "\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {}\n"
    )


# One Node, registered as a kubelet registers itself (labels, addresses, capacity, a Ready
# condition). No kubelet runs: this is what the API holds on a one-node cluster such as kind's,
# which suites listing "the cluster's nodes" (the client libraries' own tests) expect to find.
SEED_NODE = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "conformance-node", "labels": {"kubernetes.io/hostname": "conformance-node", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "node-role.kubernetes.io/control-plane": ""}},
    "status": {"capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"}, "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": "conformance-node"}],
               "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "registered by the conformance harness"}],
               "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Debian GNU/Linux 12 (bookworm)", "kernelVersion": "", "containerRuntimeVersion": "", "architecture": "amd64", "operatingSystem": "linux",
                            "machineID": "", "systemUUID": "", "bootID": "", "kubeProxyVersion": ""}}}


def register_node(url, context=None):
    """Creates SEED_NODE, then writes its status (a create ignores status, as upstream's does)."""
    def send(method, path, body):
        req = urllib.request.Request(f"{url}{path}", data=json.dumps(body).encode(), method=method, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10, context=context) as r:
            return json.loads(r.read())
    created = send("POST", "/api/v1/nodes", SEED_NODE)
    ready = send("PUT", "/api/v1/nodes/conformance-node/status", {**created, "status": SEED_NODE["status"]})
    # A new node is tainted not-ready (TaintNodesByCondition); once the node reports Ready,
    # kube-controller-manager's node lifecycle controller lifts the taint, as is done here.
    ready["spec"]["taints"] = [t for t in ready["spec"].get("taints", []) if t.get("key") != "node.kubernetes.io/not-ready"]
    send("PUT", "/api/v1/nodes/conformance-node", ready)


class Topology:
    """etcd plus one shard (whole range) or the router over K shard processes."""

    def __init__(self, name, exe, etcd_bin, compaction):
        self.name, self.exe, self.etcd_bin, self.compaction = name, exe, etcd_bin, compaction
        self.procs = []
        self.dir = Path(tempfile.mkdtemp(prefix=f"conformance-{name}-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))

    def start(self):
        client, peer = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{client}"
        self.spawn([self.etcd_bin, "--data-dir", str(self.dir / "etcd"), "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url, "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--log-level", "error"], "etcd")
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{etcd_url}/health", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("etcd did not start")
                time.sleep(0.1)
        port = free_port()
        if self.name == "shard":
            # A shard alone serves plain HTTP to anyone (it is meant to sit behind a router).
            url, context = f"http://127.0.0.1:{port}", None
            self.spawn([self.exe, "shard", "--insecure-plain-http", "--etcd-endpoints", etcd_url, "--listen", f"127.0.0.1:{port}", "--id", "conformance", "--compaction-interval", str(self.compaction)], "shard")
            self.kubeconfig = self.dir / "kubeconfig"
            kubeconfig(url, self.kubeconfig)
        else:
            # The router as a user starts it: HTTPS with its own PKI, RBAC, and the kubeconfig
            # it writes (the admin's client certificate, system:masters), which every suite uses.
            k = self.name.split("-")[1]
            url, pki = f"https://127.0.0.1:{port}", self.dir / "pki"
            self.kubeconfig = self.dir / "router-kubeconfig"
            self.spawn([self.exe, "--etcd-endpoints", etcd_url, "--listen", f"127.0.0.1:{port}", "--shards", k, "--kubeconfig", str(self.kubeconfig), "--pki-dir", str(pki), "--compaction-interval", str(self.compaction)], "router")
            deadline = time.monotonic() + 60
            while not self.kubeconfig.exists():  # written once the PKI is whole and the port bound
                if time.monotonic() > deadline:
                    raise RuntimeError("the router made no PKI")
                time.sleep(0.1)
            context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
            context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        wait_ready(url, context=context)
        register_node(url, context)
        return self

    def spawn(self, argv, label):
        log = open(self.dir / f"{label}.log", "w")
        # Its own process group, so stopping it stops its children (the router's shards).
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.PIPE, start_new_session=True))

    def stop(self):
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)


def run_suite(name, args, kubeconfig_path, workdir, per_test_timeout):
    """Runs one suite; returns {test: ("passed"|"failed"|"skipped", detail)} and the deselected."""
    junit = workdir / f"{name}.xml"
    deselected = workdir / f"{name}.deselected.json"
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig_path),
        "PYTHONPATH": os.pathsep.join([str(HERE / "plugins"), str(HERE / "upstream"), os.environ.get("PYTHONPATH", "")]),
        "CONFORMANCE_SUITE": name,
        "CONFORMANCE_DESELECTED": str(HERE / "deselected.txt"),
        "CONFORMANCE_DESELECTED_OUT": str(deselected),
        "NO_PROXY": "127.0.0.1,localhost",
        "HOME": tempfile.mkdtemp(prefix="conformance-home-"),
        # Builds (kube-rs's tests) still find the toolchain and crates behind the fresh HOME.
        "CARGO_HOME": os.environ.get("CARGO_HOME") or os.path.expanduser("~/.cargo"),
        "RUSTUP_HOME": os.environ.get("RUSTUP_HOME") or os.path.expanduser("~/.rustup"),
    }
    cmd = [sys.executable, "-m", "pytest", "-p", "selection", "-p", "no:cacheprovider", "-q", "-rN", "--timeout", str(per_test_timeout), f"--junitxml={junit}", *args]
    started = time.monotonic()
    out = subprocess.run(cmd, env=env, cwd=workdir, capture_output=True, text=True)
    (workdir / f"{name}.log").write_text(out.stdout + out.stderr)
    results = {}
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            test = test_id(case.get("classname", ""), case.get("name"))
            failure = case.find("failure") if case.find("failure") is not None else case.find("error")
            if failure is not None:
                results[test] = ("failed", (failure.get("message") or "").splitlines()[0][:200] if failure.get("message") else "")
            elif case.find("skipped") is not None:
                results[test] = ("skipped", (case.find("skipped").get("message") or "")[:200])
            else:
                results[test] = ("passed", "")
    if not results and out.returncode not in (0, 5):
        results[f"{name} (collection)"] = ("failed", out.stdout[-500:] + out.stderr[-500:])
    dropped = json.loads(deselected.read_text()) if deselected.exists() else []
    return results, dropped, time.monotonic() - started


def test_id(classname, name):
    """`module.py::[Class::]name` from a JUnit classname such as `tests.test_api` or
    `dynamic.test_client.TestDynamicClient`."""
    parts = classname.split(".")
    mod = max((i for i, p in enumerate(parts) if p.startswith("test")), default=len(parts) - 1)
    return "::".join([f"{parts[mod]}.py", *parts[mod + 1:], name])


def load_expected():
    expected = {}
    for line in (HERE / "expected-failures.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        head, _, reason = line.partition(" -- ")
        suite, _, test = head.strip().partition(" ")
        expected[(suite, test.strip())] = reason.strip()
    return expected


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topology", action="append", choices=["shard", "router-1", "router-4"], help="repeatable; default: all three")
    ap.add_argument("--kubeconfig", help="run against this endpoint instead of starting one")
    ap.add_argument("--suite", action="append", help="repeatable; default: all")
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"))
    ap.add_argument("--per-test-timeout", type=int, default=180)
    ap.add_argument("--compaction-interval", type=int, default=10, help="seconds, for the servers started here")
    a = ap.parse_args()

    all_suites = suites()
    chosen = a.suite or list(all_suites)
    os.environ.setdefault("CONFORMANCE_COMPACTION_SECONDS", str(a.compaction_interval))
    os.environ.setdefault("CONFORMANCE_NO_EVENT_SECONDS", "10")
    if a.kubeconfig:
        topologies = ["external"]
    else:
        topologies = a.topology or ["shard", "router-1", "router-4"]
        subprocess.run(["cargo", "build", "-q", "--bin", "shard-router"], cwd=ROOT, check=True)
        exe = str(ROOT / "target" / "debug" / "shard-router")
        etcd_bin = str(ROOT / ".tools/etcd/usr/bin/etcd") if (ROOT / ".tools/etcd/usr/bin/etcd").exists() else shutil.which("etcd")
        if not etcd_bin:
            sys.exit("no etcd: run deploy/local/install-deps.sh")

    expected = load_expected()
    # results[suite][test][topology] = (status, detail)
    results, deselected, durations = {}, {}, {}
    for topo in topologies:
        t = None
        try:
            if topo == "external":
                kc = Path(a.kubeconfig).resolve()
            else:
                t = Topology(topo, exe, etcd_bin, a.compaction_interval).start()
                kc = t.kubeconfig
            work = Path(tempfile.mkdtemp(prefix=f"conformance-{topo}-results-"))
            for s in chosen:
                if s == "security" and topo == "shard":
                    # One shard asked directly is plain HTTP with no authentication (a shard
                    # sits behind a router): there is no identity to check.
                    continue
                desc, args = all_suites[s]
                print(f"== {topo}: {s}", flush=True)
                got, dropped, took = run_suite(s, args, kc, work, a.per_test_timeout)
                durations[(s, topo)] = took
                for test, res in got.items():
                    results.setdefault(s, {}).setdefault(test, {})[topo] = res
                for d in dropped:
                    deselected.setdefault(s, {})[d["test"]] = d["reason"]
                passed = sum(1 for r in got.values() if r[0] == "passed")
                print(f"   {passed}/{len(got)} passed, {len(dropped)} deselected, {took:.0f}s (logs: {work})", flush=True)
        finally:
            if t:
                t.stop()

    regressions, now_passing = [], []
    for s, tests in results.items():
        for test, by_topo in tests.items():
            for topo, (status, detail) in by_topo.items():
                reason = expected.get((s, test))
                if status == "failed" and reason is None:
                    regressions.append(f"{s} {test} [{topo}]: {detail}")
                if status == "passed" and reason is not None:
                    now_passing.append(f"{s} {test} [{topo}]")
    write_report(Path(a.out), chosen, all_suites, topologies, results, deselected, expected, durations, a)
    for line in now_passing:
        print(f"now passing (remove from expected-failures.txt): {line}")
    for line in regressions:
        print(f"UNEXPECTED FAILURE: {line}")
    print(f"report: {a.out}")
    sys.exit(1 if regressions else 0)


def cell(res, reason):
    if res is None:
        return "–"
    status = res[0]
    if status == "passed":
        return "pass"
    if status == "skipped":
        return "skipped"
    return "expected fail" if reason else "**FAIL**"


def write_report(out, chosen, all_suites, topologies, results, deselected, expected, durations, a):
    cmd = "python3 conformance/run.py " + " ".join(sys.argv[1:])
    lines = [
        "# Conformance results",
        "",
        "Generated by the command below; do not edit by hand.",
        "",
        f"- Command: `{cmd.strip()}`",
        f"- Date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        f"- Topologies: {', '.join(topologies)}" + ("" if a.kubeconfig else f" (real etcd; compaction every {a.compaction_interval} s)"),
        "",
        "## Summary",
        "",
        "| suite | topology | passed | expected failures | unexpected failures | skipped | deselected | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in chosen:
        tests = results.get(s, {})
        for topo in topologies:
            rs = [(t, by.get(topo)) for t, by in tests.items() if by.get(topo)]
            p = sum(1 for _, r in rs if r[0] == "passed")
            xf = sum(1 for t, r in rs if r[0] == "failed" and (s, t) in expected)
            f = sum(1 for t, r in rs if r[0] == "failed" and (s, t) not in expected)
            sk = sum(1 for _, r in rs if r[0] == "skipped")
            lines.append(f"| {s} | {topo} | {p} | {xf} | {f} | {sk} | {len(deselected.get(s, {}))} | {durations.get((s, topo), 0):.0f} |")
    for s in chosen:
        desc, _ = all_suites[s]
        lines += ["", f"## {s}", "", desc, "", "| test | " + " | ".join(topologies) + " | note |", "|---|" + "---|" * len(topologies) + "---|"]
        for test in sorted(results.get(s, {})):
            by = results[s][test]
            reason = expected.get((s, test), "")
            if not reason:
                reason = next((d for r in by.values() if r[0] == "failed" and (d := r[1])), "")
            reason = reason.replace("|", "\\|")
            lines.append(f"| `{test}` | " + " | ".join(cell(by.get(t), expected.get((s, test))) for t in topologies) + f" | {reason} |")
        for test, reason in sorted(deselected.get(s, {}).items()):
            lines.append(f"| `{test}` | " + " | ".join("deselected" for _ in topologies) + f" | {reason} |")
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
