"""Hostile input: malformed, oversized, contradictory and encoded-to-trick requests, each answered
as kube-apiserver answers it (the Status code and reason), after which the server still serves
and the canary objects are intact (conftest.py). Runnable against any endpoint."""

import base64
import json
import urllib.parse
import uuid

import pytest

# Characters of one, two, three and four UTF-8 bytes: a byte-offset slice through any of them
# would panic a server that slices text by bytes.
MULTIBYTE = ["é", "€", "𝄞"]


def q(s):
    return urllib.parse.quote(s, safe="=&,!()")


def cm(name="x", **extra):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **extra}


def status_of(data):
    try:
        return json.loads(data)
    except ValueError:
        return None


def check(resp, code, reason):
    status, headers, data = resp
    assert status == code, f"want {code} {reason}, got {status}: {data[:300]!r}"
    if code >= 400:
        s = status_of(data)
        assert s and s.get("kind") == "Status" and s.get("code") == code, f"not a Status: {data[:300]!r}"
        assert s.get("reason", "") == reason, f"reason {s.get('reason')!r}, want {reason!r}: {s.get('message')}"


# --- query parameters of a LIST -------------------------------------------------------------

LIST_QUERIES = [
    ("limit=abc", 400, "BadRequest"),
    ("limit=", 400, "BadRequest"),
    ("limit=1.5", 400, "BadRequest"),
    ("limit=99999999999999999999", 400, "BadRequest"),
    ("limit=%FF", 400, "BadRequest"),
    ("limit=1&limit=abc", 200, ""),
    ("limit=abc&limit=1", 400, "BadRequest"),
    ("%6Cimit=abc", 400, "BadRequest"),
    ("limit=9223372036854775807", 200, ""),
    ("timeoutSeconds=abc", 400, "BadRequest"),
    ("timeoutSeconds=-5", 200, ""),
    ("timeoutSeconds=99999999999999999999", 400, "BadRequest"),
    ("resourceVersion=abc", 400, "BadRequest"),
    ("resourceVersion=-1", 400, "BadRequest"),
    ("resourceVersion=99999999999999999999", 400, "BadRequest"),
    ("resourceVersion=0", 200, ""),
    ("resourceVersion=", 200, ""),
    ("resourceVersion=%00", 400, "BadRequest"),
    ("resourceVersionMatch=Bogus&resourceVersion=0", 422, "Invalid"),
    ("resourceVersionMatch=Exact", 422, "Invalid"),
    ("resourceVersionMatch=NotOlderThan&resourceVersion=0", 200, ""),
    ("labelSelector=!!!", 400, "BadRequest"),
    ("labelSelector=a in (b", 400, "BadRequest"),
    ("labelSelector=a=" + "x" * 64, 400, "BadRequest"),
    ("labelSelector=a%00=b", 400, "BadRequest"),
    ("labelSelector=", 200, ""),
    ("labelSelector=a", 200, ""),
    ("labelSelector=!a", 200, ""),
    ("labelSelector=a notin (b,c)", 200, ""),
    ("labelSelector=a=b&labelSelector=!!!", 200, ""),
    ("fieldSelector=bogus=x", 400, "BadRequest"),
    ("fieldSelector=metadata.name", 400, "BadRequest"),
    ("fieldSelector=data.x=1", 400, "BadRequest"),
    ("fieldSelector=metadata.name=a,metadata.namespace!=b", 200, ""),
    ("fieldSelector=metadata.name==x", 200, ""),
    ("fieldSelector=metadata.name=%C3%A9", 200, ""),
    ("continue=garbage", 400, "BadRequest"),
    ("continue=%FF%FE", 400, "BadRequest"),
    ("continue=" + q(base64.b64encode(b'{"v":"meta.k8s.io/v1","rv":0,"start":"x"}').decode()), 400, "BadRequest"),
    ("continue=" + q(base64.b64encode(b'{"v":"wrong","rv":5,"start":"x"}').decode()), 400, "BadRequest"),
    ("continue=" + q(base64.b64encode(b'{"v":"meta.k8s.io/v1","rv":5,"start":"../../x"}').decode()), 400, "BadRequest"),
    ("continue=" + q(base64.b64encode(b'[1,2,3]').decode()), 400, "BadRequest"),
    ("sendInitialEvents=true", 422, "Invalid"),
    ("pretty=maybe", 200, ""),
    ("unknownParameter=1", 200, ""),
    ("timeout=abc", 400, "BadRequest"),
    ("timeout=5", 400, "BadRequest"),
    ("timeout=10s", 200, ""),
    ("timeout=-1s", 200, ""),
    ("timeout=99999h", 200, ""),
    ("watch=false", 200, ""),
    ("watch=0", 200, ""),
]


