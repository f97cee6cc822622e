"""The invariants of shardplane's design (I2-I5), observed from outside through any endpoint:
concurrent writers, several watchers, paged and exact LISTs, resumes, with each write's own
answer as the oracle."""

import concurrent.futures
import random
import threading

import pytest
from kubernetes import client

from util import RawWatcher, raw


def writes(core, ns, n, seed):
    """n random creates, updates and deletes over 12 names; returns each successful write's
    (type, name, rv) from its own answer (a delete's RV is read from the DELETED event)."""
    rng = random.Random(seed)
    done = []
    for i in range(n):
        name = f"n{rng.randrange(12)}"
        try:
            op = rng.randrange(3)
            if op == 0:
                o = core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name)))
                done.append(("ADDED", name, int(o.metadata.resource_version)))
            elif op == 1:
                o = core.patch_namespaced_config_map(name, ns, {"data": {"i": str(i)}})
                done.append(("MODIFIED", name, int(o.metadata.resource_version)))
            else:
                core.delete_namespaced_config_map(name, ns)
                done.append(("DELETED", name, None))
        except client.exceptions.ApiException as e:
            assert e.status in (404, 409), e
    return done


def changes(w, count):
    out = []
    while len(out) < count:
        e = w.next()
        assert e is not None and e["type"] in ("ADDED", "MODIFIED", "DELETED"), e
        out.append((e["type"], e["object"]["metadata"]["name"], int(e["object"]["metadata"]["resourceVersion"])))
    return out


def test_i2_concurrent_watchers_see_every_write_once_in_one_order(core, api_client, ns):
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    path = f"/api/v1/namespaces/{ns}/configmaps"
    watchers = [RawWatcher(api_client, path, {"resourceVersion": start}) for _ in range(3)]
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        done = [w for batch in pool.map(lambda s: writes(core, ns, 60, s), range(3)) for w in batch]
    seqs = [changes(w, len(done)) for w in watchers]
    assert seqs[0] == seqs[1] == seqs[2]
    rvs = [rv for _, _, rv in seqs[0]]
    assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs), "strictly increasing RVs"
    # Every acknowledged create and update is there with its own RV; deletes by count and name.
    got = {(t, n, rv) for t, n, rv in seqs[0] if t != "DELETED"}
    assert {w for w in done if w[0] != "DELETED"} == got
    assert sorted(n for t, n, _ in seqs[0] if t == "DELETED") == sorted(n for t, n, _ in done if t == "DELETED")
    for w in watchers:
        w.stop()


def test_i3_a_list_at_rv_r_equals_the_history_replayed_to_r(core, api_client, ns):
    path = f"/api/v1/namespaces/{ns}/configmaps"
    base = core.list_namespaced_config_map(ns)
    w = RawWatcher(api_client, path, {"resourceVersion": base.metadata.resource_version})
    done = writes(core, ns, 80, 11)
    events = changes(w, len(done))
    w.stop()
    state = {c.metadata.name: int(c.metadata.resource_version) for c in base.items}
    for i, (t, name, rv) in enumerate(events):
        if t == "DELETED":
            state.pop(name, None)
        else:
            state[name] = rv
        if i % 9 == 0 or i == len(events) - 1:
            code, _, at = raw(api_client, "GET", path, query={"resourceVersion": str(rv), "resourceVersionMatch": "Exact"})
            assert code == 200, at
            assert {i["metadata"]["name"]: int(i["metadata"]["resourceVersion"]) for i in at["items"]} == state, f"LIST at {rv}"


def test_i4_paging_while_writing_yields_each_object_once_at_one_rv(core, api_client, ns):
    for i in range(150):
        core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"p{i:03d}")))
    stop = threading.Event()

    def churn():
        i = 0
        while not stop.is_set():
            core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"x{i:04d}")))
            core.delete_namespaced_config_map(f"p{i % 150:03d}", ns) if i < 150 else None
            i += 1

    t = threading.Thread(target=churn, daemon=True)
    t.start()
    try:
        seen, cont, rv = [], None, None
        while True:
            page = core.list_namespaced_config_map(ns, limit=17, _continue=cont)
            rv = rv or page.metadata.resource_version
            assert page.metadata.resource_version == rv
            seen += [(c.metadata.name, c.metadata.resource_version) for c in page.items]
            cont = page.metadata._continue
            if not cont:
                break
    finally:
        stop.set()
        t.join()
    code, _, at = raw(api_client, "GET", f"/api/v1/namespaces/{ns}/configmaps", query={"resourceVersion": rv, "resourceVersionMatch": "Exact"})
    assert code == 200
    assert seen == [(i["metadata"]["name"], i["metadata"]["resourceVersion"]) for i in at["items"]]
    assert len(seen) == len(set(seen))


def test_i5_resume_inside_the_window_misses_nothing(core, api_client, ns):
    """Resuming from any RV of the recent history yields exactly the changes after it. (Which RV
    is too old, and so gets 410 Expired, depends on the server's history window; a fresh server
    may still hold all of it. crates/testkit/tests/shard_api.rs::watch_semantics checks the 410 with a small
    history.)"""
    path = f"/api/v1/namespaces/{ns}/configmaps"
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    w = RawWatcher(api_client, path, {"resourceVersion": start})
    done = writes(core, ns, 40, 5)
    all_events = changes(w, len(done))
    w.stop()
    for mid in (all_events[0][2], all_events[len(all_events) // 2][2], all_events[-2][2]):
        resumed = RawWatcher(api_client, path, {"resourceVersion": str(mid)})
        rest = [e for e in all_events if e[2] > mid]
        assert changes(resumed, len(rest)) == rest
        resumed.stop()
