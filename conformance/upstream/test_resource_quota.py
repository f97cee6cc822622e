"""API-only checks of ResourceQuota (upstream's sig-api-machinery resource_quota e2e): a quota's
status is calculated promptly, the life of each counted kind (secrets, config maps, pods,
services, replication controllers, replica sets, claims) is captured in `status.used` and given
back when the object goes, a write past the quota is refused with 403, scopes select pods, and a
quota can be updated, deleted and its status written. Usage already in the namespace is counted
first, as upstream's checks do, so the checks hold on any cluster."""

import time
from fractions import Fraction

import pytest
from kubernetes import client

from util import raw

WITHIN = 120  # upstream's resourceQuotaTimeout

SUFFIX = {"": 1, "m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def qty(text):
    """A quantity's value (enough of upstream's grammar for these checks)."""
    text = str(text)
    for s in sorted(SUFFIX, key=len, reverse=True):
        if s and text.endswith(s):
            return Fraction(text[: -len(s)]) * SUFFIX[s]
    return Fraction(text)


def same(a, b):
    return set(a) == set(b) and all(qty(a[k]) == qty(b[k]) for k in a)


def hard_quota(name):
    """Upstream's newTestResourceQuota, less the kinds these checks do not create."""
    hard = {"pods": "5", "services": "10", "services.nodeports": "1", "services.loadbalancers": "1", "replicationcontrollers": "10", "resourcequotas": "1",
            "cpu": "1", "memory": "500Mi", "configmaps": "10", "persistentvolumeclaims": "10", "requests.storage": "10Gi", "secrets": "10",
            "count/replicasets.apps": "5", "requests.example.com/dongle": "3",
            "gold.storageclass.storage.k8s.io/persistentvolumeclaims": "10", "gold.storageclass.storage.k8s.io/requests.storage": "10Gi"}
    return client.V1ResourceQuota(metadata=client.V1ObjectMeta(name=name), spec=client.V1ResourceQuotaSpec(hard=hard))


def wait_used(core, ns, name, expected):
    """Waits until the quota's status.used holds `expected` (for the resources it names)."""
    deadline = time.monotonic() + WITHIN
    while True:
        used = core.read_namespaced_resource_quota(name, ns).status.used or {}
        if all(k in used and qty(used[k]) == qty(v) for k, v in expected.items()):
            return used
        assert time.monotonic() < deadline, f"status.used {used}, want {expected}"
        time.sleep(0.2)


def counted(core, ns, name="test-quota"):
    """Creates upstream's test quota and waits for its first status."""
    core.create_namespaced_resource_quota(ns, hard_quota(name))
    zero = {k: "0" for k in hard_quota(name).spec.hard}
    zero["resourcequotas"] = "1"
    return wait_used(core, ns, name, {k: v for k, v in zero.items() if k not in ("configmaps", "secrets")})


def forbidden(call):
    with pytest.raises(client.exceptions.ApiException) as e:
        call()
    assert e.value.status == 403, e.value.body
    return e.value.body


def pod(name, requests=None, limits=None, deadline=None):
    res = client.V1ResourceRequirements(requests=requests, limits=limits) if requests or limits else None
    spec = client.V1PodSpec(containers=[client.V1Container(name="pause", image="registry.k8s.io/pause:3.10", resources=res)], active_deadline_seconds=deadline)
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name), spec=spec)


def test_status_promptly_calculated(core, ns):
    """ResourceQuota should create a ResourceQuota and ensure its status is promptly calculated"""
    used = counted(core, ns)
    assert qty(used["resourcequotas"]) == 1


@pytest.mark.parametrize("kind", ["secret", "configMap"])
def test_capture_life_of(core, ns, kind):
    """ResourceQuota should create a ResourceQuota and capture the life of a secret / a configMap"""
    resource, listed, create, delete, obj = {
        "secret": ("secrets", core.list_namespaced_secret, core.create_namespaced_secret, core.delete_namespaced_secret,
                   client.V1Secret(metadata=client.V1ObjectMeta(name="test-secret"), data={"a": "Yg=="})),
        "configMap": ("configmaps", core.list_namespaced_config_map, core.create_namespaced_config_map, core.delete_namespaced_config_map,
                      client.V1ConfigMap(metadata=client.V1ObjectMeta(name="test-cm"), data={"a": "b"})),
    }[kind]
    before = len(listed(ns).items)
    counted(core, ns)
    wait_used(core, ns, "test-quota", {resource: str(before)})
    create(ns, obj)
    wait_used(core, ns, "test-quota", {resource: str(before + 1)})
    delete(obj.metadata.name, ns)
    wait_used(core, ns, "test-quota", {resource: str(before)})


