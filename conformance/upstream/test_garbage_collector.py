"""API-only checks of the garbage collector (upstream's sig-api-machinery garbage_collector e2e):
deleting an owner with each propagation policy deletes its dependents, orphans them (their
owner references removed) or keeps the owner until they are gone; a dependent with another live
owner survives; a circle of owners does not block; custom resources are collected alike. No
workload controller runs here, so the checks create the dependents with their owner references,
as the replication controller, the deployment controller or the job controller would."""

import time
import uuid

import pytest
from kubernetes import client

from util import raw

WITHIN = 60


def until(what, check, within=WITHIN):
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def ref(obj, api_version, kind, block=True, controller=True):
    return client.V1OwnerReference(api_version=api_version, kind=kind, name=obj.metadata.name, uid=obj.metadata.uid, controller=controller, block_owner_deletion=block)


def pod_spec():
    return client.V1PodSpec(containers=[client.V1Container(name="nginx", image="registry.k8s.io/pause:3.10")])


def rc(core, ns, name, replicas=2):
    template = client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels={"app": name}), spec=pod_spec())
    return core.create_namespaced_replication_controller(ns, client.V1ReplicationController(metadata=client.V1ObjectMeta(name=name), spec=client.V1ReplicationControllerSpec(replicas=replicas, selector={"app": name}, template=template)))


def pods_of(core, ns, owner, n, owners=None, finalizers=None, prefix=None):
    """Creates `n` pods owned by `owner` (and `owners` besides), as its controller would."""
    refs = owners or [ref(owner, "v1", "ReplicationController")]
    for i in range(n):
        meta = client.V1ObjectMeta(name=f"{prefix or owner.metadata.name}-{i}", labels={"app": owner.metadata.name}, owner_references=refs, finalizers=finalizers)
        core.create_namespaced_pod(ns, client.V1Pod(metadata=meta, spec=pod_spec()))


def names(items):
    return sorted(o.metadata.name for o in items)


def gone(read):
    try:
        read()
        return False
    except client.exceptions.ApiException as e:
        assert e.status == 404, e.body
        return True


def test_delete_pods_created_by_rc_when_not_orphaning(core, ns):
    """Garbage collector should delete pods created by rc when not orphaning"""
    owner = rc(core, ns, "simpletest.rc")
    pods_of(core, ns, owner, 2)
    core.delete_namespaced_replication_controller(owner.metadata.name, ns, propagation_policy="Background")
    until("pods not collected", lambda: not core.list_namespaced_pod(ns).items)


def test_orphan_pods_created_by_rc_if_delete_options_say_so(core, ns):
    """Garbage collector should orphan pods created by rc if delete options say so"""
    owner = rc(core, ns, "simpletest.rc")
    pods_of(core, ns, owner, 2)
    core.delete_namespaced_replication_controller(owner.metadata.name, ns, propagation_policy="Orphan")
    until("rc not deleted", lambda: gone(lambda: core.read_namespaced_replication_controller(owner.metadata.name, ns)))
    until("owner references not removed", lambda: all(not p.metadata.owner_references for p in core.list_namespaced_pod(ns).items))
    assert names(core.list_namespaced_pod(ns).items) == ["simpletest.rc-0", "simpletest.rc-1"]


def deployment_and_rs(api_client, ns):
    apps = client.AppsV1Api(api_client)
    template = client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels={"app": "gc"}), spec=pod_spec())
    d = apps.create_namespaced_deployment(ns, client.V1Deployment(metadata=client.V1ObjectMeta(name="simpletest.deployment"), spec=client.V1DeploymentSpec(replicas=0, selector=client.V1LabelSelector(match_labels={"app": "gc"}), template=template)))
    rs = apps.create_namespaced_replica_set(ns, client.V1ReplicaSet(metadata=client.V1ObjectMeta(name="simpletest.deployment-1", owner_references=[ref(d, "apps/v1", "Deployment")]),
                                                                     spec=client.V1ReplicaSetSpec(replicas=0, selector=client.V1LabelSelector(match_labels={"app": "gc"}), template=template)))
    return apps, d, rs


