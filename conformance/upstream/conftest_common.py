"""Fixtures for the reproduced upstream checks: API clients for the cluster KUBECONFIG names (typed,
and `Raw` for requests sent exactly as written: its server, CA, client certificate or token),
and a fresh namespace per test (`<basename>-<random>`, deleted afterwards), as the e2e framework."""

import http.client
import json
import os
import ssl
import urllib.parse
import uuid

import pytest
from kubernetes import client, config


@pytest.fixture(scope="session")
def api_client():
    config.load_kube_config(config_file=os.environ["KUBECONFIG"])
    return client.ApiClient()


@pytest.fixture(scope="session")
def core(api_client):
    return client.CoreV1Api(api_client)


@pytest.fixture
def ns(core, request):
    base = request.node.name.split("[")[0].replace("_", "-")[:40].strip("-")
    # Ten hex digits (51 characters at most): a parametrized test shares its base over a hundred
    # cases, and with five digits (2^20 names) 101 cases collide in about 0.5% of runs (a CI run
    # met one: AlreadyExists in this fixture).
    name = f"{base}-{uuid.uuid4().hex[:10]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    try:
        core.delete_namespace(name)
    except client.exceptions.ApiException:
        pass


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
