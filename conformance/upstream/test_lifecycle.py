"""API-only lifecycle tests of the conformance list (reference section 4.7): create, get, list by
label, watch, update, patch, delete, deletecollection, per resource."""

import time
import uuid

import pytest
from kubernetes import client

from util import Watcher, raw


def wait_gone(list_fn, *args, **kwargs):
    deadline = time.monotonic() + 30
    while list_fn(*args, **kwargs).items:
        assert time.monotonic() < deadline, "still listed after deletecollection"
        time.sleep(0.2)


def delete_collection_round_trip(create, list_fn, delete_collection, ns, selector, bodies):
    """Creates `bodies`, finds exactly them by `selector`, deletes them as a collection, and
    waits until none is listed."""
    for b in bodies:
        create(ns, b)
    assert len(list_fn(ns, label_selector=selector).items) == len(bodies)
    delete_collection(ns, label_selector=selector)
    wait_gone(list_fn, ns, label_selector=selector)


def test_configmap_lifecycle(core, ns):
    """ConfigMap should run through a ConfigMap lifecycle"""
    label = {"test-configmap-static": "true"}
    core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="test-configmap", labels=label), data={"valueName": "value"}))
    w = Watcher(core.list_namespaced_config_map, ns, label_selector="test-configmap-static=true", timeout_seconds=60)
    w.expect("ADDED", lambda o: o.metadata.name == "test-configmap")
    core.patch_namespaced_config_map("test-configmap", ns, {"metadata": {"labels": {"test-configmap": "patched"}}, "data": {"valueName": "value1"}})
    w.expect("MODIFIED", lambda o: o.data == {"valueName": "value1"})
    found = core.list_config_map_for_all_namespaces(label_selector="test-configmap-static=true").items
    assert [c.metadata.name for c in found if c.metadata.namespace == ns] == ["test-configmap"]
    assert found[0].metadata.labels["test-configmap"] == "patched"
    core.delete_collection_namespaced_config_map(ns, label_selector="test-configmap-static=true")
    w.expect("DELETED", lambda o: o.metadata.name == "test-configmap")
    w.stop()


@pytest.mark.parametrize("kind", ["configmap", "secret"])
def test_empty_key_fails(core, ns, kind):
    """ConfigMap / Secret should fail to create with an empty key"""
    with pytest.raises(client.exceptions.ApiException) as e:
        if kind == "configmap":
            core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="empty"), data={"": "value"}))
        else:
            core.create_namespaced_secret(ns, client.V1Secret(metadata=client.V1ObjectMeta(name="empty"), data={"": "dmFsdWU="}))
    assert e.value.status == 422


def test_secret_patch(core, ns):
    """Secrets should patch a secret"""
    core.create_namespaced_secret(ns, client.V1Secret(metadata=client.V1ObjectMeta(name="test-secret", labels={"testsecret-constant": "true"}), data={"key": "dmFsdWU="}))
    assert [s.metadata.name for s in core.list_secret_for_all_namespaces(label_selector="testsecret-constant=true").items if s.metadata.namespace == ns] == ["test-secret"]
    core.patch_namespaced_secret("test-secret", ns, {"metadata": {"labels": {"testsecret": "true"}}, "data": {"key": "dmFsdWUy"}})
    s = core.read_namespaced_secret("test-secret", ns)
    assert s.metadata.labels["testsecret"] == "true" and s.data["key"] == "dmFsdWUy"
    core.delete_collection_namespaced_secret(ns, label_selector="testsecret-constant=true")
    wait_gone(core.list_namespaced_secret, ns, label_selector="testsecret-constant=true")


