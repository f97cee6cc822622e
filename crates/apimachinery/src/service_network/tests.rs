use super::*;
use proptest::prelude::*;

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

#[test]
fn the_flags_are_read_as_upstream_reads_them() {
    let n = ServiceNetwork::parse("10.0.0.0/24", "30000-32767").unwrap();
    assert_eq!((n.kubernetes_service_ip().to_string(), n.family(), n.node_port_range()), ("10.0.0.1".to_owned(), "IPv4", "30000-32767".to_owned()));
    assert_eq!(ServiceNetwork::parse("fd00:10:96::/112", "30000-30010").unwrap().kubernetes_service_ip().to_string(), "fd00:10:96::1");
    assert_eq!(ServiceNetwork::default().kubernetes_service_ip().to_string(), "10.96.0.1");
    for (cidr, ports) in [("10.0.0.0/24,fd00::/112", "30000-32767"), ("10.0.0.1/24", "30000-32767"), ("10.0.0.0/32", "1-2"), ("10.0.0.0/24", "32767-30000"), ("10.0.0.0/24", "0-10"), ("x", "1-2"), ("10.0.0.0/24", "30000")] {
        assert!(ServiceNetwork::parse(cidr, ports).is_err(), "{cidr} {ports}");
    }
}

#[test]
fn network_and_broadcast_addresses_are_never_allocatable() {
    let nets = [net("10.0.0.0/24")];
    assert!(!allocatable_in(&nets, &"10.0.0.0".parse().unwrap()));
    assert!(!allocatable_in(&nets, &"10.0.0.255".parse().unwrap()));
    assert!(allocatable_in(&nets, &"10.0.0.1".parse().unwrap()));
    assert!(allocatable_in(&nets, &"10.0.0.254".parse().unwrap()));
    assert!(!allocatable_in(&nets, &"10.0.1.1".parse().unwrap()));
}

proptest! {
    /// A dynamic candidate is an allocatable address above the static band (the range's first
    /// sixteenth, 16 to 256 addresses).
    #[test]
    fn dynamic_candidates_are_allocatable_and_above_the_static_band(prefix in 20u8..31, r in any::<u128>()) {
        let n = net(&format!("10.96.0.0/{prefix}"));
        let ip = dynamic_candidate(&n, r).unwrap();
        prop_assert!(allocatable_in(&[n], &ip));
        let size = (1u128 << (32 - prefix)) - 2;
        let offset = number(&ip) - number(&n.network()) - 1;
        prop_assert!(offset >= static_band(size).min(size - 1), "{ip} in the static band");
    }

    /// `first_free` returns an allocatable address not taken, and `None` exactly when every
    /// allocatable address is taken (a BTreeSet model of a small range).
    #[test]
    fn first_free_finds_a_free_address_while_one_is_left(taken in proptest::collection::btree_set(0u32..64, 0..64), r in any::<u128>()) {
        let n = net("10.1.0.0/26");
        let taken: BTreeSet<IpAddr> = taken.into_iter().map(|i| IpAddr::V4((u32::from(std::net::Ipv4Addr::new(10, 1, 0, 0)) + i).into())).collect();
        let free_left = (1u32..63).any(|i| !taken.contains(&IpAddr::V4((u32::from(std::net::Ipv4Addr::new(10, 1, 0, 0)) + i).into())));
        match first_free(&[n], &taken, r) {
            Some(ip) => {
                prop_assert!(!taken.contains(&ip));
                prop_assert!(allocatable_in(&[n], &ip));
            }
            None => prop_assert!(!free_left),
        }
    }
}

