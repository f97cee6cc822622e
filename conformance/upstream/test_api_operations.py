"""The "should support <Kind> API operations" family of the conformance list, for every
resource of the groups an API server serves from its own storage: create three labelled
objects, get one, list them (in the namespace and across namespaces), watch from the list's
resourceVersion, patch and see MODIFIED, replace, read and write the status where the kind has
one, delete one and see DELETED, delete the rest as a collection. Each case runs through the
typed client of its group, so every answer must also deserialize into the client's models."""

import time
import uuid

import pytest
from kubernetes import client

from util import Watcher

CSR_REQUEST = (  # a PEM certificate request (an EC P-256 key, CN e2e-user; base64 of its PEM text, as the API carries it)
    "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlITk1IVUNBUUF3RXpFUk1BOEdBMVVFQXd3SVpUSmxMWFZ6WlhJd1dUQVRCZ2NxaGtqT1BRSUJCZ2dxaGtqTwpQUU1CQndOQ0FBUkNZRXRpUHpXOTcwZFlFWmRzRWhzcEJrTlpOVDJSL1JxYy9xNHZzZVJRU0pQYzFKSGNVanlNCjNBYlZHTU5ydHRqOGR2WnVIZ2tGWnlEY2cwZnR4dHo4b0FBd0NnWUlLb1pJemowRUF3SURTQUF3UlFJZ0o2L1oKZmZ6TFk0UU42YnFtUXNQWDBvRnVtMTExQmVrZnRRbGhLaHVzckVjQ0lRREVod1o2bytobThtK2VVaTdJSHJBVAp6ZGhTVDZBV1dGcnhxOUJPM05JclJ3PT0KLS0tLS1FTkQgQ0VSVElGSUNBVEUgUkVRVUVTVC0tLS0tCg=="
)


def template(labels):
    return {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}