@pytest.mark.parametrize("kind", ["configmap", "secret"])
def test_immutable(core, ns, kind):
    """should be immutable if `immutable` field is set"""
    read = core.read_namespaced_config_map if kind == "configmap" else core.read_namespaced_secret
    replace = core.replace_namespaced_config_map if kind == "configmap" else core.replace_namespaced_secret
    if kind == "configmap":
        core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="imm"), data={"data": "value"}))
    else:
        core.create_namespaced_secret(ns, client.V1Secret(metadata=client.V1ObjectMeta(name="imm"), data={"data": "dmFsdWU="}))
    cur = read("imm", ns)
    cur.data = {"data": "dmFsdWUy" if kind == "secret" else "value2"}
    replace("imm", ns, cur)
    cur = read("imm", ns)
    cur.immutable = True
    replace("imm", ns, cur)
    cur = read("imm", ns)
    cur.data = {"data": "dmFsdWUz" if kind == "secret" else "value3"}
    with pytest.raises(client.exceptions.ApiException) as e:
        replace("imm", ns, cur)
    assert e.value.status == 422
    cur = read("imm", ns)
    cur.immutable = False
    with pytest.raises(client.exceptions.ApiException) as e:
        replace("imm", ns, cur)
    assert e.value.status == 422
    cur = read("imm", ns)
    cur.metadata.labels = {"label1": "value1"}
    assert replace("imm", ns, cur).metadata.labels == {"label1": "value1"}
    (core.delete_namespaced_config_map if kind == "configmap" else core.delete_namespaced_secret)("imm", ns)


def template(name, labels=None):
    return client.V1PodTemplate(metadata=client.V1ObjectMeta(name=name, labels=labels), template=client.V1PodTemplateSpec(spec=client.V1PodSpec(containers=[client.V1Container(name="nginx", image="nginx")])))


def test_podtemplate_lifecycle(core, ns):
    """PodTemplates should run the lifecycle of PodTemplates"""
    core.create_namespaced_pod_template(ns, template("nginx-pod-template", {"podtemplate-static": "true"}))
    assert [t.metadata.name for t in core.list_namespaced_pod_template(ns, label_selector="podtemplate-static=true").items] == ["nginx-pod-template"]
    core.patch_namespaced_pod_template("nginx-pod-template", ns, {"metadata": {"labels": {"podtemplate": "patched"}}})
    assert core.read_namespaced_pod_template("nginx-pod-template", ns).metadata.labels["podtemplate"] == "patched"
    core.delete_namespaced_pod_template("nginx-pod-template", ns)
    assert core.list_namespaced_pod_template(ns, label_selector="podtemplate-static=true").items == []


def test_podtemplate_replace(core, ns):
    """PodTemplates should replace a pod template"""
    core.create_namespaced_pod_template(ns, template("podtemplate-replace"))
    cur = core.read_namespaced_pod_template("podtemplate-replace", ns)
    cur.template.spec.termination_grace_period_seconds = 1
    assert core.replace_namespaced_pod_template("podtemplate-replace", ns, cur).template.spec.termination_grace_period_seconds == 1


def test_podtemplate_delete_collection(core, ns):
    """PodTemplates should delete a collection of pod templates"""
    bodies = [template(f"test-podtemplate-{i}", {"podtemplate-set": "true"}) for i in range(3)]
    delete_collection_round_trip(core.create_namespaced_pod_template, core.list_namespaced_pod_template, core.delete_collection_namespaced_pod_template, ns, "podtemplate-set=true", bodies)


def test_lease_api(api_client, ns):
    """Lease lease API should be available"""
    coord = client.CoordinationV1Api(api_client)
    now = "2026-01-01T00:00:00.000000Z"
    lease = client.V1Lease(metadata=client.V1ObjectMeta(name="lease"), spec=client.V1LeaseSpec(holder_identity="holder", lease_duration_seconds=30, acquire_time=now, renew_time=now))
    created = coord.create_namespaced_lease(ns, lease)
    assert coord.read_namespaced_lease("lease", ns).spec.holder_identity == "holder"
    created.spec.holder_identity = "holder2"
    assert coord.replace_namespaced_lease("lease", ns, created).spec.holder_identity == "holder2"
    assert coord.patch_namespaced_lease("lease", ns, {"spec": {"holderIdentity": "holder3"}}).spec.holder_identity == "holder3"
    for i in range(2):
        coord.create_namespaced_lease(ns, client.V1Lease(metadata=client.V1ObjectMeta(name=f"lease{i}", labels={"deletecollection": "true"}), spec=client.V1LeaseSpec(holder_identity="h")))
    assert len(coord.list_lease_for_all_namespaces(label_selector="deletecollection=true").items) >= 2
    coord.delete_collection_namespaced_lease(ns, label_selector="deletecollection=true")
    wait_gone(coord.list_namespaced_lease, ns, label_selector="deletecollection=true")
    coord.delete_namespaced_lease("lease", ns)
    with pytest.raises(client.exceptions.ApiException) as e:
        coord.read_namespaced_lease("lease", ns)
    assert e.value.status == 404


