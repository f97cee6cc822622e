"""Fixtures for the security suite: the admin's clients from KUBECONFIG, a namespace per test,
ServiceAccounts given roles and tokens (TokenRequest) the way any cluster's users get them, and
raw clients that send a token, or no credential at all, trusting the cluster's CA."""

import copy
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from conftest_common import Raw, api_client, core, ns  # noqa: F401  (shared fixtures)

BIN = Path("/usr/lib/google-cloud-sdk/bin")


@pytest.fixture(scope="session")
def raw(api_client):
    return Raw(api_client.configuration)


def raw_as(cfg, token=None):
    """A raw client trusting the cluster's CA that sends `token`, or no credential at all."""
    c = copy.copy(cfg)
    c.api_key = {"authorization": f"Bearer {token}"} if token else {}
    c.api_key_prefix = {}
    c.cert_file = None
    c.key_file = None
    return Raw(c)


@pytest.fixture(scope="session")
def anonymous(api_client):
    return raw_as(api_client.configuration)


class Cluster:
    """The admin's raw client, and users made from ServiceAccounts."""

    def __init__(self, raw, cfg):
        self.raw, self.cfg = raw, cfg

    def ok(self, method, path, body=None, want=(200, 201)):
        status, obj = self.raw.json(method, path, body)
        assert status in want, f"{method} {path}: {status} {obj}"
        return obj

    def service_account(self, ns, name):
        self.ok("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})
        return f"system:serviceaccount:{ns}:{name}"

    def bind(self, ns, name, cluster_role, sa):
        body = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]}
        self.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", body)

    def token(self, ns, sa, seconds=600, bound=None):
        spec = {"expirationSeconds": seconds}
        if bound:
            spec["boundObjectRef"] = bound
        review = self.ok("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
        return review["status"]["token"], review["status"]["expirationTimestamp"]

    def user(self, token):
        return raw_as(self.cfg, token)

    def kubectl(self, token, *args):
        """The newest kubectl installed, as the token's user (no kubeconfig)."""
        exe = max(BIN.glob("kubectl.1.*"), key=lambda p: int(p.name.split(".")[2]))
        home = tempfile.mkdtemp(prefix="security-kubectl-")
        try:
            cmd = [str(exe), "--kubeconfig=/dev/null", f"--server={self.cfg.host}", f"--token={token}"]
            if self.cfg.ssl_ca_cert:
                cmd.append(f"--certificate-authority={self.cfg.ssl_ca_cert}")
            return subprocess.run(cmd + list(args), capture_output=True, text=True, env={**os.environ, "HOME": home}, timeout=60)
        finally:
            shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster(raw, api_client):
    return Cluster(raw, api_client.configuration)


def eventually(check, seconds=30, what="the condition"):
    """Waits for `check()` to return a true value within `seconds`; returns it."""
    deadline = time.monotonic() + seconds
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what} did not hold within {seconds} s"
        time.sleep(0.2)


def status_of(raw_client, method, path, body=None, headers=None):
    status, _, data = raw_client(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    try:
        return status, json.loads(data) if data else None
    except ValueError:
        return status, data
