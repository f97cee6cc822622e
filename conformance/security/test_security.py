"""Identity and access, as kube-apiserver's users meet them, against any endpoint: what an
anonymous caller may read, what the `view`, `edit` and `admin` roles allow (403 with upstream's
messages otherwise), escalation refused, ServiceAccount tokens from TokenRequest (bound to a pod,
refused once it is gone, with TokenReview saying so), `kubectl auth can-i --list` and `kubectl
auth whoami`, and impersonation needing the `impersonate` verb.

Users are ServiceAccounts given roles and tokens, as on any cluster; the admin is the
KUBECONFIG's user."""

import base64
import json
import uuid

from conftest import eventually, status_of

UNAUTHORIZED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "Unauthorized", "reason": "Unauthorized", "code": 401}


def forbidden_message(user, verb, resource, ns=None, group="", name=None):
    """Upstream's RBAC 403 message for a resource request."""
    what = f'{resource}.{group}' if group else resource
    subject = f'{what} "{name}"' if name else what
    scope = f'in the namespace "{ns}"' if ns else "at the cluster scope"
    return f'{subject} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group "{group}" {scope}'


def test_anonymous_callers_reach_only_what_upstream_allows_them(anonymous):
    status, _ = status_of(anonymous, "GET", "/healthz")
    if status == 401:
        # --anonymous-auth=false: every path needs a credential.
        for path in ["/livez", "/readyz", "/version", "/api", "/api/v1/namespaces"]:
            assert status_of(anonymous, "GET", path) == (401, UNAUTHORIZED), path
        return
    assert status == 200
    for path in ["/livez", "/readyz", "/version"]:
        assert status_of(anonymous, "GET", path)[0] == 200, path
    for path in ["/api", "/apis", "/metrics", "/openapi/v2", "/.well-known/openid-configuration", "/openid/v1/jwks"]:
        status, body = status_of(anonymous, "GET", path)
        assert (status, body["message"], body["reason"]) == (403, f'forbidden: User "system:anonymous" cannot get path "{path}"', "Forbidden"), path
    status, body = status_of(anonymous, "GET", "/api/v1/secrets")
    assert (status, body["message"]) == (403, forbidden_message("system:anonymous", "list", "secrets"))
    status, body = status_of(anonymous, "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "anonymous-was-here"}})
    assert (status, body["message"]) == (403, forbidden_message("system:anonymous", "create", "namespaces"))


def test_a_token_that_names_no_one_is_refused_with_upstreams_401(cluster):
    for token in ["not-a-token", "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"]:
        assert status_of(cluster.user(token), "GET", "/api/v1/namespaces") == (401, UNAUTHORIZED), token
        assert status_of(cluster.user(token), "GET", "/healthz")[0] == 401, "a bad credential is never anonymous"


def test_view_reads_pods_and_not_secrets_and_writes_nothing(cluster, ns):
    user = cluster.service_account(ns, "viewer")
    cluster.bind(ns, "viewer-view", "view", "viewer")
    token, _ = cluster.token(ns, "viewer")
    me = cluster.user(token)
    eventually(lambda: status_of(me, "GET", f"/api/v1/namespaces/{ns}/pods")[0] == 200, what="view's binding taking effect")
    status, body = status_of(me, "GET", f"/api/v1/namespaces/{ns}/secrets")
    assert (status, body["message"], body["reason"]) == (403, forbidden_message(user, "list", "secrets", ns), "Forbidden")
    status, body = status_of(me, "GET", f"/api/v1/namespaces/{ns}/secrets/s")
    assert (status, body["message"], body["details"]) == (403, forbidden_message(user, "get", "secrets", ns, name="s"), {"name": "s", "kind": "secrets"})
    status, body = status_of(me, "POST", f"/api/v1/namespaces/{ns}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    assert (status, body["message"]) == (403, forbidden_message(user, "create", "configmaps", ns))
    # A namespace is its own namespace in upstream's request attributes.
    status, body = status_of(me, "DELETE", f"/api/v1/namespaces/{ns}")
    assert (status, body["message"]) == (403, forbidden_message(user, "delete", "namespaces", ns, name=ns))
    # Nothing outside the namespace either.
    status, body = status_of(me, "GET", "/api/v1/namespaces/default/pods")
    assert (status, body["message"]) == (403, forbidden_message(user, "list", "pods", "default"))


def test_edit_and_admin_cannot_grant_more_than_they_hold(cluster, ns):
    editor = cluster.service_account(ns, "editor")
    cluster.bind(ns, "editor-edit", "edit", "editor")
    boss = cluster.service_account(ns, "boss")
    cluster.bind(ns, "boss-admin", "admin", "boss")
    grab = lambda subject: {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "grab"},  # noqa: E731
                            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                            "subjects": [{"kind": "ServiceAccount", "name": subject, "namespace": ns}]}
    path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"
    edit = cluster.user(cluster.token(ns, "editor")[0])
    eventually(lambda: status_of(edit, "GET", f"/api/v1/namespaces/{ns}/configmaps")[0] == 200, what="edit's binding taking effect")
    status, body = status_of(edit, "POST", path, grab("editor"))
    assert (status, body["message"]) == (403, forbidden_message(editor, "create", "rolebindings", ns, group="rbac.authorization.k8s.io"))
    admin = cluster.user(cluster.token(ns, "boss")[0])
    eventually(lambda: status_of(admin, "GET", path)[0] == 200, what="admin's binding taking effect")
    status, body = status_of(admin, "POST", path, grab("boss"))
    groups = f'["system:serviceaccounts" "system:serviceaccounts:{ns}" "system:authenticated"]'
    assert status == 403 and body["reason"] == "Forbidden", body
    assert body["message"].startswith(f'rolebindings.rbac.authorization.k8s.io "grab" is forbidden: user "{boss}" (groups={groups}) is attempting to grant RBAC permissions not currently held:\n'), body["message"]
    assert '{APIGroups:["*"], Resources:["*"], Verbs:["*"]}' in body["message"], body["message"]
    # What admin holds it may grant: view.
    ok = grab("editor")
    ok["metadata"]["name"], ok["roleRef"]["name"] = "share-view", "view"
    assert status_of(admin, "POST", path, ok)[0] == 201


def claims(token):
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def test_a_bound_token_works_until_its_pod_is_gone_and_token_review_says_so(cluster, ns):
    user = cluster.service_account(ns, "runner")
    cluster.bind(ns, "runner-view", "view", "runner")
    pod = cluster.ok("POST", f"/api/v1/namespaces/{ns}/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder"},
                                                                "spec": {"serviceAccountName": "runner", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})
    token, expires = cluster.token(ns, "runner", seconds=600, bound={"kind": "Pod", "apiVersion": "v1", "name": "holder", "uid": pod["metadata"]["uid"]})
    c = claims(token)
    # It expires when TokenRequest said, as long after it was issued as asked.
    assert c["exp"] - c["iat"] == 600, c
    assert c["kubernetes.io"]["pod"] == {"name": "holder", "uid": pod["metadata"]["uid"]}
    from datetime import datetime
    assert int(datetime.fromisoformat(expires.replace("Z", "+00:00")).timestamp()) == c["exp"]
    me = cluster.user(token)
    eventually(lambda: status_of(me, "GET", f"/api/v1/namespaces/{ns}/pods")[0] == 200, what="the token's binding taking effect")
    review = lambda: cluster.ok("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})  # noqa: E731
    answered = review()["status"]
    assert answered["authenticated"] is True and answered["user"]["username"] == user, answered
    assert answered["user"]["extra"]["authentication.kubernetes.io/pod-name"] == ["holder"], answered
    cluster.ok("DELETE", f"/api/v1/namespaces/{ns}/pods/holder?gracePeriodSeconds=0")
    eventually(lambda: cluster.raw.json("GET", f"/api/v1/namespaces/{ns}/pods/holder")[0] == 404, what="the pod's deletion")
    eventually(lambda: status_of(me, "GET", f"/api/v1/namespaces/{ns}/pods") == (401, UNAUTHORIZED), seconds=60, what="the token of a deleted pod being refused")
    answered = review()["status"]
    assert answered.get("authenticated") in (None, False) and answered.get("error"), answered


def test_can_i_list_and_whoami_answer_as_upstream(cluster, ns):
    user = cluster.service_account(ns, "asker")
    cluster.bind(ns, "asker-view", "view", "asker")
    token, _ = cluster.token(ns, "asker")
    eventually(lambda: status_of(cluster.user(token), "GET", f"/api/v1/namespaces/{ns}/pods")[0] == 200, what="the binding taking effect")
    out = cluster.kubectl(token, "auth", "whoami", "-o", "json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)["status"]["userInfo"]
    assert (info["username"], info["groups"]) == (user, ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"]), info
    yes = cluster.kubectl(token, "auth", "can-i", "list", "pods", "-n", ns)
    no = cluster.kubectl(token, "auth", "can-i", "list", "secrets", "-n", ns)
    assert (yes.returncode, yes.stdout.strip(), no.returncode, no.stdout.strip()) == (0, "yes", 1, "no")
    out = cluster.kubectl(token, "auth", "can-i", "--list", "-n", ns)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["Resources", "Non-Resource", "URLs", "Resource", "Names", "Verbs"], out.stdout
    assert any(line.startswith("pods ") and "[get list watch]" in line for line in lines), out.stdout
    assert any(line.startswith("selfsubjectaccessreviews.authorization.k8s.io ") and "[create]" in line for line in lines), out.stdout
    assert not any(line.startswith("secrets ") for line in lines), out.stdout


def test_impersonation_needs_the_impersonate_verb(cluster, ns):
    user = cluster.service_account(ns, "actor")
    token, _ = cluster.token(ns, "actor")
    me = cluster.user(token)
    target = f"someone-{uuid.uuid4().hex[:6]}"
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    path = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
    status, body = status_of(me, "POST", path, review, headers={"Impersonate-User": target})
    assert (status, body["message"]) == (403, f'users "{target}" is forbidden: User "{user}" cannot impersonate resource "users" in API group "" at the cluster scope')
    status, body = status_of(me, "POST", path, review, headers={"Impersonate-Group": "system:masters"})
    assert (status, body["reason"]) == (400, "BadRequest"), "a group without a user is a bad request"
    role, binding = f"impersonate-{ns}", f"impersonate-{ns}"
    cluster.ok("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
                                                                         "rules": [{"apiGroups": [""], "resources": ["users"], "resourceNames": [target], "verbs": ["impersonate"]}]})
    try:
        cluster.ok("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": binding},
                                                                                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                                                                                    "subjects": [{"kind": "ServiceAccount", "name": "actor", "namespace": ns}]})
        answered = eventually(lambda: (lambda s, b: b if s == 201 else None)(*status_of(me, "POST", path, review, headers={"Impersonate-User": target})), what="the impersonate grant taking effect")
        assert answered["status"]["userInfo"] == {"username": target, "groups": ["system:authenticated"]}, answered
        # Another user, or a group, is not granted.
        status, body = status_of(me, "POST", path, review, headers={"Impersonate-User": target, "Impersonate-Group": "system:masters"})
        assert (status, body["message"]) == (403, f'groups "system:masters" is forbidden: User "{user}" cannot impersonate resource "groups" in API group "" at the cluster scope')
        assert status_of(me, "POST", path, review, headers={"Impersonate-User": "admin"})[0] == 403
    finally:
        cluster.raw.json("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{binding}")
        cluster.raw.json("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}")
