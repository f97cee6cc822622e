"""API Priority and Fairness as upstream's e2e suite checks it (test/e2e/apimachinery/flowcontrol.go):
a PriorityLevelConfiguration and a FlowSchema that matches one user are created, and a request
by that user (impersonated, as the e2e test does) is answered with the
`X-Kubernetes-PF-FlowSchema-UID` and `X-Kubernetes-PF-PriorityLevel-UID` headers naming them,
once the server has taken the new configuration. The admin is classified as exempt; a FlowSchema
naming a level that does not exist is marked Dangling."""

import time
import uuid

from kubernetes import client

from conftest_common import Raw


def _raw(api_client):
    return Raw(api_client.configuration)


def _wait(cond, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError("the condition did not hold in time")


def test_requests_can_be_classified_by_adding_flowschema_and_prioritylevelconfiguration(api_client):
    fc = client.FlowcontrolApiserverV1Api(api_client)
    suffix = uuid.uuid4().hex[:6]
    user = f"e2e-user-{suffix}"
    pl = fc.create_priority_level_configuration({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration", "metadata": {"name": f"e2e-pl-{suffix}"},
                                                 "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 1, "limitResponse": {"type": "Reject"}}}})
    fs = fc.create_flow_schema({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": f"e2e-fs-{suffix}"},
                                "spec": {"priorityLevelConfiguration": {"name": pl.metadata.name}, "matchingPrecedence": 1000, "distinguisherMethod": {"type": "ByUser"},
                                         "rules": [{"subjects": [{"kind": "User", "user": {"name": user}}],
                                                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                                                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": True, "namespaces": ["*"]}]}]}})
    raw = _raw(api_client)
    try:
        def classified():
            status, headers, _ = raw("GET", "/version", headers={"Impersonate-User": user})
            return status == 200 and headers.get("x-kubernetes-pf-flowschema-uid") == fs.metadata.uid and headers.get("x-kubernetes-pf-prioritylevel-uid") == pl.metadata.uid
        _wait(classified)
        # The admin itself goes to exempt.
        status, headers, _ = raw("GET", "/api/v1/namespaces/default")
        exempt = fc.read_priority_level_configuration("exempt")
        assert (status, headers.get("x-kubernetes-pf-prioritylevel-uid")) == (200, exempt.metadata.uid)
        # The schema's level exists: not dangling.
        _wait(lambda: any(c.type == "Dangling" and c.status == "False" and c.reason == "Found" for c in (fc.read_flow_schema(fs.metadata.name).status.conditions or [])))
    finally:
        fc.delete_flow_schema(fs.metadata.name)
        fc.delete_priority_level_configuration(pl.metadata.name)


def test_a_flowschema_naming_a_missing_level_is_marked_dangling(api_client):
    fc = client.FlowcontrolApiserverV1Api(api_client)
    name = f"e2e-dangling-{uuid.uuid4().hex[:6]}"
    fc.create_flow_schema({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": name},
                           "spec": {"priorityLevelConfiguration": {"name": "no-such-level"}, "matchingPrecedence": 5000, "rules": []}})
    try:
        def dangling():
            conds = fc.read_flow_schema(name).status.conditions or []
            return next((c for c in conds if c.type == "Dangling" and c.status == "True"), None)
        c = _wait(dangling)
        assert (c.reason, c.message) == ("NotFound", 'This FlowSchema references the PriorityLevelConfiguration object named "no-such-level" but there is no such object')
        assert c.last_transition_time is not None
    finally:
        fc.delete_flow_schema(name)