def check_list(raw, canary, query, code, reason):
    """A LIST of the canary namespace's ConfigMaps with `query` (spaces encoded) answers `code`."""
    ns, _ = canary
    check(raw("GET", f"/api/v1/namespaces/{ns}/configmaps?{query.replace(' ', '%20')}"), code, reason)


@pytest.mark.parametrize("query,code,reason", LIST_QUERIES, ids=[c[0][:60] for c in LIST_QUERIES])
def test_list_query(raw, canary, query, code, reason):
    check_list(raw, canary, query, code, reason)


def multibyte_cases():
    """Each parameter with a multi-byte character at every position of a valid value."""
    base = {"labelSelector": "app=web", "fieldSelector": "metadata.name=web", "limit": "10", "resourceVersion": "10", "timeoutSeconds": "10", "timeout": "10s", "continue": "abc"}
    out = []
    for name, value in base.items():
        for ch in MULTIBYTE[::2]:
            for i in range(len(value) + 1):
                v = value[:i] + ch + value[i:]
                # A field selector's value may be any text; everything else refuses the character.
                ok = name == "fieldSelector" and i > value.index("=")
                out.append((f"{name}={q(v)}", 200 if ok else 400, "" if ok else "BadRequest"))
    return out


MULTIBYTE_QUERIES = multibyte_cases()


@pytest.mark.parametrize("query,code,reason", MULTIBYTE_QUERIES, ids=[c[0] for c in MULTIBYTE_QUERIES])
def test_multibyte_in_query(raw, canary, query, code, reason):
    check_list(raw, canary, query, code, reason)


WATCH_QUERIES = [
    ("watch=true&resourceVersion=abc", 400, "BadRequest"),
    ("watch=true&timeoutSeconds=abc", 400, "BadRequest"),
    ("watch=1&labelSelector=!!!", 400, "BadRequest"),
    ("watch=true&sendInitialEvents=true", 422, "Invalid"),
    ("watch=true&resourceVersionMatch=Exact&resourceVersion=1", 422, "Invalid"),
]


@pytest.mark.parametrize("query,code,reason", WATCH_QUERIES, ids=[c[0] for c in WATCH_QUERIES])
def test_watch_query(raw, canary, query, code, reason):
    check_list(raw, canary, query, code, reason)


@pytest.mark.parametrize("flag", ["true", "yes", "", "TRUE", "1"])
def test_any_watch_value_but_false_is_a_watch(raw, canary, flag):
    """Upstream's parameter codec reads a boolean as false only for `0` and `false`."""
    ns, _ = canary
    status, headers, data = raw("GET", f"/api/v1/namespaces/{ns}/configmaps?watch={flag}&timeoutSeconds=1")
    assert status == 200
    assert b"ConfigMapList" not in data and b'"type":"ADDED"' in data.replace(b" ", b""), data[:200]


# --- paths and names ------------------------------------------------------------------------