def test_delete_rs_created_by_deployment_when_not_orphaning(api_client, ns):
    """Garbage collector should delete RS created by deployment when not orphaning"""
    apps, d, _ = deployment_and_rs(api_client, ns)
    apps.delete_namespaced_deployment(d.metadata.name, ns, propagation_policy="Background")
    until("replica set not collected", lambda: not apps.list_namespaced_replica_set(ns).items)


def test_orphan_rs_created_by_deployment_when_policy_is_orphan(api_client, ns):
    """Garbage collector should orphan RS created by deployment when deleteOptions.PropagationPolicy is Orphan"""
    apps, d, rs = deployment_and_rs(api_client, ns)
    apps.delete_namespaced_deployment(d.metadata.name, ns, propagation_policy="Orphan")
    until("deployment not deleted", lambda: gone(lambda: apps.read_namespaced_deployment(d.metadata.name, ns)))
    until("replica set still owned", lambda: not apps.read_namespaced_replica_set(rs.metadata.name, ns).metadata.owner_references)


def test_keep_rc_until_all_its_pods_are_deleted(core, ns):
    """Garbage collector should keep the rc around until all its pods are deleted if the deleteOptions says so"""
    owner = rc(core, ns, "simpletest.rc")
    # One pod holds on with a finalizer of its own, so "until" is observable.
    pods_of(core, ns, owner, 1, finalizers=["example.com/hold"], prefix="held")
    pods_of(core, ns, owner, 2)
    core.delete_namespaced_replication_controller(owner.metadata.name, ns, propagation_policy="Foreground")
    until("free pods not collected", lambda: names(core.list_namespaced_pod(ns).items) == ["held-0"])
    held = core.read_namespaced_pod("held-0", ns)
    assert held.metadata.deletion_timestamp is not None
    kept = core.read_namespaced_replication_controller(owner.metadata.name, ns)
    assert kept.metadata.deletion_timestamp is not None and "foregroundDeletion" in (kept.metadata.finalizers or [])
    core.patch_namespaced_pod("held-0", ns, {"metadata": {"finalizers": None}})
    until("rc not deleted after its pods", lambda: gone(lambda: core.read_namespaced_replication_controller(owner.metadata.name, ns)))


def test_dependents_with_a_valid_owner_survive_a_foreground_delete(core, ns):
    """Garbage collector should not delete dependents that have both valid owner and owner that's waiting for dependents to be deleted"""
    to_delete = rc(core, ns, "simpletest-rc-to-be-deleted")
    to_stay = rc(core, ns, "simpletest-rc-to-stay")
    pods_of(core, ns, to_delete, 2, prefix="only")
    both = [ref(to_delete, "v1", "ReplicationController"), ref(to_stay, "v1", "ReplicationController", controller=False)]
    pods_of(core, ns, to_delete, 2, owners=both, prefix="both")
    core.delete_namespaced_replication_controller(to_delete.metadata.name, ns, propagation_policy="Foreground")
    until("rc not deleted", lambda: gone(lambda: core.read_namespaced_replication_controller(to_delete.metadata.name, ns)))
    left = core.list_namespaced_pod(ns).items
    assert names(left) == ["both-0", "both-1"]
    for p in left:
        assert [r.name for r in p.metadata.owner_references] == [to_stay.metadata.name], p.metadata.owner_references


def test_not_blocked_by_dependency_circle(core, ns):
    """Garbage collector should not be blocked by dependency circle"""
    def make(name):
        return core.create_namespaced_pod(ns, client.V1Pod(metadata=client.V1ObjectMeta(name=name), spec=pod_spec()))
    p1, p2, p3 = make("pod1"), make("pod2"), make("pod3")
    for dependent, owner in ((p1, p3), (p2, p1), (p3, p2)):
        core.patch_namespaced_pod(dependent.metadata.name, ns, {"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": owner.metadata.name, "uid": owner.metadata.uid, "blockOwnerDeletion": True}]}})
    core.delete_namespaced_pod("pod1", ns, propagation_policy="Foreground")
    until("the circle was not collected", lambda: not core.list_namespaced_pod(ns).items)


