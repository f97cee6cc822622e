"""kubectl 1.27-1.33 (every version installed) against the endpoint KUBECONFIG names, with default
flags and a fresh HOME per version: what a user types every day."""

import json
import os
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

BIN = Path("/usr/lib/google-cloud-sdk/bin")
VERSIONS = sorted((p.name.split("kubectl.")[1] for p in BIN.glob("kubectl.1.*")), key=lambda v: int(v.split(".")[1]))


class Kubectl:
    def __init__(self, version):
        self.exe = str(BIN / f"kubectl.{version}")
        self.home = tempfile.mkdtemp(prefix=f"kubectl-{version}-")
        self.ns = f"kubectl-{version.replace('.', '-')}-{uuid.uuid4().hex[:5]}"

    def run(self, *args, stdin=None, check=True, timeout=60):
        env = {**os.environ, "HOME": self.home, "KUBECONFIG": os.environ["KUBECONFIG"]}
        out = subprocess.run([self.exe, *args], input=stdin, env=env, capture_output=True, text=True, timeout=timeout)
        if check and out.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {out.returncode}: {out.stderr}")
        return out

    def json(self, *args):
        return json.loads(self.run(*args, "-o", "json").stdout)


@pytest.fixture(params=VERSIONS)
def k(request):
    k = Kubectl(request.param)
    k.run("create", "namespace", k.ns)
    yield k
    k.run("delete", "namespace", k.ns, "--wait=false", check=False)


DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
        ports: [{containerPort: 80}]
