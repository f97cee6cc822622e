"""test/e2e/apimachinery/custom_resource_definition.go and crd_watch.go,
[sig-api-machinery] CustomResourceDefinition resources and CustomResourceDefinition Watch: each
test asserts what its upstream counterpart asserts. The CRDs are the e2e fixtures'
(apiextensions-apiserver/test/integration/fixtures): a random `foo<suffix>` kind in
mygroup.example.com with an allow-all schema, and the `noxu` kind."""

import time
import uuid

import pytest
from kubernetes import client

from util import EVENT_WITHIN, Watcher, raw

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
ALLOW_ALL = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}


def random_crd(scope="Cluster"):
    """fixtures.NewRandomNameV1CustomResourceDefinition"""
    g = "foo" + uuid.uuid4().hex[:5]
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{g}s.mygroup.example.com"},
        "spec": {"group": "mygroup.example.com", "scope": scope,
                 "versions": [{"name": "v1beta1", "served": True, "storage": True, "schema": ALLOW_ALL}],
                 "names": {"plural": g + "s", "singular": g, "kind": g, "listKind": g + "List"}},
    }


def noxu_crd(scope="Cluster"):
    """fixtures.NewNoxuV1CustomResourceDefinition"""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "noxus.mygroup.example.com"},
        "spec": {"group": "mygroup.example.com", "scope": scope,
                 "versions": [{"name": "v1beta1", "served": True, "storage": True, "schema": ALLOW_ALL}],
                 "names": {"plural": "noxus", "singular": "nonenglishnoxu", "kind": "WishIHadChosenNoxu", "shortNames": ["foo", "bar", "abc", "def"], "listKind": "NoxuItemList", "categories": ["all"]}},
    }


def collection(crd):
    return f"/apis/{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}/{crd['spec']['names']['plural']}"


def wait(cond, what, within=EVENT_WITHIN):
    deadline = time.monotonic() + within
    while not cond():
        assert time.monotonic() < deadline, f"{what} not within {within}s"
        time.sleep(0.1)


def create_crd(api_client, crd):
    """fixtures.CreateNewV1CustomResourceDefinition(WatchUnsafe): create, then wait until it is
    Established and its resource answers."""
    code, _, created = raw(api_client, "POST", CRDS, body=crd)
    assert code == 201, created
    name = crd["metadata"]["name"]

    def established():
        _, _, c = raw(api_client, "GET", f"{CRDS}/{name}")
        return any(x.get("type") == "Established" and x.get("status") == "True" for x in c.get("status", {}).get("conditions", []))

    wait(established, f"{name} Established")
    wait(lambda: raw(api_client, "GET", collection(crd))[0] == 200, f"{name}'s resource served")
    return created


def delete_crd(api_client, crd):
    """fixtures.DeleteV1CustomResourceDefinition: delete, then wait until its resource is gone."""
    code, _, st = raw(api_client, "DELETE", f"{CRDS}/{crd['metadata']['name']}")
    assert code == 200, st
    wait(lambda: raw(api_client, "GET", collection(crd))[0] == 404, f"{crd['metadata']['name']}'s resource gone")


@pytest.fixture
def crds(api_client):
    """CRDs a test creates, deleted afterwards whatever happens."""
    made = []
    yield made
    for crd in made:
        raw(api_client, "DELETE", f"{CRDS}/{crd['metadata']['name']}")


def test_crd_creating_deleting_works(api_client, crds):
    """Simple CustomResourceDefinition creating/deleting custom resource definition objects works"""
    crd = random_crd()
    crds.append(crd)
    create_crd(api_client, crd)
    delete_crd(api_client, crd)


