//! Upstream's `apiserver_flowcontrol_*` metrics, with upstream's names and labels.

use crate::classify::Classification;
use crate::model::{Limits, Refusal};
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};
use std::time::Duration;

/// The gate's metrics.
#[derive(Clone)]
pub struct FlowMetrics {
    rejected: IntCounterVec,
    dispatched: IntCounterVec,
    inqueue: IntGaugeVec,
    executing: IntGaugeVec,
    executing_seats: IntGaugeVec,
    wait: HistogramVec,
    seats: HistogramVec,
    nominal: IntGaugeVec,
    concurrency_limit: IntGaugeVec,
    lower: IntGaugeVec,
    upper: IntGaugeVec,
}

const BY_FLOW: [&str; 2] = ["priority_level", "flow_schema"];

impl FlowMetrics {
    /// Registers them in `registry` (once per registry: a second gate on one registry reuses
    /// nothing and registers nothing twice).
    pub fn register(registry: &Registry) -> Self {
        let counter = |name: &str, help: &str, labels: &[&str]| IntCounterVec::new(Opts::new(name, help), labels).expect("metric");
        let gauge = |name: &str, help: &str, labels: &[&str]| IntGaugeVec::new(Opts::new(name, help), labels).expect("metric");
        let m = Self {
            rejected: counter("apiserver_flowcontrol_rejected_requests_total", "Number of requests rejected by API Priority and Fairness subsystem", &["priority_level", "flow_schema", "reason"]),
            dispatched: counter("apiserver_flowcontrol_dispatched_requests_total", "Number of requests executed by API Priority and Fairness subsystem", &BY_FLOW),
            inqueue: gauge("apiserver_flowcontrol_current_inqueue_requests", "Number of requests currently pending in queues of the API Priority and Fairness subsystem", &BY_FLOW),
            executing: gauge("apiserver_flowcontrol_current_executing_requests", "Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the API Priority and Fairness subsystem", &BY_FLOW),
            executing_seats: gauge("apiserver_flowcontrol_current_executing_seats", "Concurrency (number of seats) occupied by the currently executing (initial stage for a WATCH, any stage otherwise) requests in the API Priority and Fairness subsystem", &BY_FLOW),
            wait: HistogramVec::new(
                HistogramOpts::new("apiserver_flowcontrol_request_wait_duration_seconds", "Length of time a request spent waiting in its queue").buckets(vec![0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0]),
                &["priority_level", "flow_schema", "execute"],
            )
            .expect("metric"),
            seats: HistogramVec::new(HistogramOpts::new("apiserver_flowcontrol_work_estimated_seats", "Number of estimated seats (maximum of initial and final seats) associated with requests in API Priority and Fairness").buckets(vec![1.0, 2.0, 4.0, 10.0]), &BY_FLOW).expect("metric"),
            nominal: gauge("apiserver_flowcontrol_nominal_limit_seats", "Nominal number of execution seats configured for each priority level", &["priority_level"]),
            concurrency_limit: gauge("apiserver_flowcontrol_request_concurrency_limit", "Nominal number of execution seats configured for each priority level", &["priority_level"]),
            lower: gauge("apiserver_flowcontrol_lower_limit_seats", "Configured lower bound on number of execution seats available to each priority level", &["priority_level"]),
            upper: gauge("apiserver_flowcontrol_upper_limit_seats", "Configured upper bound on number of execution seats available to each priority level", &["priority_level"]),
        };
        let all: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(m.rejected.clone()),
            Box::new(m.dispatched.clone()),
            Box::new(m.inqueue.clone()),
            Box::new(m.executing.clone()),
            Box::new(m.executing_seats.clone()),
            Box::new(m.wait.clone()),
            Box::new(m.seats.clone()),
            Box::new(m.nominal.clone()),
            Box::new(m.concurrency_limit.clone()),
            Box::new(m.lower.clone()),
            Box::new(m.upper.clone()),
        ];
        for c in all {
            // Already registered (a second gate in one process's registry): the first stays.
            let _ = registry.register(c);
        }
        m
    }

    fn flow(c: &Classification) -> [&str; 2] {
        [&c.level, &c.schema]
    }

    pub(crate) fn queued(&self, c: &Classification) {
        self.inqueue.with_label_values(&Self::flow(c)).inc();
    }

    pub(crate) fn dequeued(&self, c: &Classification) {
        self.inqueue.with_label_values(&Self::flow(c)).dec();
    }

    pub(crate) fn rejected(&self, c: &Classification, why: Refusal, waited: Option<Duration>) {
        self.rejected.with_label_values(&[&c.level, &c.schema, why.label()]).inc();
        if let Some(w) = waited {
            self.wait.with_label_values(&[&c.level, &c.schema, "false"]).observe(w.as_secs_f64());
        }
    }

    /// A request starts with `width` seats (0: exempt, holding none) after waiting `waited`.
    pub(crate) fn dispatched(&self, c: &Classification, width: u32, waited: Option<Duration>) {
        self.dispatched.with_label_values(&Self::flow(c)).inc();
        self.wait.with_label_values(&[&c.level, &c.schema, "true"]).observe(waited.unwrap_or_default().as_secs_f64());
        if width > 0 {
            self.executing.with_label_values(&Self::flow(c)).inc();
            self.executing_seats.with_label_values(&Self::flow(c)).add(width as i64);
            self.seats.with_label_values(&Self::flow(c)).observe(width as f64);
        }
    }

    pub(crate) fn finished(&self, c: &Classification, width: u32) {
        self.executing.with_label_values(&Self::flow(c)).dec();
        self.executing_seats.with_label_values(&Self::flow(c)).sub(width as i64);
    }

    pub(crate) fn limits(&self, level: &str, l: &Limits, exempt: bool) {
        self.nominal.with_label_values(&[level]).set(l.nominal as i64);
        self.concurrency_limit.with_label_values(&[level]).set(l.nominal as i64);
        self.lower.with_label_values(&[level]).set(if exempt { 0 } else { l.guaranteed() as i64 });
        self.upper.with_label_values(&[level]).set(l.ceiling().min(i64::MAX as u64) as i64);
    }
}
