//! The configuration a gate enforces, built from the FlowSchema and PriorityLevelConfiguration
//! objects (RFC 0013, "Configuration"): each level's seats by upstream's formulas over the
//! server's total (`NominalCL = ceil(total × shares / Σ shares)`, `LendableCL` and
//! `BorrowingCL` rounded from their percentages), the schemas in matching order (lowest
//! `matchingPrecedence`, then name), and which schemas are dangling (their level does not
//! exist: upstream skips them and marks them with the `Dangling` condition).
//!
//! The mandatory `exempt` and `catch-all` objects are always in force: when the store has not
//! got them (yet), their built-in values stand in, as upstream's do.

use crate::model::{Limits, Queuing};
use serde_json::Value;
use shardplane_apimachinery::kind_rules::flowcontrol as bootstrap;

/// How requests of one schema split into flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distinguisher {
    ByUser,
    ByNamespace,
    /// One flow for the whole schema.
    None,
}

/// A priority level as configured.
#[derive(Clone, Debug, PartialEq)]
pub struct Level {
    pub name: String,
    pub uid: String,
    /// `type: Exempt`: never queued, never limited.
    pub exempt: bool,
    /// Its seats (an exempt level's lend to others and limit nothing).
    pub limits: Limits,
}

/// A FlowSchema as configured.
#[derive(Clone, Debug, PartialEq)]
pub struct Schema {
    pub name: String,
    pub uid: String,
    pub level: String,
    pub precedence: i64,
    pub distinguisher: Distinguisher,
    /// `spec.rules`, matched by [`crate::classify`].
    pub rules: Vec<Value>,
}

/// Everything a gate decides from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    pub levels: Vec<Level>,
    /// In matching order, dangling ones left out.
    pub schemas: Vec<Schema>,
    /// The schemas naming a level that does not exist.
    pub dangling: Vec<String>,
}

fn text(v: &Value, pointer: &str) -> String {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("").to_owned()
}

fn number(v: &Value, pointer: &str) -> Option<u64> {
    v.pointer(pointer).and_then(Value::as_u64)
}

/// `ceil(a × b / c)` in integers (0 when `c` is 0).
fn ceil_share(a: u64, b: u64, c: u64) -> u64 {
    if c == 0 { 0 } else { (a * b).div_ceil(c) }
}

/// `round(n × pct / 100)`, halves away from zero as Go's `math.Round`.
fn round_percent(n: u64, pct: u64) -> u64 {
    (n * pct * 2 + 100) / 200
}

impl Config {
    /// The configuration `levels` and `schemas` (objects as stored) give a server of
    /// `server_seats` seats in all (`--max-requests-inflight` + `--max-mutating-requests-inflight`).
    pub fn build(levels: &[Value], schemas: &[Value], server_seats: u32) -> Config {
        let mut level_objects: Vec<Value> = levels.to_vec();
        let mut schema_objects: Vec<Value> = schemas.to_vec();
        // The mandatory objects stand in for themselves until the store has them.
        let name_of = |o: &Value| text(o, "/metadata/name");
        for mandatory in bootstrap::priority_levels().into_iter().take(2) {
            if !level_objects.iter().any(|o| name_of(o) == name_of(&mandatory)) {
                level_objects.push(mandatory);
            }
        }
        for mandatory in bootstrap::flow_schemas().into_iter().take(2) {
            if !schema_objects.iter().any(|o| name_of(o) == name_of(&mandatory)) {
                schema_objects.push(mandatory);
            }
        }
        let limited = |o: &Value| if text(o, "/spec/type") == "Exempt" { "/spec/exempt" } else { "/spec/limited" };
        let shares = |o: &Value| number(o, &format!("{}/nominalConcurrencyShares", limited(o))).unwrap_or(if text(o, "/spec/type") == "Exempt" { 0 } else { 30 });
        let sum: u64 = level_objects.iter().map(shares).sum();
        let mut levels: Vec<Level> = level_objects
            .iter()
            .map(|o| {
                let at = limited(o);
                let exempt = text(o, "/spec/type") == "Exempt";
                let nominal = ceil_share(server_seats as u64, shares(o), sum);
                let lendable = round_percent(nominal, number(o, &format!("{at}/lendablePercent")).unwrap_or(0).min(100));
                let borrowing = if exempt { Some(0) } else { number(o, &format!("{at}/borrowingLimitPercent")).map(|p| round_percent(nominal, p) as u32) };
                let queuing = (!exempt && text(o, "/spec/limited/limitResponse/type") == "Queue").then(|| {
                    let q = |f: &str, d: u64| number(o, &format!("/spec/limited/limitResponse/queuing/{f}")).unwrap_or(d).min(u32::MAX as u64) as u32;
                    let queues = q("queues", 64).max(1);
                    Queuing { queues, hand_size: q("handSize", 8).clamp(1, queues), queue_length_limit: q("queueLengthLimit", 50) }
                });
                Level { name: name_of(o), uid: text(o, "/metadata/uid"), exempt, limits: Limits { nominal: nominal as u32, lendable: lendable as u32, borrowing, queuing } }
            })
            .collect();
        levels.sort_by(|a, b| a.name.cmp(&b.name));
        let mut out = Config { levels, ..Config::default() };
        for o in &schema_objects {
            let level = text(o, "/spec/priorityLevelConfiguration/name");
            if !out.levels.iter().any(|l| l.name == level) {
                out.dangling.push(name_of(o));
                continue;
            }
            let distinguisher = match text(o, "/spec/distinguisherMethod/type").as_str() {
                "ByUser" => Distinguisher::ByUser,
                "ByNamespace" => Distinguisher::ByNamespace,
                _ => Distinguisher::None,
            };
            let rules = o.pointer("/spec/rules").and_then(Value::as_array).cloned().unwrap_or_default();
            let precedence = o.pointer("/spec/matchingPrecedence").and_then(Value::as_i64).unwrap_or(1000);
            out.schemas.push(Schema { name: name_of(o), uid: text(o, "/metadata/uid"), level, precedence, distinguisher, rules });
        }
        out.schemas.sort_by(|a, b| (a.precedence, &a.name).cmp(&(b.precedence, &b.name)));
        out.dangling.sort();
        out
    }

