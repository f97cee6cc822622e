//! `--perf`: a sampling profile of the server processes while a case runs, so every miss in the
//! report names where the time goes (linux-perf's `perf record` at a fixed frequency on the
//! processes' own pids, then `perf report`'s flat self-time by function).
//!
//! Profiled runs are extra runs of a case, never the timed ones: sampling costs a little CPU.

use std::path::PathBuf;
use std::process::Stdio;
use tokio::process::{Child, Command};

/// Samples per second per thread: often enough for a few hundred samples from a second-long
/// case, rarely enough to cost under 1% of a core.
const FREQUENCY: &str = "997";
/// Functions listed per process.
const TOP: usize = 12;

/// A `perf record` running on a group of processes.
struct Recording {
    label: String,
    child: Child,
    data: PathBuf,
}

/// Recordings in progress, one per group of processes (the router; the shards; etcd).
pub struct Profile {
    recordings: Vec<Recording>,
}

/// What one group's recording found.
pub struct Flat {
    pub label: String,
    pub samples: u64,
    /// (share of samples in %, component) by share: the kernel, libc, jemalloc, or the Rust
    /// crate a function belongs to.
    pub by_component: Vec<(f64, String)>,
    /// (share of samples in %, function) for the top functions by self time.
    pub by_function: Vec<(f64, String)>,
}

/// Whether `perf` can sample here (it is installed and the kernel allows it).
pub fn available() -> bool {
    std::process::Command::new("perf").args(["record", "-q", "-o", "/dev/null", "--", "true"]).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

impl Profile {
    /// Starts sampling each group: (label, pids).
    pub async fn start(groups: &[(&str, Vec<u32>)]) -> Self {
        let mut recordings = Vec::new();
        for (label, pids) in groups {
            let data = std::env::temp_dir().join(format!("shardplane-perf-{}.data", uuid::Uuid::new_v4()));
            let pids = pids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
            let child = Command::new("perf").args(["record", "-q", "-F", FREQUENCY, "-p", &pids, "-o"]).arg(&data).stdout(Stdio::null()).stderr(Stdio::null()).kill_on_drop(true).spawn().expect("perf record");
            recordings.push(Recording { label: (*label).to_owned(), child, data });
        }
        // perf attaches to running threads as it starts; give it the moment it takes.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        Self { recordings }
    }

    /// Stops sampling (perf writes its file on SIGINT) and reads each group's flat profile.
    pub async fn finish(self) -> Vec<Flat> {
        let mut out = Vec::new();
        for mut r in self.recordings {
            if let Some(pid) = r.child.id() {
                let _ = Command::new("kill").args(["-INT", &pid.to_string()]).status().await;
            }
            let _ = r.child.wait().await;
            let report = std::process::Command::new("perf").args(["report", "--stdio", "--no-children", "-n", "--sort", "dso,sym", "-i"]).arg(&r.data).stderr(Stdio::null()).output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
            let _ = std::fs::remove_file(&r.data);
            out.push(flat(r.label, &report));
        }
        out
    }
}

/// Profiles `groups` while `work` runs.
pub async fn during<T>(groups: &[(&str, Vec<u32>)], work: impl std::future::Future<Output = T>) -> Vec<Flat> {
    let p = Profile::start(groups).await;
    work.await;
    p.finish().await
}

/// One row of `perf report --stdio -n --sort dso,sym`: "  12.34%  123  libc.so.6  [.] memcpy"
/// (`[k]` for a kernel function).
struct Row {
    share: f64,
    samples: u64,
    object: String,
    kernel: bool,
    function: String,
}

fn rows(report: &str) -> Vec<Row> {
    report
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (pct, rest) = l.trim_start().split_once('%')?;
            let mut words = rest.split_whitespace();
            let samples = words.next()?.parse().ok()?;
            let object = words.next()?.to_owned();
            let kernel = words.next()? == "[k]";
            Some(Row { share: pct.trim().parse().ok()?, samples, object, kernel, function: words.collect::<Vec<_>>().join(" ") })
        })
        .collect()
}