"""


def test_version_and_api_resources(k):
    v = json.loads(k.run("version", "-o", "json").stdout)
    assert v["serverVersion"]["major"].isdigit()
    out = k.run("api-resources").stdout
    for line in ("configmaps", "deployments", "namespaces"):
        assert line in out


def test_apply_get_and_table(k):
    k.run("apply", "-n", k.ns, "-f", "-", stdin=DEPLOYMENT)
    table = k.run("get", "-n", k.ns, "deployments").stdout
    assert table.splitlines()[0].split()[:2] == ["NAME", "READY"] and "web" in table
    d = k.json("get", "-n", k.ns, "deployment", "web")
    assert d["spec"]["replicas"] == 2 and d["metadata"]["generation"] == 1
    # A second apply with a change is a patch computed by kubectl (three-way merge).
    k.run("apply", "-n", k.ns, "-f", "-", stdin=DEPLOYMENT.replace("replicas: 2", "replicas: 3"))
    d = k.json("get", "-n", k.ns, "deployment", "web")
    assert d["spec"]["replicas"] == 3 and d["metadata"]["generation"] == 2


def test_strict_validation_refuses_unknown_fields(k):
    out = k.run("apply", "-n", k.ns, "-f", "-", stdin=DEPLOYMENT.replace("replicas: 2", "replicas: 2\n  bogus: 1"), check=False)
    assert out.returncode != 0 and 'unknown field "spec.bogus"' in out.stderr, out.stderr


def test_create_label_annotate_patch_delete(k):
    k.run("create", "configmap", "cfg", "-n", k.ns, "--from-literal=a=1")
    k.run("label", "configmap", "cfg", "-n", k.ns, "tier=backend")
    k.run("annotate", "configmap", "cfg", "-n", k.ns, "note=hi")
    k.run("patch", "configmap", "cfg", "-n", k.ns, "-p", '{"data":{"b":"2"}}')
    k.run("patch", "configmap", "cfg", "-n", k.ns, "--type=merge", "-p", '{"data":{"c":"3"}}')
    k.run("patch", "configmap", "cfg", "-n", k.ns, "--type=json", "-p", '[{"op":"remove","path":"/data/a"}]')
    cm = k.json("get", "configmap", "cfg", "-n", k.ns)
    assert cm["data"] == {"b": "2", "c": "3"}
    assert cm["metadata"]["labels"] == {"tier": "backend"} and cm["metadata"]["annotations"]["note"] == "hi"
    assert [i["metadata"]["name"] for i in k.json("get", "configmaps", "-n", k.ns, "-l", "tier=backend")["items"]] == ["cfg"]
    k.run("delete", "configmap", "cfg", "-n", k.ns)
    k.run("wait", "--for=delete", "configmap/cfg", "-n", k.ns, "--timeout=20s")


def test_replace_and_generate_name(k):
    k.run("create", "-n", k.ns, "-f", "-", stdin="apiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: gen-}\ndata: {a: b}\n")
    items = k.json("get", "configmaps", "-n", k.ns)["items"]
    assert len(items) == 1 and items[0]["metadata"]["name"].startswith("gen-")
    cm = items[0]
    cm["data"] = {"a": "replaced"}
    k.run("replace", "-n", k.ns, "-f", "-", stdin=json.dumps(cm))
    assert k.json("get", "configmap", cm["metadata"]["name"], "-n", k.ns)["data"] == {"a": "replaced"}


def test_get_watch_sees_a_change(k):
    k.run("create", "configmap", "watched", "-n", k.ns)
    env = {**os.environ, "HOME": k.home}
    w = subprocess.Popen([k.exe, "get", "configmaps", "-n", k.ns, "--watch", "--output-watch-events", "-o", "name", "--request-timeout=20s"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        first = w.stdout.readline()
        assert "watched" in first, first
        k.run("label", "configmap", "watched", "-n", k.ns, "x=y")
        assert "watched" in w.stdout.readline()
    finally:
        w.kill()
        w.wait()


def test_explain(k):
    out = k.run("explain", "pods.spec.containers").stdout
    assert "image" in out and "FIELDS" in out.upper()


def test_server_side_apply(k):
    k.run("apply", "--server-side", "-n", k.ns, "-f", "-", stdin="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ssa}\ndata: {a: b}\n")
    cm = k.json("get", "configmap", "ssa", "-n", k.ns, "--show-managed-fields")
    assert cm["data"] == {"a": "b"} and cm["metadata"]["managedFields"][0]["manager"] == "kubectl"
    # Re-applied without a: the server removes what the manager no longer sets.
    k.run("apply", "--server-side", "-n", k.ns, "-f", "-", stdin="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ssa}\ndata: {c: d}\n")
    assert k.json("get", "configmap", "ssa", "-n", k.ns)["data"] == {"c": "d"}
    # Another manager changing c conflicts, unless it forces.
    rival = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ssa}\ndata: {c: e}\n"
    out = k.run("apply", "--server-side", "--field-manager=rival", "-n", k.ns, "-f", "-", stdin=rival, check=False)
    assert out.returncode != 0 and 'conflict with "kubectl"' in out.stderr, out.stderr
    k.run("apply", "--server-side", "--field-manager=rival", "--force-conflicts", "-n", k.ns, "-f", "-", stdin=rival)
    cm = k.json("get", "configmap", "ssa", "-n", k.ns, "--show-managed-fields")
    assert cm["data"] == {"c": "e"} and sorted(m["manager"] for m in cm["metadata"]["managedFields"]) == ["kubectl", "rival"]


def test_get_flowschemas_and_priority_levels_shows_upstreams_defaults(k):
    out = k.run("get", "flowschemas,prioritylevelconfigurations").stdout
    lines = out.splitlines()
    # Both tables, with upstream's columns and the mandatory and suggested objects.
    fs_header = next(l for l in lines if l.startswith("NAME") and "PRIORITYLEVEL" in l)
    assert fs_header.split() == ["NAME", "PRIORITYLEVEL", "MATCHINGPRECEDENCE", "DISTINGUISHERMETHOD", "AGE", "MISSINGPL"], fs_header
    pl_header = next(l for l in lines if l.startswith("NAME") and "NOMINALCONCURRENCYSHARES" in l)
    assert pl_header.split()[:2] == ["NAME", "TYPE"], pl_header
    rows = {l.split()[0]: l.split() for l in lines if not l.startswith("NAME") and l.strip()}
    for fs, level, precedence in [("flowschema.flowcontrol.apiserver.k8s.io/exempt", "exempt", "1"), ("flowschema.flowcontrol.apiserver.k8s.io/global-default", "global-default", "9900"), ("flowschema.flowcontrol.apiserver.k8s.io/catch-all", "catch-all", "10000")]:
        assert rows[fs][1:3] == [level, precedence], rows.get(fs)
        assert rows[fs][-1] == "False", f"{fs} is not dangling: {rows[fs]}"
    for pl, kind in [("prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/exempt", "Exempt"), ("prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/workload-low", "Limited"), ("prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/catch-all", "Limited")]:
        assert rows[pl][1] == kind, rows.get(pl)
