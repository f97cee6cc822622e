"""The PyPI `kubernetes` client, unmodified, against a shardplane server (URL as argv[1]).

Exercises what Python operators do: create, read, list with selectors, paging, merge and JSON
patch, replace with a stale resourceVersion (409), watch from a resourceVersion, and delete.
Exits non-zero with a message on the first difference from kube-apiserver's behaviour.
"""
import sys
import threading

from kubernetes import client, watch
from kubernetes.client.rest import ApiException


def main(url):
    cfg = client.Configuration()
    cfg.host = url
    api_client = client.ApiClient(cfg)
    core = client.CoreV1Api(api_client)
    apps = client.AppsV1Api(api_client)

    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="py")))
    cm = core.create_namespaced_config_map("py", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cfg", labels={"app": "py"}), data={"k": "v"}))
    assert cm.metadata.uid and int(cm.metadata.resource_version) > 0, cm.metadata
    start_rv = cm.metadata.resource_version

    # Watch from the create's RV in the background; it must see exactly the later changes.
    seen = []
    done = threading.Event()

    def watcher():
        w = watch.Watch()
        for ev in w.stream(core.list_namespaced_config_map, "py", resource_version=start_rv, timeout_seconds=20):
            seen.append((ev["type"], ev["object"].metadata.name, ev["object"].metadata.resource_version))
            if len(seen) == 3:
                w.stop()
        done.set()

    t = threading.Thread(target=watcher)
    t.start()

    for i in range(5):
        core.create_namespaced_config_map("py", client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"extra-{i}", labels={"app": "extra"})))
    patched = core.patch_namespaced_config_map("cfg", "py", {"data": {"k": "patched"}})
    assert patched.data == {"k": "patched"}, patched.data
    jp = core.patch_namespaced_config_map("cfg", "py", [{"op": "add", "path": "/data/n", "value": "1"}])
    assert jp.data == {"k": "patched", "n": "1"}, jp.data

    # Replace with the stale object: 409 Conflict.
    try:
        core.replace_namespaced_config_map("cfg", "py", cm)
        raise AssertionError("stale replace succeeded")
    except ApiException as e:
        assert e.status == 409, e

    listed = core.list_namespaced_config_map("py", label_selector="app=extra")
    assert sorted(i.metadata.name for i in listed.items) == [f"extra-{i}" for i in range(5)], listed.items
    page = core.list_namespaced_config_map("py", limit=2)
    assert len(page.items) == 2 and page.metadata._continue, page.metadata
    rest = core.list_namespaced_config_map("py", limit=100, _continue=page.metadata._continue)
    assert len(page.items) + len(rest.items) == 6 and rest.metadata.resource_version == page.metadata.resource_version

    dep = apps.create_namespaced_deployment("py", client.V1Deployment(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1DeploymentSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels={"app": "web"}),
            template=client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels={"app": "web"}), spec=client.V1PodSpec(containers=[client.V1Container(name="web", image="nginx")])),
        ),
    ))
    assert dep.metadata.generation == 1

    core.delete_namespaced_config_map("cfg", "py")
    try:
        core.read_namespaced_config_map("cfg", "py")
        raise AssertionError("deleted object still readable")
    except ApiException as e:
        assert e.status == 404 and '"reason":"NotFound"' in e.body.replace(" ", ""), e.body

    done.wait(25)
    t.join(5)
    types = [(typ, name) for typ, name, _ in seen]
    assert types == [("ADDED", "extra-0"), ("ADDED", "extra-1"), ("ADDED", "extra-2")], seen
    rvs = [int(rv) for _, _, rv in seen]
    assert rvs == sorted(rvs) and rvs[0] > int(start_rv), seen
    print("python client scenario passed")


if __name__ == "__main__":
    main(sys.argv[1])