def test_capture_life_of_pod(core, ns):
    """ResourceQuota should create a ResourceQuota and capture the life of a pod"""
    counted(core, ns)
    req = {"cpu": "500m", "memory": "252Mi", "example.com/dongle": "2"}
    core.create_namespaced_pod(ns, pod("test-pod", requests=req, limits={"example.com/dongle": "2"}))
    wait_used(core, ns, "test-quota", {"pods": "1", "cpu": "500m", "memory": "252Mi", "requests.example.com/dongle": "2"})
    body = forbidden(lambda: core.create_namespaced_pod(ns, pod("fail-pod", requests={"cpu": "600m", "memory": "100Mi"})))
    assert "exceeded quota: test-quota" in body, body
    body = forbidden(lambda: core.create_namespaced_pod(ns, pod("fail-pod-for-extended-resource", requests={"cpu": "100m", "memory": "10Mi", "example.com/dongle": "2"}, limits={"example.com/dongle": "2"})))
    assert "requests.example.com/dongle=2" in body, body
    # A pod cannot change its resource requirements (validation, before any quota).
    p = core.read_namespaced_pod("test-pod", ns)
    p.spec.containers[0].resources.requests["cpu"] = "100m"
    with pytest.raises(client.exceptions.ApiException) as e:
        core.replace_namespaced_pod("test-pod", ns, p)
    assert e.value.status == 422, e.value.body
    core.delete_namespaced_pod("test-pod", ns, grace_period_seconds=0)
    wait_used(core, ns, "test-quota", {"pods": "0", "cpu": "0", "memory": "0", "requests.example.com/dongle": "0"})


def test_capture_life_of_service(core, ns):
    """ResourceQuota should create a ResourceQuota and capture the life of a service"""
    counted(core, ns)
    ports = [client.V1ServicePort(name="http", port=80, target_port=8080)]
    core.create_namespaced_service(ns, client.V1Service(metadata=client.V1ObjectMeta(name="test-service"), spec=client.V1ServiceSpec(ports=ports)))
    core.create_namespaced_service(ns, client.V1Service(metadata=client.V1ObjectMeta(name="test-service-np"), spec=client.V1ServiceSpec(type="NodePort", ports=ports)))
    wait_used(core, ns, "test-quota", {"services": "2", "services.nodeports": "1", "services.loadbalancers": "0"})
    body = forbidden(lambda: core.create_namespaced_service(ns, client.V1Service(metadata=client.V1ObjectMeta(name="test-service-lb"), spec=client.V1ServiceSpec(type="LoadBalancer", ports=ports))))
    assert "services.nodeports" in body, body
    core.delete_namespaced_service("test-service", ns)
    core.delete_namespaced_service("test-service-np", ns)
    wait_used(core, ns, "test-quota", {"services": "0", "services.nodeports": "0", "services.loadbalancers": "0"})


def test_capture_life_of_replication_controller(core, ns):
    """ResourceQuota should create a ResourceQuota and capture the life of a replication controller"""
    counted(core, ns)
    template = client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels={"name": "rc"}), spec=pod("x").spec)
    rc = client.V1ReplicationController(metadata=client.V1ObjectMeta(name="test-rc"), spec=client.V1ReplicationControllerSpec(replicas=0, selector={"name": "rc"}, template=template))
    core.create_namespaced_replication_controller(ns, rc)
    wait_used(core, ns, "test-quota", {"replicationcontrollers": "1"})
    core.delete_namespaced_replication_controller("test-rc", ns)
    wait_used(core, ns, "test-quota", {"replicationcontrollers": "0"})


