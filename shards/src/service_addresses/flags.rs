//! Upstream's flags for Service addresses: `--service-cluster-ip-range` and
//! `--service-node-port-range` (RFC 0014), taken by `shard-server` and by `shard-router`, which
//! passes them to the shards it starts.

use shardplane_apimachinery::service_network::ServiceNetwork;

/// The service IP range and node-port range, as given.
#[derive(clap::Args, Clone, Debug)]
pub struct ServiceNetworkFlags {
    /// The CIDR Services' cluster IPs come from (the default ServiceCIDR's); the
    /// `default/kubernetes` Service gets its first address. One family (RFC 0014).
    #[arg(long, default_value = "10.96.0.0/12")]
    pub service_cluster_ip_range: String,
    /// The ports NodePort and LoadBalancer Services' node ports come from, `LOW-HIGH`.
    #[arg(long, default_value = "30000-32767")]
    pub service_node_port_range: String,
}

impl ServiceNetworkFlags {
    /// The ranges the flags name, or why they name none.
    pub fn network(&self) -> Result<ServiceNetwork, String> {
        ServiceNetwork::parse(&self.service_cluster_ip_range, &self.service_node_port_range)
    }

    /// The same flags, to pass to a child process.
    pub fn to_args(&self) -> Vec<String> {
        vec![format!("--service-cluster-ip-range={}", self.service_cluster_ip_range), format!("--service-node-port-range={}", self.service_node_port_range)]
    }
}
