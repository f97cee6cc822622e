use super::*;
use crate::user::UserInfo;
use proptest::prelude::*;
use serde_json::{json, Value};

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo::authenticated(name, "", groups.iter().map(|g| g.to_string()).collect())
}

fn policy_of(cluster_roles: &[Value], roles: &[Value], crbs: &[Value], rbs: &[Value]) -> Policy {
    Policy::new(&Objects { cluster_roles: cluster_roles.iter().collect(), roles: roles.iter().collect(), cluster_role_bindings: crbs.iter().collect(), role_bindings: rbs.iter().collect() })
}

fn bootstrap_with(rbs: &[Value], extra_roles: &[Value]) -> Policy {
    let mut roles = bootstrap::cluster_roles();
    roles.extend(extra_roles.iter().cloned());
    policy_of(&roles, &[], &bootstrap::cluster_role_bindings(), rbs)
}

fn role_binding(ns: &str, name: &str, kind: &str, role: &str, subjects: Value) -> Value {
    json!({"metadata": {"name": name, "namespace": ns}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role}, "subjects": subjects})
}

fn can(p: &Policy, u: &UserInfo, verb: &str, group: &str, resource: &str, ns: &str) -> bool {
    p.authorize(u, &Attributes::resource(verb, group, resource, "", ns, "")).allowed()
}

#[test]
fn the_bootstrap_policy_grants_what_upstreams_does() {
    let p = bootstrap_with(&[role_binding("team", "viewers", "ClusterRole", "view", json!([{"kind": "User", "name": "vera"}]))], &[]);
    let admin = user("kubernetes-admin", &["system:masters"]);
    assert!(can(&p, &admin, "delete", "", "secrets", "team"));
    assert!(p.authorize(&admin, &Attributes::non_resource("get", "/metrics")).allowed());
    let vera = user("vera", &[]);
    assert!(can(&p, &vera, "list", "", "pods", "team"));
    assert!(can(&p, &vera, "watch", "apps", "deployments", "team"));
    assert!(!can(&p, &vera, "get", "", "secrets", "team"), "view does not read secrets");
    assert!(!can(&p, &vera, "create", "", "pods", "team"));
    assert!(!can(&p, &vera, "list", "", "pods", "other"), "a RoleBinding grants in its namespace only");
    assert!(p.authorize(&vera, &Attributes::resource("create", "authorization.k8s.io", "selfsubjectaccessreviews", "", "", "")).allowed(), "basic-user");
    assert!(p.authorize(&vera, &Attributes::non_resource("get", "/apis/apps/v1")).allowed(), "discovery");
    let anonymous = crate::authn::anonymous();
    assert!(p.authorize(&anonymous, &Attributes::non_resource("get", "/healthz")).allowed());
    assert!(p.authorize(&anonymous, &Attributes::non_resource("get", "/version")).allowed());
    assert!(!p.authorize(&anonymous, &Attributes::non_resource("get", "/api")).allowed(), "anonymous callers get no discovery");
    assert!(!p.authorize(&anonymous, &Attributes::non_resource("get", "/metrics")).allowed());
    let scheduler = user("system:kube-scheduler", &[]);
    assert!(p.authorize(&scheduler, &Attributes::resource("create", "", "pods", "binding", "team", "p")).allowed());
    assert!(p.authorize(&scheduler, &Attributes::resource("update", "coordination.k8s.io", "leases", "", "kube-system", "kube-scheduler")).allowed());
    assert!(!p.authorize(&scheduler, &Attributes::resource("update", "coordination.k8s.io", "leases", "", "kube-system", "other")).allowed());
}

