//! What an operator asks of the store on a bad day (RFC 0016): each member's health and size,
//! the store's revisions and alarms, defragmenting one member at a time, and saving a snapshot
//! to restore from.

use crate::{Result, Storage, StorageError};
use std::path::Path;
use std::time::Duration;

/// One member as it reports itself.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MemberStatus {
    /// The client URL asked.
    pub endpoint: String,
    /// Its member id (hex in what etcd prints; a number here).
    pub id: u64,
    /// The leader it follows (0: none).
    pub leader: u64,
    /// etcd's version.
    pub version: String,
    /// The database file's size, bytes.
    pub db_size: i64,
    /// The part of it in use, bytes (the rest is free pages a defragmentation returns).
    pub db_size_in_use: i64,
    /// The revision it has applied.
    pub revision: u64,
    pub raft_term: u64,
    pub raft_index: u64,
    pub is_learner: bool,
    /// What the member says is wrong with it.
    pub errors: Vec<String>,
}

impl MemberStatus {
    /// Whether this member is the leader.
    pub fn is_leader(&self) -> bool {
        self.leader != 0 && self.leader == self.id
    }
}

/// The whole store, as its members and alarms describe it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StoreStatus {
    /// Each endpoint asked, and what it said (or why it did not answer).
    pub members: Vec<(String, std::result::Result<MemberStatus, String>)>,
    /// Raised alarms: (member id, alarm).
    pub alarms: Vec<(u64, String)>,
    /// The store's revision now.
    pub revision: u64,
    /// The revision history was compacted to (0: none yet).
    pub compacted_revision: u64,
}

impl StoreStatus {
    /// The member that leads, if the members that answered agree on one.
    pub fn leader(&self) -> Option<&MemberStatus> {
        agreed_leader(self.members.iter().filter_map(|(_, m)| m.as_ref().ok()))
    }
}

/// The member every one of `answered` follows, if they agree on one and it is among them.
pub fn agreed_leader<'a>(answered: impl IntoIterator<Item = &'a MemberStatus>) -> Option<&'a MemberStatus> {
    let answered: Vec<&MemberStatus> = answered.into_iter().collect();
    let leader = answered.first()?.leader;
    if leader == 0 || answered.iter().any(|m| m.leader != leader) {
        return None;
    }
    answered.into_iter().find(|m| m.id == leader)
}

/// How long a defragmented member may take to answer again before the next is left alone.
const DEFRAG_SETTLE: Duration = Duration::from_secs(30);

impl Storage {
    /// The status of the one member at `endpoint`, asked directly (not through the member in use).
    pub async fn member_status(endpoint: &str) -> Result<MemberStatus> {
        let member = Storage::connect(&[endpoint.to_owned()]).await?;
        let s = member.client().maintenance_client().status().await?;
        let header = s.header();
        Ok(MemberStatus {
            endpoint: endpoint.to_owned(),
            id: header.map_or(0, |h| h.member_id()),
            leader: s.leader(),
            version: s.version().to_owned(),
            db_size: s.db_size(),
            db_size_in_use: s.raft_used_db_size(),
            revision: header.map_or(0, |h| h.revision() as u64),
            raft_term: s.raft_term(),
            raft_index: s.raft_index(),
            is_learner: s.is_learner(),
            errors: s.errors().to_vec(),
        })
    }

    /// Every member of `endpoints`, the alarms, the revision and the compacted revision.
    pub async fn store_status(&self, endpoints: &[String]) -> Result<StoreStatus> {
        let mut members = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            members.push((endpoint.clone(), Self::member_status(endpoint).await.map_err(|e| e.to_string())));
        }
        let alarms = self.alarms().await?.into_iter().map(|(member, alarm)| (member, format!("{alarm:?}").to_uppercase())).collect();
        let revision = self.current_revision().await?;
        let compacted_revision = self.compacted_revision().await?;
        Ok(StoreStatus { members, alarms, revision, compacted_revision })
    }

    /// The revision history was compacted to (0: nothing compacted yet): a watch from the first
    /// revision is cancelled with it (etcd creates the watch, then cancels it when it syncs;
    /// a progress mark comes only once it is synced, so one arriving first means nothing is
    /// compacted).
    pub async fn compacted_revision(&self) -> Result<u64> {
        let seen = async {
            let mut watch = self.watch_range(b"\0", b"\0\0", 0).await?;
            watch.request_progress().await?;
            watch.next().await
        };
        match tokio::time::timeout(Duration::from_secs(10), seen).await {
            Ok(Err(StorageError::Compacted { compacted, .. })) => Ok(compacted),
            Ok(Err(e)) => Err(e),
            Ok(Ok(Some(_))) => Ok(0),
            Ok(Ok(None)) => Err(StorageError::Etcd("the watch asking what the store has compacted ended".into())),
            Err(_) => Err(StorageError::Etcd("the store did not say within 10 s what it has compacted".into())),
        }
    }

    /// Defragments each of `endpoints` in turn, waiting for each to answer again before the
    /// next (a member defragmenting answers nothing, so one at a time keeps a quorum). Every
    /// member must answer before it starts. Returns each member's status before and after.
    pub async fn defragment_members(endpoints: &[String]) -> Result<Vec<(MemberStatus, MemberStatus)>> {
        let mut before = Vec::new();
        for endpoint in endpoints {
            before.push(Self::member_status(endpoint).await.map_err(|e| StorageError::Etcd(format!("{endpoint} does not answer ({e}); defragment when every member is healthy")))?);
        }
        let mut out = Vec::new();
        for b in before {
            let member = Storage::connect(std::slice::from_ref(&b.endpoint)).await?;
            member.client().maintenance_client().defragment().await.map_err(|e| StorageError::Etcd(format!("defragmenting {}: {e}", b.endpoint)))?;
            let deadline = std::time::Instant::now() + DEFRAG_SETTLE;
            let after = loop {
                match Self::member_status(&b.endpoint).await {
                    Ok(s) => break s,
                    Err(e) if std::time::Instant::now() > deadline => return Err(StorageError::Etcd(format!("{} did not answer within {DEFRAG_SETTLE:?} of its defragmentation: {e}", b.endpoint))),
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            };
            out.push((b, after));
        }
        Ok(out)
    }

    /// Streams a snapshot of the member in use to `path` (written beside it, synced, then
    /// renamed, so `path` is never half a snapshot). Returns its size and a revision it holds
    /// everything up to (the store's revision when it started: etcd 3.5 does not say which
    /// revision a snapshot ends at, `etcdutl snapshot status` does).
    pub async fn save_snapshot(&self, path: &Path) -> Result<(u64, u64)> {
        use tokio::io::AsyncWriteExt;
        let io = |e: std::io::Error| StorageError::Etcd(format!("{}: {e}", path.display()));
        let partial = path.with_extension("part");
        let mut file = tokio::fs::File::create(&partial).await.map_err(io)?;
        let revision = self.current_revision().await?;
        let mut stream = self.client().maintenance_client().snapshot().await?;
        let mut bytes = 0u64;
        while let Some(chunk) = stream.message().await? {
            file.write_all(chunk.blob()).await.map_err(io)?;
            bytes += chunk.blob().len() as u64;
        }
        file.sync_all().await.map_err(io)?;
        drop(file);
        tokio::fs::rename(&partial, path).await.map_err(io)?;
        Ok((bytes, revision))
    }
}
