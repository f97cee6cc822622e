"""test/e2e/apimachinery/field_validation.go, [sig-api-machinery] FieldValidation (typed objects)."""

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
