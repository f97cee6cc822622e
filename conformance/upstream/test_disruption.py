"""API-only checks of PodDisruptionBudgets and eviction (upstream's sig-apps DisruptionController
e2e): a budget is created, processed, updated, patched and deleted; its status is kept by the
cluster and written through the status subresource; evictions are allowed or refused with
upstream's 429 as the budget says, and an eviction blocked by a budget goes once the budget
allows it. No kubelet runs here, so the checks play its part: they report their pods Running and
Ready through the status subresource, and they create a replica set's pods with its controller
reference, as its controller would."""

import time

import pytest
from kubernetes import client

from util import raw

WITHIN = 60  # upstream's timeout for the controller


def policy(api_client):
    return client.PolicyV1Api(api_client)


def ready_pods(core, ns, n, labels=None, owner=None, prefix="pod"):
    """Creates `n` pods labelled foo=bar and reports them Running and Ready."""
    for i in range(n):
        meta = client.V1ObjectMeta(name=f"{prefix}-{i}", labels=labels or {"foo": "bar"}, owner_references=[owner] if owner else None)
        core.create_namespaced_pod(ns, client.V1Pod(metadata=meta, spec=client.V1PodSpec(containers=[client.V1Container(name="donothing", image="registry.k8s.io/pause:3.10")])))
        p = core.read_namespaced_pod(f"{prefix}-{i}", ns)
        p.status = client.V1PodStatus(phase="Running", conditions=[client.V1PodCondition(type="Ready", status="True")])
        core.replace_namespaced_pod_status(f"{prefix}-{i}", ns, p)


def replica_set_pods(api_client, core, ns, size):
    """A replica set of `size` and its pods, created and made ready as its controller and the
    kubelets would."""
    template = client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels={"foo": "bar"}), spec=client.V1PodSpec(containers=[client.V1Container(name="donothing", image="registry.k8s.io/pause:3.10")]))
    rs = client.AppsV1Api(api_client).create_namespaced_replica_set(ns, client.V1ReplicaSet(metadata=client.V1ObjectMeta(name="rs"), spec=client.V1ReplicaSetSpec(replicas=size, selector=client.V1LabelSelector(match_labels={"foo": "bar"}), template=template)))
    owner = client.V1OwnerReference(api_version="apps/v1", kind="ReplicaSet", name="rs", uid=rs.metadata.uid, controller=True, block_owner_deletion=True)
    ready_pods(core, ns, size, owner=owner, prefix="rs")


def budget(name="foo", min_available=None, max_unavailable=None, labels=None):
    return client.V1PodDisruptionBudget(metadata=client.V1ObjectMeta(name=name, labels=labels), spec=client.V1PodDisruptionBudgetSpec(
        selector=client.V1LabelSelector(match_labels={"foo": "bar"}), min_available=min_available, max_unavailable=max_unavailable))


def processed(api_client, ns, name="foo", check=None):
    """Waits until the controller has processed the budget's spec (and `check` holds)."""
    deadline = time.monotonic() + WITHIN
    while True:
        pdb = policy(api_client).read_namespaced_pod_disruption_budget(name, ns)
        if pdb.status and pdb.status.observed_generation is not None and pdb.status.observed_generation >= pdb.metadata.generation and (check is None or check(pdb)):
            return pdb
        assert time.monotonic() < deadline, f"budget {name} not processed: {pdb.status}"
        time.sleep(0.2)


def evict(core, ns, name):
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=ns))
    return core.create_namespaced_pod_eviction(name, ns, body)


def evict_denied(core, ns, name):
    with pytest.raises(client.exceptions.ApiException) as e:
        evict(core, ns, name)
    assert e.value.status == 429, e.value.body
    assert "Cannot evict pod as it would violate the pod's disruption budget." in e.value.body
    return e.value


def test_create_pdb(api_client, ns):
    """DisruptionController should create a PodDisruptionBudget"""
    p = policy(api_client)
    p.create_namespaced_pod_disruption_budget(ns, budget(min_available="1%"))
    processed(api_client, ns)
    for _ in range(10):  # the controller may write the status in between
        pdb = p.read_namespaced_pod_disruption_budget("foo", ns)
        pdb.spec.min_available = "2%"
        try:
            p.replace_namespaced_pod_disruption_budget("foo", ns, pdb)
            break
        except client.exceptions.ApiException as e:
            assert e.status == 409, e.body
    assert processed(api_client, ns).spec.min_available == "2%"
    p.patch_namespaced_pod_disruption_budget("foo", ns, {"spec": {"minAvailable": "3%"}})
    assert processed(api_client, ns).spec.min_available == "3%"
    p.delete_namespaced_pod_disruption_budget("foo", ns)
    with pytest.raises(client.exceptions.ApiException) as e:
        p.read_namespaced_pod_disruption_budget("foo", ns)
    assert e.value.status == 404