def path_cases():
    cases = [
        ("GET", "/api/v1/namespaces/{ns}/configmaps/does-not-exist", 404, "NotFound"),
        ("GET", "/api/v1/namespaces/{ns}/configmaps/" + "a" * 10000, 404, "NotFound"),
        ("GET", "/api/v1/namespaces/{ns}/configmaps/a%00b", 404, "NotFound"),
        ("GET", "/api/v1/namespaces/{ns}/configmaps/a%0Ab", 404, "NotFound"),
        ("GET", "/api/v1/namespaces/{ns}/configmaps/%FF%FE", 404, "NotFound"),
        ("GET", "/api/v1/nosuchresource", 404, "NotFound"),
        ("GET", "/apis/nosuch.example.com/v1/things", 404, "NotFound"),
        ("GET", "/apis/nosuch.example.com/v1/namespaces/x/things/y", 404, "NotFound"),
        ("GET", "/api/v2/pods", 404, "NotFound"),
        ("GET", "/api/v1/namespaces/{ns}/configmaps/canary-0/nosuchsubresource", 404, "NotFound"),
        ("POST", "/api/v1/namespaces/{ns}/configmaps/canary-0", 405, "MethodNotAllowed"),
        ("PUT", "/api/v1/namespaces/{ns}/configmaps", 405, "MethodNotAllowed"),
        ("PATCH", "/api/v1/namespaces/{ns}/configmaps", 405, "MethodNotAllowed"),
        ("DELETE", "/api/v1/namespaces/default", 403, "Forbidden"),
        ("DELETE", "/api/v1/namespaces/kube-system", 403, "Forbidden"),
        ("DELETE", "/api/v1/namespaces/kube-public", 403, "Forbidden"),
    ]
    for ch in MULTIBYTE:
        cases.append(("GET", "/api/v1/namespaces/{ns}/configmaps/" + q("canary" + ch), 404, "NotFound"))
        cases.append(("GET", "/api/v1/namespaces/{ns}/configmaps/" + q(ch), 404, "NotFound"))
        cases.append(("GET", "/api/v1/namespaces/" + q(ch) + "/configmaps", 200, ""))
        cases.append(("DELETE", "/api/v1/namespaces/{ns}/configmaps/" + q(ch * 3), 404, "NotFound"))
    return cases


PATHS = path_cases()


@pytest.mark.parametrize("method,path,code,reason", PATHS, ids=[f"{c[0]} {c[1][:70]}" for c in PATHS])
def test_path(raw, canary, method, path, code, reason):
    ns, _ = canary
    check(raw(method, path.replace("{ns}", ns)), code, reason)


def test_protected_namespaces_survive(raw):
    for name in ["default", "kube-system", "kube-public"]:
        assert raw("GET", f"/api/v1/namespaces/{name}")[0] == 200, name


# --- bodies ---------------------------------------------------------------------------------

def deep(n):
    return '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep"},"data":{"a":' + "[" * n + "]" * n + "}}"


