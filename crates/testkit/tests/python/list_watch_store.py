"""The PyPI `kubernetes` client's list-then-watch, as operators written in Python run it (the
client has no informer; this is the loop its watch documentation asks for): list, watch from
the list's resourceVersion, and on 410 Gone list again. Prints the store after every change as
one JSON line: {"synced": bool, "objects": {name: resourceVersion}}.

Usage: list_watch_store.py SERVER_URL NAMESPACE  (runs until killed)
"""
import json
import sys
import time

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

url, namespace = sys.argv[1], sys.argv[2]
configuration = client.Configuration()
configuration.host = url
api = client.CoreV1Api(client.ApiClient(configuration))


def emit(synced, store):
    print(json.dumps({"synced": synced, "objects": store}, sort_keys=True), flush=True)


store, rv = {}, None
while True:
    try:
        if rv is None:
            listed = api.list_namespaced_config_map(namespace, _request_timeout=30)
            store = {cm.metadata.name: cm.metadata.resource_version for cm in listed.items}
            rv = listed.metadata.resource_version
            emit(True, store)
        stream = watch.Watch().stream(
            api.list_namespaced_config_map, namespace, resource_version=rv,
            allow_watch_bookmarks=True, timeout_seconds=30, _request_timeout=60)
        for event in stream:
            obj = event["object"]
            rv = obj.metadata.resource_version
            if event["type"] == "BOOKMARK":
                continue
            if event["type"] == "DELETED":
                store.pop(obj.metadata.name, None)
            else:
                store[obj.metadata.name] = rv
            emit(True, store)
    except ApiException as e:
        if e.status == 410:
            # The resourceVersion is gone (compacted, or a restored store): list again.
            print(f"relist after {e.status}", file=sys.stderr, flush=True)
            rv = None
            emit(False, store)
        else:
            print(f"retry after {e.status} {e.reason}", file=sys.stderr, flush=True)
            time.sleep(0.5)
    except Exception as e:  # the server unreachable for a while: try again from the same RV
        print(f"retry after {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        time.sleep(0.5)