@pytest.fixture
def crd(api_client):
    ext = client.ApiextensionsV1Api(api_client)
    plural = f"gcowners{uuid.uuid4().hex[:6]}"
    body = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": f"{plural}.gc.example.com"},
            "spec": {"group": "gc.example.com", "scope": "Namespaced", "names": {"plural": plural, "singular": plural[:-1], "kind": plural.capitalize()[:-1]},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
    ext.create_custom_resource_definition(body)
    until("CRD not established", lambda: raw(api_client, "GET", f"/apis/gc.example.com/v1/{plural}")[0] == 200)
    yield plural, plural.capitalize()[:-1]
    ext.delete_custom_resource_definition(f"{plural}.gc.example.com")


def custom_pair(api_client, ns, plural, kind):
    custom = client.CustomObjectsApi(api_client)
    owner = custom.create_namespaced_custom_object("gc.example.com", "v1", ns, plural, {"apiVersion": "gc.example.com/v1", "kind": kind, "metadata": {"name": "owner"}})
    dep = {"apiVersion": "gc.example.com/v1", "kind": kind, "metadata": {"name": "dependent", "ownerReferences": [{"apiVersion": "gc.example.com/v1", "kind": kind, "name": "owner", "uid": owner["metadata"]["uid"]}]}}
    custom.create_namespaced_custom_object("gc.example.com", "v1", ns, plural, dep)
    return custom


def test_cascading_deletion_of_custom_resources(api_client, ns, crd):
    """Garbage collector should support cascading deletion of custom resources"""
    plural, kind = crd
    custom = custom_pair(api_client, ns, plural, kind)
    custom.delete_namespaced_custom_object("gc.example.com", "v1", ns, plural, "owner", propagation_policy="Background")
    until("dependent not collected", lambda: gone(lambda: custom.get_namespaced_custom_object("gc.example.com", "v1", ns, plural, "dependent")))


def test_orphan_deletion_of_custom_resources(api_client, ns, crd):
    """Garbage collector should support orphan deletion of custom resources"""
    plural, kind = crd
    custom = custom_pair(api_client, ns, plural, kind)
    custom.delete_namespaced_custom_object("gc.example.com", "v1", ns, plural, "owner", propagation_policy="Orphan")
    until("owner not deleted", lambda: gone(lambda: custom.get_namespaced_custom_object("gc.example.com", "v1", ns, plural, "owner")))
    until("dependent still owned", lambda: not custom.get_namespaced_custom_object("gc.example.com", "v1", ns, plural, "dependent")["metadata"].get("ownerReferences"))


def test_delete_jobs_and_pods_created_by_cronjob(api_client, core, ns):
    """Garbage collector should delete jobs and pods created by cronjob"""
    batch = client.BatchV1Api(api_client)
    template = client.V1PodTemplateSpec(spec=client.V1PodSpec(containers=pod_spec().containers, restart_policy="OnFailure"))
    cj = batch.create_namespaced_cron_job(ns, client.V1CronJob(metadata=client.V1ObjectMeta(name="simple"), spec=client.V1CronJobSpec(schedule="*/1 * * * ?", job_template=client.V1JobTemplateSpec(spec=client.V1JobSpec(template=template)))))
    job = batch.create_namespaced_job(ns, client.V1Job(metadata=client.V1ObjectMeta(name="simple-1", owner_references=[ref(cj, "batch/v1", "CronJob")]), spec=client.V1JobSpec(template=template, manual_selector=True, selector=client.V1LabelSelector(match_labels={"job": "simple-1"}))))
    core.create_namespaced_pod(ns, client.V1Pod(metadata=client.V1ObjectMeta(name="simple-1-pod", labels={"job": "simple-1"}, owner_references=[ref(job, "batch/v1", "Job")]), spec=pod_spec()))
    batch.delete_namespaced_cron_job("simple", ns, propagation_policy="Background")
    until("jobs and pods not collected", lambda: not batch.list_namespaced_job(ns).items and not core.list_namespaced_pod(ns).items)
