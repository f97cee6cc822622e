"""Fixtures for the hostile-input suite: the raw HTTP client (`conftest_common.Raw`), so that
requests go out exactly as written, and a canary namespace whose objects every case checks
afterwards."""

import uuid

import pytest
from conftest_common import Raw, api_client  # noqa: F401  (the suites' one client for KUBECONFIG)


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