def test_serviceaccount_lifecycle(core, ns):
    """ServiceAccounts should run through the lifecycle of a ServiceAccount"""
    w = Watcher.from_now(core.list_namespaced_service_account, ns, label_selector="test-serviceaccount-static=true", timeout_seconds=60)
    core.create_namespaced_service_account(ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="testserviceaccount", labels={"test-serviceaccount-static": "true"})))
    w.expect("ADDED", lambda o: o.metadata.name == "testserviceaccount")
    core.patch_namespaced_service_account("testserviceaccount", ns, {"automountServiceAccountToken": False})
    w.expect("MODIFIED", lambda o: o.automount_service_account_token is False)
    assert [s.metadata.name for s in core.list_service_account_for_all_namespaces(label_selector="test-serviceaccount-static=true").items if s.metadata.namespace == ns] == ["testserviceaccount"]
    core.delete_collection_namespaced_service_account(ns, label_selector="test-serviceaccount-static=true")
    w.expect("DELETED", lambda o: o.metadata.name == "testserviceaccount")
    w.stop()


def test_serviceaccount_update(core, ns):
    """ServiceAccounts should update a ServiceAccount"""
    core.create_namespaced_service_account(ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="e2e-sa")))
    cur = core.read_namespaced_service_account("e2e-sa", ns)
    cur.automount_service_account_token = True
    assert core.replace_namespaced_service_account("e2e-sa", ns, cur).automount_service_account_token is True


def event(name, ns, labels=None):
    # The involved object is in the event's namespace, as upstream's test writes it (and as
    # event validation requires of an event without eventTime).
    return client.CoreV1Event(metadata=client.V1ObjectMeta(name=name, labels=labels), message="This is a test event", reason="Test", type="Normal", count=1,
                              involved_object=client.V1ObjectReference(namespace=ns), source=client.V1EventSource(component="test"))


def test_event_lifecycle(core, ns):
    """Events should manage the lifecycle of an event"""
    core.create_namespaced_event(ns, event("event-test", ns, {"testevent-constant": "true"}))
    assert [e.metadata.name for e in core.list_event_for_all_namespaces(label_selector="testevent-constant=true").items if e.metadata.namespace == ns] == ["event-test"]
    core.patch_namespaced_event("event-test", ns, {"message": "This is a test event - patched"})
    assert core.read_namespaced_event("event-test", ns).message == "This is a test event - patched"
    cur = core.read_namespaced_event("event-test", ns)
    cur.series = client.CoreV1EventSeries(count=100, last_observed_time="2026-01-01T00:00:00.000000Z")
    assert core.replace_namespaced_event("event-test", ns, cur).series.count == 100
    core.delete_namespaced_event("event-test", ns)
    assert core.list_namespaced_event(ns, label_selector="testevent-constant=true").items == []


def test_event_delete_collection(core, ns):
    """Events should delete a collection of events"""
    bodies = [event(f"test-event-{i}", ns, {"testevent-set": "true"}) for i in range(3)]
    delete_collection_round_trip(core.create_namespaced_event, core.list_namespaced_event, core.delete_collection_namespaced_event, ns, "testevent-set=true", bodies)


def service(name, labels=None):
    return client.V1Service(metadata=client.V1ObjectMeta(name=name, labels=labels), spec=client.V1ServiceSpec(type="ClusterIP", ports=[client.V1ServicePort(name="http", protocol="TCP", port=80, target_port=8080)]))


def test_service_delete_collection(core, ns):
    """Services should delete a collection of services"""
    bodies = [service(f"e2e-svc-{i}", {"e2e-test-service": "delete"}) for i in range(3)]
    delete_collection_round_trip(core.create_namespaced_service, core.list_namespaced_service, core.delete_collection_namespaced_service, ns, "e2e-test-service=delete", bodies)


def test_service_find_from_all_namespaces(core, ns):
    """Services should find a service from listing all namespaces"""
    found = [(s.metadata.namespace, s.metadata.name) for s in core.list_service_for_all_namespaces(field_selector="metadata.name=kubernetes").items]
    assert ("default", "kubernetes") in found


