"""The `k8s_cluster` pytest fixture that the kr8s test suite (shipped in its wheel) expects from
pytest-kind / pytest-kubernetes, for whatever cluster KUBECONFIG names: `.kubectl(*args)`,
`.kubectl_path`, `.kubeconfig_path`. The kubectl is the one in $KUBECTL (default: the newest
installed one), run with a fresh HOME so no cache from another run leaks in.

kr8s's suite runs on kind, where kube-system always holds the control-plane pods, and several
of its tests list pods across the cluster expecting some. An API server with no kubelet has
none, so the fixture makes sure kube-system holds one pod (`conformance-seed`), as a cluster
with a control plane would; it is left in place (a real cluster is not emptied either). The
`ensure_gc` fixture some of its tests ask for, from kr8s's own conftest, is here too."""

import gc
import os
import subprocess
import tempfile
from pathlib import Path

import pytest


class Cluster:
    def __init__(self, kubeconfig: str, kubectl: str):
        self.kubeconfig_path = Path(kubeconfig)
        self.kubectl_path = kubectl
        self._home = tempfile.mkdtemp(prefix="conformance-home-")

    def kubectl(self, *args, as_dict=False):
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig_path), "HOME": self._home}
        out = subprocess.run([self.kubectl_path, *args], env=env, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {out.stderr}")
        return out.stdout


SEED = """apiVersion: v1
kind: Pod
metadata:
  name: conformance-seed
  namespace: kube-system
  labels: {app: conformance-seed}
spec:
  containers:
  - name: pause
    image: registry.k8s.io/pause:3.10
"""


@pytest.fixture(scope="session")
def k8s_cluster():
    kubeconfig = os.environ["KUBECONFIG"]
    kubectl = os.environ.get("KUBECTL", "/usr/lib/google-cloud-sdk/bin/kubectl.1.33")
    cluster = Cluster(kubeconfig, kubectl)
    env = {**os.environ, "KUBECONFIG": kubeconfig, "HOME": cluster._home}
    subprocess.run([kubectl, "apply", "-f", "-"], input=SEED, env=env, capture_output=True, text=True, timeout=120, check=True)
    return cluster


@pytest.fixture
def ensure_gc():
    """kr8s's own conftest (not in its wheel) runs the garbage collector around the tests that
    ask for this: dynamic object classes a test registers are weakly held and must be gone
    before the next case checks that none is registered."""
    gc.collect()
    yield
    gc.collect()
