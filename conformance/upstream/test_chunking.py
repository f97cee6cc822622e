"""test/e2e/apimachinery/chunking.go, [sig-api-machinery] Servers with support for API chunking."""

import concurrent.futures
import os
import random
import time

import pytest
from kubernetes import client

COUNT = 400


@pytest.fixture
def templates(core, ns):
    def make(i):
        body = client.V1PodTemplate(
            metadata=client.V1ObjectMeta(name=f"template-{i:04d}"),
            template=client.V1PodTemplateSpec(spec=client.V1PodSpec(containers=[client.V1Container(name="test", image="busybox")])),
        )
        for _ in range(5):
            try:
                return core.create_namespaced_pod_template(ns, body)
            except client.exceptions.ApiException as e:
                if e.status != 429:
                    raise
                time.sleep(0.2)
        raise AssertionError("throttled")

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        list(pool.map(make, range(COUNT)))
    return ns


def test_chunking_return_chunks_of_results_for_list_calls(core, templates):
    """should return chunks of results for list calls"""
    ns = templates
    rng = random.Random(1)
    for _ in range(3):
        limit = rng.randrange(1, 41)
        seen, cont, first_rv = 0, None, None
        while True:
            page = core.list_namespaced_pod_template(ns, limit=limit, _continue=cont)
            assert len(page.items) <= limit
            if first_rv is None:
                first_rv = page.metadata.resource_version
            assert page.metadata.resource_version == first_rv
            for i, item in enumerate(page.items):
                assert item.metadata.name == f"template-{seen + i:04d}"
            if page.metadata._continue:
                assert page.metadata.remaining_item_count is not None
                assert page.metadata.remaining_item_count + len(page.items) + seen == COUNT
            else:
                assert page.metadata.remaining_item_count is None
            seen += len(page.items)
            cont = page.metadata._continue
            if not cont:
                break
        assert seen == COUNT
    whole = core.list_namespaced_pod_template(ns, limit=COUNT + 1)
    assert len(whole.items) == COUNT and not whole.metadata._continue


@pytest.mark.slow
def test_chunking_continue_after_compaction(core, templates):
    """should support continue listing from the last key if the original version has been compacted away, though the list is inconsistent [Slow]"""
    ns = templates
    first = core.list_namespaced_pod_template(ns, limit=40)
    first_rv = first.metadata.resource_version
    token = first.metadata._continue
    # The suite runs servers with a short compaction interval (CONFORMANCE_COMPACTION_SECONDS).
    interval = int(os.environ.get("CONFORMANCE_COMPACTION_SECONDS", "300"))
    deadline = time.monotonic() + 2 * interval + 30
    inconsistent = None
    while time.monotonic() < deadline:
        # Writes move the revision on, so the compactor has something to compact.
        core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(generate_name="tick-")))
        try:
            core.list_namespaced_pod_template(ns, limit=40, _continue=token)
        except client.exceptions.ApiException as e:
            assert e.status == 410, e
            import json

            status = json.loads(e.body)
            assert status["reason"] == "Expired"
            inconsistent = status["metadata"]["continue"]
            assert inconsistent
            break
        time.sleep(min(5, interval / 4))
    assert inconsistent, "the continue token never expired"
    page = core.list_namespaced_pod_template(ns, limit=40, _continue=inconsistent)
    assert page.metadata.resource_version != first_rv
    assert [i.metadata.name for i in page.items] == [f"template-{i:04d}" for i in range(40, 80)]
    seen = 80
    rv = page.metadata.resource_version
    cont = page.metadata._continue
    while cont:
        page = core.list_namespaced_pod_template(ns, limit=40, _continue=cont)
        assert page.metadata.resource_version == rv
        for i, item in enumerate(page.items):
            assert item.metadata.name == f"template-{seen + i:04d}"
        seen += len(page.items)
        cont = page.metadata._continue
    assert seen == COUNT