#[test]
fn aggregated_roles_take_every_matching_roles_rules_transitively() {
    let crd_viewer = json!({"metadata": {"name": "widgets-view", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
                            "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get"]}]});
    let p = bootstrap_with(&[], &[crd_viewer]);
    let has = |role: &str, group: &str, resource: &str, verb: &str| p.cluster_role(role).unwrap().iter().any(|r| r.allows(&Attributes::resource(verb, group, resource, "", "ns", "")));
    for role in ["view", "edit", "admin"] {
        assert!(has(role, "example.com", "widgets", "get"), "{role} takes the labelled role's rules");
        assert!(has(role, "", "pods", "list"), "{role} views pods");
    }
    assert!(has("edit", "", "secrets", "update") && !has("view", "", "secrets", "update"));
    assert!(has("admin", "rbac.authorization.k8s.io", "rolebindings", "create") && !has("edit", "rbac.authorization.k8s.io", "rolebindings", "create"));
    let stale: Vec<&str> = p.aggregation_updates().iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(stale, ["admin", "edit", "view"], "the stored (empty) rules are out of date");
    // Stored as the controller writes them, nothing is out of date.
    let mut written = bootstrap::cluster_roles();
    for r in written.iter_mut() {
        if let Some(union) = p.cluster_role(r["metadata"]["name"].as_str().unwrap()) {
            r["rules"] = serde_json::to_value(&**union).unwrap();
        }
    }
    written.push(json!({"metadata": {"name": "widgets-view", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}, "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get"]}]}));
    assert!(policy_of(&written, &[], &[], &[]).aggregation_updates().is_empty());
}