def test_crd_listing_works(api_client, crds):
    """Simple CustomResourceDefinition listing custom resource definition objects works"""
    label = str(uuid.uuid4())
    created = {}
    for _ in range(10):
        crd = random_crd()
        crd["metadata"]["labels"] = {"e2e-list-test-uuid": label}
        crds.append(crd)
        c = create_crd(api_client, crd)
        created[c["metadata"]["name"]] = c
    unlabeled = random_crd()
    crds.append(unlabeled)
    create_crd(api_client, unlabeled)
    selector = {"labelSelector": f"e2e-list-test-uuid={label}"}
    code, _, listed = raw(api_client, "GET", CRDS, query=selector)
    assert code == 200, listed
    assert len(listed["items"]) == 10
    for actual in listed["items"]:
        expected = created.get(actual["metadata"]["name"])
        assert expected is not None, actual["metadata"]["name"]
        assert actual["spec"] == expected["spec"]
    # Delete collection by the label; the unlabeled one stays.
    code, _, st = raw(api_client, "DELETE", CRDS, query=selector)
    assert code == 200, st
    for name in created:
        wait(lambda: raw(api_client, "GET", f"{CRDS}/{name}")[0] == 404, f"{name} deleted")
    code, _, remaining = raw(api_client, "GET", f"{CRDS}/{unlabeled['metadata']['name']}")
    assert code == 200, remaining
    delete_crd(api_client, unlabeled)


def has_condition(conditions, expected):
    return any({k: v for k, v in c.items() if v not in (None, "")} == expected for c in conditions or [])


def test_crd_status_subresource_works(api_client, crds):
    """Simple CustomResourceDefinition getting/updating/patching custom resource definition status sub-resource works"""
    crd = random_crd()
    crds.append(crd)
    created = create_crd(api_client, crd)
    path = f"{CRDS}/{crd['metadata']['name']}"
    updated = None
    for _ in range(5):  # retry.RetryOnConflict
        code, _, status = raw(api_client, "GET", path + "/status")
        assert code == 200, status
        assert status["spec"] == created["spec"], "the status sub-resource's spec is the CRD's"
        status["status"].setdefault("conditions", []).append({"message": "updated"})
        code, _, updated = raw(api_client, "PUT", path + "/status", body=status)
        if code != 409:
            break
    assert code == 200, updated
    assert has_condition(updated["status"]["conditions"], {"message": "updated"}), updated["status"]
    code, _, patched = raw(api_client, "PATCH", path + "/status", body='[{"op": "add", "path": "/status/conditions", "value": [{"message": "patched"}]}]',
                           headers={"Content-Type": "application/json-patch+json"})
    assert code == 200, patched
    assert has_condition(patched["status"]["conditions"], {"message": "patched"}), patched["status"]
    delete_crd(api_client, crd)


def test_crd_in_discovery_documents(api_client):
    """should include custom resource definition resources in discovery documents"""
    code, _, groups = raw(api_client, "GET", "/apis")
    assert code == 200
    group = next((g for g in groups["groups"] if g["name"] == "apiextensions.k8s.io"), None)
    assert group is not None, "apiextensions.k8s.io API group not found in /apis discovery document"
    assert any(v["version"] == "v1" for v in group["versions"])
    code, _, group = raw(api_client, "GET", "/apis/apiextensions.k8s.io")
    assert code == 200 and group["name"] == "apiextensions.k8s.io", group
    assert any(v["version"] == "v1" for v in group["versions"])
    code, _, resources = raw(api_client, "GET", "/apis/apiextensions.k8s.io/v1")
    assert code == 200 and resources["groupVersion"] == "apiextensions.k8s.io/v1", resources
    assert any(r["name"] == "customresourcedefinitions" for r in resources["resources"])