def body_cases():
    big_name = "a" * 254
    wide = {f"k{i:06d}": "v" * 16 for i in range(80_000)}
    cases = [
        ("not JSON", "{", {}, 400, "BadRequest"),
        ("empty", "", {}, 400, "BadRequest"),
        ("array", "[]", {}, 400, "BadRequest"),
        ("null", "null", {}, 400, "BadRequest"),
        ("number", "42", {}, 400, "BadRequest"),
        ("string", '"x"', {}, 400, "BadRequest"),
        ("truncated", json.dumps(cm())[:-3], {}, 400, "BadRequest"),
        ("wrong kind", json.dumps({**cm(), "kind": "Secret"}), {}, 400, "BadRequest"),
        ("data wrong type", json.dumps(cm(data={"a": 1})), {}, 400, "BadRequest"),
        ("metadata wrong type", json.dumps({**cm(), "metadata": "x"}), {}, 400, "BadRequest"),
        ("labels wrong type", json.dumps(cm(**{})) .replace('"metadata": {', '"metadata": {"labels": [1], '), {}, 400, "BadRequest"),
        ("deep 100", deep(100), {}, 400, "BadRequest"),
        ("deep 100000", deep(100_000), {}, 400, "BadRequest"),
        ("wide data past 1 MiB", json.dumps(cm(name="wide", data=wide)), {}, 422, "Invalid"),
        ("duplicate key, strict", '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dup","name":"dup2"}}', {"?": "fieldValidation=Strict"}, 400, "BadRequest"),
        ("unknown field, strict", json.dumps({**cm(name="unknown"), "bogus": 1}), {"?": "fieldValidation=Strict"}, 400, "BadRequest"),
        ("fieldValidation bogus", json.dumps(cm(name="fv")), {"?": "fieldValidation=Bogus"}, 400, "BadRequest"),
        ("no name", json.dumps({**cm(), "metadata": {}}), {}, 422, "Invalid"),
        ("name uppercase", json.dumps(cm(name="UPPER")), {}, 422, "Invalid"),
        ("name underscore", json.dumps(cm(name="a_b")), {}, 422, "Invalid"),
        ("name too long", json.dumps(cm(name=big_name)), {}, 422, "Invalid"),
        ("name control char", json.dumps(cm(name="a\u0001b")), {}, 422, "Invalid"),
        ("name NUL", json.dumps(cm(name="a\u0000b")), {}, 422, "Invalid"),
        ("name dot", json.dumps(cm(name=".")), {}, 422, "Invalid"),
        ("name dot dot", json.dumps(cm(name="..")), {}, 422, "Invalid"),
        ("name leading dash", json.dumps(cm(name="-a")), {}, 422, "Invalid"),
        ("name slash", json.dumps(cm(name="a/b")), {}, 422, "Invalid"),
        ("generateName invalid", json.dumps({**cm(), "metadata": {"generateName": "É-"}}), {}, 422, "Invalid"),
        ("label key invalid", json.dumps({**cm(name="lk"), "metadata": {"name": "lk", "labels": {"bad key!": "v"}}}), {}, 422, "Invalid"),
        ("label value too long", json.dumps({**cm(name="lv"), "metadata": {"name": "lv", "labels": {"k": "v" * 64}}}), {}, 422, "Invalid"),
        ("annotations past 256 KiB", json.dumps({**cm(name="an"), "metadata": {"name": "an", "annotations": {"a": "x" * 262_145}}}), {}, 422, "Invalid"),
        ("finalizer invalid", json.dumps({**cm(name="fin"), "metadata": {"name": "fin", "finalizers": ["not a name!"]}}), {}, 422, "Invalid"),
        ("data key invalid", json.dumps(cm(name="dk", data={"bad key!": "v"})), {}, 422, "Invalid"),
        ("namespace mismatch", json.dumps({**cm(name="nsm"), "metadata": {"name": "nsm", "namespace": "elsewhere"}}), {}, 400, "BadRequest"),
        ("past 3 MiB", json.dumps(cm(name="big", data={"a": "x" * (3 * 1024 * 1024 + 10)})), {}, 413, "RequestEntityTooLarge"),
        ("text/plain", json.dumps(cm(name="tp")), {"Content-Type": "text/plain"}, 415, "UnsupportedMediaType"),
        ("unknown media type", json.dumps(cm(name="um")), {"Content-Type": "application/bogus"}, 415, "UnsupportedMediaType"),
        ("protobuf garbage", b"\x00\x01garbage", {"Content-Type": "application/vnd.kubernetes.protobuf"}, 400, "BadRequest"),
        ("protobuf truncated", b"k8s\x00\n\x0c\n\x02v1\x12\tConfig", {"Content-Type": "application/vnd.kubernetes.protobuf"}, 400, "BadRequest"),
        ("protobuf empty", b"", {"Content-Type": "application/vnd.kubernetes.protobuf"}, 400, "BadRequest"),
        ("accept bogus", json.dumps(cm(name="ab")), {"Accept": "application/bogus"}, 406, "NotAcceptable"),
    ]
    for ch in MULTIBYTE:
        cases.append((f"name {ch}", json.dumps(cm(name="a" + ch)), {}, 422, "Invalid"))
        cases.append((f"label value {ch}", json.dumps({**cm(name="l"), "metadata": {"name": "l", "labels": {"k": ch}}}), {}, 422, "Invalid"))
    return cases


