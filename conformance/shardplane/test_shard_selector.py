"""KEP-5866 `shardSelector` as a client sees it: disjoint selectors that cover the hash space
partition every LIST and WATCH, and LIST responses echo the canonical selector in
`metadata.shardInfo`."""

from kubernetes import client

import queue

from util import RawWatcher, raw

HALVES = [("0x0000000000000000", "0x8000000000000000"), ("0x8000000000000000", "0x10000000000000000")]
QUARTERS = [("0x0000000000000000", "0x4000000000000000"), ("0x4000000000000000", "0x8000000000000000"), ("0x8000000000000000", "0xc000000000000000"), ("0xc000000000000000", "0x10000000000000000")]


def sel(field, lo, hi):
    return f"shardRange({field}, '{lo}', '{hi}')"


def names(items):
    return sorted(i["metadata"]["name"] for i in items)


def test_disjoint_shard_selectors_partition_a_list(core, api_client, ns):
    for i in range(60):
        core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"cm-{i:02d}")))
    code, _, whole = raw(api_client, "GET", f"/api/v1/namespaces/{ns}/configmaps")
    assert code == 200
    rv = whole["metadata"]["resourceVersion"]
    for field in ("object.metadata.uid", "object.metadata.namespace"):
        for ranges in (HALVES, QUARTERS):
            parts = []
            for lo, hi in ranges:
                s = sel(field, lo, hi)
                code, _, part = raw(api_client, "GET", f"/api/v1/namespaces/{ns}/configmaps", query={"shardSelector": s, "resourceVersion": rv, "resourceVersionMatch": "Exact"})
                assert code == 200, part
                assert part["metadata"]["shardInfo"]["selector"] == s
                assert "remainingItemCount" not in part["metadata"]
                parts.append(names(part["items"]))
            # Each object in exactly one part; together exactly the whole list.
            flat = [n for p in parts for n in p]
            assert sorted(flat) == names(whole["items"]) and len(flat) == len(set(flat))
            if field == "object.metadata.uid":
                assert sum(1 for p in parts if p) > 1, "uids spread over several ranges"
    union = " || ".join(sel("object.metadata.uid", lo, hi) for lo, hi in (QUARTERS[0], QUARTERS[2]))
    code, _, u = raw(api_client, "GET", f"/api/v1/namespaces/{ns}/configmaps", query={"shardSelector": union, "resourceVersion": rv, "resourceVersionMatch": "Exact"})
    assert code == 200 and u["metadata"]["shardInfo"]["selector"] == union
    q = []
    for lo, hi in (QUARTERS[0], QUARTERS[2]):
        _, _, part = raw(api_client, "GET", f"/api/v1/namespaces/{ns}/configmaps", query={"shardSelector": sel("object.metadata.uid", lo, hi), "resourceVersion": rv, "resourceVersionMatch": "Exact"})
        q += names(part["items"])
    assert names(u["items"]) == sorted(q)


def test_disjoint_shard_selectors_partition_a_watch(core, api_client, ns):
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    path = f"/api/v1/namespaces/{ns}/configmaps"
    whole = RawWatcher(api_client, path, {"resourceVersion": start})
    halves = [RawWatcher(api_client, path, {"resourceVersion": start, "shardSelector": sel("object.metadata.uid", lo, hi)}) for lo, hi in HALVES]
    for i in range(30):
        core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"w-{i:02d}")))
    every = [whole.next() for _ in range(30)]
    assert [e["type"] for e in every] == ["ADDED"] * 30
    got = {}
    for h in halves:
        got[id(h)] = []
    # The two halves together deliver exactly the whole watch's events, each once, each in RV order.
    want = sorted((e["object"]["metadata"]["resourceVersion"], e["object"]["metadata"]["name"]) for e in every)
    seen = []
    for h in halves:
        mine = []
        while len(seen) + len(mine) < 30:
            try:
                e = h.next(within=3)
            except queue.Empty:
                break
            mine.append((e["object"]["metadata"]["resourceVersion"], e["object"]["metadata"]["name"]))
        assert [int(rv) for rv, _ in mine] == sorted(int(rv) for rv, _ in mine)
        seen += mine
    assert sorted(seen) == want
    for w in (whole, *halves):
        w.stop()


def test_bad_shard_selector_is_refused(api_client, ns):
    code, _, st = raw(api_client, "GET", f"/api/v1/namespaces/{ns}/configmaps", query={"shardSelector": "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')"})
    assert code == 400 and st["kind"] == "Status", st
