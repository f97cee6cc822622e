//! Several hosts on one machine, for what crosses a network (issue #23, RFC 0016): each host is
//! a network namespace with its own address on a bridge that only this machine sees; the test
//! process, in the machine's own namespace, is the client host (it holds the bridge's first
//! address). Processes run on a host with `ip netns exec`; a host can be cut off from every
//! other (its link down: packets vanish, connections hang, as across a real partition) and
//! joined again. The namespaces and the bridge are removed when the [`Hosts`] is dropped (the
//! processes run on them belong to their callers, who stop them first).
//!
//! Needs root and iproute2 (`ip`), as the CI machine has.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// The hosts of one test: a bridge, and one namespace per host.
pub struct Hosts {
    /// Names of the namespaces, in order.
    names: Vec<String>,
    bridge: String,
    subnet: [u8; 3],
}

/// One host: its namespace and address.
#[derive(Clone, Debug)]
pub struct Host {
    pub namespace: String,
    pub addr: Ipv4Addr,
}

impl Host {
    /// `program` with `args`, to run on this host.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.namespace]).arg(program);
        c
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).stdout(Stdio::null()).output().expect("run ip (iproute2)");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

impl Hosts {
    /// Makes `n` hosts on a fresh bridge with a subnet of its own (10.x.y.0/24, x and y random,
    /// so tests running at once do not meet); host `i` is 10.x.y.(11 + i).
    pub fn create(n: usize) -> Self {
        assert!(n <= 200, "one /24 holds the hosts");
        let id = uuid::Uuid::new_v4().simple().to_string();
        let tag = &id[..6];
        let bytes = uuid::Uuid::new_v4().into_bytes();
        let subnet = [10, 200 + bytes[0] % 50, bytes[1]];
        let bridge = format!("sp{tag}br");
        let names: Vec<String> = (0..n).map(|i| format!("sp{tag}h{i}")).collect();
        let hosts = Self { names, bridge, subnet };
        let [a, b, c] = subnet;
        ip(&["link", "add", &hosts.bridge, "type", "bridge"]);
        ip(&["addr", "add", &format!("{a}.{b}.{c}.1/24"), "dev", &hosts.bridge]);
        ip(&["link", "set", &hosts.bridge, "up"]);
        for (i, ns) in hosts.names.iter().enumerate() {
            let outer = format!("sp{tag}v{i}");
            let inner = format!("sp{tag}i{i}");
            ip(&["netns", "add", ns]);
            ip(&["link", "add", &outer, "type", "veth", "peer", "name", &inner]);
            ip(&["link", "set", &inner, "netns", ns]);
            ip(&["-n", ns, "link", "set", "dev", &inner, "name", "eth0"]);
            ip(&["-n", ns, "addr", "add", &format!("{}/24", hosts.host(i).addr), "dev", "eth0"]);
            ip(&["-n", ns, "link", "set", "eth0", "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            ip(&["link", "set", &outer, "master", &hosts.bridge]);
            ip(&["link", "set", &outer, "up"]);
        }
        hosts
    }

    /// Host `i`.
    pub fn host(&self, i: usize) -> Host {
        let [a, b, c] = self.subnet;
        Host { namespace: self.names[i].clone(), addr: Ipv4Addr::new(a, b, c, 11 + i as u8) }
    }

    /// Cuts host `i` off: its link goes down, so nothing reaches it and it reaches nothing.
    pub fn partition(&self, i: usize) {
        ip(&["-n", &self.names[i], "link", "set", "eth0", "down"]);
    }

    /// Joins host `i` again after [`Hosts::partition`].
    pub fn heal(&self, i: usize) {
        ip(&["-n", &self.names[i], "link", "set", "eth0", "up"]);
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.names {
            let _ = Command::new("ip").args(["netns", "del", ns]).stderr(Stdio::null()).status();
        }
        let _ = Command::new("ip").args(["link", "del", &self.bridge]).stderr(Stdio::null()).status();
    }
}
