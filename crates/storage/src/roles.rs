//! The store's own access control for a cluster whose processes reach etcd with client
//! certificates (RFC 0012, "Inside the cluster: the store"): etcd names a caller by its
//! certificate's common name, and these roles let the shards write objects and their own
//! membership but never the range map, which only the routers (their coordinators) and the
//! standalone coordinator write.
//!
//! [`Storage::set_up_roles`] creates the roles and users (as `root`, whose certificate the
//! operator holds) and turns etcd's authentication on; it is idempotent.

use crate::{Result, Storage, StorageError};
use etcd_client::{Permission, UserAddOptions};

/// The common name of a router's store certificate (it runs a coordinator, which writes the map).
pub const ROUTER_USER: &str = "shardplane-router";
/// The common name of a standalone coordinator's and shardctl's store certificate.
pub const COORDINATOR_USER: &str = "shardplane-coordinator";
/// The common name of a shard's store certificate.
pub const SHARD_USER: &str = "shardplane-shard";

/// The role of the range map's writers: every key.
pub const COORDINATOR_ROLE: &str = "shardplane-coordinator";
/// The role of the shards: objects, their membership and the compaction marker; the rest of
/// shardplane's keys (the range map, the coordinator's) read-only.
pub const SHARD_ROLE: &str = "shardplane-shard";

/// The permissions of [`SHARD_ROLE`], each with how it is shown.
fn shard_permissions() -> Vec<(String, Permission)> {
    let registry = shardplane_keyspace::etcd_layout::REGISTRY_PREFIX;
    let (members, compact) = (crate::members::SHARDS_PREFIX, crate::compaction::COMPACT_KEY);
    vec![
        (format!("readwrite {registry}*"), Permission::read_write(registry).with_prefix()),
        (format!("readwrite {members}*"), Permission::read_write(members).with_prefix()),
        (format!("readwrite {compact}"), Permission::read_write(compact)),
        ("read /shardplane/*".to_owned(), Permission::read("/shardplane/").with_prefix()),
    ]
}

/// An answer that says the thing exists already (a second run).
fn exists(e: &etcd_client::Error) -> bool {
    e.to_string().contains("already exists")
}

impl Storage {
    /// Creates the roles and users (`root`, [`ROUTER_USER`], [`COORDINATOR_USER`],
    /// [`SHARD_USER`], none with a password: they are named by certificate) and enables etcd's
    /// authentication. Run as `root`. Returns what it did, one line per step.
    pub async fn set_up_roles(&self) -> Result<Vec<String>> {
        let mut c = self.client();
        let mut done = Vec::new();
        let mut step = |what: String, r: std::result::Result<(), etcd_client::Error>| match r {
            Ok(()) => {
                done.push(what);
                Ok(())
            }
            Err(e) if exists(&e) => {
                done.push(format!("{what} (already there)"));
                Ok(())
            }
            Err(e) => Err(StorageError::Etcd(format!("{what}: {e}"))),
        };
        let no_password = || Some(UserAddOptions::new().with_no_pwd());
        step("user root".into(), c.user_add("root", "", no_password()).await.map(drop))?;
        step("root has role root".into(), c.user_grant_role("root", "root").await.map(drop))?;
        step(format!("role {COORDINATOR_ROLE}"), c.role_add(COORDINATOR_ROLE).await.map(drop))?;
        step(format!("role {COORDINATOR_ROLE}: every key"), c.role_grant_permission(COORDINATOR_ROLE, Permission::read_write(vec![0u8]).with_from_key()).await.map(drop))?;
        step(format!("role {SHARD_ROLE}"), c.role_add(SHARD_ROLE).await.map(drop))?;
        for (shown, p) in shard_permissions() {
            step(format!("role {SHARD_ROLE}: {shown}"), c.role_grant_permission(SHARD_ROLE, p).await.map(drop))?;
        }
        for (user, role) in [(ROUTER_USER, COORDINATOR_ROLE), (COORDINATOR_USER, COORDINATOR_ROLE), (SHARD_USER, SHARD_ROLE)] {
            step(format!("user {user}"), c.user_add(user, "", no_password()).await.map(drop))?;
            step(format!("{user} has role {role}"), c.user_grant_role(user, role).await.map(drop))?;
        }
        step("authentication enabled".into(), c.auth_enable().await.map(drop))?;
        Ok(done)
    }
}