#[test]
fn a_missing_role_is_the_reason_and_service_accounts_match_by_namespace() {
    let rbs = [
        role_binding("ns", "gone", "Role", "absent", json!([{"kind": "Group", "name": "system:authenticated"}])),
        role_binding("ns", "sa", "Role", "reader", json!([{"kind": "ServiceAccount", "name": "bot"}])),
    ];
    let roles = [json!({"metadata": {"name": "reader", "namespace": "ns"}, "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]})];
    let p = policy_of(&[], &roles, &[], &rbs);
    let bot = user("system:serviceaccount:ns:bot", &["system:serviceaccounts"]);
    let d = p.authorize(&bot, &Attributes::resource("get", "", "configmaps", "", "ns", "c"));
    assert_eq!(d, Decision::Allow("RBAC: allowed by RoleBinding \"sa/ns\" of Role \"reader\" to ServiceAccount \"/bot\"".into()));
    let other = user("system:serviceaccount:other:bot", &[]);
    let d = p.authorize(&other, &Attributes::resource("get", "", "configmaps", "", "ns", "c"));
    assert_eq!(d, Decision::NoOpinion("RBAC: role.rbac.authorization.k8s.io \"absent\" not found".into()));
}

#[test]
fn forbidden_messages_are_upstreams() {
    let u = user("jane", &[]);
    assert_eq!(forbidden_message(&u, &Attributes::resource("list", "", "pods", "", "default", ""), ""), "pods is forbidden: User \"jane\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\"");
    assert_eq!(forbidden_message(&u, &Attributes::resource("get", "apps", "deployments", "scale", "ns", "d"), ""), "deployments.apps \"d\" is forbidden: User \"jane\" cannot get resource \"deployments/scale\" in API group \"apps\" in the namespace \"ns\"");
    assert_eq!(forbidden_message(&u, &Attributes::resource("list", "", "nodes", "", "", ""), "RBAC: x"), "nodes is forbidden: User \"jane\" cannot list resource \"nodes\" in API group \"\" at the cluster scope: RBAC: x");
    assert_eq!(forbidden_message(&u, &Attributes::non_resource("get", "/metrics"), ""), "forbidden: User \"jane\" cannot get path \"/metrics\"");
}

#[test]
fn escalation_lists_what_is_not_held_compacted() {
    let owned = vec![PolicyRule { verbs: vec!["get".into(), "list".into()], api_groups: vec!["".into()], resources: vec!["pods".into()], ..Default::default() }];
    let wanted = vec![PolicyRule { verbs: vec!["get".into(), "delete".into(), "list".into(), "create".into()], api_groups: vec!["".into()], resources: vec!["pods".into(), "secrets".into()], ..Default::default() }];
    let missing = missing_rules(&owned, &wanted);
    let printed: Vec<String> = missing.iter().map(compact).collect();
    assert_eq!(printed, ["{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\" \"create\"]}", "{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"delete\" \"list\" \"create\"]}"]);
    assert!(missing_rules(&owned, &owned).is_empty());
    let msg = escalation_message(&user("ed", &["dev"]), &missing[..1], &[]);
    assert_eq!(msg, "user \"ed\" (groups=[\"dev\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\" \"create\"]}");
}

// The decision is a function of the rules the user holds: allowed exactly when some rule that
// `rules_for` returns allows the request (the model), whatever the bindings and roles.
fn word() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["*", "a", "b", "c"]).prop_map(str::to_owned)
}

fn rule_strategy() -> impl Strategy<Value = PolicyRule> {
    (prop::collection::vec(word(), 1..3), prop::collection::vec(word(), 1..3), prop::collection::vec(prop::sample::select(vec!["*", "a", "b", "a/s", "*/s"]).prop_map(str::to_owned), 1..3), prop::collection::vec(word(), 0..2))
        .prop_map(|(verbs, api_groups, resources, resource_names)| PolicyRule { verbs, api_groups, resources, resource_names: resource_names.into_iter().filter(|n| n != "*").collect(), non_resource_urls: vec![] })
}

proptest! {
    #[test]
    fn a_decision_is_what_the_held_rules_allow(
        cluster in prop::collection::vec(prop::collection::vec(rule_strategy(), 0..3), 0..3),
        namespaced in prop::collection::vec(prop::collection::vec(rule_strategy(), 0..3), 0..3),
        crb_targets in prop::collection::vec((0usize..4, prop::sample::select(vec!["u", "g", "other"])), 0..4),
        rb_targets in prop::collection::vec((0usize..4, any::<bool>(), prop::sample::select(vec!["u", "g", "other"]), prop::sample::select(vec!["ns", "x"])), 0..4),
        verb in word(), group in word(), resource in prop::sample::select(vec!["a", "b"]), sub in prop::sample::select(vec!["", "s"]), name in prop::sample::select(vec!["", "a", "b"]), ns in prop::sample::select(vec!["", "ns", "x"]),
    ) {
        let cr: Vec<Value> = cluster.iter().enumerate().map(|(i, r)| json!({"metadata": {"name": format!("c{i}")}, "rules": r})).collect();
        let ro: Vec<Value> = namespaced.iter().enumerate().map(|(i, r)| json!({"metadata": {"name": format!("r{i}"), "namespace": "ns"}, "rules": r})).collect();
        let subject = |s: &str| if s == "g" { json!([{"kind": "Group", "name": "g"}]) } else { json!([{"kind": "User", "name": s}]) };
        let crbs: Vec<Value> = crb_targets.iter().enumerate().map(|(i, (role, s))| json!({"metadata": {"name": format!("b{i}")}, "roleRef": {"kind": "ClusterRole", "name": format!("c{role}")}, "subjects": subject(s)})).collect();
        let rbs: Vec<Value> = rb_targets.iter().enumerate().map(|(i, (role, cluster_role, s, bns))| {
            let (kind, name) = if *cluster_role { ("ClusterRole", format!("c{role}")) } else { ("Role", format!("r{role}")) };
            role_binding(bns, &format!("rb{i}"), kind, &name, subject(s))
        }).collect();
        let p = policy_of(&cr, &ro, &crbs, &rbs);
        let u = user("u", &["g"]);
        let a = Attributes::resource(&verb, &group, resource, sub, ns, name);
        let (held, _) = p.rules_for(&u, ns);
        prop_assert_eq!(p.authorize(&u, &a).allowed(), held.iter().any(|r| r.allows(&a)));
        // Whatever one holds, one can grant: no escalation against one's own rules.
        prop_assert!(missing_rules(&held, &held).is_empty());
    }
}
