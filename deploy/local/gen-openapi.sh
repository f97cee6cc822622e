#!/usr/bin/env bash
# Regenerates crates/apimachinery/openapi/schemas-v1.33.json: the OpenAPI v3 component schemas of
# every served kind (and everything they reference), which the servers publish under /openapi/v3
# and use to drop unknown fields and to honour fieldValidation=Strict.
#
# Source: Kubernetes v1.33 definitions as the PyPI package kubernetes-validate 1.37.0 (Apache-2.0)
# ships them (JSON Schema rendered from upstream's OpenAPI), converted back to OpenAPI v3 form:
# $refs point into components.schemas, nullable type arrays become single types, IntOrString and
# Quantity become upstream's string schemas. The result is committed; run this again when a
# served kind is added.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --disable-pip-version-check --no-deps 'kubernetes-validate==1.37.0' -d "$work"
python3 - "$work"/kubernetes_validate-*.whl "$root/crates/apimachinery/openapi/schemas-v1.33.json" <<'PY'
import json, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    defs = json.loads(z.read("kubernetes_validate/kubernetes-json-schema/v1.33.0-local/_definitions.json"))["$defs"]
core = ["Namespace", "ConfigMap", "Secret", "Pod", "Service", "Endpoints", "ServiceAccount", "Event", "PodTemplate", "ReplicationController",
        "Node", "PersistentVolume", "PersistentVolumeClaim", "ResourceQuota", "LimitRange", "Binding", "ComponentStatus"]
roots = [f"io.k8s.api.core.v1.{k}" for k in core]
roots += [f"io.k8s.api.{g}.{k}" for g, kinds in {
    "apps.v1": ["Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "ControllerRevision"],
    "batch.v1": ["Job", "CronJob"],
    "coordination.v1": ["Lease"],
    "autoscaling.v1": ["HorizontalPodAutoscaler", "Scale"],
    "autoscaling.v2": ["HorizontalPodAutoscaler"],
    "policy.v1": ["PodDisruptionBudget", "Eviction"],
    "rbac.v1": ["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"],
    "discovery.v1": ["EndpointSlice"],
    "events.v1": ["Event"],
    "networking.v1": ["Ingress", "IngressClass", "NetworkPolicy", "ServiceCIDR", "IPAddress"],
    "node.v1": ["RuntimeClass"],
    "scheduling.v1": ["PriorityClass"],
    "storage.v1": ["StorageClass", "CSIDriver", "CSINode", "CSIStorageCapacity", "VolumeAttachment"],
    "certificates.v1": ["CertificateSigningRequest"],
    "flowcontrol.v1": ["FlowSchema", "PriorityLevelConfiguration"],
    "resource.v1beta1": ["DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice"],
    "resource.v1beta2": ["DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice"],
}.items() for k in kinds]
roots += ["io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition"]
roots += [f"io.k8s.apimachinery.pkg.apis.meta.v1.{k}" for k in ["DeleteOptions", "Status"]]
REF = "#/$defs/"

def convert(s, top=False):
    if isinstance(s, list):
        return [convert(x) for x in s]
    if not isinstance(s, dict):
        return s
    if "oneOf" in s and all("type" in o for o in s["oneOf"]):
        kinds = {t for o in s["oneOf"] for t in (o["type"] if isinstance(o["type"], list) else [o["type"]]) if t != "null"}
        out = {k: v for k, v in s.items() if k != "oneOf"}
        out["type"] = "string"
        if "integer" in kinds:
            out["format"] = "int-or-string"
            out["x-kubernetes-int-or-string"] = True
        return out
    out = {}
    for k, v in s.items():
        if k == "$ref" and isinstance(v, str):
            continue
        if k == "type" and isinstance(v, list):
            v = [t for t in v if t != "null"]
            v = v[0] if len(v) == 1 else v
        elif k == "enum" and not top:
            continue  # the validator pins apiVersion/kind; upstream's schemas do not
        elif k in ("properties", "patternProperties"):
            v = {pk: convert(pv) for pk, pv in v.items()}
            out[k] = v
            continue
        out[k] = convert(v)
    if isinstance(s.get("$ref"), str):
        ref = "#/components/schemas/" + s["$ref"][len(REF):]
        if out:
            out["allOf"] = [{"$ref": ref}]
        else:
            out = {"$ref": ref}
    return out

def refs(s, acc):
    if isinstance(s, dict):
        if isinstance(s.get("$ref"), str) and s["$ref"].startswith(REF):
            acc.add(s["$ref"][len(REF):])
        for v in s.values():
            refs(v, acc)
    elif isinstance(s, list):
        for v in s:
            refs(v, acc)

seen, todo = set(), list(roots)
while todo:
    name = todo.pop()
    if name in seen:
        continue
    seen.add(name)
    acc = set()
    refs(defs[name], acc)
    todo.extend(acc - seen)
schemas = {name: convert(defs[name], top=True) for name in sorted(seen)}
with open(out, "w") as fh:
    json.dump({"kubernetesVersion": "v1.33.0", "source": "kubernetes-validate 1.37.0 (PyPI), v1.33.0-local", "schemas": schemas}, fh, separators=(",", ":"), sort_keys=True)
print(len(schemas), "schemas")
PY
ls -l "$root/crates/apimachinery/openapi/"