#[test]
fn a_service_holds_its_addresses_and_node_ports() {
    let svc = json!({"spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.9", "clusterIPs": ["10.96.0.9"], "healthCheckNodePort": 30100,
        "ports": [{"port": 80, "nodePort": 30080}, {"port": 443, "nodePort": 30443}, {"port": 53}]}});
    let h = held(&svc);
    assert_eq!(h.ips.iter().map(ToString::to_string).collect::<Vec<_>>(), ["10.96.0.9"]);
    assert_eq!(h.node_ports.into_iter().collect::<Vec<_>>(), [30080, 30100, 30443]);
    assert_eq!(held(&json!({"spec": {"clusterIP": "None"}})), Held::default());
    assert_eq!(held(&json!({"spec": {"type": "ExternalName", "clusterIP": "10.0.0.1"}})), Held::default());
    assert!(!wants_cluster_ip(&json!({"spec": {"clusterIP": "None"}})));
    assert!(wants_cluster_ip(&json!({"spec": {}})));
    assert!(allocates_node_ports(&json!({"spec": {"type": "LoadBalancer"}})));
    assert!(!allocates_node_ports(&json!({"spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false}})));
}

#[test]
fn ip_families_are_filled_as_upstream_fills_them_on_a_single_stack_cluster() {
    let mut svc = json!({"spec": {"type": "ClusterIP", "selector": {"a": "b"}}});
    assert!(init_ip_family_fields(&mut svc, None, "IPv4").is_empty());
    assert_eq!((&svc["spec"]["ipFamilyPolicy"], &svc["spec"]["ipFamilies"]), (&json!("SingleStack"), &json!(["IPv4"])));
    // Headless without a selector: RequireDualStack, one family on a single-stack cluster.
    let mut headless = json!({"spec": {"clusterIP": "None", "clusterIPs": ["None"]}});
    assert!(init_ip_family_fields(&mut headless, None, "IPv4").is_empty());
    assert_eq!((&headless["spec"]["ipFamilyPolicy"], &headless["spec"]["ipFamilies"]), (&json!("RequireDualStack"), &json!(["IPv4"])));
    let mut v6 = json!({"spec": {"ipFamilies": ["IPv6"]}});
    let causes = init_ip_family_fields(&mut v6, None, "IPv4");
    assert_eq!(causes.iter().map(|c| (c.field.as_str(), c.message.as_str())).collect::<Vec<_>>(), [("spec.ipFamilies[0]", "Invalid value: \"IPv6\": not configured on this cluster")]);
    let mut dual = json!({"spec": {"ipFamilyPolicy": "RequireDualStack"}});
    assert_eq!(init_ip_family_fields(&mut dual, None, "IPv4")[0].message, "Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services");
    let mut given = json!({"spec": {"clusterIPs": ["fd00::5"]}});
    assert_eq!(init_ip_family_fields(&mut given, None, "IPv4")[0].message, "Invalid value: []string{\"fd00::5\"}: IPv6 is not configured on this cluster");
    // An update keeps the old policy.
    let mut upd = json!({"spec": {"clusterIPs": ["10.96.0.5"]}});
    assert!(init_ip_family_fields(&mut upd, Some(&json!({"spec": {"ipFamilyPolicy": "PreferDualStack"}})), "IPv4").is_empty());
    assert_eq!(upd["spec"]["ipFamilyPolicy"], "PreferDualStack");
    let mut external = json!({"spec": {"type": "ExternalName", "externalName": "x.example"}});
    assert!(init_ip_family_fields(&mut external, None, "IPv4").is_empty());
    assert!(external["spec"].get("ipFamilies").is_none());
}

#[test]
fn an_update_keeps_allocated_values_it_leaves_out_and_drops_those_of_a_type_left() {
    let old = json!({"spec": {"type": "NodePort", "clusterIP": "10.96.0.9", "clusterIPs": ["10.96.0.9"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
        "ports": [{"name": "http", "port": 80, "nodePort": 30080}, {"name": "https", "port": 443, "nodePort": 30443}]}});
    // A PUT that names no node ports keeps them, by port name.
    let mut new = json!({"spec": {"type": "NodePort", "ports": [{"name": "https", "port": 443}, {"name": "http", "port": 8080}]}});
    prepare_update(&old, &mut new);
    assert_eq!(new["spec"]["ports"], json!([{"name": "https", "port": 443, "nodePort": 30443}, {"name": "http", "port": 8080, "nodePort": 30080}]));
    // To ClusterIP with the ports unchanged: the node ports go.
    let mut to_cluster_ip = old.clone();
    to_cluster_ip["spec"]["type"] = json!("ClusterIP");
    prepare_update(&old, &mut to_cluster_ip);
    assert!(to_cluster_ip["spec"]["ports"].as_array().unwrap().iter().all(|p| p.get("nodePort").is_none()));
    let mut with_policy = old.clone();
    with_policy["spec"]["externalTrafficPolicy"] = json!("Cluster");
    let mut to_cluster_ip = with_policy.clone();
    to_cluster_ip["spec"]["type"] = json!("ClusterIP");
    prepare_update(&with_policy, &mut to_cluster_ip);
    assert!(to_cluster_ip["spec"].get("externalTrafficPolicy").is_none(), "{to_cluster_ip}");
    // To ExternalName: the addresses and families go.
    let mut external = old.clone();
    external["spec"]["type"] = json!("ExternalName");
    external["spec"]["externalName"] = json!("x.example");
    prepare_update(&old, &mut external);
    for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        assert!(external["spec"].get(f).is_none(), "{f}: {external}");
    }
}

#[test]
fn ip_address_objects_name_their_parent() {
    let o = ip_address_object(&"10.96.3.4".parse().unwrap(), "ns", "web");
    assert_eq!(o["metadata"]["name"], "10.96.3.4");
    assert!(managed(&o));
    assert_eq!(parent_service(&o), Some(("ns".to_owned(), "web".to_owned())));
    assert_eq!(node_port_holder(&node_port_record("ns", "web")), Some(("ns".to_owned(), "web".to_owned())));
    let resources = crate::resources::builtin_resources();
    let info = crate::resources::find(&resources, "networking.k8s.io", "v1", "ipaddresses").unwrap();
    let errors = crate::kind_rules::validate(info, &o);
    assert!(errors.is_empty(), "{errors:?}");
}
