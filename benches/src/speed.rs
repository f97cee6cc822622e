//! The machine's speed, as the report's header gives it: how many times one core encodes and
//! decodes a ~1 KiB ConfigMap as JSON in a second (the servers' own kind of work), measured
//! before the first scenario and after the last. Two runs of the same code on machines whose
//! speed differs are not a repeat of the same conditions (RFC 0017, "Machines differ from
//! session to session"), and `bench compare` says so when their headers differ.

use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Tries per measurement (of one second in a measuring run); the figure is their median.
const TRIES: usize = 5;

/// Where the header puts the figure, for [`read`].
const LABEL: &str = "- **Machine speed**: ";

/// One measurement: the median of [`TRIES`] tries and the least and most of them, in JSON
/// round trips per second on one core.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Speed {
    pub median: f64,
    pub least: f64,
    pub most: f64,
}

fn object() -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "speed-000001", "namespace": "bench", "uid": "0d3b5c1e-6a7f-4c2b-9e1d-2f8a7b6c5d4e", "resourceVersion": "123456",
                        "labels": {"app": "speed", "tier": "bench"}, "creationTimestamp": "2026-12-07T00:00:00Z"},
           "data": {"k": "value-0123456789abcdef".repeat(40)}})
}

/// Round trips done in `window`.
fn round_trips(window: Duration) -> f64 {
    let o = object();
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < window {
        for _ in 0..64 {
            let bytes = serde_json::to_vec(std::hint::black_box(&o)).expect("encode");
            let back: Value = serde_json::from_slice(std::hint::black_box(&bytes)).expect("decode");
            std::hint::black_box(back);
        }
        n += 64;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Measures the speed now, on the calling thread (a blocking second per try: call it where
/// nothing else of the benchmark runs).
pub fn measure(window: Duration) -> Speed {
    let mut tries: Vec<f64> = (0..TRIES).map(|_| round_trips(window)).collect();
    tries.sort_by(f64::total_cmp);
    Speed { median: tries[TRIES / 2], least: tries[0], most: tries[TRIES - 1] }
}

/// The header's line for the speed before the first scenario and after the last.
pub fn header_line(before: Speed, after: Speed, window: Duration) -> String {
    format!(
        "{LABEL}{:.0} JSON round trips (encode and decode) of a ~1 KiB ConfigMap per second on one core before the first scenario ({:.0} to {:.0}), {:.0} after the last ({:.0} to {:.0}): each the median of {TRIES} tries of {} ms, with the least and most. Two runs of the same code are a repeat on like machines only when these agree (RFC 0017).\n",
        before.median,
        before.least,
        before.most,
        after.median,
        after.least,
        after.most,
        window.as_millis()
    )
}

/// The speed before the first scenario from a report's header, if it has one.
pub fn read(report: &str) -> Option<f64> {
    let line = report.lines().find_map(|l| l.strip_prefix(LABEL))?;
    line.split_whitespace().next()?.parse().ok()
}

/// What `bench compare` says of the two runs' machines: their speeds and whether they differ by
/// more than `tolerance` (a fraction of the slower).
pub fn compare_line(old: &str, new: &str, tolerance: f64) -> String {
    match (read(old), read(new)) {
        (Some(a), Some(b)) => {
            let apart = (a.max(b) / a.min(b).max(1.0)) - 1.0;
            if apart > tolerance {
                format!("**The machines differ**: {a:.0} and {b:.0} JSON round trips per second, {:.0}% apart (more than {:.0}%): these runs are not a repeat under the same conditions, whatever their verdicts.", apart * 100.0, tolerance * 100.0)
            } else {
                format!("The machines' speeds: {a:.0} and {b:.0} JSON round trips per second, {:.0}% apart (within {:.0}%).", apart * 100.0, tolerance * 100.0)
            }
        }
        _ => "A report does not give its machine's speed (reports before it was measured): whether the machines were alike is unknown.".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_speed_is_read_back_from_the_header_and_compared() {
        let s = |m: f64| Speed { median: m, least: m - 100.0, most: m + 100.0 };
        let a = format!("# Benchmark results\n\n{}", header_line(s(40_000.0), s(39_000.0), Duration::from_secs(1)));
        assert_eq!(read(&a), Some(40_000.0));
        assert!(a.contains("5 tries of 1000 ms"), "{a}");
        let b = format!("# Benchmark results\n\n{}", header_line(s(20_000.0), s(20_000.0), Duration::from_secs(1)));
        assert!(compare_line(&a, &b, 0.1).starts_with("**The machines differ**: 40000 and 20000"), "{}", compare_line(&a, &b, 0.1));
        let c = header_line(s(41_000.0), s(41_000.0), Duration::from_secs(1));
        assert!(compare_line(&a, &c, 0.1).starts_with("The machines' speeds: 40000 and 41000 JSON round trips per second, 2% apart"), "{}", compare_line(&a, &c, 0.1));
        assert!(compare_line("no header", &a, 0.1).contains("unknown"));
    }

    #[test]
    fn a_measurement_counts_round_trips_of_a_kibibyte_object() {
        // The header calls it a ~1 KiB ConfigMap.
        let len = serde_json::to_vec(&object()).expect("encode").len();
        assert!((900..1300).contains(&len), "{len} bytes");
        let m = measure(Duration::from_millis(20));
        assert!(m.least > 0.0, "{m:?}");
    }
}