def test_service_status_lifecycle(core, api_client, ns):
    """Services should complete a service status lifecycle"""
    core.create_namespaced_service(ns, service("test-service-status", {"test-service-static": "true"}))
    st = core.read_namespaced_service_status("test-service-status", ns)
    body = {"metadata": {"annotations": {"patchedstatus": "true"}}, "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}}}
    code, _, out = raw(api_client, "PATCH", f"/api/v1/namespaces/{ns}/services/test-service-status/status", body=body, headers={"Content-Type": "application/merge-patch+json"})
    assert code == 200 and out["status"]["loadBalancer"]["ingress"][0]["ip"] == "203.0.113.1"
    cur = core.read_namespaced_service_status("test-service-status", ns)
    cur.status.conditions = [client.V1Condition(type="StatusUpdate", status="True", reason="E2E", message="Set from e2e test", last_transition_time="2026-01-01T00:00:00Z")]
    out = core.replace_namespaced_service_status("test-service-status", ns, cur)
    assert out.status.conditions[0].type == "StatusUpdate"
    patched = core.patch_namespaced_service("test-service-status", ns, {"metadata": {"labels": {"test-service": "patched"}}})
    assert patched.metadata.labels["test-service"] == "patched"
    core.delete_namespaced_service("test-service-status", ns)
    assert st.metadata.name == "test-service-status"


def test_endpoint_lifecycle(core, ns):
    """Services should test the lifecycle of an Endpoint"""
    w = Watcher.from_now(core.list_namespaced_endpoints, ns, label_selector="test-endpoint-static=true", timeout_seconds=60)
    ep = client.V1Endpoints(metadata=client.V1ObjectMeta(name="testservice", labels={"test-endpoint-static": "true"}),
                            subsets=[client.V1EndpointSubset(addresses=[client.V1EndpointAddress(ip="10.0.0.24")], ports=[client.CoreV1EndpointPort(name="http", port=80, protocol="TCP")])])
    core.create_namespaced_endpoints(ns, ep)
    w.expect("ADDED", lambda o: o.metadata.name == "testservice")
    core.patch_namespaced_endpoints("testservice", ns, {"metadata": {"labels": {"test-service": "updated"}}})
    w.expect("MODIFIED", lambda o: (o.metadata.labels or {}).get("test-service") == "updated")
    patch = {"subsets": [{"addresses": [{"ip": "10.0.0.25"}], "ports": [{"name": "http-test", "port": 8080, "protocol": "TCP"}]}]}
    core.patch_namespaced_endpoints("testservice", ns, patch)
    w.expect("MODIFIED", lambda o: o.subsets[0].addresses[0].ip == "10.0.0.25" and o.subsets[0].ports[0].port == 8080)
    core.delete_collection_namespaced_endpoints(ns, label_selector="test-endpoint-static=true")
    w.expect("DELETED", lambda o: o.metadata.name == "testservice")
    w.stop()


def test_replication_controller_lifecycle(core, ns):
    """ReplicationController should test the lifecycle of a ReplicationController"""
    labels = {"test-rc-static": "true"}
    rc = client.V1ReplicationController(metadata=client.V1ObjectMeta(name="rc-test", labels=labels), spec=client.V1ReplicationControllerSpec(
        replicas=1, selector={"test-rc-static": "true"},
        template=client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels=labels), spec=client.V1PodSpec(containers=[client.V1Container(name="rc-test", image="nginx")]))))
    w = Watcher.from_now(core.list_namespaced_replication_controller, ns, label_selector="test-rc-static=true", timeout_seconds=60)
    core.create_namespaced_replication_controller(ns, rc)
    w.expect("ADDED", lambda o: o.metadata.name == "rc-test")
    core.patch_namespaced_replication_controller("rc-test", ns, {"metadata": {"labels": {"test-rc": "patched"}}})
    w.expect("MODIFIED", lambda o: (o.metadata.labels or {}).get("test-rc") == "patched")
    core.patch_namespaced_replication_controller_status("rc-test", ns, {"status": {"readyReplicas": 0, "availableReplicas": 0}})
    core.patch_namespaced_replication_controller_scale("rc-test", ns, {"spec": {"replicas": 2}})
    w.expect("MODIFIED", lambda o: o.spec.replicas == 2)
    assert [r.metadata.name for r in core.list_replication_controller_for_all_namespaces(label_selector="test-rc-static=true").items if r.metadata.namespace == ns] == ["rc-test"]
    core.delete_collection_namespaced_replication_controller(ns, label_selector="test-rc-static=true")
    w.expect("DELETED", lambda o: o.metadata.name == "rc-test")
    w.stop()


