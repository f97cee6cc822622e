"""test/e2e/apimachinery/namespace.go, [sig-api-machinery] Namespaces [Serial]."""

import time

from kubernetes import client

from util import raw


def rv(o):
    return int(o.metadata.resource_version)


def test_namespace_patching(core, ns):
    """should patch a Namespace"""
    before = core.read_namespace(ns)
    assert before.metadata.resource_version.isdigit() and 0 < rv(before) < 2**128
    patched = core.patch_namespace(ns, {"metadata": {"labels": {"testLabel": "testValue"}}})
    assert rv(patched) > rv(before)
    assert core.read_namespace(ns).metadata.labels["testLabel"] == "testValue"


def test_namespace_apply_update(core, ns):
    """should apply an update to a Namespace"""
    for _ in range(5):
        cur = core.read_namespace(ns)
        cur.metadata.labels = {**(cur.metadata.labels or {}), ns: "updated"}
        try:
            updated = core.replace_namespace(ns, cur)
            break
        except client.exceptions.ApiException as e:
            assert e.status == 409
    assert updated.metadata.labels[ns] == "updated"


def test_namespace_apply_finalizer(core, ns):
    """should apply a finalizer to a Namespace"""
    cur = core.read_namespace(ns)
    cur.spec.finalizers = [*(cur.spec.finalizers or []), "e2e.example.com/fakeFinalizer"]
    out = core.replace_namespace_finalize(ns, cur)
    assert "e2e.example.com/fakeFinalizer" in out.spec.finalizers
    cur = core.read_namespace(ns)
    cur.spec.finalizers = [f for f in cur.spec.finalizers if f != "e2e.example.com/fakeFinalizer"]
    out = core.replace_namespace_finalize(ns, cur)
    assert "e2e.example.com/fakeFinalizer" not in (out.spec.finalizers or [])


def test_namespace_status(core, api_client, ns):
    """should apply changes to a namespace status"""
    st = core.read_namespace_status(ns)
    assert st.status.phase == "Active"
    body = {"metadata": {"annotations": {"e2e-patched-ns-status": ns}}, "status": {"conditions": [{"type": "StatusPatch", "status": "True", "reason": "E2E", "message": "Patched by an e2e test"}]}}
    code, _, patched = raw(api_client, "PATCH", f"/api/v1/namespaces/{ns}/status", body=body, headers={"Content-Type": "application/merge-patch+json"})
    assert code == 200, patched
    assert patched["metadata"]["annotations"]["e2e-patched-ns-status"] == ns
    assert any(c["type"] == "StatusPatch" and c["reason"] == "E2E" for c in patched["status"]["conditions"])
    cur = core.read_namespace_status(ns)
    cur.status.conditions.append(client.V1NamespaceCondition(type="StatusUpdate", status="True", reason="E2E", message="Updated by an e2e test"))
    out = core.replace_namespace_status(ns, cur)
    assert [c.type for c in out.status.conditions] == ["StatusPatch", "StatusUpdate"]


def test_namespace_deletion_removes_contents(core):
    """namespace-deletion-removes-services (and its other contents): deleting a namespace deletes what is in it, then the namespace"""
    name = f"nsdelete-{int(time.time() * 1000) % 100000}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    core.create_namespaced_service(name, client.V1Service(metadata=client.V1ObjectMeta(name="test-service"), spec=client.V1ServiceSpec(selector={"foo": "bar"}, ports=[client.V1ServicePort(port=80, target_port=80)])))
    for i in range(5):
        core.create_namespaced_config_map(name, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"cm-{i}")))
    core.delete_namespace(name)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            core.read_namespace(name)
        except client.exceptions.ApiException as e:
            assert e.status == 404
            break
        time.sleep(0.2)
    else:
        raise AssertionError("namespace not deleted within 60 s")
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    assert core.list_namespaced_service(name).items == []
    assert core.list_namespaced_config_map(name).items == []
    core.delete_namespace(name)