def test_custom_resource_defaulting_for_requests_and_from_storage(api_client, crds):
    """custom resource defaulting for requests and from storage works"""
    crd = random_crd()
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"] = {"a": {"type": "string"}, "b": {"type": "string"}}
    crds.append(crd)
    create_crd(api_client, crd)
    kind, api_version = crd["spec"]["names"]["kind"], f"mygroup.example.com/v1beta1"
    base = collection(crd)
    name1 = "cr-1" + uuid.uuid4().hex[:5]
    code, _, cr = raw(api_client, "POST", base, body={"apiVersion": api_version, "kind": kind, "metadata": {"name": name1}})
    assert code == 201, cr
    crd_path = f"{CRDS}/{crd['metadata']['name']}"
    json_patch = {"Content-Type": "application/json-patch+json"}
    code, _, st = raw(api_client, "PATCH", crd_path, headers=json_patch,
                      body='[{"op":"add","path":"/spec/versions/0/schema/openAPIV3Schema/properties/a/default", "value": "A"}]')
    assert code == 200, st

    def read_a():
        code, _, got = raw(api_client, "GET", f"{base}/{name1}")
        assert code == 200, got
        assert got.get("a") in (None, "A"), got
        return got.get("a") == "A"

    wait(read_a, "the CR defaulted on read", within=30)
    name2 = "cr-2" + uuid.uuid4().hex[:5]
    code, _, cr2 = raw(api_client, "POST", base, body={"apiVersion": api_version, "kind": kind, "metadata": {"name": name2}})
    assert code == 201, cr2
    assert cr2.get("a") == "A", cr2
    code, _, st = raw(api_client, "PATCH", crd_path, headers=json_patch,
                      body='[{"op":"remove","path":"/spec/versions/0/schema/openAPIV3Schema/properties/a/default"},'
                           '{"op":"add","path":"/spec/versions/0/schema/openAPIV3Schema/properties/b/default", "value": "B"}]')
    assert code == 200, st

    def read_b():
        code, _, got = raw(api_client, "GET", f"{base}/{name2}")
        assert code == 200, got
        assert got.get("b") in (None, "B"), got
        if got.get("b") != "B":
            return False
        assert got.get("a") == "A", f"expected a:\"A\" to be unchanged: {got}"
        return True

    wait(read_b, "the CR defaulted on read for b, a unchanged", within=30)
    delete_crd(api_client, crd)


def test_crd_watch_on_custom_resource_objects(api_client, crds):
    """CustomResourceDefinition Watch watch on custom resource definition objects"""
    crd = noxu_crd()
    crds.append(crd)
    create_crd(api_client, crd)
    custom = client.CustomObjectsApi(api_client)
    args = ("mygroup.example.com", "v1beta1", "noxus")

    def watch(name):
        return Watcher.from_now(custom.list_cluster_custom_object, *args, field_selector=f"metadata.name={name}", timeout_seconds=600)

    watch_a, watch_b = watch("name1"), watch("name2")
    try:
        def instance(name):
            """fixtures.NewNoxuInstance, created; the answer has a uid, the CRD's apiVersion and kind."""
            obj = {"apiVersion": "mygroup.example.com/v1beta1", "kind": "WishIHadChosenNoxu", "metadata": {"name": name},
                   "content": {"key": "value"}, "num": {"num1": 9223372036854775807, "num2": 1000000}}
            created = custom.create_cluster_custom_object(*args, obj)
            assert created["metadata"].get("uid"), created
            assert (created["apiVersion"], created["kind"]) == ("mygroup.example.com/v1beta1", "WishIHadChosenNoxu")
            assert created["num"]["num1"] == 9223372036854775807, "int64 survives"
            return created

        def named(name):
            return lambda o: o["metadata"]["name"] == name

        instance("name1")
        watch_a.expect("ADDED", named("name1"))
        watch_b.expect_none()
        instance("name2")
        watch_b.expect("ADDED", named("name2"))
        watch_a.expect_none()
        for mine, other, name in ((watch_a, watch_b, "name1"), (watch_b, watch_a, "name2")):
            code, _, st = raw(api_client, "PATCH", f"/apis/mygroup.example.com/v1beta1/noxus/{name}", body='[{ "op": "add", "path": "/dummy", "value": "test" }]',
                              headers={"Content-Type": "application/json-patch+json"})
            assert code == 200, st
            mine.expect("MODIFIED", named(name))
            other.expect_none()
        for mine, other, name in ((watch_a, watch_b, "name1"), (watch_b, watch_a, "name2")):
            custom.delete_cluster_custom_object(*args, name)
            mine.expect("DELETED", named(name))
            other.expect_none()
    finally:
        watch_a.stop()
        watch_b.stop()
    delete_crd(api_client, crd)