def test_capture_life_of_replica_set(api_client, core, ns):
    """ResourceQuota should create a ResourceQuota and capture the life of a replica set"""
    apps = client.AppsV1Api(api_client)
    counted(core, ns)
    template = client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels={"name": "rs"}), spec=pod("x").spec)
    rs = client.V1ReplicaSet(metadata=client.V1ObjectMeta(name="test-rs"), spec=client.V1ReplicaSetSpec(replicas=0, selector=client.V1LabelSelector(match_labels={"name": "rs"}), template=template))
    apps.create_namespaced_replica_set(ns, rs)
    wait_used(core, ns, "test-quota", {"count/replicasets.apps": "1"})
    apps.delete_namespaced_replica_set("test-rs", ns)
    wait_used(core, ns, "test-quota", {"count/replicasets.apps": "0"})


def test_capture_life_of_persistent_volume_claim_with_storage_class(core, ns):
    """ResourceQuota should create a ResourceQuota and capture the life of a persistent volume claim with a storage class"""
    counted(core, ns)
    spec = client.V1PersistentVolumeClaimSpec(access_modes=["ReadWriteOnce"], storage_class_name="gold", resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}))
    core.create_namespaced_persistent_volume_claim(ns, client.V1PersistentVolumeClaim(metadata=client.V1ObjectMeta(name="test-claim"), spec=spec))
    wait_used(core, ns, "test-quota", {"persistentvolumeclaims": "1", "requests.storage": "1Gi",
                                       "gold.storageclass.storage.k8s.io/persistentvolumeclaims": "1", "gold.storageclass.storage.k8s.io/requests.storage": "1Gi"})
    core.delete_namespaced_persistent_volume_claim("test-claim", ns)
    wait_used(core, ns, "test-quota", {"persistentvolumeclaims": "0", "requests.storage": "0", "gold.storageclass.storage.k8s.io/persistentvolumeclaims": "0"})


def scoped(name, scope, hard=None):
    return client.V1ResourceQuota(metadata=client.V1ObjectMeta(name=name), spec=client.V1ResourceQuotaSpec(
        hard=hard or {"pods": "5", "requests.cpu": "1", "requests.memory": "500Mi", "limits.cpu": "2", "limits.memory": "1Gi"}, scopes=[scope]))


def test_terminating_scopes(core, ns):
    """ResourceQuota should verify ResourceQuota with terminating scopes."""
    core.create_namespaced_resource_quota(ns, scoped("quota-terminating", "Terminating"))
    core.create_namespaced_resource_quota(ns, scoped("quota-not-terminating", "NotTerminating"))
    zero = {"pods": "0", "requests.cpu": "0"}
    wait_used(core, ns, "quota-terminating", zero)
    wait_used(core, ns, "quota-not-terminating", zero)
    res = {"cpu": "500m", "memory": "200Mi"}
    lim = {"cpu": "1", "memory": "400Mi"}
    core.create_namespaced_pod(ns, pod("test-pod", requests=res, limits=lim))
    wait_used(core, ns, "quota-not-terminating", {"pods": "1", "requests.cpu": "500m", "requests.memory": "200Mi", "limits.cpu": "1", "limits.memory": "400Mi"})
    wait_used(core, ns, "quota-terminating", zero)
    core.delete_namespaced_pod("test-pod", ns, grace_period_seconds=0)
    wait_used(core, ns, "quota-not-terminating", zero)
    core.create_namespaced_pod(ns, pod("terminating-pod", requests=res, limits=lim, deadline=3600))
    wait_used(core, ns, "quota-terminating", {"pods": "1", "requests.cpu": "500m", "limits.memory": "400Mi"})
    wait_used(core, ns, "quota-not-terminating", zero)
    core.delete_namespaced_pod("terminating-pod", ns, grace_period_seconds=0)
    wait_used(core, ns, "quota-terminating", zero)