BODIES = body_cases()


@pytest.mark.parametrize("what,body,headers,code,reason", BODIES, ids=[c[0] for c in BODIES])
def test_create_body(raw, canary, what, body, headers, code, reason):
    ns, _ = canary
    headers = dict(headers)
    query = headers.pop("?", "")
    check(raw("POST", f"/api/v1/namespaces/{ns}/configmaps" + (f"?{query}" if query else ""), body=body if isinstance(body, bytes) else body.encode(), headers=headers), code, reason)


def test_yaml_body_creates(raw, canary):
    ns, _ = canary
    name = f"yaml-{uuid.uuid4().hex[:6]}"
    body = f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  a: b\n"
    check(raw("POST", f"/api/v1/namespaces/{ns}/configmaps", body=body.encode(), headers={"Content-Type": "application/yaml"}), 201, "")
    check(raw("DELETE", f"/api/v1/namespaces/{ns}/configmaps/{name}"), 200, "")


# --- patches --------------------------------------------------------------------------------

def patch_cases():
    copies = [{"op": "add", "path": "/data/seed", "value": "x" * 4096}] + [{"op": "copy", "from": "/data", "path": f"/metadata/annotations/c{i}"} for i in range(2000)]
    doubling = [{"op": "add", "path": "/data/seed", "value": "x" * 1000}]
    for i in range(30):
        doubling.append({"op": "copy", "from": "/data", "path": f"/data/d{i}"})
    laughs = "a0: &a0 \"lol\"\n" + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i-1}'] * 9)}]\n" for i in range(1, 10))
    return [
        ("json patch not JSON", "application/json-patch+json", "[", "", 400, "BadRequest"),
        ("json patch not a list", "application/json-patch+json", "{}", "", 400, "BadRequest"),
        ("json patch unknown op", "application/json-patch+json", '[{"op":"bogus","path":"/a"}]', "", 400, "BadRequest"),
        ("json patch 10001 operations", "application/json-patch+json", json.dumps([{"op": "test", "path": "/kind", "value": "ConfigMap"}] * 10001), "", 413, "RequestEntityTooLarge"),
        ("json patch copy doubling", "application/json-patch+json", json.dumps(doubling), "", 422, "Invalid"),
        ("json patch many copies", "application/json-patch+json", json.dumps(copies), "", 422, "Invalid"),
        ("json patch test fails", "application/json-patch+json", '[{"op":"test","path":"/kind","value":"Secret"}]', "", 422, "Invalid"),
        ("json patch bad pointer", "application/json-patch+json", '[{"op":"remove","path":"/nope/deeper"}]', "", 422, "Invalid"),
        ("merge patch not JSON", "application/merge-patch+json", "{", "", 400, "BadRequest"),
        ("strategic patch not JSON", "application/strategic-merge-patch+json", "{", "", 400, "BadRequest"),
        ("patch as application/json", "application/json", "{}", "", 415, "UnsupportedMediaType"),
        ("patch unknown type", "application/bogus-patch", "{}", "", 415, "UnsupportedMediaType"),
        ("merge patch changes name", "application/merge-patch+json", '{"metadata":{"name":"other"}}', "", 422, "Invalid"),
        ("merge patch stale resourceVersion", "application/merge-patch+json", '{"metadata":{"resourceVersion":"1"}}', "", 409, "Conflict"),
        ("apply without fieldManager", "application/apply-patch+yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n", "", 422, "Invalid"),
        ("apply YAML not YAML", "application/apply-patch+yaml", "a: [", "fieldManager=hostile", 400, "BadRequest"),
        ("apply YAML billion laughs", "application/apply-patch+yaml", laughs, "fieldManager=hostile", 400, "BadRequest"),
    ]


