"""test/e2e/apimachinery/watch.go, [sig-api-machinery] Watchers [Conformance]."""

import random
import threading
import time

from kubernetes import client

from util import Watcher, same_object

LABEL = "watch-this-configmap"


def cm(name, value, data=None):
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels={LABEL: value}), data=data)


def mutate(core, ns, name, n):
    """Get-modify-Update, as upstream (retry on conflict)."""
    for _ in range(10):
        cur = core.read_namespaced_config_map(name, ns)
        cur.data = {**(cur.data or {}), "mutation": str(n)}
        try:
            return core.replace_namespaced_config_map(name, ns, cur)
        except client.exceptions.ApiException as e:
            if e.status != 409:
                raise
    raise AssertionError("update kept conflicting")


def watch_cms(core, ns, rv, *values):
    sel = f"{LABEL} in ({','.join(values)})"
    if rv is None:
        return Watcher.from_now(core.list_namespaced_config_map, ns, label_selector=sel, timeout_seconds=600)
    return Watcher(core.list_namespaced_config_map, ns, label_selector=sel, timeout_seconds=600, resource_version=rv)


def test_watch_configmaps_with_multiple_watchers(core, ns):
    """should observe add, update, and delete watch notifications on configmaps"""
    a, b, ab = watch_cms(core, ns, None, "multiple-watchers-A"), watch_cms(core, ns, None, "multiple-watchers-B"), watch_cms(core, ns, None, "multiple-watchers-A", "multiple-watchers-B")
    created = core.create_namespaced_config_map(ns, cm("e2e-watch-test-configmap-a", "multiple-watchers-A"))
    for w in (a, ab):
        w.expect("ADDED", lambda o: same_object(o, created))
    b.expect_none()
    for n in (1, 2):
        updated = mutate(core, ns, "e2e-watch-test-configmap-a", n)
        for w in (a, ab):
            w.expect("MODIFIED", lambda o, u=updated: same_object(o, u))
        b.expect_none()
    core.delete_namespaced_config_map("e2e-watch-test-configmap-a", ns)
    for w in (a, ab):
        w.expect("DELETED", lambda o: o.metadata.name == "e2e-watch-test-configmap-a")
    b.expect_none()
    created = core.create_namespaced_config_map(ns, cm("e2e-watch-test-configmap-b", "multiple-watchers-B"))
    for w in (b, ab):
        w.expect("ADDED", lambda o: same_object(o, created))
    a.expect_none()
    core.delete_namespaced_config_map("e2e-watch-test-configmap-b", ns)
    for w in (b, ab):
        w.expect("DELETED", lambda o: o.metadata.name == "e2e-watch-test-configmap-b")
    a.expect_none()
    for w in (a, b, ab):
        w.stop()


def test_watch_configmaps_from_resource_version(core, ns):
    """should be able to start watching from a specific resource version"""
    name = "e2e-watch-test-resource-version"
    core.create_namespaced_config_map(ns, cm(name, "from-resource-version"))
    first = mutate(core, ns, name, 1)
    second = mutate(core, ns, name, 2)
    core.delete_namespaced_config_map(name, ns)
    w = watch_cms(core, ns, first.metadata.resource_version, "from-resource-version")
    w.expect("MODIFIED", lambda o: same_object(o, second))
    w.expect("DELETED", lambda o: o.metadata.name == name)
    w.stop()


def test_watch_configmaps_closed_and_restarted(core, ns):
    """should be able to restart watching from the last resource version observed by the previous watch"""
    name = "e2e-watch-test-watch-closed"
    w = watch_cms(core, ns, None, "watch-closed-and-restarted")
    core.create_namespaced_config_map(ns, cm(name, "watch-closed-and-restarted"))
    mutate(core, ns, name, 1)
    w.expect("ADDED", lambda o: o.metadata.name == name)
    last = w.expect("MODIFIED", lambda o: o.metadata.name == name)
    w.stop()
    second = mutate(core, ns, name, 2)
    w2 = watch_cms(core, ns, last.metadata.resource_version, "watch-closed-and-restarted")
    core.delete_namespaced_config_map(name, ns)
    w2.expect("MODIFIED", lambda o: same_object(o, second))
    w2.expect("DELETED", lambda o: o.metadata.name == name)
    w2.stop()


def test_watch_configmaps_label_changed(core, ns):
    """should observe an object deletion if it stops meeting the requirements of the selector"""
    name = "e2e-watch-test-label-changed"
    w = watch_cms(core, ns, None, "label-changed-and-restored")
    core.create_namespaced_config_map(ns, cm(name, "label-changed-and-restored"))
    first = mutate(core, ns, name, 1)
    w.expect("ADDED", lambda o: o.metadata.name == name)
    w.expect("MODIFIED", lambda o: same_object(o, first))
    cur = core.read_namespaced_config_map(name, ns)
    cur.metadata.labels[LABEL] = "wrong-value"
    core.replace_namespaced_config_map(name, ns, cur)
    w.expect("DELETED", lambda o: o.metadata.name == name)
    mutate(core, ns, name, 2)
    w.expect_none()
    cur = core.read_namespaced_config_map(name, ns)
    cur.metadata.labels[LABEL] = "label-changed-and-restored"
    restored = core.replace_namespaced_config_map(name, ns, cur)
    w.expect("ADDED", lambda o: same_object(o, restored))
    third = mutate(core, ns, name, 3)
    w.expect("MODIFIED", lambda o: same_object(o, third))
    core.delete_namespaced_config_map(name, ns)
    w.expect("DELETED", lambda o: o.metadata.name == name)
    w.stop()


def test_watch_consistency(core, ns):
    """should receive events on concurrent watches in same order"""
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    stop = threading.Event()
    failures = []

    def produce():
        i = 0
        rng = random.Random(7)
        while not stop.is_set():
            try:
                op = rng.randrange(3)
                name = f"cm-{rng.randrange(max(i, 1))}"
                if op == 0 or i == 0:
                    core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"cm-{i}")))
                    i += 1
                elif op == 1:
                    # An unconditional update: no resourceVersion in the object.
                    core.replace_namespaced_config_map(name, ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"mutation": str(i)}))
                else:
                    core.delete_namespaced_config_map(name, ns)
            except client.exceptions.ApiException as e:
                if e.status not in (404, 409):
                    failures.append(e)
            time.sleep(0.005)

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    try:
        rv = start
        watchers = []
        for _ in range(100):
            watchers.append(Watcher(core.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=600))
            first = watchers[0].next()
            assert first is not None and first["type"] in ("ADDED", "MODIFIED", "DELETED"), first
            want = first["object"].metadata.resource_version
            for w in watchers[1:]:
                e = w.next()
                assert e is not None and e["object"].metadata.resource_version == want, (e and e["object"].metadata.resource_version, want)
            rv = want
    finally:
        stop.set()
        t.join()
        for w in watchers:
            w.stop()
    assert not failures, failures