def test_best_effort_scope(core, ns):
    """ResourceQuota should verify ResourceQuota with best effort scope."""
    core.create_namespaced_resource_quota(ns, scoped("quota-besteffort", "BestEffort", {"pods": "5"}))
    core.create_namespaced_resource_quota(ns, scoped("quota-not-besteffort", "NotBestEffort", {"pods": "5"}))
    wait_used(core, ns, "quota-besteffort", {"pods": "0"})
    wait_used(core, ns, "quota-not-besteffort", {"pods": "0"})
    core.create_namespaced_pod(ns, pod("best-effort"))
    wait_used(core, ns, "quota-besteffort", {"pods": "1"})
    wait_used(core, ns, "quota-not-besteffort", {"pods": "0"})
    core.delete_namespaced_pod("best-effort", ns, grace_period_seconds=0)
    wait_used(core, ns, "quota-besteffort", {"pods": "0"})
    core.create_namespaced_pod(ns, pod("not-best-effort", requests={"cpu": "100m", "memory": "10Mi"}, limits={"cpu": "100m", "memory": "10Mi"}))
    wait_used(core, ns, "quota-not-besteffort", {"pods": "1"})
    wait_used(core, ns, "quota-besteffort", {"pods": "0"})
    core.delete_namespaced_pod("not-best-effort", ns, grace_period_seconds=0)
    wait_used(core, ns, "quota-not-besteffort", {"pods": "0"})


def test_update_and_delete(core, ns):
    """ResourceQuota should be able to update and delete ResourceQuota."""
    q = core.create_namespaced_resource_quota(ns, client.V1ResourceQuota(metadata=client.V1ObjectMeta(name="test-quota"), spec=client.V1ResourceQuotaSpec(hard={"cpu": "1", "memory": "500Mi"})))
    got = core.read_namespaced_resource_quota("test-quota", ns)
    assert same(got.spec.hard, {"cpu": "1", "memory": "500Mi"})
    for _ in range(10):  # the controller may write the status in between: read and try again
        got = core.read_namespaced_resource_quota("test-quota", ns)
        got.spec.hard["cpu"] = "2"
        try:
            core.replace_namespaced_resource_quota("test-quota", ns, got)
            break
        except client.exceptions.ApiException as e:
            assert e.status == 409, e.body
    assert same(core.read_namespaced_resource_quota("test-quota", ns).spec.hard, {"cpu": "2", "memory": "500Mi"})
    core.delete_namespaced_resource_quota("test-quota", ns)
    with pytest.raises(client.exceptions.ApiException) as e:
        core.read_namespaced_resource_quota("test-quota", ns)
    assert e.value.status == 404
    assert q.metadata.uid


def test_apply_changes_to_status(core, api_client, ns):
    """ResourceQuota should apply changes to a resourcequota status"""
    hard = {"cpu": "500m", "memory": "500Mi"}
    core.create_namespaced_resource_quota(ns, client.V1ResourceQuota(metadata=client.V1ObjectMeta(name="e2e-rq-status", labels={"e2e-rq-label": "e2e-rq-status"}), spec=client.V1ResourceQuotaSpec(hard=hard)))
    wait_used(core, ns, "e2e-rq-status", {"cpu": "0", "memory": "0"})
    # Status written by hand is kept as written...
    for _ in range(10):
        got = core.read_namespaced_resource_quota("e2e-rq-status", ns)
        got.status = client.V1ResourceQuotaStatus(hard={"cpu": "1", "memory": "1Gi"}, used={"cpu": "0", "memory": "0"})
        try:
            updated = core.replace_namespaced_resource_quota_status("e2e-rq-status", ns, got)
            break
        except client.exceptions.ApiException as e:
            assert e.status == 409, e.body
    assert same(updated.status.hard, {"cpu": "1", "memory": "1Gi"})
    status, _, patched = raw(api_client, "PATCH", f"/api/v1/namespaces/{ns}/resourcequotas/e2e-rq-status/status",
                             {"status": {"hard": {"cpu": "750m", "memory": "750Mi"}}}, headers={"Content-Type": "application/merge-patch+json"})
    assert status == 200, patched
    assert same(patched["status"]["hard"], {"cpu": "750m", "memory": "750Mi"})
    # ... until the controller sets status.hard back to spec.hard.
    deadline = time.monotonic() + WITHIN
    while not same(core.read_namespaced_resource_quota("e2e-rq-status", ns).status.hard, hard):
        assert time.monotonic() < deadline, "status.hard not reset to spec.hard"
        time.sleep(0.2)
