//! The store's space: etcd's NOSPACE alarm (raised when the backend passes
//! `--quota-backend-bytes`; every write is refused until it is disarmed), and the way out, as
//! etcd's own maintenance guide gives it: compact to the current revision, defragment every
//! member so the freed pages are given back, then disarm the alarm.

use crate::{Result, Storage, StorageError};
use etcd_client::{AlarmAction, AlarmOptions, AlarmType};

/// What etcd answers a write while its NOSPACE alarm is raised.
pub const NOSPACE_MESSAGE: &str = "database space exceeded";

/// Whether an error is etcd refusing a write because its space quota is used up.
pub fn is_nospace(e: &StorageError) -> bool {
    matches!(e, StorageError::Etcd(m) if m.contains(NOSPACE_MESSAGE))
}

/// What a recovery did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// The revision compacted to.
    pub compacted_to: u64,
    /// Members defragmented.
    pub defragmented: usize,
    /// Alarms disarmed.
    pub disarmed: usize,
}

impl Storage {
    /// The store's raised NOSPACE alarms (by member id); an empty list when none is raised, or
    /// when the store has no alarms to report (the embedded store keeps none).
    pub async fn space_alarms(&self) -> Result<Vec<u64>> {
        Ok(self.alarms().await?.into_iter().filter(|(_, alarm)| *alarm == AlarmType::Nospace).map(|(member, _)| member).collect())
    }

    /// Every raised alarm, (member id, alarm); none from a store that keeps no alarms (the
    /// embedded store).
    pub async fn alarms(&self) -> Result<Vec<(u64, AlarmType)>> {
        let asked = self.endpoints().call(crate::endpoints::Repeat::Safe, |c| async move { c.maintenance_client().alarm(AlarmAction::Get, AlarmType::None, None).await }).await;
        let resp = match asked {
            Ok((r, _)) => r,
            Err(etcd_client::Error::GRpcStatus(s)) if s.code() == tonic::Code::Unimplemented => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        Ok(resp.alarms().iter().map(|a| (a.member_id(), a.alarm())).collect())
    }

    /// Recovers from NOSPACE: compacts to the current revision, defragments each of
    /// `endpoints` (every member: a defragmentation is per member), and disarms every NOSPACE
    /// alarm. Safe to run when no alarm is raised (it then only compacts and defragments).
    pub async fn recover_space(&self, endpoints: &[String]) -> Result<Recovery> {
        let compacted_to = self.current_revision().await?;
        match self.compact(compacted_to).await {
            Ok(()) => {}
            // Already compacted there (a compactor beat us to it).
            Err(e) if e.to_string().contains("compacted") => {}
            Err(e) => return Err(e),
        }
        let mut defragmented = 0;
        for endpoint in endpoints {
            let member = Storage::connect(std::slice::from_ref(endpoint)).await?;
            match member.client().maintenance_client().defragment().await {
                Ok(_) => defragmented += 1,
                Err(etcd_client::Error::GRpcStatus(s)) if s.code() == tonic::Code::Unimplemented => {}
                Err(e) => return Err(e.into()),
            }
        }
        let mut disarmed = 0;
        for member_id in self.space_alarms().await? {
            let mut options = AlarmOptions::new();
            options.with_member(member_id);
            self.client().maintenance_client().alarm(AlarmAction::Deactivate, AlarmType::Nospace, Some(options)).await?;
            disarmed += 1;
        }
        Ok(Recovery { compacted_to, defragmented, disarmed })
    }
}
