//! The FlowSchemas and PriorityLevelConfigurations followed from the store (RFC 0013,
//! "Configuration"): one informer per kind over the whole hash space, and the gate
//! reconfigured from both at every change. The router and every shard follow the same objects,
//! so their gates agree once each has seen the same revision.

use crate::config::Config;
use crate::gate::Gate;
use serde_json::Value;
use shardplane_storage::informer::{Held, InformerOptions, Informers};
use shardplane_storage::Storage;
use std::sync::Arc;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The API group of the flowcontrol objects.
pub const GROUP: &str = "flowcontrol.apiserver.k8s.io";
/// The followed kinds: levels, then schemas.
pub const KINDS: [(&str, &str); 2] = [(GROUP, "prioritylevelconfigurations"), (GROUP, "flowschemas")];

/// The most objects of one kind followed; past it the configuration in force stays, and a
/// warning says why.
pub const MAX_OBJECTS: usize = 10_000;

/// Both kinds as last listed, once each has been.
pub fn objects(held: &[Arc<Held>]) -> Option<Vec<Vec<Value>>> {
    held.iter().map(|h| if let Held::Objects(m) = &**h { Some(m.values().map(|v| (**v).clone()).collect()) } else { None }).collect()
}

/// Starts following both kinds on the stores `store_of` names, putting each state in force in
/// `gate`; the informers, for a caller that also reads the objects (the Dangling status).
pub fn follow(gate: Arc<Gate>, store_of: impl Fn(&str, &str) -> Storage, stop: &CancellationToken) -> Arc<Informers> {
    let informers = Arc::new(Informers::start(&KINDS, store_of, stop, InformerOptions { max: MAX_OBJECTS, progress_every: None }));
    let kinds: Vec<watch::Receiver<Arc<Held>>> = KINDS.iter().map(|(g, p)| informers.subscribe(g, p).expect("followed")).collect();
    tokio::spawn(configure_at_changes(gate, kinds, stop.child_token()));
    informers
}

async fn configure_at_changes(gate: Arc<Gate>, mut kinds: Vec<watch::Receiver<Arc<Held>>>, stop: CancellationToken) {
    loop {
        let held: Vec<Arc<Held>> = kinds.iter_mut().map(|k| k.borrow_and_update().clone()).collect();
        match objects(&held) {
            Some(o) => gate.configure(Config::build(&o[0], &o[1], gate.server_seats())),
            None if held.iter().any(|h| matches!(**h, Held::TooMany)) => tracing::warn!(max = MAX_OBJECTS, "too many flowcontrol objects to follow; the configuration in force stays"),
            None => {}
        }
        let changed = futures::future::select_all(kinds.iter_mut().map(|k| Box::pin(k.changed())));
        tokio::select! {
            (result, _, _) = changed => if result.is_err() { return },
            _ = stop.cancelled() => return,
        }
    }
}