def test_list_and_delete_collection(api_client, ns):
    """DisruptionController should list and delete a collection of PodDisruptionBudgets"""
    p = policy(api_client)
    for i in range(3):
        p.create_namespaced_pod_disruption_budget(ns, budget(name=f"foo-{i}", min_available=1, labels={"foo": "bar"}))
    assert len(p.list_namespaced_pod_disruption_budget(ns, label_selector="foo=bar").items) == 3
    p.delete_collection_namespaced_pod_disruption_budget(ns, label_selector="foo=bar")
    deadline = time.monotonic() + WITHIN
    while p.list_namespaced_pod_disruption_budget(ns).items:
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_observe_status_updated(api_client, core, ns):
    """DisruptionController should observe PodDisruptionBudget status updated"""
    policy(api_client).create_namespaced_pod_disruption_budget(ns, budget(min_available=1))
    ready_pods(core, ns, 3)
    # Upstream waits for disruptionsAllowed to turn positive: it starts at 0, so a positive value
    # means the controller is working. That already holds once two of the three pods are counted
    # healthy, so the wait also covers the third pod's status write before the counts are compared.
    pdb = processed(api_client, ns, check=lambda b: b.status.disruptions_allowed > 0 and b.status.current_healthy == 3)
    assert (pdb.status.current_healthy, pdb.status.desired_healthy, pdb.status.expected_pods, pdb.status.disruptions_allowed) == (3, 1, 3, 2)


def test_update_and_patch_status(api_client, core, ns):
    """DisruptionController should update/patch PodDisruptionBudget status"""
    p = policy(api_client)
    p.create_namespaced_pod_disruption_budget(ns, budget(min_available=1))
    processed(api_client, ns)
    ready_pods(core, ns, 1)
    for _ in range(10):
        pdb = p.read_namespaced_pod_disruption_budget("foo", ns)
        pdb.status.disrupted_pods = {"pod-0": "2026-01-01T00:00:00Z"}
        try:
            updated = p.replace_namespaced_pod_disruption_budget_status("foo", ns, pdb)
            break
        except client.exceptions.ApiException as e:
            assert e.status == 409, e.body
    assert "pod-0" in updated.status.disrupted_pods
    status, _, patched = raw(api_client, "PATCH", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/foo/status",
                             {"status": {"disruptedPods": None}}, headers={"Content-Type": "application/merge-patch+json"})
    assert status == 200, patched
    assert not patched["status"].get("disruptedPods")


def test_block_eviction_until_pdb_allows_it(api_client, core, ns):
    """DisruptionController should block an eviction until the PDB is updated to allow it"""
    p = policy(api_client)
    p.create_namespaced_pod_disruption_budget(ns, budget(min_available=3))
    ready_pods(core, ns, 3)
    processed(api_client, ns, check=lambda b: b.status.current_healthy == 3)
    evict_denied(core, ns, "pod-0")
    p.patch_namespaced_pod_disruption_budget("foo", ns, {"spec": {"minAvailable": 2}})
    processed(api_client, ns, check=lambda b: b.status.disruptions_allowed == 1)
    evict(core, ns, "pod-0")
    processed(api_client, ns, check=lambda b: b.status.disruptions_allowed == 0 and b.status.current_healthy == 2)
    evict_denied(core, ns, "pod-1")
    p.delete_namespaced_pod_disruption_budget("foo", ns)
    evict(core, ns, "pod-1")


@pytest.mark.parametrize("case", [
    # (description, minAvailable, maxUnavailable, pods, replica set size, deny)
    ("no PDB", None, None, 1, 0, False),
    ("too few pods, absolute", 2, None, 2, 0, True),
    ("enough pods, absolute", 2, None, 3, 0, False),
    ("enough pods, replicaSet, percentage", "90%", None, 0, 10, False),
    ("maxUnavailable allow single eviction, percentage", None, "10%", 0, 10, False),
], ids=lambda c: c[0])
def test_evictions(api_client, core, ns, case):
    """DisruptionController evictions: <case> => should (not) allow an eviction"""
    _, min_available, max_unavailable, pods, rs_size, deny = case
    if pods:
        ready_pods(core, ns, pods)
    if rs_size:
        replica_set_pods(api_client, core, ns, rs_size)
    target = "pod-0" if pods else "rs-0"
    if min_available is None and max_unavailable is None:
        evict(core, ns, target)
        return
    policy(api_client).create_namespaced_pod_disruption_budget(ns, budget(min_available=min_available, max_unavailable=max_unavailable))
    healthy = pods + rs_size
    pdb = processed(api_client, ns, check=lambda b: b.status.current_healthy == healthy)
    if deny:
        e = evict_denied(core, ns, target)
        assert f"The disruption budget foo needs {pdb.status.desired_healthy} healthy pods and has {healthy} currently" in e.body
    else:
        assert pdb.status.disruptions_allowed > 0, pdb.status
        evict(core, ns, target)