PATCHES = patch_cases()


@pytest.mark.parametrize("what,ctype,body,query,code,reason", PATCHES, ids=[c[0] for c in PATCHES])
def test_patch(raw, canary, what, ctype, body, query, code, reason):
    ns, _ = canary
    name = f"patched-{uuid.uuid4().hex[:6]}"
    status, obj = raw.json("POST", f"/api/v1/namespaces/{ns}/configmaps", cm(name=name, data={"a": "b"}))
    assert status == 201, obj
    try:
        target = f"/api/v1/namespaces/{ns}/configmaps/{name}" + (f"?{query}" if query else "")
        check(raw("PATCH", target, body=body.replace("{name}", name).encode(), headers={"Content-Type": ctype}), code, reason)
        # Refused patches change nothing.
        status, after = raw.json("GET", f"/api/v1/namespaces/{ns}/configmaps/{name}")
        assert status == 200 and after["data"] == {"a": "b"} and after["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
    finally:
        raw("DELETE", f"/api/v1/namespaces/{ns}/configmaps/{name}")


# --- options of a write ---------------------------------------------------------------------

DRY_RUNS = [
    # (verb, query, body of a DELETE, the options kind upstream validates the query as)
    ("POST", "dryRun=Bogus", None, "CreateOptions"),
    ("POST", "dryRun=All&dryRun=Bogus", None, "CreateOptions"),
    ("PUT", "dryRun=all", None, "UpdateOptions"),
    ("PATCH", "dryRun=Bogus", None, "PatchOptions"),
    ("DELETE", "dryRun=Bogus", None, "DeleteOptions"),
    ("DELETE", "", {"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["Bogus"]}, "DeleteOptions"),
    ("DELETECOLLECTION", "dryRun=Bogus", None, "DeleteOptions"),
]


@pytest.mark.parametrize("verb,query,delete_body,kind", DRY_RUNS, ids=[f"{c[0]} {c[1] or 'body'}" for c in DRY_RUNS])
def test_unsupported_dry_run_is_invalid_options(raw, canary, verb, query, delete_body, kind):
    ns, _ = canary
    name = f"dry-{uuid.uuid4().hex[:6]}"
    status, obj = raw.json("POST", f"/api/v1/namespaces/{ns}/configmaps", cm(name=name, data={"a": "b"}))
    assert status == 201, obj
    try:
        one, coll = f"/api/v1/namespaces/{ns}/configmaps/{name}", f"/api/v1/namespaces/{ns}/configmaps"
        sent = {
            "POST": lambda: raw("POST", f"{coll}?{query}", body=json.dumps(cm(name=name + "-new")).encode()),
            "PUT": lambda: raw("PUT", f"{one}?{query}", body=json.dumps({**obj, "data": {"a": "changed"}}).encode()),
            "PATCH": lambda: raw("PATCH", f"{one}?{query}", body=b'{"data":{"a":"changed"}}', headers={"Content-Type": "application/merge-patch+json"}),
            "DELETE": lambda: raw("DELETE", f"{one}?{query}", body=json.dumps(delete_body).encode() if delete_body else None),
            "DELETECOLLECTION": lambda: raw("DELETE", f"{coll}?{query}&labelSelector=never%3Dmatches"),
        }[verb]()
        check(sent, 422, "Invalid")
        s = status_of(sent[2])
        assert (s["details"]["group"], s["details"]["kind"]) == ("meta.k8s.io", kind), s
        assert s["details"]["causes"][0]["field"] == "dryRun", s
        # Nothing was written.
        status, after = raw.json("GET", one)
        assert status == 200 and after["data"] == {"a": "b"}, after
        assert raw("GET", f"{coll}/{name}-new")[0] == 404
    finally:
        raw("DELETE", f"/api/v1/namespaces/{ns}/configmaps/{name}")
