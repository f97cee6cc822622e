//! `shardctl store`: the store as an operator reads it on a bad day (RFC 0016): its members,
//! which leads, each member's database size and the part in use, alarms, the revision and the
//! compacted revision.

use crate::{columns, human_bytes};
use shardplane_storage::maintenance::{MemberStatus, StoreStatus};

/// The table `shardctl store status` prints.
pub fn render_status(s: &StoreStatus) -> String {
    let leader = s.leader().map_or_else(|| "none agreed".to_owned(), |m| format!("{:x} ({})", m.id, m.endpoint));
    let mut out = format!("REVISION {}   COMPACTED {}   LEADER {leader}\n", s.revision, s.compacted_revision);
    for (member, alarm) in &s.alarms {
        out.push_str(&format!("ALARM {alarm} on member {member:x}\n"));
    }
    out.push('\n');
    let mut rows = vec![["ENDPOINT", "ID", "ROLE", "VERSION", "DB SIZE", "IN USE", "REVISION", "RAFT TERM", "RAFT INDEX", "ERRORS"].map(str::to_owned).to_vec()];
    for (endpoint, status) in &s.members {
        rows.push(match status {
            Ok(m) => vec![
                endpoint.clone(),
                format!("{:x}", m.id),
                role(m).to_owned(),
                m.version.clone(),
                human_bytes(m.db_size.max(0) as u64),
                human_bytes(m.db_size_in_use.max(0) as u64),
                m.revision.to_string(),
                m.raft_term.to_string(),
                m.raft_index.to_string(),
                if m.errors.is_empty() { "-".into() } else { m.errors.join("; ") },
            ],
            Err(e) => vec![endpoint.clone(), "-".into(), "unreachable".into(), "-".into(), "-".into(), "-".into(), "-".into(), "-".into(), "-".into(), e.clone()],
        });
    }
    out.push_str(&columns(&rows));
    out
}

fn role(m: &MemberStatus) -> &'static str {
    match (m.is_leader(), m.is_learner, m.leader) {
        (true, _, _) => "leader",
        (_, true, _) => "learner",
        (_, _, 0) => "no leader",
        _ => "follower",
    }
}

/// What `shardctl store defrag` prints: each member's size before and after.
pub fn render_defrag(done: &[(MemberStatus, MemberStatus)]) -> String {
    let mut rows = vec![["ENDPOINT", "DB SIZE BEFORE", "AFTER", "IN USE"].map(str::to_owned).to_vec()];
    for (before, after) in done {
        rows.push(vec![before.endpoint.clone(), human_bytes(before.db_size.max(0) as u64), human_bytes(after.db_size.max(0) as u64), human_bytes(after.db_size_in_use.max(0) as u64)]);
    }
    columns(&rows)
}