def test_job_lifecycle(api_client, ns):
    """Job should manage the lifecycle of a job"""
    batch = client.BatchV1Api(api_client)
    job = client.V1Job(metadata=client.V1ObjectMeta(name="e2e-job", labels={"e2e-job-label": "e2e-job"}), spec=client.V1JobSpec(
        suspend=True, parallelism=1, completions=1,
        template=client.V1PodTemplateSpec(spec=client.V1PodSpec(restart_policy="Never", containers=[client.V1Container(name="c", image="busybox")]))))
    w = Watcher.from_now(batch.list_namespaced_job, ns, label_selector="e2e-job-label=e2e-job", timeout_seconds=60)
    batch.create_namespaced_job(ns, job)
    w.expect("ADDED", lambda o: o.metadata.name == "e2e-job")
    batch.patch_namespaced_job("e2e-job", ns, {"metadata": {"labels": {"e2e-patched-job": "patched"}}})
    w.expect("MODIFIED", lambda o: (o.metadata.labels or {}).get("e2e-patched-job") == "patched")
    cur = batch.read_namespaced_job("e2e-job", ns)
    cur.metadata.annotations = {"updated": "true"}
    batch.replace_namespaced_job("e2e-job", ns, cur)
    w.expect("MODIFIED", lambda o: (o.metadata.annotations or {}).get("updated") == "true")
    assert [j.metadata.name for j in batch.list_job_for_all_namespaces(label_selector="e2e-job-label=e2e-job").items if j.metadata.namespace == ns] == ["e2e-job"]
    batch.delete_collection_namespaced_job(ns, label_selector="e2e-job-label=e2e-job")
    w.expect("DELETED", lambda o: o.metadata.name == "e2e-job")
    w.stop()


def test_pods_delete_collection(core, ns):
    """Pods should delete a collection of pods"""
    for i in range(3):
        core.create_namespaced_pod(ns, client.V1Pod(metadata=client.V1ObjectMeta(name=f"test-pod-{i}", labels={"type": "Testing"}), spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")])))
    core.delete_collection_namespaced_pod(ns, label_selector="type=Testing", grace_period_seconds=1)
    wait_gone(core.list_namespaced_pod, ns, label_selector="type=Testing")


def test_node_lifecycle(core):
    """Node should run through the lifecycle of a node (create a fake Node, patch, list by label, update, delete)"""
    name = f"e2e-fake-node-{uuid.uuid4().hex[:5]}"
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name)))
    core.patch_node(name, {"metadata": {"labels": {name: "patched"}}})
    assert [n.metadata.name for n in core.list_node(label_selector=f"{name}=patched").items] == [name]
    cur = core.read_node(name)
    cur.metadata.annotations = {"updated": "true"}
    core.replace_node(name, cur)
    core.delete_node(name)


def test_limitrange_list_patch_delete_collection(core, ns):
    """LimitRange should list, patch and delete a LimitRange by collection"""
    lr = client.V1LimitRange(metadata=client.V1ObjectMeta(name="e2e-limitrange", labels={"e2e-test": "limitrange"}), spec=client.V1LimitRangeSpec(limits=[client.V1LimitRangeItem(type="Container", default={"cpu": "500m"})]))
    core.create_namespaced_limit_range(ns, lr)
    assert len(core.list_limit_range_for_all_namespaces(label_selector="e2e-test=limitrange").items) >= 1
    core.patch_namespaced_limit_range("e2e-limitrange", ns, {"metadata": {"labels": {"e2e-patched": "true"}}})
    core.delete_collection_namespaced_limit_range(ns, label_selector="e2e-test=limitrange")
    wait_gone(core.list_namespaced_limit_range, ns, label_selector="e2e-test=limitrange")