/// What a function's time counts as: the kernel, libc, jemalloc, a binary without symbols, or
/// the first crate named in its (demangled) path.
fn component(r: &Row) -> String {
    if r.kernel {
        return "kernel".into();
    }
    if r.object.starts_with("libc") {
        return "libc (memcpy, memcmp, …)".into();
    }
    if r.function.starts_with("_rjem") || r.function.contains("jemalloc") {
        return "jemalloc".into();
    }
    if r.function.starts_with("0x") {
        return format!("{} (no symbols)", r.object);
    }
    let name = r.function.trim_start_matches(['<', '&', '*']).trim_start_matches("mut ").trim_start_matches("dyn ");
    match name.split_once("::").map(|(c, _)| c).filter(|c| !c.is_empty() && c.chars().all(|x| x.is_alphanumeric() || x == '_')) {
        Some("core" | "alloc" | "std") => "Rust standard library".into(),
        Some(c) => c.to_owned(),
        None => r.function.split('(').next().unwrap_or("").to_owned(),
    }
}

/// A group's profile from its report.
fn flat(label: String, report: &str) -> Flat {
    let rows = rows(report);
    let mut components: Vec<(f64, String)> = Vec::new();
    for r in &rows {
        let c = component(r);
        match components.iter_mut().find(|(_, name)| *name == c) {
            Some(entry) => entry.0 += r.share,
            None => components.push((r.share, c)),
        }
    }
    components.sort_by(|a, b| b.0.total_cmp(&a.0));
    components.truncate(8);
    let by_function = rows.iter().take(TOP).map(|r| (r.share, shorten(&if r.kernel { format!("{} (kernel)", r.function) } else { r.function.clone() }))).collect();
    Flat { label, samples: rows.iter().map(|r| r.samples).sum(), by_component: components, by_function }
}

/// A function name short enough for a table cell: generic arguments dropped, at most 90 chars.
fn shorten(name: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for c in name.chars() {
        match c {
            '<' => {
                if depth == 0 {
                    out.push_str("<…>");
                }
                depth += 1;
            }
            '>' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    let out = out.replace('|', "\\|");
    if out.chars().count() > 90 { format!("{}…", out.chars().take(89).collect::<String>()) } else { out }
}

/// The report's Markdown for a profiled case: per group, where its samples went.
pub fn render(case: &str, flats: &[Flat]) -> String {
    let mut s = format!("**Profile: {case}** (`perf record -F {FREQUENCY}` on the processes' pids; self time, share of each group's samples)\n\n");
    for f in flats {
        let objects = f.by_component.iter().map(|(p, o)| format!("{o} {p:.0}%")).collect::<Vec<_>>().join(", ");
        s.push_str(&format!("- {} ({} samples): {objects}\n", f.label, f.samples));
    }
    s.push('\n');
    s.push_str("| group | share | function |\n|---|---|---|\n");
    for f in flats {
        for (p, name) in &f.by_function {
            s.push_str(&format!("| {} | {p:.1}% | `{name}` |\n", f.label));
        }
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_perf_report_tables() {
        let text = "# Samples: 1K of event 'cpu-clock:ppp'\n#\n# Overhead  Samples  Shared Object  Symbol\n#\n    20.50%      205  [kernel.kallsyms]  [k] copy_user_generic\n     3.25%       32  shard-server  [.] <serde_json::de::Deserializer<R> as serde::de::Deserializer>::deserialize_struct\n     2.00%       20  shard-server  [.] serde_json::read::SliceRead::skip_to_escape\n     1.00%       10  libc.so.6  [.] __memmove_avx512\n     1.00%       10  shard-server  [.] _rjem_malloc\n     1.00%       10  etcd  [.] 0x0000000000003783\n     0.50%        5  shard-server  [.] core::slice::memchr::memchr_aligned\n            |\n            ---x\n";
        let f = flat("shards".into(), text);
        assert_eq!(f.samples, 292);
        let comp: Vec<(String, f64)> = f.by_component.iter().map(|(p, c)| (c.clone(), *p)).collect();
        assert_eq!(comp[0], ("kernel".to_owned(), 20.5));
        assert_eq!(comp[1], ("serde_json".to_owned(), 5.25));
        assert!(comp.iter().any(|(c, _)| c == "jemalloc") && comp.iter().any(|(c, _)| c == "etcd (no symbols)") && comp.iter().any(|(c, _)| c == "Rust standard library") && comp.iter().any(|(c, _)| c.starts_with("libc")));
        assert_eq!(f.by_function[0], (20.5, "copy_user_generic (kernel)".to_owned()));
        assert_eq!(f.by_function[1].1, "<…>::deserialize_struct");
        assert_eq!(shorten("a<b<c>>::d<e>"), "a<…>::d<…>");
    }
}
