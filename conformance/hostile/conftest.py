"""Fixtures for the hostile-input suite: a raw HTTP client for the cluster KUBECONFIG names (its
server, CA, client certificate or token), so that requests go out exactly as written, and a
canary namespace whose objects every case checks afterwards."""

import http.client
import json
import ssl
import urllib.parse
import uuid

import pytest
from conftest_common import api_client  # noqa: F401  (the suites' one client for KUBECONFIG)


class Raw:
    """Sends one request as written and returns (status, headers, body bytes)."""

    def __init__(self, cfg):
        u = urllib.parse.urlsplit(cfg.host)
        self.https = u.scheme == "https"
        self.host, self.port = u.hostname, u.port or (443 if self.https else 80)
        self.headers = {}
        if cfg.api_key.get("authorization"):
            self.headers["Authorization"] = cfg.api_key["authorization"]
        self.ctx = None
        if self.https:
            self.ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else ssl.create_default_context()
            if not cfg.verify_ssl:
                self.ctx.check_hostname = False
                self.ctx.verify_mode = ssl.CERT_NONE
            if cfg.cert_file:
                self.ctx.load_cert_chain(cfg.cert_file, cfg.key_file)

    def __call__(self, method, target, body=None, headers=None, timeout=60):
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout) if self.https else http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            h = dict(self.headers)
            if body is not None:
                h.setdefault("Content-Type", "application/json")
            h.update(headers or {})
            conn.request(method, target, body=body, headers=h)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def json(self, method, target, body=None, headers=None):
        status, _, data = self(method, target, body=json.dumps(body) if isinstance(body, (dict, list)) else body, headers=headers)
        return status, json.loads(data) if data else None


@pytest.fixture(scope="session")
def raw(api_client):
    return Raw(api_client.configuration)


@pytest.fixture(scope="session")
def canary(raw):
    """A namespace with three ConfigMaps: (namespace, {name: (resourceVersion, data)})."""
    ns = f"hostile-canary-{uuid.uuid4().hex[:6]}"
    status, _ = raw.json("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    assert status == 201, status
    objects = {}
    for i in range(3):
        data = {"i": str(i), "text": "canary é 𝄞"}
        status, obj = raw.json("POST", f"/api/v1/namespaces/{ns}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"canary-{i}"}, "data": data})
        assert status == 201, (status, obj)
        objects[obj["metadata"]["name"]] = (obj["metadata"]["resourceVersion"], data)
    yield ns, objects
    raw("DELETE", f"/api/v1/namespaces/{ns}")


@pytest.fixture(autouse=True)
def canaries_intact(raw, canary):
    """After every case: the server still answers, and the canaries are as they were written."""
    yield
    ns, objects = canary
    status, listed = raw.json("GET", f"/api/v1/namespaces/{ns}/configmaps")
    assert status == 200, f"the server no longer lists: {status} {listed}"
    got = {o["metadata"]["name"]: (o["metadata"]["resourceVersion"], o.get("data")) for o in listed["items"] if o["metadata"]["name"].startswith("canary-")}
    assert got == objects, "a canary object changed"