# (client class, snake name, namespaced, body for a name, status patch or None, upstream test name)
CASES = [
    ("NodeV1Api", "runtime_class", False, lambda n: {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": n}, "handler": "runc"}, None, "RuntimeClass should support RuntimeClasses API operations"),
    ("NetworkingV1Api", "ingress_class", False, lambda n: {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": n}, "spec": {"controller": "example.com/controller"}}, None, "IngressClass API should support creating IngressClass API operations"),
    ("NetworkingV1Api", "ingress", True, lambda n: {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": n}, "spec": {"defaultBackend": {"service": {"name": "default-backend", "port": {"number": 8080}}}}},
     {"status": {"loadBalancer": {"ingress": [{"ip": "169.1.1.1"}]}}}, "Ingress API should support creating Ingress API operations"),
    ("NetworkingV1Api", "network_policy", True, lambda n: {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": n}, "spec": {"podSelector": {"matchLabels": {"app": "x"}}}}, None, "NetworkPolicy API should support creating NetworkPolicy API operations"),
    ("NetworkingV1Api", "service_cidr", False, lambda n: {"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR", "metadata": {"name": n}, "spec": {"cidrs": ["10.200.0.0/24"]}},
     {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Test", "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, "ServiceCIDR API operations"),
    ("DiscoveryV1Api", "endpoint_slice", True, lambda n: {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": n}, "addressType": "IPv4", "endpoints": [{"addresses": ["1.2.3.4"]}], "ports": [{"port": 80}]}, None,
     "EndpointSlice should support creating EndpointSlice API operations"),
    ("SchedulingV1Api", "priority_class", False, lambda n: {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": 100}, None, "PriorityClass endpoints should be operated with different HTTP methods"),
    ("BatchV1Api", "cron_job", True, lambda n: {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": n}, "spec": {"schedule": "*/1 * * * ?", "jobTemplate": {"spec": {"template": {**template({"app": n}), "spec": {**template({})["spec"], "restartPolicy": "OnFailure"}}}}}},
     {"status": {"lastScheduleTime": "2026-01-01T00:00:00Z"}}, "CronJob should support CronJob API operations"),
    ("PolicyV1Api", "pod_disruption_budget", True, lambda n: {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": n}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"foo": "bar"}}}},
     {"status": {"currentHealthy": 0, "desiredHealthy": 1, "disruptionsAllowed": 0, "expectedPods": 0, "observedGeneration": 1}}, "DisruptionController should list, patch and delete a collection of PodDisruptionBudgets"),
    ("AutoscalingV2Api", "horizontal_pod_autoscaler", True, lambda n: {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": n}, "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}, "maxReplicas": 3}},
     {"status": {"currentReplicas": 1, "desiredReplicas": 1}}, "HorizontalPodAutoscaler API operations"),
    ("CertificatesV1Api", "certificate_signing_request", False, lambda n: {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": n}, "spec": {"request": CSR_REQUEST, "signerName": "example.com/e2e", "usages": ["client auth"]}},
     {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "E2E", "message": "set from the status subresource"}]}}, "Certificates API should support CSR API operations"),
    ("FlowcontrolApiserverV1Api", "priority_level_configuration", False, lambda n: {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration", "metadata": {"name": n}, "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 2, "limitResponse": {"type": "Reject"}}}},
     {"status": {"conditions": [{"type": "Test", "status": "True", "reason": "E2E"}]}}, "API priority and fairness should support PriorityLevelConfiguration API operations"),
    ("FlowcontrolApiserverV1Api", "flow_schema", False, lambda n: {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": n}, "spec": {"priorityLevelConfiguration": {"name": "global-default"}, "matchingPrecedence": 500}},
     {"status": {"conditions": [{"type": "Test", "status": "True", "reason": "E2E"}]}}, "API priority and fairness should support FlowSchema API operations"),
    ("StorageV1Api", "csi_storage_capacity", True, lambda n: {"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity", "metadata": {"name": n}, "storageClassName": "e2e", "capacity": "1Gi"}, None, "CSIStorageCapacity should support CSIStorageCapacities API operations"),
    ("StorageV1Api", "storage_class", False, lambda n: {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": n}, "provisioner": "e2e.example.com"}, None, "StorageClass API operations"),
    ("StorageV1Api", "csi_driver", False, lambda n: {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": n}, "spec": {}}, None, "CSIDriver API operations"),
    ("StorageV1Api", "csi_node", False, lambda n: {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": n}, "spec": {"drivers": []}}, None, "CSINode API operations"),
    ("StorageV1Api", "volume_attachment", False, lambda n: {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": n}, "spec": {"attacher": "e2e.example.com", "nodeName": "n1", "source": {"persistentVolumeName": "pv1"}}},
     {"status": {"attached": True}}, "VolumeAttachment should run through the lifecycle of a VolumeAttachment"),
    ("CoreV1Api", "persistent_volume", False, lambda n: {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": n}, "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/e2e"}}},
     {"status": {"phase": "Available"}}, "PersistentVolumes should run through the lifecycle of a PV and a PVC"),
    ("CoreV1Api", "persistent_volume_claim", True, lambda n: {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": n}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}},
     {"status": {"phase": "Bound"}}, "PersistentVolumes should run through the lifecycle of a PV and a PVC"),
    ("CoreV1Api", "resource_quota", True, lambda n: {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": n}, "spec": {"hard": {"pods": "10"}}},
     {"status": {"hard": {"pods": "10"}, "used": {"pods": "0"}}}, "ResourceQuota should manage the lifecycle of a ResourceQuota"),
    ("AppsV1Api", "controller_revision", True, lambda n: {"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": {"name": n}, "revision": 1, "data": {"spec": {}}}, None, "ControllerRevision should manage the lifecycle of a ControllerRevision"),
    # Dynamic Resource Allocation (beta in 1.33, outside the conformance list): each kind in
    # v1beta2, and claims in v1beta1 too (stored once, converted, watched in either version).
    ("ResourceV1beta2Api", "device_class", False, lambda n: {"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceClass", "metadata": {"name": n}, "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}}, None, "DRA DeviceClass API operations"),
    ("ResourceV1beta2Api", "resource_claim", True, lambda n: {"apiVersion": "resource.k8s.io/v1beta2", "kind": "ResourceClaim", "metadata": {"name": n}, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}},
     {"status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "p", "device": "d0"}]}}}}, "DRA ResourceClaim API operations"),
    ("ResourceV1beta1Api", "resource_claim", True, lambda n: {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim", "metadata": {"name": n}, "spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.example.com"}]}}},
     {"status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "p", "device": "d0"}]}}}}, "DRA ResourceClaim API operations (v1beta1)"),
    ("ResourceV1beta2Api", "resource_claim_template", True, lambda n: {"apiVersion": "resource.k8s.io/v1beta2", "kind": "ResourceClaimTemplate", "metadata": {"name": n}, "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}}, None,
     "DRA ResourceClaimTemplate API operations"),
    ("ResourceV1beta2Api", "resource_slice", False, lambda n: {"apiVersion": "resource.k8s.io/v1beta2", "kind": "ResourceSlice", "metadata": {"name": n}, "spec": {"driver": "gpu.example.com", "nodeName": "n1", "pool": {"name": n, "generation": 0, "resourceSliceCount": 1}, "devices": [{"name": "d0"}]}}, None,
     "DRA ResourceSlice API operations"),
    ("RbacAuthorizationV1Api", "role", True, lambda n: {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": n}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}, None, "RBAC Role API operations"),
    ("RbacAuthorizationV1Api", "cluster_role", False, lambda n: {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": n}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}, None, "RBAC ClusterRole API operations"),
    ("RbacAuthorizationV1Api", "role_binding", True, lambda n: {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": n}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}, "subjects": [{"kind": "User", "name": "u"}]}, None, "RBAC RoleBinding API operations"),
    ("RbacAuthorizationV1Api", "cluster_role_binding", False, lambda n: {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": n}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"}, "subjects": [{"kind": "Group", "name": "g"}]}, None, "RBAC ClusterRoleBinding API operations"),
]


class Ops:
    """A kind's typed client methods, namespaced or not, called with upstream's argument order."""

    def __init__(self, api, snake, ns):
        self.api, self.snake, self.ns = api, snake, ns

    def _m(self, verb, suffix=""):
        scope = "namespaced_" if self.ns else ""
        return getattr(self.api, f"{verb}_{scope}{self.snake}{suffix}")

    def create(self, body):
        return self._m("create")(self.ns, body) if self.ns else self._m("create")(body)

    def read(self, name, suffix=""):
        return self._m("read", suffix)(name, self.ns) if self.ns else self._m("read", suffix)(name)

    def patch(self, name, body, suffix=""):
        return self._m("patch", suffix)(name, self.ns, body) if self.ns else self._m("patch", suffix)(name, body)

    def replace(self, name, body, suffix=""):
        return self._m("replace", suffix)(name, self.ns, body) if self.ns else self._m("replace", suffix)(name, body)

    def delete(self, name):
        return self._m("delete")(name, self.ns) if self.ns else self._m("delete")(name)

    def delete_collection(self, **kw):
        return self._m("delete_collection")(self.ns, **kw) if self.ns else self._m("delete_collection")(**kw)

    @property
    def list_call(self):
        """The list method and its positional arguments (a bound method, not a wrapper: the
        client's watch decodes events by the method's declared return type)."""
        return (self._m("list"), (self.ns,) if self.ns else ())

    def list_fn(self, **kw):
        method, args = self.list_call
        return method(*args, **kw)

    def list_all(self, **kw):
        return getattr(self.api, f"list_{self.snake}_for_all_namespaces")(**kw)


@pytest.mark.parametrize("api_class,snake,namespaced,make,status,upstream", CASES, ids=[c[1] + ("-v1beta1" if c[0].endswith("V1beta1Api") else "") for c in CASES])
def test_api_operations(api_client, ns, api_class, snake, namespaced, make, status, upstream):
    ops = Ops(getattr(client, api_class)(api_client), snake, ns if namespaced else None)
    run = uuid.uuid4().hex[:6]
    label = f"e2e-{snake.replace('_', '-')}-{run}"
    selector = f"{label}=true"
    names = [f"e2e-{snake.replace('_', '-')}-{run}-{i}" for i in range(3)]
    for n in names:
        body = make(n)
        body["metadata"]["labels"] = {label: "true"}
        created = ops.create(body)
        assert created.metadata.name == n
    assert ops.read(names[0]).metadata.name == names[0]
    listed = ops.list_fn(label_selector=selector)
    assert sorted(o.metadata.name for o in listed.items) == names
    if namespaced:
        assert sorted(o.metadata.name for o in ops.list_all(label_selector=selector).items) == names
    method, args = ops.list_call
    w = Watcher(method, *args, label_selector=selector, resource_version=listed.metadata.resource_version, timeout_seconds=60)
    try:
        patched = ops.patch(names[0], {"metadata": {"annotations": {"patched": "true"}}})
        assert patched.metadata.annotations["patched"] == "true"
        w.expect("MODIFIED", lambda o: o.metadata.name == names[0] and (o.metadata.annotations or {}).get("patched") == "true")
        current = ops.read(names[0])
        current.metadata.annotations["updated"] = "true"
        assert ops.replace(names[0], current).metadata.annotations["updated"] == "true"
        if status is not None:
            assert ops.read(names[0], "_status").metadata.name == names[0]
            after = ops.patch(names[0], status, "_status")
            # What the status patch set is there, and a main-resource write cannot undo it.
            assert after.status is not None
            again = ops.read(names[0])
            again.metadata.annotations["after-status"] = "true"
            kept = ops.replace(names[0], again)
            assert kept.status == after.status
        if snake == "certificate_signing_request":
            csr = ops.read(names[0])
            csr.status.conditions = [client.V1CertificateSigningRequestCondition(type="Approved", status="True", reason="E2E", message="approved by the test")]
            approved = ops.api.replace_certificate_signing_request_approval(names[0], csr)
            assert [c.type for c in approved.status.conditions if c.type == "Approved"] == ["Approved"]
        ops.delete(names[0])
        w.expect("DELETED", lambda o: o.metadata.name == names[0])
        assert sorted(o.metadata.name for o in ops.list_fn(label_selector=selector).items) == names[1:]
        ops.delete_collection(label_selector=selector)
        deadline = time.monotonic() + 30
        while ops.list_fn(label_selector=selector).items:
            assert time.monotonic() < deadline, "still listed after deletecollection"
            time.sleep(0.2)
    finally:
        w.stop()
