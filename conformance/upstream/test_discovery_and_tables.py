"""Discovery (test/e2e/apimachinery/discovery.go, aggregated_discovery.go), server version
(server_version.go) and Table conversion (table_conversion.go)."""

import pytest

from util import raw

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

# (group, version, resource) that upstream's aggregated-discovery tests require in /apis.
UPSTREAM_APIS = [
    ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations"),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
    ("apiregistration.k8s.io", "v1", "apiservices"),
    ("apps", "v1", "deployments"),
    ("authentication.k8s.io", "v1", "tokenreviews"),
    ("authorization.k8s.io", "v1", "selfsubjectaccessreviews"),
    ("autoscaling", "v1", "horizontalpodautoscalers"),
    ("autoscaling", "v2", "horizontalpodautoscalers"),
    ("batch", "v1", "jobs"),
    ("certificates.k8s.io", "v1", "certificatesigningrequests"),
    ("coordination.k8s.io", "v1", "leases"),
    ("discovery.k8s.io", "v1", "endpointslices"),
    ("events.k8s.io", "v1", "events"),
    ("networking.k8s.io", "v1", "ingresses"),
    ("node.k8s.io", "v1", "runtimeclasses"),
    ("policy", "v1", "poddisruptionbudgets"),
    ("scheduling.k8s.io", "v1", "priorityclasses"),
    ("storage.k8s.io", "v1", "csinodes"),
]


def test_server_version(api_client):
    """server version should find the server version"""
    code, _, v = raw(api_client, "GET", "/version")
    assert code == 200
    assert v["major"].isdigit() and v["minor"].rstrip("+").isdigit(), v


def test_discovery_preferred_version(api_client):
    """Discovery should validate PreferredVersion for each APIGroup"""
    code, _, groups = raw(api_client, "GET", "/apis/")
    assert code == 200 and groups["groups"]
    for g in groups["groups"]:
        code, _, group = raw(api_client, "GET", f"/apis/{g['name']}/")
        assert code == 200
        versions = [v["groupVersion"] for v in group["versions"]]
        assert versions and group["preferredVersion"]["groupVersion"] in versions


@pytest.mark.parametrize("group,version,resource", UPSTREAM_APIS + [("", "v1", "namespaces")], ids=lambda x: x or "core")
def test_discovery_locate_groupversion_and_resource(api_client, group, version, resource):
    """Discovery should locate the groupVersion and a resource within each APIGroup"""
    path = f"/apis/{group}/{version}" if group else "/api/v1"
    code, _, rl = raw(api_client, "GET", path)
    assert code == 200, rl
    assert rl["groupVersion"] == (f"{group}/{version}" if group else "v1")
    assert resource in [r["name"] for r in rl["resources"]]


def aggregated(api_client, path):
    code, headers, body = raw(api_client, "GET", path, headers={"Accept": AGGREGATED})
    assert code == 200
    assert "as=APIGroupDiscoveryList" in headers.get("Content-Type", "")
    assert body["kind"] == "APIGroupDiscoveryList"
    return {(g["metadata"].get("name", ""), v["version"], r["resource"]) for g in body["items"] for v in g["versions"] for r in v["resources"]}


@pytest.mark.parametrize("group,version,resource", UPSTREAM_APIS, ids=lambda x: x)
def test_aggregated_discovery_apis(api_client, group, version, resource):
    """AggregatedDiscovery should support raw aggregated discovery endpoint Accept headers"""
    assert (group, version, resource) in aggregated(api_client, "/apis")


def test_aggregated_discovery_api(api_client):
    """AggregatedDiscovery should support raw aggregated discovery request for CRDs (core part: /api)"""
    assert ("", "v1", "namespaces") in aggregated(api_client, "/api")


def test_table_406_for_backend_without_metadata(api_client):
    """Servers with support for Table transformation should return a 406 for a backend which does not implement metadata"""
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {"nonResourceAttributes": {"path": "/", "verb": "get"}}}
    code, _, _ = raw(api_client, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=body, headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    assert code == 406


def test_table_pod_and_paged_podtemplates(core, api_client, ns):
    """Table conversion shape (non-conformance tests of table_conversion.go): one object as a
    v1beta1 Table, and PodTemplates paged as Tables."""
    from kubernetes import client

    core.create_namespaced_pod(ns, client.V1Pod(metadata=client.V1ObjectMeta(name="pod-1"), spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")])))
    code, _, t = raw(api_client, "GET", f"/api/v1/namespaces/{ns}/pods/pod-1", headers={"Accept": "application/json;as=Table;v=v1beta1;g=meta.k8s.io"})
    assert code == 200 and t["kind"] == "Table"
    assert len(t["columnDefinitions"]) >= 3 and t["columnDefinitions"][0]["name"] == "Name"
    assert len(t["rows"]) == 1 and t["rows"][0]["cells"][0] == "pod-1"
    for i in range(3):
        core.create_namespaced_pod_template(ns, client.V1PodTemplate(metadata=client.V1ObjectMeta(name=f"template-{i:04d}"), template=client.V1PodTemplateSpec(spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]))))
    accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    code, _, page = raw(api_client, "GET", f"/api/v1/namespaces/{ns}/podtemplates", headers=accept, query={"limit": "2"})
    assert code == 200 and [r["cells"][0] for r in page["rows"]] == ["template-0000", "template-0001"]
    assert page["metadata"]["resourceVersion"] and page["metadata"]["continue"]
    code, _, rest = raw(api_client, "GET", f"/api/v1/namespaces/{ns}/podtemplates", headers=accept, query={"limit": "2", "continue": page["metadata"]["continue"]})
    assert code == 200 and rest["rows"][0]["cells"][0] == "template-0002"
