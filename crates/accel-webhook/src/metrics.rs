//! The webhook's Prometheus metrics: reviews by endpoint and outcome, denials by rule, and a
//! latency histogram, rendered in the text exposition format.
//!
//! This module owns the counters and their rendering; it uses atomics only, so recording never
//! blocks a review.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use accel_core::admission::Rule;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// Which webhook a review came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Mutate,
    Validate,
}

impl Endpoint {
    fn index(self) -> usize {
        match self {
            Endpoint::Mutate => 0,
            Endpoint::Validate => 1,
        }
    }
    fn label(index: usize) -> &'static str {
        if index == 0 { "mutate" } else { "validate" }
    }
}

/// How a review ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// In scope and allowed.
    Allowed,
    /// In scope and denied.
    Denied,
    /// Out of scope (no queue label, not a Pod, not a create): passed untouched.
    Skipped,
    /// The request could not be read: answered with an HTTP error.
    Error,
}

const OUTCOMES: [(Outcome, &str); 4] = [
    (Outcome::Allowed, "allowed"),
    (Outcome::Denied, "denied"),
    (Outcome::Skipped, "skipped"),
    (Outcome::Error, "error"),
];

#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

/// All the webhook's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    reviews: [[AtomicU64; OUTCOMES.len()]; 2],
    denials: [AtomicU64; Rule::ALL.len()],
    latency: [Histogram; 2],
}

impl Metrics {
    /// Count one review and its latency.
    pub fn record(&self, endpoint: Endpoint, outcome: Outcome, rules: &[Rule], elapsed: Duration) {
        let e = endpoint.index();
        if let Some(i) = OUTCOMES.iter().position(|(o, _)| *o == outcome) {
            self.reviews[e][i].fetch_add(1, Ordering::Relaxed);
        }
        let mut seen: Vec<Rule> = Vec::new();
        for rule in rules {
            if seen.contains(rule) {
                continue;
            }
            seen.push(*rule);
            if let Some(i) = Rule::ALL.iter().position(|r| r == rule) {
                self.denials[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        let h = &self.latency[e];
        let secs = elapsed.as_secs_f64();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                h.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        h.count.fetch_add(1, Ordering::Relaxed);
        h.sum_nanos.fetch_add(
            u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP device_manager_webhook_reviews_total AdmissionReviews answered, by webhook and outcome.\n");
        out.push_str("# TYPE device_manager_webhook_reviews_total counter\n");
        for (e, row) in self.reviews.iter().enumerate() {
            for (i, (_, label)) in OUTCOMES.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "device_manager_webhook_reviews_total{{webhook=\"{}\",outcome=\"{label}\"}} {}",
                    Endpoint::label(e),
                    row[i].load(Ordering::Relaxed)
                );
            }
        }
        out.push_str("# HELP device_manager_webhook_denials_total Denied Pods, by the rule each violation broke.\n");
        out.push_str("# TYPE device_manager_webhook_denials_total counter\n");
        for (i, rule) in Rule::ALL.iter().enumerate() {
            let _ = writeln!(
                out,
                "device_manager_webhook_denials_total{{rule=\"{}\"}} {}",
                rule.label(),
                self.denials[i].load(Ordering::Relaxed)
            );
        }
        out.push_str("# HELP device_manager_webhook_review_duration_seconds Time to answer one AdmissionReview, body read included.\n");
        out.push_str("# TYPE device_manager_webhook_review_duration_seconds histogram\n");
        for (e, h) in self.latency.iter().enumerate() {
            let webhook = Endpoint::label(e);
            for (i, bound) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "device_manager_webhook_review_duration_seconds_bucket{{webhook=\"{webhook}\",le=\"{bound}\"}} {}",
                    h.buckets[i].load(Ordering::Relaxed)
                );
            }
            let count = h.count.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "device_manager_webhook_review_duration_seconds_bucket{{webhook=\"{webhook}\",le=\"+Inf\"}} {count}"
            );
            let sum = h.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(
                out,
                "device_manager_webhook_review_duration_seconds_sum{{webhook=\"{webhook}\"}} {sum}"
            );
            let _ = writeln!(
                out,
                "device_manager_webhook_review_duration_seconds_count{{webhook=\"{webhook}\"}} {count}"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_reviews_denials_and_latency() {
        let m = Metrics::default();
        m.record(
            Endpoint::Validate,
            Outcome::Denied,
            &[Rule::OneFamily, Rule::OneFamily, Rule::NoSidecarClaim],
            Duration::from_micros(300),
        );
        m.record(
            Endpoint::Mutate,
            Outcome::Allowed,
            &[],
            Duration::from_millis(3),
        );
        let text = m.render();
        assert!(text.contains(
            "device_manager_webhook_reviews_total{webhook=\"validate\",outcome=\"denied\"} 1\n"
        ));
        assert!(text.contains(
            "device_manager_webhook_reviews_total{webhook=\"mutate\",outcome=\"allowed\"} 1\n"
        ));
        assert!(
            text.contains("device_manager_webhook_denials_total{rule=\"rule1\"} 1\n"),
            "one Pod counts once per rule"
        );
        assert!(text.contains("device_manager_webhook_denials_total{rule=\"rule7\"} 1\n"));
        assert!(text.contains("device_manager_webhook_review_duration_seconds_bucket{webhook=\"validate\",le=\"0.00025\"} 0\n"));
        assert!(text.contains("device_manager_webhook_review_duration_seconds_bucket{webhook=\"validate\",le=\"0.0005\"} 1\n"));
        assert!(text.contains("device_manager_webhook_review_duration_seconds_bucket{webhook=\"mutate\",le=\"0.002\"} 0\n"));
        assert!(text.contains(
            "device_manager_webhook_review_duration_seconds_count{webhook=\"mutate\"} 1\n"
        ));
    }
}