    /// The level named `name`.
    pub fn level(&self, name: &str) -> Option<&Level> {
        self.levels.iter().find(|l| l.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults(seats: u32) -> Config {
        Config::build(&bootstrap::priority_levels(), &bootstrap::flow_schemas(), seats)
    }

    #[test]
    fn upstreams_defaults_give_upstreams_seats() {
        // 600 seats over shares 0+5+40+30+10+40+100+20 = 245, as kube-apiserver computes them
        // (`apiserver_flowcontrol_nominal_limit_seats` on a default server).
        let c = defaults(600);
        let seats = |n: &str| c.level(n).unwrap().limits;
        assert_eq!(seats("catch-all").nominal, 13);
        assert_eq!(seats("workload-low").nominal, 245);
        assert_eq!(seats("workload-low").lendable, 221);
        assert_eq!(seats("global-default").nominal, 49);
        assert_eq!(seats("global-default").lendable, 25);
        assert_eq!(seats("node-high").nominal, 98);
        assert_eq!(seats("leader-election").nominal, 25);
        assert_eq!(seats("exempt").nominal, 0);
        assert!(c.level("exempt").unwrap().exempt);
        assert!(seats("catch-all").queuing.is_none(), "catch-all rejects rather than queues");
        assert_eq!(seats("workload-high").queuing, Some(Queuing { queues: 128, hand_size: 6, queue_length_limit: 50 }));
    }

    #[test]
    fn schemas_go_by_precedence_then_name_and_dangling_ones_are_set_aside() {
        let mut schemas = bootstrap::flow_schemas();
        schemas.push(serde_json::json!({"metadata": {"name": "lost"}, "spec": {"priorityLevelConfiguration": {"name": "nowhere"}, "matchingPrecedence": 5, "rules": []}}));
        schemas.push(serde_json::json!({"metadata": {"name": "a-tie"}, "spec": {"priorityLevelConfiguration": {"name": "system"}, "matchingPrecedence": 500, "rules": []}}));
        let c = Config::build(&bootstrap::priority_levels(), &schemas, 600);
        let order: Vec<&str> = c.schemas.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(&order[..3], ["exempt", "probes", "system-leader-election"]);
        let tie = order.iter().position(|n| *n == "a-tie").unwrap();
        assert_eq!(order[tie + 1], "system-nodes");
        assert_eq!(c.dangling, ["lost"]);
        assert_eq!(order.last(), Some(&"catch-all"));
    }

    #[test]
    fn the_mandatory_objects_stand_in_until_the_store_has_them() {
        let c = Config::build(&[], &[], 600);
        assert_eq!(c.levels.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(), ["catch-all", "exempt"]);
        // catch-all holds every share: all 600 seats.
        assert_eq!(c.level("catch-all").unwrap().limits.nominal, 600);
        assert_eq!(c.schemas.len(), 2);
    }
}
