//! apf: what priority and fairness costs on an unsaturated request path (RFC 0013). Two
//! topologies of K shards side by side, each on its own etcd, both plain HTTP with an anonymous
//! caller: **A** with `--enable-priority-and-fairness=false` (the two in-flight bounds alone),
//! **B** as `shard-router` runs by default (every request classified by the FlowSchemas, given
//! its seats through its level's queues at the router and again at the shard). The same rounds
//! go to both, alternating, as the `access` scenario runs them. The load stays inside the seats
//! (32 requests in flight; `global-default`, where an anonymous caller goes, has 49 of the 600
//! seats and may borrow 25 more), so what is measured is classification and queueing, not
//! waiting.

use crate::access::{compare, Compared, Side, NS};
use crate::cluster::Topology;
use crate::report::Section;
use crate::Ctx;
use serde_json::json;

pub async fn run(ctx: &Ctx) -> Section {
    let (n, lists, rounds, k) = crate::access::sizes(ctx);
    let client = shardplane_http::outbound::client_builder().pool_max_idle_per_host(1024).http1_only().build().expect("client");
    let mut sides = Vec::new();
    for flags in [&["--enable-priority-and-fairness=false"][..], &[][..]] {
        let etcd = crate::start_etcd().await;
        let topology = Topology::start_with(&ctx.router, &etcd.endpoint, k, flags).await;
        let r = client.post(format!("{}/api/v1/namespaces", topology.url)).json(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).send().await.expect("namespace");
        assert!(r.status().is_success(), "namespace: {}", r.status());
        sides.push(Side { topology, client: client.clone(), token: None, _etcd: etcd });
    }
    let sides: [Side; 2] = sides.try_into().unwrap_or_else(|_| unreachable!("two sides"));
    let compared = Compared {
        title: "priority and fairness cost",
        names: ["priority and fairness off (`--enable-priority-and-fairness=false`: the in-flight bounds alone)", "priority and fairness on (the default: the FlowSchemas classify every request, its level's queues give it seats, at the router and at the shard)"],
        topologies: "(plain HTTP, an anonymous caller, AlwaysAllow on both)",
        target: "with priority and fairness vs without",
        why: "The cost is matching each request against the FlowSchemas in order (an anonymous request walks them to `global-default`), the gate's lock and its queue bookkeeping, twice per request (router and shard), and the seat held until the answer is sent. Throughput ratios below 1 are the cost; latency and CPU ratios above 1 are.\n",
    };
    compare(ctx, sides, &compared, (n, lists, rounds, k)).await
}
