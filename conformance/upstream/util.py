"""Helpers shared by the reproduced checks: raw requests, and watch expectations with deadlines
(upstream's expectEvent waits up to a minute; expectNoEvent watches for 10 s)."""

import json
import os
import queue
import threading
import time
import urllib.parse

import urllib3

from kubernetes import watch

EVENT_WITHIN = 60
# Upstream waits 10 s; CONFORMANCE_NO_EVENT_SECONDS shortens it where time is short (CI).
NO_EVENT_FOR = float(os.environ.get("CONFORMANCE_NO_EVENT_SECONDS", "10"))


def raw(api_client, method, path, body=None, headers=None, query=None):
    """(status, headers, parsed JSON or text) of one request, never raising on HTTP errors."""
    url = api_client.configuration.host + path
    if query:
        url += "?" + urllib.parse.urlencode(query)
    hdrs = {"Accept": "application/json", **(headers or {})}
    if body is not None and "Content-Type" not in hdrs:
        hdrs["Content-Type"] = "application/json"
    data = None if body is None else (body if isinstance(body, (str, bytes)) else json.dumps(body))
    r = api_client.rest_client.pool_manager.request(method, url, body=data, headers=hdrs, preload_content=True)
    text = r.data.decode()
    try:
        payload = json.loads(text)
    except ValueError:
        payload = text
    return r.status, r.headers, payload


class Watcher:
    """A watch read by a thread into a queue, so tests can wait for (or for the absence of) an
    event with a deadline."""

    def __init__(self, list_fn, *args, **kwargs):
        self.events = queue.Queue()
        self.w = watch.Watch()
        self.thread = threading.Thread(target=self._run, args=(list_fn, args, kwargs), daemon=True)
        self.thread.start()

    def _run(self, list_fn, args, kwargs):
        try:
            for e in self.w.stream(list_fn, *args, **kwargs):
                self.events.put(e)
        except Exception as exc:  # the stream ended with an error: the test sees it
            self.events.put({"type": "STREAM_ERROR", "object": exc})
        self.events.put(None)

    @classmethod
    def from_now(cls, list_fn, *args, **kwargs):
        """A watch of every change after this moment. Upstream's e2e framework opens a watch
        with RV "" synchronously, so it sees every later write; here the stream connects on a
        thread, so the watch starts at the RV of a LIST taken now instead: nothing after it can
        be missed, however late the stream connects."""
        selectors = {k: v for k, v in kwargs.items() if k in ("label_selector", "field_selector")}
        listed = list_fn(*args, **selectors)
        # A typed client answers a model; CustomObjectsApi answers a dict.
        rv = listed["metadata"]["resourceVersion"] if isinstance(listed, dict) else listed.metadata.resource_version
        return cls(list_fn, *args, resource_version=rv, **kwargs)

    def next(self, within=EVENT_WITHIN):
        return self.events.get(timeout=within)

    def expect(self, kind, obj_check, within=EVENT_WITHIN):
        """Waits for an event of `kind` whose object passes `obj_check` (events that do not match
        are skipped, as upstream's expectEvent does)."""
        deadline = time.monotonic() + within
        seen = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {kind} event matching within {within}s; saw {seen}")
            try:
                e = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if e is None:
                raise AssertionError(f"watch ended before a {kind} event; saw {seen}")
            seen.append((e["type"], getattr(e["object"], "metadata", None) and e["object"].metadata.name))
            if e["type"] == kind and obj_check(e["object"]):
                return e["object"]

    def expect_none(self, within=NO_EVENT_FOR):
        try:
            e = self.events.get(timeout=within)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected event {e['type'] if e else 'end of stream'}")

    def stop(self):
        self.w.stop()


def same_object(a, b):
    """upstream's apiequality.Semantic.DeepEqual of a watch object and a write's answer."""
    return a.to_dict() == b.to_dict()


class RawWatcher(Watcher):
    """A watch of a raw path and query (for parameters the Python client does not know, such
    as `shardSelector`); events are dicts as the server sent them."""

    def __init__(self, api_client, path, query):
        self.events = queue.Queue()
        self.w = None
        url = api_client.configuration.host + path + "?" + urllib.parse.urlencode({**query, "watch": "1"})
        # A pool of its own: an open watch holds its connection until stop(). It trusts and
        # presents what the client's configuration does (the cluster CA, a client certificate).
        cfg = api_client.configuration
        tls = {"cert_reqs": "CERT_REQUIRED", "ca_certs": cfg.ssl_ca_cert, "cert_file": cfg.cert_file, "key_file": cfg.key_file} if url.startswith("https:") else {}
        self.pool = urllib3.PoolManager(**tls)
        headers = {"Accept": "application/json"}
        if cfg.api_key.get("authorization"):
            headers["Authorization"] = cfg.api_key["authorization"]
        self.resp = self.pool.request("GET", url, headers=headers, preload_content=False, timeout=urllib3.Timeout(connect=10, read=None))
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        buf = b""
        try:
            for chunk in self.resp.stream(4096, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        self.events.put(json.loads(line))
        except Exception as exc:  # the connection was closed by stop()
            self.events.put({"type": "STREAM_ERROR", "object": str(exc)})
        self.events.put(None)

    def stop(self):
        try:
            self.resp.shutdown()
        except (AttributeError, RuntimeError):  # older urllib3, or the stream already ended
            pass
        self.resp.close()
        self.pool.clear()
