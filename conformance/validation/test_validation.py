"""Invalid objects, answered as kube-apiserver 1.33 answers them: a 422 `Status` with reason
`Invalid` and exactly upstream's causes (reason, field, message). Runnable against any endpoint.

- Every served kind that can be created refuses an invalid name, with the message of the name
  rule upstream's validation uses for that kind.
- Per-kind rules: pod specs (containers, names, images, ports, probes, resources, mounts, security contexts,
  affinity, policies), Services (ports, families, traffic policies), workloads' selectors, templates and counts, RBAC bindings, leases, autoscalers, events.k8s.io's strict
  rules, ConfigMap keys, priority, storage, ingress and runtime classes, volumes, claims and
  disruption budgets, nodes, namespaces, endpoints, quotas, network policies, ingresses, certificate requests, Dynamic
  Resource Allocation's claims, templates, slices and classes, RBAC roles, the CSI kinds, volume attachments, flow
  schemas and priority levels, service CIDRs, IP addresses, limit ranges and controller revisions.
- Immutable fields: an update that changes one is refused with upstream's cause.

Where upstream's message quotes a whole Go struct (a Job's template), the check is on reason and
field only; that is said beside the case.
"""

import copy
import uuid

import pytest

SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an "
             "alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric "
         "character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
DNS1035 = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an "
           "alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")
BAD_NAME = "bad%name"
# The name rule of each kind whose rule is not a DNS subdomain (upstream's Validate*Name).
NAME_RULES = {
    ("", "namespaces"): LABEL,
    ("", "services"): DNS1035,
    ("rbac.authorization.k8s.io", "roles"): "may not contain '%'",
    ("rbac.authorization.k8s.io", "clusterroles"): "may not contain '%'",
    ("rbac.authorization.k8s.io", "rolebindings"): "may not contain '%'",
    ("rbac.authorization.k8s.io", "clusterrolebindings"): "may not contain '%'",
    ("networking.k8s.io", "ipaddresses"): "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
}
# Kinds the name check leaves out, and why.
NAME_SKIP = {
    ("", "bindings"): "creating one binds a pod; its name is the pod's",
    ("", "events"): "core events' names are checked as path segments only",
    ("events.k8s.io", "events"): "checked with events.k8s.io's own rules below",
    ("certificates.k8s.io", "certificatesigningrequests"): "upstream accepts any name for a CSR",
    ("apiextensions.k8s.io", "customresourcedefinitions"): "a CRD's name must be <plural>.<group>: its own suite",
    **{(g, r): "a review is answered, never stored, and upstream reads no name of it" for g, r in [
        ("authentication.k8s.io", "selfsubjectreviews"), ("authentication.k8s.io", "tokenreviews"),
        ("authorization.k8s.io", "localsubjectaccessreviews"), ("authorization.k8s.io", "selfsubjectaccessreviews"),
        ("authorization.k8s.io", "selfsubjectrulesreviews"), ("authorization.k8s.io", "subjectaccessreviews")]},
}


def served_kinds(raw):
    """(group, version, plural, namespaced) of every served resource that can be created, in
    its preferred version."""
    out = []
    _, api = raw.json("GET", "/api/v1")
    groups = [("", "v1", api)]
    _, apis = raw.json("GET", "/apis")
    for g in apis["groups"]:
        v = g["preferredVersion"]["version"]
        _, listing = raw.json("GET", f"/apis/{g['name']}/{v}")
        groups.append((g["name"], v, listing))
    for group, version, listing in groups:
        for r in listing["resources"]:
            if "/" in r["name"] or "create" not in r["verbs"]:
                continue
            out.append((group, version, r["name"], r["namespaced"], r["kind"]))
    return out


def collection(group, version, plural, namespace):
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


def invalid(status, body):
    assert status == 422, body
    assert body["kind"] == "Status" and body["reason"] == "Invalid" and body["code"] == 422, body
    return [(c["reason"], c["field"], c["message"]) for c in body["details"]["causes"]]


def test_every_kind_refuses_an_invalid_name(raw, ns):
    checked = []
    for group, version, plural, namespaced, kind in served_kinds(raw):
        if (group, plural) in NAME_SKIP:
            continue
        api_version = f"{group}/{version}" if group else version
        status, body = raw.json("POST", collection(group, version, plural, ns if namespaced else None), {"apiVersion": api_version, "kind": kind, "metadata": {"name": BAD_NAME}})
        causes = invalid(status, body)
        rule = NAME_RULES.get((group, plural), SUBDOMAIN)
        want = ("FieldValueInvalid", "metadata.name", f'Invalid value: "{BAD_NAME}": {rule}')
        assert want in causes, f"{plural}: {causes}"
        checked.append(plural)
    assert len(checked) >= 40, checked


# A PEM certificate request (an EC P-256 key, CN e2e-user), base64 as the API carries it.
CSR_REQUEST = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlITk1IVUNBUUF3RXpFUk1BOEdBMVVFQXd3SVpUSmxMWFZ6WlhJd1dUQVRCZ2NxaGtqT1BRSUJCZ2dxaGtqTwpQUU1CQndOQ0FBUkNZRXRpUHpXOTcwZFlFWmRzRWhzcEJrTlpOVDJSL1JxYy9xNHZzZVJRU0pQYzFKSGNVanlNCjNBYlZHTU5ydHRqOGR2WnVIZ2tGWnlEY2cwZnR4dHo4b0FBd0NnWUlLb1pJemowRUF3SURTQUF3UlFJZ0o2L1oKZmZ6TFk0UU42YnFtUXNQWDBvRnVtMTExQmVrZnRRbGhLaHVzckVjQ0lRREVod1o2bytobThtK2VVaTdJSHJBVAp6ZGhTVDZBV1dGcnhxOUJPM05JclJ3PT0KLS0tLS1FTkQgQ0VSVElGSUNBVEUgUkVRVUVTVC0tLS0tCg=="
CSR_USAGES = ["any", "cert sign", "client auth", "code signing", "content commitment", "crl sign", "data encipherment", "decipher only", "digital signature",
              "email protection", "encipher only", "ipsec end system", "ipsec tunnel", "ipsec user", "key agreement", "key encipherment", "microsoft sgc",
              "netscape sgc", "ocsp signing", "s/mime", "server auth", "signing", "timestamping"]


def pod(**spec):
    base = {"containers": [{"name": "c", "image": "nginx"}]}
    base.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p-{uuid.uuid4().hex[:6]}"}, "spec": base}


