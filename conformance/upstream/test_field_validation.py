"""test/e2e/apimachinery/field_validation.go, [sig-api-machinery] FieldValidation: typed objects,
and custom resources applied server-side."""

import copy
import json

import pytest

from util import raw

DEPLOYMENT = """{
  "apiVersion": "apps/v1",
  "kind": "Deployment",
  "metadata": {"name": "%s", "labels": {"app": "nginx"}},
  "spec": {
    "unknownField": "foo",
    "replicas": 1,
    "replicas": 2,
    "selector": {"matchLabels": {"app": "nginx"}},
    "template": {"metadata": {"labels": {"app": "nginx"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]}}
  }
}"""


def test_field_validation_typed_unknown_and_duplicate_fields(api_client, ns):
    """should detect unknown and duplicate fields of a typed object"""
    code, _, st = raw(api_client, "POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body=DEPLOYMENT % "deployment", query={"fieldValidation": "Strict"})
    assert code == 400, st
    assert 'strict decoding error: unknown field "spec.unknownField", duplicate field "spec.replicas"' in st["message"], st["message"]


def test_field_validation_typed_unknown_metadata_fields(api_client, ns):
    """should detect unknown metadata fields of a typed object"""
    body = """{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "deployment", "unknownMeta": "foo", "labels": {"app": "nginx"}},
      "spec": {"selector": {"matchLabels": {"app": "nginx"}}, "template": {"metadata": {"labels": {"app": "nginx"}, "unknownSubMeta": "foo"}, "spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]}}}}"""
    code, _, st = raw(api_client, "POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body=body, query={"fieldValidation": "Strict"})
    assert code == 400, st
    assert 'strict decoding error: unknown field "metadata.unknownMeta", unknown field "spec.template.metadata.unknownSubMeta"' in st["message"], st["message"]


def test_field_validation_warn_and_ignore(api_client, ns):
    """Warn admits the object with a warning per problem; Ignore admits it silently"""
    code, headers, obj = raw(api_client, "POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body=DEPLOYMENT % "warned", query={"fieldValidation": "Warn"})
    assert code == 201, obj
    warning = headers.get("Warning", "")
    assert r'299 - "unknown field \"spec.unknownField\""' in warning and r'299 - "duplicate field \"spec.replicas\""' in warning, warning
    assert obj["spec"]["replicas"] == 2 and "unknownField" not in obj["spec"]
    code, headers, obj = raw(api_client, "POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body=DEPLOYMENT % "ignored", query={"fieldValidation": "Ignore"})
    assert code == 201 and "Warning" not in headers


# field_validation.go's custom resource checks: each applies (server-side apply, YAML) a CR of a
# fixtures.NewRandomNameMultipleVersionCustomResourceDefinition CRD with fieldValidation=Strict.

CR_SCHEMA = {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {
    "foo": {"type": "string"},
    "cronSpec": {"type": "string", "pattern": "^(\\d+|\\*)(/\\d+)?(\\s+(\\d+|\\*)(/\\d+)?){4}$"},
    "ports": {"type": "array", "x-kubernetes-list-map-keys": ["containerPort", "protocol"], "x-kubernetes-list-type": "map",
              "items": {"type": "object", "required": ["containerPort", "protocol"], "properties": {
                  "containerPort": {"format": "int32", "type": "integer"}, "hostIP": {"type": "string"},
                  "hostPort": {"format": "int32", "type": "integer"}, "name": {"type": "string"}, "protocol": {"type": "string"}}}}}}}}}

CR_BODY = """
apiVersion: %s
kind: %s
metadata:
  name: %s
  finalizers:
  - test-finalizer
%sspec:
%s  cronSpec: "* * * * */5"
  ports:
  - name: x
    containerPort: 80
    protocol: TCP"""


def multi_version_crd(schema=None):
    """fixtures.NewRandomNameMultipleVersionCustomResourceDefinition, with `schema` for every version"""
    from test_custom_resources import ALLOW_ALL, random_crd
    crd = random_crd()
    crd["spec"]["versions"] = [{"name": "v1beta1", "served": True, "storage": True, "schema": schema or ALLOW_ALL},
                               {"name": "v1", "served": True, "storage": False, "schema": schema or ALLOW_ALL}]
    return crd


@pytest.fixture
def cr_crd(api_client):
    """Makes a CRD (created and established); afterwards drops its CR's finalizer and deletes it."""
    from test_custom_resources import CRDS, collection, create_crd
    made = []

    def make(schema=None):
        crd = multi_version_crd(schema)
        create_crd(api_client, crd)
        made.append(crd)
        return crd, collection(crd)

    yield make
    for crd in made:
        raw(api_client, "PATCH", f"{collection(crd)}/mytest", body='{"metadata":{"finalizers":null}}', headers={"Content-Type": "application/merge-patch+json"})
        raw(api_client, "DELETE", f"{CRDS}/{crd['metadata']['name']}")


def apply_cr(api_client, base, body):
    return raw(api_client, "PATCH", f"{base}/mytest", body=body, headers={"Content-Type": "application/apply-patch+yaml"},
               query={"fieldManager": "field_validation_mgr", "fieldValidation": "Strict"})


def cr_body(crd, root="", spec="  foo: foo1\n"):
    return CR_BODY % (f"{crd['spec']['group']}/v1beta1", crd["spec"]["names"]["kind"], "mytest", root, spec)


def test_field_validation_cr_valid_with_schema(api_client, cr_crd):
    """should create/apply a valid CR for CRD with validation schema"""
    crd, base = cr_crd(CR_SCHEMA)
    code, _, obj = apply_cr(api_client, base, cr_body(crd))
    assert code in (200, 201), obj


def test_field_validation_cr_unknown_fields_without_schema(api_client, cr_crd):
    """should create/apply a CR with unknown fields for CRD with no validation schema"""
    crd, base = cr_crd()
    code, _, obj = apply_cr(api_client, base, cr_body(crd, spec="  unknown: uk1\n"))
    assert code in (200, 201), obj


def test_field_validation_cr_extra_properties_refused(api_client, cr_crd):
    """should create/apply an invalid CR with extra properties for CRD with validation schema"""
    crd, base = cr_crd(CR_SCHEMA)
    code, _, result = apply_cr(api_client, base, cr_body(crd, root="unknownField: unknown\n"))
    assert ".unknownField: field not declared in schema" in json.dumps(result), result


def test_field_validation_cr_unknown_metadata_in_root_and_embedded(api_client, cr_crd, ns):
    """should detect unknown metadata fields in both the root and embedded object of a CR"""
    schema = copy.deepcopy(CR_SCHEMA)
    spec = schema["openAPIV3Schema"]["properties"]["spec"]
    spec["x-kubernetes-preserve-unknown-fields"] = True
    spec["properties"]["template"] = {"type": "object", "x-kubernetes-embedded-resource": True,
                                      "properties": {"metadata": {"type": "object", "properties": {"name": {"type": "string"}}}, "spec": {"type": "object"}}}
    crd, base = cr_crd(schema)
    body = cr_body(crd).replace("  finalizers:", "  unknownMeta: unknown\n  finalizers:").replace(
        "spec:\n", f"spec:\n  template:\n    apiversion: foo/v1\n    kind: Sub\n    metadata:\n        unknownSubMeta: unknown\n        name: subobject\n        namespace: {ns}\n")
    code, _, result = apply_cr(api_client, base, body)
    text = json.dumps(result)
    assert ".spec.template.metadata.unknownSubMeta: field not declared in schema" in text or ".metadata.unknownMeta: field not declared in schema" in text, result


def test_field_validation_cr_duplicates_when_preserving_unknown(api_client, cr_crd):
    """should detect duplicates in a CR when preserving unknown fields"""
    schema = copy.deepcopy(CR_SCHEMA)
    schema["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"] = True
    crd, base = cr_crd(schema)
    code, _, result = apply_cr(api_client, base, cr_body(crd, spec="  unknown: uk1\n  foo: foo1\n  foo: foo2\n"))
    assert 'line 11: key \\"foo\\" already set in map' in json.dumps(result), result
