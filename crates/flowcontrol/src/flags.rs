//! Upstream's flags for a server's concurrency: `--enable-priority-and-fairness` and the two
//! in-flight bounds, which with priority and fairness on are summed into the server's seats
//! (RFC 0013) and with it off are the two plain bounds of the request prologue.

use shardplane_http::limits::{InflightLimits, DEFAULT_MUTATING, DEFAULT_READ};

/// How a server bounds what it serves at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct Flags {
    /// Give requests seats by API Priority and Fairness (the FlowSchemas and priority levels),
    /// as kube-apiserver's flag; `false`: the two in-flight bounds alone, 429 past either.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = true, action = clap::ArgAction::Set))]
    pub enable_priority_and_fairness: bool,
    /// Most concurrent non-mutating requests (watches exempt) with priority and fairness off;
    /// with it on, part of the server's seats.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = DEFAULT_READ as u32))]
    pub max_requests_inflight: u32,
    /// Most concurrent mutating requests with priority and fairness off; with it on, the rest
    /// of the server's seats.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = DEFAULT_MUTATING as u32))]
    pub max_mutating_requests_inflight: u32,
}

impl Default for Flags {
    fn default() -> Self {
        Self { enable_priority_and_fairness: true, max_requests_inflight: DEFAULT_READ as u32, max_mutating_requests_inflight: DEFAULT_MUTATING as u32 }
    }
}

impl Flags {
    /// The server's seats under priority and fairness (upstream: the two bounds summed).
    pub fn server_seats(&self) -> u32 {
        self.max_requests_inflight.saturating_add(self.max_mutating_requests_inflight).max(1)
    }

    /// The prologue's two bounds, when priority and fairness is off.
    pub fn inflight(&self) -> Option<InflightLimits> {
        (!self.enable_priority_and_fairness).then(|| InflightLimits::new(self.max_requests_inflight as usize, self.max_mutating_requests_inflight as usize))
    }

    /// The same flags, to pass to a child process.
    pub fn to_args(&self) -> Vec<String> {
        vec![
            format!("--enable-priority-and-fairness={}", self.enable_priority_and_fairness),
            format!("--max-requests-inflight={}", self.max_requests_inflight),
            format!("--max-mutating-requests-inflight={}", self.max_mutating_requests_inflight),
        ]
    }
}