CREATE_CASES = {
    "pod without containers": ("/api/v1/namespaces/{ns}/pods", pod(containers=[]), [("FieldValueRequired", "spec.containers", "Required value")]),
    "pod container without image": ("/api/v1/namespaces/{ns}/pods", pod(containers=[{"name": "c"}]), [("FieldValueRequired", "spec.containers[0].image", "Required value")]),
    "pod container with a bad name": ("/api/v1/namespaces/{ns}/pods", pod(containers=[{"name": "Web_1", "image": "nginx"}]), [("FieldValueInvalid", "spec.containers[0].name", f'Invalid value: "Web_1": {LABEL}')]),
    "pod with two containers of one name": (
        "/api/v1/namespaces/{ns}/pods",
        pod(containers=[{"name": "c", "image": "nginx"}, {"name": "c", "image": "busybox"}]),
        [("FieldValueDuplicate", "spec.containers[1].name", 'Duplicate value: "c"')],
    ),
    "pod port out of range": (
        "/api/v1/namespaces/{ns}/pods",
        pod(containers=[{"name": "c", "image": "nginx", "ports": [{"containerPort": 70000}]}]),
        [("FieldValueInvalid", "spec.containers[0].ports[0].containerPort", "Invalid value: 70000: must be between 1 and 65535, inclusive")],
    ),
    "pod restart policy": (
        "/api/v1/namespaces/{ns}/pods",
        pod(restartPolicy="Sometimes"),
        [("FieldValueNotSupported", "spec.restartPolicy", 'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"')],
    ),
    "pod volumes of one name": (
        "/api/v1/namespaces/{ns}/pods",
        pod(volumes=[{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}]),
        [("FieldValueDuplicate", "spec.volumes[1].name", 'Duplicate value: "v"')],
    ),
    "service type": (
        "/api/v1/namespaces/{ns}/services",
        {"metadata": {"name": "s"}, "spec": {"type": "Magic", "ports": [{"port": 80}]}},
        [("FieldValueNotSupported", "spec.type", 'Unsupported value: "Magic": supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort"')],
    ),
    "service without ports": ("/api/v1/namespaces/{ns}/services", {"metadata": {"name": "s"}, "spec": {}}, [("FieldValueRequired", "spec.ports", "Required value")]),
    "service port numbers and names": (
        "/api/v1/namespaces/{ns}/services",
        {"metadata": {"name": "s"}, "spec": {"ports": [{"name": "a", "port": 0}, {"name": "a", "port": 81}]}},
        [("FieldValueInvalid", "spec.ports[0].port", "Invalid value: 0: must be between 1 and 65535, inclusive"), ("FieldValueDuplicate", "spec.ports[1].name", 'Duplicate value: "a"')],
    ),
    "service ports without names": (
        "/api/v1/namespaces/{ns}/services",
        {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}, {"name": "b", "port": 81}]}},
        [("FieldValueRequired", "spec.ports[0].name", "Required value")],
    ),
    "deployment without selector": (
        "/apis/apps/v1/namespaces/{ns}/deployments",
        {"metadata": {"name": "d"}, "spec": {"template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}},
        [("FieldValueRequired", "spec.selector", "Required value")],
    ),
    "deployment selector that does not match": (
        "/apis/apps/v1/namespaces/{ns}/deployments",
        {"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}},
        [("FieldValueInvalid", "spec.template.metadata.labels", 'Invalid value: map[string]string{"app":"d"}: `selector` does not match template `labels`')],
    ),
    "deployment negative replicas and template image": (
        "/apis/apps/v1/namespaces/{ns}/deployments",
        {"metadata": {"name": "d"}, "spec": {"replicas": -1, "selector": {"matchLabels": {"app": "d"}}, "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c"}]}}}},
        [("FieldValueInvalid", "spec.replicas", "Invalid value: -1: must be greater than or equal to 0"), ("FieldValueRequired", "spec.template.spec.containers[0].image", "Required value")],
    ),
    "job restart policy": (
        "/apis/batch/v1/namespaces/{ns}/jobs",
        {"metadata": {"name": "j"}, "spec": {"template": {"spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "busybox"}]}}}},
        [("FieldValueNotSupported", "spec.template.spec.restartPolicy", 'Unsupported value: "Always": supported values: "OnFailure", "Never"')],
    ),
    "cronjob without schedule": (
        "/apis/batch/v1/namespaces/{ns}/cronjobs",
        {"metadata": {"name": "cj"}, "spec": {"jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}}},
        [("FieldValueRequired", "spec.schedule", "Required value")],
    ),
    "rolebinding role kind and subject": (
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        {"metadata": {"name": "rb"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Policy", "name": "r"}, "subjects": [{"kind": "Robot", "name": "x"}]},
        [("FieldValueNotSupported", "roleRef.kind", 'Unsupported value: "Policy": supported values: "Role", "ClusterRole"'),
         ("FieldValueNotSupported", "subjects[0].kind", 'Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group"')],
    ),
    "clusterrolebinding to a role": (
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {"metadata": {"name": "crb-{suffix}"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}, "subjects": [{"kind": "ServiceAccount", "name": "sa"}]},
        [("FieldValueNotSupported", "roleRef.kind", 'Unsupported value: "Role": supported values: "ClusterRole"'), ("FieldValueRequired", "subjects[0].namespace", "Required value")],
    ),
    "lease duration": (
        "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
        {"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}},
        [("FieldValueInvalid", "spec.leaseDurationSeconds", "Invalid value: 0: must be greater than 0"), ("FieldValueInvalid", "spec.leaseTransitions", "Invalid value: -1: must be greater than or equal to 0")],
    ),
    "autoscaler bounds": (
        "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
        {"metadata": {"name": "h"}, "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}, "minReplicas": 5, "maxReplicas": 2}},
        [("FieldValueInvalid", "spec.maxReplicas", "Invalid value: 2: must be greater than or equal to `minReplicas`")],
    ),
    "autoscaler through autoscaling/v1": (
        "/apis/autoscaling/v1/namespaces/{ns}/horizontalpodautoscalers",
        {"metadata": {"name": "h1"}, "spec": {"scaleTargetRef": {"kind": "Deployment"}, "maxReplicas": 0}},
        [("FieldValueRequired", "spec.scaleTargetRef.name", "Required value"), ("FieldValueInvalid", "spec.maxReplicas", "Invalid value: 0: must be greater than 0")],
    ),
    "events.k8s.io event without its required fields": (
        "/apis/events.k8s.io/v1/namespaces/{ns}/events",
        {"metadata": {"name": "e"}, "type": "Odd", "deprecatedCount": 2, "regarding": {"kind": "Pod", "name": "p", "namespace": "{ns}"}},
        [("FieldValueRequired", "eventTime", "Required value"), ("FieldValueInvalid", "type", 'Invalid value: "": has invalid value: Odd'), ("FieldValueInvalid", "deprecatedCount", 'Invalid value: "": needs to be unset')],
    ),
    "events.k8s.io event without a reporting controller": (
        "/apis/events.k8s.io/v1/namespaces/{ns}/events",
        {"metadata": {"name": "e"}, "eventTime": "2026-12-01T10:00:00.000000Z", "reportingInstance": "i", "action": "A", "reason": "R", "type": "Normal", "regarding": {"kind": "Pod", "name": "p", "namespace": "{ns}"}},
        [("FieldValueRequired", "reportingController", "Required value")],
    ),
    "configmap key": (
        "/api/v1/namespaces/{ns}/configmaps",
        {"metadata": {"name": "cm"}, "data": {"a b": "x"}},
        [("FieldValueInvalid", "data[a b]", "Invalid value: \"a b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')")],
    ),
    "storage class without a provisioner": ("/apis/storage.k8s.io/v1/storageclasses", {"metadata": {"name": "sc-{suffix}"}}, [("FieldValueRequired", "provisioner", "Required value")]),
    "ingress class without a controller": ("/apis/networking.k8s.io/v1/ingressclasses", {"metadata": {"name": "ic-{suffix}"}, "spec": {}}, [("FieldValueRequired", "spec.controller", "Required value")]),
    "runtime class handler": (
        "/apis/node.k8s.io/v1/runtimeclasses",
        {"metadata": {"name": "rc-{suffix}"}, "handler": "Bad_Handler"},
        [("FieldValueInvalid", "handler", f'Invalid value: "Bad_Handler": {LABEL}')],
    ),
    "probe without a handler": (
        "/api/v1/namespaces/{ns}/pods",
        pod(containers=[{"name": "c", "image": "nginx", "readinessProbe": {"periodSeconds": 5}}]),
        [("FieldValueRequired", "spec.containers[0].readinessProbe", "Required value: must specify a handler type")],
    ),
    "probe with two handlers": (
        "/api/v1/namespaces/{ns}/pods",
        pod(containers=[{"name": "c", "image": "nginx", "livenessProbe": {"exec": {"command": ["true"]}, "tcpSocket": {"port": 80}}}]),
        [("FieldValueForbidden", "spec.containers[0].livenessProbe.tcpSocket", "Forbidden: may not specify more than 1 handler type")],
    ),
    "liveness probe success threshold": (
        "/api/v1/namespaces/{ns}/pods",
        pod(containers=[{"name": "c", "image": "nginx", "livenessProbe": {"tcpSocket": {"port": 80}, "successThreshold": 2}}]),
        [("FieldValueInvalid", "spec.containers[0].livenessProbe.successThreshold", "Invalid value: 2: must be 1")],
    ),
    "request above its limit": (
        "/api/v1/namespaces/{ns}/pods",
        pod(containers=[{"name": "c", "image": "nginx", "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}}]),
        [("FieldValueInvalid", "spec.containers[0].resources.requests[cpu]", 'Invalid value: "2": must be less than or equal to cpu limit of 1')],
    ),
    "certificate request that is not PEM": (
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        {"metadata": {"name": "csr-{suffix}"}, "spec": {"request": "YWI=", "signerName": "example.com/signer", "usages": ["client auth"]}},
        [("FieldValueInvalid", "spec.request", "Invalid value: []byte{0x61, 0x62}: PEM block type must be CERTIFICATE REQUEST")],
    ),
    "certificate request signer and usage": (
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        {"metadata": {"name": "csr-{suffix}"}, "spec": {"request": CSR_REQUEST, "signerName": "signer", "usages": ["flying"]}},
        [("FieldValueInvalid", "spec.signerName", "Invalid value: \"signer\": must be a fully qualified domain and path of the form 'example.com/signer-name'"),
         ("FieldValueNotSupported", "spec.usages[0]", 'Unsupported value: "flying": supported values: ' + ", ".join(f'"{u}"' for u in CSR_USAGES))],
    ),
    "node taint effect": (
        "/api/v1/nodes",
        {"metadata": {"name": "node-{suffix}"}, "spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "Sometimes"}]}},
        [("FieldValueNotSupported", "spec.taints[0].effect", 'Unsupported value: "Sometimes": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"')],
    ),
    "namespace finalizer": (
        "/api/v1/namespaces",
        {"metadata": {"name": "ns-{suffix}"}, "spec": {"finalizers": ["custom"]}},
        [("FieldValueInvalid", "spec.finalizers", 'Invalid value: "custom": name is neither a standard finalizer name nor is it fully qualified')],
    ),
    "endpoints subset without addresses": (
        "/api/v1/namespaces/{ns}/endpoints",
        {"metadata": {"name": "ep"}, "subsets": [{"ports": [{"port": 80, "protocol": "TCP"}]}]},
        [("FieldValueRequired", "subsets[0]", "Required value: must specify `addresses` or `notReadyAddresses`")],
    ),
    "endpoints address": (
        "/api/v1/namespaces/{ns}/endpoints",
        {"metadata": {"name": "ep"}, "subsets": [{"addresses": [{"ip": "not-an-ip"}], "ports": [{"port": 80, "protocol": "TCP"}]}]},
        [("FieldValueInvalid", "subsets[0].addresses[0].ip", 'Invalid value: "not-an-ip": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)')],
    ),
    "negative quota": (
        "/api/v1/namespaces/{ns}/resourcequotas",
        {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "-1"}}},
        [("FieldValueInvalid", "spec.hard[pods]", 'Invalid value: "-1": must be greater than or equal to 0')],
    ),
    "network policy type": (
        "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
        {"metadata": {"name": "np"}, "spec": {"podSelector": {}, "policyTypes": ["Sideways"]}},
        [("FieldValueNotSupported", "spec.policyTypes[0]", 'Unsupported value: "Sideways": supported values: "Ingress", "Egress"')],
    ),
    "network policy ip block": (
        "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
        {"metadata": {"name": "np"}, "spec": {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/16"]}}]}]}},
        [("FieldValueInvalid", "spec.ingress[0].from[0].ipBlock.except[0]", 'Invalid value: "11.0.0.0/16": must be a strict subset of `cidr`')],
    ),
    "ingress without rules or a backend": (
        "/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses",
        {"metadata": {"name": "ing"}, "spec": {}},
        [("FieldValueInvalid", "spec", "Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be specified")],
    ),
    "ingress path type": (
        "/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses",
        {"metadata": {"name": "ing"}, "spec": {"rules": [{"host": "example.com", "http": {"paths": [{"path": "/", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}},
        [("FieldValueRequired", "spec.rules[0].http.paths[0].pathType", "Required value: pathType must be specified")],
    ),
    "ingress host that is an address": (
        "/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses",
        {"metadata": {"name": "ing"}, "spec": {"rules": [{"host": "10.0.0.1", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}},
        [("FieldValueInvalid", "spec.rules[0].host", 'Invalid value: "10.0.0.1": must be a DNS name, not an IP address')],
    ),
    "persistent volume without a source": (
        "/api/v1/persistentvolumes",
        {"metadata": {"name": "pv-{suffix}"}, "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}},
        [("FieldValueRequired", "spec", "Required value: must specify a volume type")],
    ),
    "persistent volume with two sources": (
        "/api/v1/persistentvolumes",
        {"metadata": {"name": "pv-{suffix}"}, "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}, "hostPath": {"path": "/tmp"}, "nfs": {"server": "10.0.0.1", "path": "/x"}}},
        [("FieldValueForbidden", "spec.nfs", "Forbidden: may not specify more than 1 volume type")],
    ),
    "persistent volume reclaim policy": (
        "/api/v1/persistentvolumes",
        {"metadata": {"name": "pv-{suffix}"}, "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}, "hostPath": {"path": "/tmp"}, "persistentVolumeReclaimPolicy": "Keep"}},
        [("FieldValueNotSupported", "spec.persistentVolumeReclaimPolicy", 'Unsupported value: "Keep": supported values: "Delete", "Recycle", "Retain"')],
    ),
    "persistent volume claim without access modes": (
        "/api/v1/namespaces/{ns}/persistentvolumeclaims",
        {"metadata": {"name": "pvc"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}},
        [("FieldValueRequired", "spec.accessModes", "Required value: at least 1 access mode is required")],
    ),
    "persistent volume claim without storage": (
        "/api/v1/namespaces/{ns}/persistentvolumeclaims",
        {"metadata": {"name": "pvc"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {}}}},
        [("FieldValueRequired", "spec.resources[storage]", "Required value")],
    ),
    "disruption budget above 100%": (
        "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
        {"metadata": {"name": "pdb"}, "spec": {"maxUnavailable": "150%", "selector": {"matchLabels": {"a": "b"}}}},
        [("FieldValueInvalid", "spec.maxUnavailable", 'Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:"150%"}: must not be greater than 100%')],
    ),
    "disruption budget with both counts": (
        "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
        {"metadata": {"name": "pdb"}, "spec": {"minAvailable": 1, "maxUnavailable": 1, "selector": {"matchLabels": {"a": "b"}}}},
        # Upstream quotes the whole spec (Go's %#v): checked by the message's end.
        [("FieldValueInvalid", "spec", ": minAvailable and maxUnavailable cannot be both set")],
    ),
    "device request of two kinds": (
        "/apis/resource.k8s.io/v1beta2/namespaces/{ns}/resourceclaims",
        {"metadata": {"name": "rc"}, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}, "firstAvailable": [{"name": "a", "deviceClassName": "gpu.example.com"}]}]}}},
        [("FieldValueInvalid", "spec.devices.requests[0]", "Invalid value: null: exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set")],
    ),
    "device request count (v1beta1, reported at upstream's internal path)": (
        "/apis/resource.k8s.io/v1beta1/namespaces/{ns}/resourceclaims",
        {"metadata": {"name": "rc"}, "spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.example.com", "allocationMode": "ExactCount", "count": -1}]}}},
        [("FieldValueInvalid", "spec.devices.requests[0].exactly.count", "Invalid value: -1: must be greater than zero")],
    ),
    "device request allocation mode": (
        "/apis/resource.k8s.io/v1beta2/namespaces/{ns}/resourceclaimtemplates",
        {"metadata": {"name": "rct"}, "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "allocationMode": "Some"}}]}}}},
        [("FieldValueNotSupported", "spec.spec.devices.requests[0].exactly.allocationMode", 'Unsupported value: "Some": supported values: "All", "ExactCount"')],
    ),
    "resource slice on no node": (
        "/apis/resource.k8s.io/v1beta2/resourceslices",
        {"metadata": {"name": "rs-{suffix}"}, "spec": {"driver": "gpu.example.com", "pool": {"name": "p", "resourceSliceCount": 1}}},
        [("FieldValueRequired", "spec", "Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required")],
    ),
    "resource slice pool count": (
        "/apis/resource.k8s.io/v1beta2/resourceslices",
        {"metadata": {"name": "rs-{suffix}"}, "spec": {"driver": "gpu.example.com", "allNodes": True, "pool": {"name": "p", "resourceSliceCount": 0}}},
        [("FieldValueInvalid", "spec.pool.resourceSliceCount", "Invalid value: 0: must be greater than zero")],
    ),
    "device class selector without an expression": (
        "/apis/resource.k8s.io/v1beta2/deviceclasses",
        {"metadata": {"name": "dc-{suffix}"}, "spec": {"selectors": [{}]}},
        [("FieldValueRequired", "spec.selectors[0].cel", "Required value")],
    ),
    "role rule without verbs": (
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        {"metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "resources": ["pods"]}]},
        [("FieldValueRequired", "rules[0].verbs", "Required value: verbs must contain at least one value")],
    ),
    "role rule on non-resource URLs": (
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        {"metadata": {"name": "r"}, "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]},
        [("FieldValueInvalid", "rules[0].nonResourceURLs", 'Invalid value: []string{"/healthz"}: namespaced rules cannot apply to non-resource URLs')],
    ),
    "cluster role rule without an api group": (
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {"metadata": {"name": "cr-{suffix}"}, "rules": [{"verbs": ["get"], "resources": ["pods"]}]},
        [("FieldValueRequired", "rules[0].apiGroups", "Required value: resource rules must supply at least one api group")],
    ),
    "cluster role aggregation without selectors": (
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {"metadata": {"name": "cr-{suffix}"}, "aggregationRule": {"clusterRoleSelectors": []}},
        [("FieldValueRequired", "aggregationRule.clusterRoleSelectors", "Required value: at least one clusterRoleSelector required if aggregationRule is non-nil")],
    ),
    "csi driver lifecycle mode": (
        "/apis/storage.k8s.io/v1/csidrivers",
        {"metadata": {"name": "d{suffix}.example.com"}, "spec": {"volumeLifecycleModes": ["Forever"]}},
        [("FieldValueNotSupported", "spec.volumeLifecycleModes", 'Unsupported value: "Forever": supported values: "Persistent", "Ephemeral"')],
    ),
    "csi driver token expiry": (
        "/apis/storage.k8s.io/v1/csidrivers",
        {"metadata": {"name": "d{suffix}.example.com"}, "spec": {"tokenRequests": [{"audience": "a", "expirationSeconds": 60}]}},
        [("FieldValueInvalid", "spec.tokenRequests[0].expirationSeconds", "Invalid value: 60: may not specify a duration less than 10 minutes")],
    ),
    "csi node driver without a node ID": (
        "/apis/storage.k8s.io/v1/csinodes",
        {"metadata": {"name": "node-{suffix}"}, "spec": {"drivers": [{"name": "csi.example.com", "nodeID": ""}]}},
        [("FieldValueRequired", "spec.drivers[0].nodeID", "Required value")],
    ),
    "csi node driver listed twice": (
        "/apis/storage.k8s.io/v1/csinodes",
        {"metadata": {"name": "node-{suffix}"}, "spec": {"drivers": [{"name": "csi.example.com", "nodeID": "a"}, {"name": "csi.example.com", "nodeID": "b"}]}},
        [("FieldValueDuplicate", "spec.drivers[1].name", 'Duplicate value: "csi.example.com"')],
    ),
    "csi storage capacity class name": (
        "/apis/storage.k8s.io/v1/namespaces/{ns}/csistoragecapacities",
        {"metadata": {"name": "cap"}, "storageClassName": "Fast_Disks"},
        [("FieldValueInvalid", "storageClassName", f'Invalid value: "Fast_Disks": {SUBDOMAIN}')],
    ),
    "csi storage capacity topology operator": (
        "/apis/storage.k8s.io/v1/namespaces/{ns}/csistoragecapacities",
        {"metadata": {"name": "cap"}, "storageClassName": "fast", "nodeTopology": {"matchExpressions": [{"key": "zone", "operator": "In"}]}},
        [("FieldValueRequired", "nodeTopology.matchExpressions[0].values", "Required value: must be specified when `operator` is 'In' or 'NotIn'")],
    ),
    "volume attachment without a source": (
        "/apis/storage.k8s.io/v1/volumeattachments",
        {"metadata": {"name": "va-{suffix}"}, "spec": {"attacher": "csi.example.com", "nodeName": "node-1", "source": {}}},
        [("FieldValueRequired", "spec.source", "Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName")],
    ),
    "volume attachment attacher": (
        "/apis/storage.k8s.io/v1/volumeattachments",
        {"metadata": {"name": "va-{suffix}"}, "spec": {"attacher": "Bad_Attacher", "nodeName": "node-1", "source": {"persistentVolumeName": "pv"}}},
        [("FieldValueInvalid", "spec.attacher", f'Invalid value: "Bad_Attacher": {SUBDOMAIN}')],
    ),
    "flow schema precedence 1": (
        "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
        {"metadata": {"name": "fs-{suffix}"}, "spec": {"matchingPrecedence": 1, "priorityLevelConfiguration": {"name": "global-default"}}},
        [("FieldValueInvalid", "spec.matchingPrecedence", "Invalid value: 1: only the schema named 'exempt' may have matchingPrecedence 1")],
    ),
    "flow schema verb": (
        "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
        {"metadata": {"name": "fs-{suffix}"}, "spec": {"priorityLevelConfiguration": {"name": "global-default"}, "rules": [
            {"subjects": [{"kind": "Group", "group": {"name": "g"}}], "resourceRules": [{"verbs": ["fly"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": True}]}]}},
        [("FieldValueNotSupported", "spec.rules[0].resourceRules[0].verbs",
          'Unsupported value: []string{"fly"}: supported values: "create", "delete", "deletecollection", "get", "list", "patch", "proxy", "update", "watch"')],
    ),
    "priority level hand size": (
        "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations",
        {"metadata": {"name": "pl-{suffix}"}, "spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Queue", "queuing": {"queues": 4, "handSize": 5}}}}},
        [("FieldValueInvalid", "spec.limited.limitResponse.queuing.handSize", "Invalid value: 5: should not be greater than queues (4)")],
    ),
    "priority level exempt type": (
        "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations",
        {"metadata": {"name": "pl-{suffix}"}, "spec": {"type": "Exempt"}},
        [("FieldValueInvalid", "spec.type", "Invalid value: \"Exempt\": type must be 'Exempt' if and only if name is 'exempt'")],
    ),
    "service CIDRs of one family": (
        "/apis/networking.k8s.io/v1/servicecidrs",
        {"metadata": {"name": "sc-{suffix}"}, "spec": {"cidrs": ["10.200.0.0/16", "10.201.0.0/16"]}},
        [("FieldValueInvalid", "spec.cidrs",
          'Invalid value: networking.ServiceCIDRSpec{CIDRs:[]string{"10.200.0.0/16", "10.201.0.0/16"}}: may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64')],
    ),
    "service CIDR that is not one": (
        "/apis/networking.k8s.io/v1/servicecidrs",
        {"metadata": {"name": "sc-{suffix}"}, "spec": {"cidrs": ["10.200.0.0/33"]}},
        [("FieldValueInvalid", "spec.cidrs[0]", 'Invalid value: "10.200.0.0/33": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)')],
    ),
    "IP address without a parent": (
        "/apis/networking.k8s.io/v1/ipaddresses",
        {"metadata": {"name": "192.168.250.{n}"}, "spec": {}},
        [("FieldValueRequired", "spec.parentRef", "Required value")],
    ),
    "limit range type": (
        "/api/v1/namespaces/{ns}/limitranges",
        {"metadata": {"name": "lr"}, "spec": {"limits": [{"type": "Node", "max": {"cpu": "1"}}]}},
        [("FieldValueInvalid", "spec.limits[0].type", 'Invalid value: "Node": must be a standard limit type or fully qualified')],
    ),
    "limit range min above max": (
        "/api/v1/namespaces/{ns}/limitranges",
        {"metadata": {"name": "lr"}, "spec": {"limits": [{"type": "Container", "min": {"cpu": "2"}, "max": {"cpu": "1"}}]}},
        [("FieldValueInvalid", "spec.limits[0].min[cpu]", ": min value 2 is greater than max value 1")],
    ),
    "limit range pod defaults": (
        "/api/v1/namespaces/{ns}/limitranges",
        {"metadata": {"name": "lr"}, "spec": {"limits": [{"type": "Pod", "default": {"cpu": "1"}}]}},
        [("FieldValueForbidden", "spec.limits[0].default", "Forbidden: may not be specified when `type` is 'Pod'")],
    ),
    "controller revision without data": (
        "/apis/apps/v1/namespaces/{ns}/controllerrevisions",
        {"metadata": {"name": "cr"}, "revision": 1},
        [("FieldValueRequired", "data", "Required value: data is mandatory")],
    ),
    "controller revision number": (
        "/apis/apps/v1/namespaces/{ns}/controllerrevisions",
        {"metadata": {"name": "cr"}, "data": {"spec": {}}, "revision": -1},
        [("FieldValueInvalid", "revision", "Invalid value: -1: must be greater than or equal to 0")],
    ),
    "pod template without containers": (
        "/api/v1/namespaces/{ns}/podtemplates",
        {"metadata": {"name": "pt"}, "template": {"spec": {"containers": []}}},
        [("FieldValueRequired", "template.spec.containers", "Required value")],
    ),
    "replication controller selector that does not match": (
        "/api/v1/namespaces/{ns}/replicationcontrollers",
        {"metadata": {"name": "rc"}, "spec": {"selector": {"app": "x"}, "template": {"metadata": {"labels": {"app": "rc"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}},
        [("FieldValueInvalid", "spec.template.metadata.labels", 'Invalid value: map[string]string{"app":"rc"}: `selector` does not match template `labels`')],
    ),
    "replica set without selector": (
        "/apis/apps/v1/namespaces/{ns}/replicasets",
        {"metadata": {"name": "rs"}, "spec": {"template": {"metadata": {"labels": {"app": "rs"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}},
        [("FieldValueRequired", "spec.selector", "Required value")],
    ),
    "stateful set negative replicas": (
        "/apis/apps/v1/namespaces/{ns}/statefulsets",
        {"metadata": {"name": "ss"}, "spec": {"replicas": -2, "selector": {"matchLabels": {"app": "ss"}}, "template": {"metadata": {"labels": {"app": "ss"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}},
        [("FieldValueInvalid", "spec.replicas", "Invalid value: -2: must be greater than or equal to 0")],
    ),
    "daemon set template restart policy": (
        "/apis/apps/v1/namespaces/{ns}/daemonsets",
        {"metadata": {"name": "ds"}, "spec": {"selector": {"matchLabels": {"app": "ds"}}, "template": {"metadata": {"labels": {"app": "ds"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "nginx"}]}}}},
        [("FieldValueNotSupported", "spec.template.spec.restartPolicy", 'Unsupported value: "Never": supported values: "Always"')],
    ),
    "endpoint slice address of another family": (
        "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
        {"metadata": {"name": "es"}, "addressType": "IPv4", "endpoints": [{"addresses": ["fd00::1"]}]},
        [("FieldValueInvalid", "endpoints[0].addresses[0]", 'Invalid value: "fd00::1": must be a valid IPv4 address')],
    ),
    "endpoint slice port protocol": (
        "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
        {"metadata": {"name": "es"}, "addressType": "IPv4", "ports": [{"name": "http", "protocol": "HTTP", "port": 80}]},
        [("FieldValueNotSupported", "ports[0].protocol", 'Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP"')],
    ),
    "node taint listed twice": (
        "/api/v1/nodes",
        {"metadata": {"name": "node-{suffix}"}, "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"}]}},
        [("FieldValueDuplicate", "spec.taints[1]", 'Duplicate value: core.Taint{Key:"a", Value:"", Effect:"NoSchedule", TimeAdded:(*v1.Time)(nil)}: taints must be unique by key and effect pair')],
    ),
    "secret key": (
        "/api/v1/namespaces/{ns}/secrets",
        {"metadata": {"name": "s"}, "data": {"a b": "eA=="}},
        [("FieldValueInvalid", "data[a b]", "Invalid value: \"a b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')")],
    ),
    "service IP family policy": (
        "/api/v1/namespaces/{ns}/services",
        {"metadata": {"name": "svc"}, "spec": {"ipFamilyPolicy": "Sometimes", "ports": [{"port": 80}]}},
        [("FieldValueNotSupported", "spec.ipFamilyPolicy", 'Unsupported value: "Sometimes": supported values: "PreferDualStack", "RequireDualStack", "SingleStack"')],
    ),
    "service node port on a cluster IP service": (
        "/api/v1/namespaces/{ns}/services",
        {"metadata": {"name": "svc"}, "spec": {"type": "ClusterIP", "ports": [{"port": 80, "nodePort": 30080}]}},
        [("FieldValueForbidden", "spec.ports[0].nodePort", "Forbidden: may not be used when `type` is 'ClusterIP'")],
    ),
    "quota resource name": (
        "/api/v1/namespaces/{ns}/resourcequotas",
        {"metadata": {"name": "q"}, "spec": {"hard": {"gpus": "2"}}},
        [("FieldValueInvalid", "spec.hard[gpus]", 'Invalid value: "gpus": must be a standard resource for quota')],
    ),
    "pod run-as user": (
        "/api/v1/namespaces/{ns}/pods",
        pod(securityContext={"runAsUser": -1}),
        [("FieldValueInvalid", "spec.securityContext.runAsUser", "Invalid value: -1: must be between 0 and 2147483647, inclusive")],
    ),
    "pod node affinity without terms": (
        "/api/v1/namespaces/{ns}/pods",
        pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}),
        [("FieldValueRequired", "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms", "Required value: must have at least one node selector term")],
    ),
    "pod anti-affinity without a topology key": (
        "/api/v1/namespaces/{ns}/pods",
        pod(affinity={"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "x"}}}}]}}),
        [("FieldValueRequired", "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.topologyKey", "Required value: can not be empty")],
    ),
    "ingress wildcard host": (
        "/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses",
        {"metadata": {"name": "ing"}, "spec": {"rules": [{"host": "foo.*.example.com"}]}},
        [("FieldValueInvalid", "spec.rules[0].host", "Invalid value: \"foo.*.example.com\": a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character (e.g. '*.example.com', regex used for validation is '\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")],
    ),
    "pod container port name": (
        "/api/v1/namespaces/{ns}/pods",
        pod(containers=[{"name": "c", "image": "nginx", "ports": [{"containerPort": 80, "name": "HTTP"}]}]),
        [("FieldValueInvalid", "spec.containers[0].ports[0].name", 'Invalid value: "HTTP": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)')],
    ),
    "pod container resource name": (
        "/api/v1/namespaces/{ns}/pods",
        pod(containers=[{"name": "c", "image": "nginx", "resources": {"limits": {"gpu": "1"}}}]),
        [("FieldValueInvalid", "spec.containers[0].resources.limits[gpu]", 'Invalid value: "gpu": must be a standard resource for containers')],
    ),
    "service target port name": (
        "/api/v1/namespaces/{ns}/services",
        {"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80, "targetPort": "web--port"}]}},
        [("FieldValueInvalid", "spec.ports[0].targetPort", 'Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:"web--port"}: must not contain consecutive hyphens')],
    ),
    "pod mount of a volume it does not have": (
        "/api/v1/namespaces/{ns}/pods",
        pod(containers=[{"name": "c", "image": "nginx", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]),
        [("FieldValueNotFound", "spec.containers[0].volumeMounts[0].name", 'Not found: "data"')],
    ),
    "priority class above the user maximum": (
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"metadata": {"name": "too-high-{suffix}"}, "value": 2000000000},
        [("FieldValueForbidden", "value", "Forbidden: maximum allowed value of a user defined priority is 1000000000")],
    ),
}


def fill(value, ns, suffix):
    if isinstance(value, str):
        # {n}: a number from the suffix, for names that are addresses.
        return value.replace("{ns}", ns).replace("{suffix}", suffix).replace("{n}", str(int(suffix, 16) % 250 + 1))
    if isinstance(value, list):
        return [fill(v, ns, suffix) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, ns, suffix) for k, v in value.items()}
    return value


@pytest.mark.parametrize("case", sorted(CREATE_CASES))
def test_invalid_object_is_refused_with_upstreams_causes(raw, ns, case):
    path, body, want = CREATE_CASES[case]
    suffix = uuid.uuid4().hex[:6]
    status, answer = raw.json("POST", fill(path, ns, suffix), fill(body, ns, suffix))
    causes = invalid(status, answer)
    for reason, field, message in want:
        if message.startswith(": "):
            assert any(c[0] == reason and c[1] == field and c[2].endswith(message) for c in causes), f"{case}: want {reason} at {field} ending {message!r} in {causes}"
        else:
            assert (reason, field, message) in causes, f"{case}: want {(reason, field, message)} in {causes}"


def create(raw, path, body):
    status, obj = raw.json("POST", path, body)
    assert status == 201, obj
    return obj


def replace(raw, path, obj, change):
    """PUTs `obj` changed by `change`; on a 409 (a controller wrote the object meanwhile, as
    the quota controller writes a new quota's status) reads it again and retries, as clients
    do (client-go's RetryOnConflict)."""
    at = f"{path}/{obj['metadata']['name']}"
    for _ in range(5):
        new = copy.deepcopy(obj)
        change(new)
        status, answer = raw.json("PUT", at, new)
        if status != 409:
            return status, answer
        status, obj = raw.json("GET", at)
        assert status == 200, obj
    return status, answer


def deployment(name):
    return {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": name}}, "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}


def set_path(obj, dotted, value):
    cur = obj
    keys = dotted.split(".")
    for k in keys[:-1]:
        cur = cur[int(k)] if isinstance(cur, list) else cur.setdefault(k, {})
    cur[keys[-1]] = value


# (collection, object, change as (dotted path, new value), expected causes; None: reason and
# field only, where upstream's message quotes a whole Go struct).
IMMUTABLE_CASES = {
    "pod spec beyond its mutable fields": (
        "/api/v1/namespaces/{ns}/pods",
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
        ("spec.containers.0.name", "renamed"),
        [("FieldValueForbidden", "spec", None)],
    ),
    "deployment selector": (
        "/apis/apps/v1/namespaces/{ns}/deployments",
        deployment("d"),
        ("spec.selector", {"matchLabels": {"app": "d", "tier": "x"}}),
        [("FieldValueInvalid", "spec.selector", 'Invalid value: v1.LabelSelector{MatchLabels:map[string]string{"app":"d", "tier":"x"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable')],
    ),
    "statefulset service name": (
        "/apis/apps/v1/namespaces/{ns}/statefulsets",
        dict(deployment("s"), spec=dict(deployment("s")["spec"], serviceName="a")),
        ("spec.serviceName", "b"),
        [("FieldValueForbidden", "spec", "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden")],
    ),
    "job template": (
        "/apis/batch/v1/namespaces/{ns}/jobs",
        {"metadata": {"name": "j"}, "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}},
        ("spec.template.spec.containers.0.image", "alpine"),
        [("FieldValueInvalid", "spec.template", None)],
    ),
    "claim spec": (
        "/api/v1/namespaces/{ns}/persistentvolumeclaims",
        {"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}},
        ("spec.accessModes", ["ReadWriteMany"]),
        [("FieldValueForbidden", "spec", "Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims")],
    ),
    "rolebinding role reference": (
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        {"metadata": {"name": "rb"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "a"}, "subjects": [{"kind": "User", "name": "u", "apiGroup": "rbac.authorization.k8s.io"}]},
        ("roleRef.name", "b"),
        [("FieldValueInvalid", "roleRef", 'Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"Role", Name:"b"}: cannot change roleRef')],
    ),
    "immutable configmap": (
        "/api/v1/namespaces/{ns}/configmaps",
        {"metadata": {"name": "cm"}, "data": {"a": "1"}, "immutable": True},
        ("data.a", "2"),
        [("FieldValueForbidden", "data", "Forbidden: field is immutable when `immutable` is set")],
    ),
    "priority class value": (
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"metadata": {"name": "pc-{suffix}"}, "value": 10},
        ("value", 11),
        [("FieldValueForbidden", "value", "Forbidden: may not be changed in an update.")],
    ),
    "storage class provisioner": (
        "/apis/storage.k8s.io/v1/storageclasses",
        {"metadata": {"name": "sc-{suffix}"}, "provisioner": "example.com/a", "parameters": {"tier": "gold"}},
        ("provisioner", "example.com/b"),
        [("FieldValueForbidden", "provisioner", "Forbidden: updates to provisioner are forbidden.")],
    ),
    "storage class parameters": (
        "/apis/storage.k8s.io/v1/storageclasses",
        {"metadata": {"name": "sc-{suffix}"}, "provisioner": "example.com/a", "parameters": {"tier": "gold"}},
        ("parameters.tier", "silver"),
        [("FieldValueForbidden", "parameters", "Forbidden: updates to parameters are forbidden.")],
    ),
    "ingress class controller": (
        "/apis/networking.k8s.io/v1/ingressclasses",
        {"metadata": {"name": "ic-{suffix}"}, "spec": {"controller": "example.com/a"}},
        ("spec.controller", "example.com/b"),
        [("FieldValueInvalid", "spec.controller", 'Invalid value: "example.com/b": field is immutable')],
    ),
    "runtime class handler": (
        "/apis/node.k8s.io/v1/runtimeclasses",
        {"metadata": {"name": "rc-{suffix}"}, "handler": "runc"},
        ("handler", "kata"),
        [("FieldValueInvalid", "handler", 'Invalid value: "kata": field is immutable')],
    ),
    "secret type": (
        "/api/v1/namespaces/{ns}/secrets",
        {"metadata": {"name": "s"}, "type": "example.com/a", "stringData": {"k": "v"}},
        ("type", "example.com/b"),
        [("FieldValueInvalid", "type", 'Invalid value: "example.com/b": field is immutable')],
    ),
    "endpoint slice address type": (
        "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
        {"metadata": {"name": "es"}, "addressType": "IPv4", "endpoints": []},
        ("addressType", "IPv6"),
        [("FieldValueInvalid", "addressType", 'Invalid value: "IPv6": field is immutable')],
    ),
    "resource claim spec": (
        "/apis/resource.k8s.io/v1beta2/namespaces/{ns}/resourceclaims",
        {"metadata": {"name": "rc"}, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}},
        ("spec.devices.requests.0.exactly.count", 2),
        # Upstream quotes the whole spec (Go's %#v): reason and field only.
        [("FieldValueInvalid", "spec", None)],
    ),
    "resource slice driver": (
        "/apis/resource.k8s.io/v1beta2/resourceslices",
        {"metadata": {"name": "rs-{suffix}"}, "spec": {"driver": "a.example.com", "nodeName": "n1", "pool": {"name": "p", "resourceSliceCount": 1}}},
        ("spec.driver", "b.example.com"),
        [("FieldValueInvalid", "spec.driver", 'Invalid value: "b.example.com": field is immutable')],
    ),
    "service cluster IP": (
        "/api/v1/namespaces/{ns}/services",
        {"metadata": {"name": "svc"}, "spec": {"clusterIP": "10.96.100.10", "clusterIPs": ["10.96.100.10"], "ports": [{"port": 80}]}},
        ("spec.clusterIPs", ["10.96.100.11"]),
        [("FieldValueInvalid", "spec.clusterIPs[0]", 'Invalid value: []string{"10.96.100.11"}: may not change once set')],
    ),
    "quota scopes": (
        "/api/v1/namespaces/{ns}/resourcequotas",
        {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "5"}, "scopes": ["BestEffort"]}},
        ("spec.scopes", ["NotBestEffort"]),
        [("FieldValueInvalid", "spec.scopes", 'Invalid value: []core.ResourceQuotaScope{"NotBestEffort"}: field is immutable')],
    ),
    "csi driver attach required": (
        "/apis/storage.k8s.io/v1/csidrivers",
        {"metadata": {"name": "d{suffix}.example.com"}, "spec": {"attachRequired": True}},
        ("spec.attachRequired", False),
        [("FieldValueInvalid", "spec.attachedRequired", "Invalid value: false: field is immutable")],
    ),
    "csi node driver": (
        "/apis/storage.k8s.io/v1/csinodes",
        {"metadata": {"name": "node-{suffix}"}, "spec": {"drivers": [{"name": "csi.example.com", "nodeID": "a"}]}},
        ("spec.drivers.0.nodeID", "b"),
        [("FieldValueInvalid", "spec.drivers",
          'Invalid value: storage.CSINodeDriver{Name:"csi.example.com", NodeID:"b", TopologyKeys:[]string(nil), Allocatable:(*storage.VolumeNodeResources)(nil)}: field is immutable')],
    ),
    "csi storage capacity class": (
        "/apis/storage.k8s.io/v1/namespaces/{ns}/csistoragecapacities",
        {"metadata": {"name": "cap"}, "storageClassName": "fast"},
        ("storageClassName", "slow"),
        [("FieldValueInvalid", "storageClassName", 'Invalid value: "slow": field is immutable')],
    ),
    "volume attachment spec": (
        "/apis/storage.k8s.io/v1/volumeattachments",
        {"metadata": {"name": "va-{suffix}"}, "spec": {"attacher": "csi.example.com", "nodeName": "node-1", "source": {"persistentVolumeName": "pv"}}},
        ("spec.nodeName", "node-2"),
        [("FieldValueInvalid", "spec", None)],
    ),
    "service CIDR list": (
        "/apis/networking.k8s.io/v1/servicecidrs",
        {"metadata": {"name": "sc-{suffix}"}, "spec": {"cidrs": ["10.210.0.0/16"]}},
        ("spec.cidrs", ["10.211.0.0/16"]),
        [("FieldValueInvalid", "spec.cidrs", 'Invalid value: []string{"10.211.0.0/16"}: field is immutable')],
    ),
    "IP address parent": (
        "/apis/networking.k8s.io/v1/ipaddresses",
        {"metadata": {"name": "192.168.251.{n}"}, "spec": {"parentRef": {"resource": "services", "namespace": "default", "name": "a"}}},
        ("spec.parentRef.name", "b"),
        [("FieldValueInvalid", "spec.parentRef", 'Invalid value: networking.ParentReference{Group:"", Resource:"services", Namespace:"default", Name:"b"}: field is immutable')],
    ),
    "controller revision data": (
        "/apis/apps/v1/namespaces/{ns}/controllerrevisions",
        {"metadata": {"name": "cr"}, "data": {"spec": {"a": 1}}, "revision": 1},
        ("data.spec.a", 2),
        [("FieldValueInvalid", "data", None)],
    ),
    "daemon set selector": (
        "/apis/apps/v1/namespaces/{ns}/daemonsets",
        deployment("ds"),
        ("spec.selector", {"matchLabels": {"app": "ds", "tier": "x"}}),
        [("FieldValueInvalid", "spec.selector", None)],
    ),
    "job completions": (
        "/apis/batch/v1/namespaces/{ns}/jobs",
        {"metadata": {"name": "j"}, "spec": {"completions": 2, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}},
        ("spec.completions", 3),
        [("FieldValueInvalid", "spec.completions", "Invalid value: 3: field is immutable")],
    ),
    "volume mode": (
        "/api/v1/persistentvolumes",
        {"metadata": {"name": "pv-{suffix}"}, "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}, "hostPath": {"path": "/tmp/x"}, "volumeMode": "Filesystem"}},
        ("spec.volumeMode", "Block"),
        [("FieldValueInvalid", "volumeMode", 'Invalid value: "Block": field is immutable')],
    ),
    "storage class reclaim policy": (
        "/apis/storage.k8s.io/v1/storageclasses",
        {"metadata": {"name": "sc-{suffix}"}, "provisioner": "example.com/a", "reclaimPolicy": "Delete"},
        ("reclaimPolicy", "Retain"),
        [("FieldValueForbidden", "reclaimPolicy", "Forbidden: updates to reclaimPolicy are forbidden.")],
    ),
    "csi driver lifecycle modes": (
        "/apis/storage.k8s.io/v1/csidrivers",
        {"metadata": {"name": "d{suffix}.example.com"}, "spec": {"volumeLifecycleModes": ["Persistent"]}},
        ("spec.volumeLifecycleModes", ["Persistent", "Ephemeral"]),
        [("FieldValueInvalid", "spec.volumeLifecycleModes", 'Invalid value: []storage.VolumeLifecycleMode{"Persistent", "Ephemeral"}: field is immutable')],
    ),
    "csi storage capacity topology": (
        "/apis/storage.k8s.io/v1/namespaces/{ns}/csistoragecapacities",
        {"metadata": {"name": "cap"}, "storageClassName": "fast", "nodeTopology": {"matchLabels": {"zone": "a"}}},
        ("nodeTopology.matchLabels.zone", "b"),
        [("FieldValueInvalid", "nodeTopology", 'Invalid value: v1.LabelSelector{MatchLabels:map[string]string{"zone":"b"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable')],
    ),
    "replica set selector": (
        "/apis/apps/v1/namespaces/{ns}/replicasets",
        deployment("rs"),
        ("spec.selector", {"matchLabels": {"app": "rs", "tier": "x"}}),
        [("FieldValueInvalid", "spec.selector", 'Invalid value: v1.LabelSelector{MatchLabels:map[string]string{"app":"rs", "tier":"x"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable')],
    ),
    "job selector": (
        "/apis/batch/v1/namespaces/{ns}/jobs",
        {"metadata": {"name": "j"}, "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}},
        ("spec.selector", {"matchLabels": {"other": "x"}}),
        [("FieldValueInvalid", "spec.selector", 'Invalid value: v1.LabelSelector{MatchLabels:map[string]string{"other":"x"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable')],
    ),
    "priority class preemption policy": (
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"metadata": {"name": "pc-{suffix}"}, "value": 10, "preemptionPolicy": "Never"},
        ("preemptionPolicy", "PreemptLowerPriority"),
        [("FieldValueInvalid", "preemptionPolicy", 'Invalid value: "PreemptLowerPriority": field is immutable')],
    ),
    "storage class binding mode": (
        "/apis/storage.k8s.io/v1/storageclasses",
        {"metadata": {"name": "sc-{suffix}"}, "provisioner": "example.com/a", "volumeBindingMode": "Immediate"},
        ("volumeBindingMode", "WaitForFirstConsumer"),
        [("FieldValueInvalid", "volumeBindingMode", 'Invalid value: "WaitForFirstConsumer": field is immutable')],
    ),
    "cluster role binding role reference": (
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {"metadata": {"name": "crb-{suffix}"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "a"}, "subjects": [{"kind": "Group", "name": "g", "apiGroup": "rbac.authorization.k8s.io"}]},
        ("roleRef.name", "b"),
        [("FieldValueInvalid", "roleRef", 'Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"b"}: cannot change roleRef')],
    ),
    "immutable secret": (
        "/api/v1/namespaces/{ns}/secrets",
        {"metadata": {"name": "s"}, "stringData": {"a": "1"}, "immutable": True},
        ("data.a", "Mg=="),
        [("FieldValueForbidden", "data", "Forbidden: field is immutable when `immutable` is set")],
    ),
    "resource claim template spec": (
        "/apis/resource.k8s.io/v1beta2/namespaces/{ns}/resourceclaimtemplates",
        {"metadata": {"name": "rct"}, "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}},
        ("spec.spec.devices.requests.0.exactly.count", 2),
        # Upstream quotes the whole spec (Go's %#v): reason and field only.
        [("FieldValueInvalid", "spec", None)],
    ),
    "resource slice pool": (
        "/apis/resource.k8s.io/v1beta2/resourceslices",
        {"metadata": {"name": "rs-{suffix}"}, "spec": {"driver": "a.example.com", "nodeName": "n1", "pool": {"name": "p", "resourceSliceCount": 1}}},
        ("spec.pool.name", "q"),
        [("FieldValueInvalid", "spec.pool.name", 'Invalid value: "q": field is immutable')],
    ),
    "events.k8s.io event note": (
        "/apis/events.k8s.io/v1/namespaces/{ns}/events",
        {"metadata": {"name": "e"}, "eventTime": "2026-12-01T10:00:00.000000Z", "reportingController": "example.com/c", "reportingInstance": "i", "action": "A", "reason": "R", "note": "n",
         "type": "Normal", "regarding": {"kind": "Pod", "name": "p", "namespace": "{ns}"}},
        ("note", "changed"),
        [("FieldValueInvalid", "message", 'Invalid value: "changed": field is immutable')],
    ),
}


@pytest.mark.parametrize("case", sorted(IMMUTABLE_CASES))
def test_an_update_of_an_immutable_field_is_refused(raw, ns, case):
    path, body, (field, value), want = IMMUTABLE_CASES[case]
    suffix = uuid.uuid4().hex[:6]
    path = fill(path, ns, suffix)
    obj = create(raw, path, fill(body, ns, suffix))
    status, answer = replace(raw, path, obj, lambda o: set_path(o, field, value))
    causes = invalid(status, answer)
    for reason, at, message in want:
        if message is None:
            assert any(c[0] == reason and c[1] == at for c in causes), f"{case}: want {reason} at {at} in {causes}"
        else:
            assert (reason, at, message) in causes, f"{case}: want {(reason, at, message)} in {causes}"
