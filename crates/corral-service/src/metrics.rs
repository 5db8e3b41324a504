//! A small latency histogram keyed by labels, rendered in the Prometheus text format.
//!
//! Hand-rolled on purpose: two metric families do not earn a metrics framework's compile time.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use corral_domain::Provider;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Debug, Clone, Default)]
struct Series {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// The provider-call latency family, fed by `corral_provider::Contracted` for every adapter.
#[derive(Debug)]
pub struct ProviderCalls(Histograms);

impl Default for ProviderCalls {
    fn default() -> Self {
        Self(Histograms::new(
            "corral_provider_call_duration_seconds",
            "Provider calls by provider, call and outcome",
            &["provider", "call", "outcome"],
        ))
    }
}

impl ProviderCalls {
    /// Appends the family in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        self.0.render(out);
    }
}

impl corral_provider::CallObserver for ProviderCalls {
    fn observe(&self, provider: Provider, call: &'static str, took: Duration, ok: bool) {
        let outcome = if ok { "ok" } else { "error" };
        self.0.observe(&[provider.as_str(), call, outcome], took);
    }
}

/// Latency histograms keyed by a tuple of label values.
#[derive(Debug)]
pub struct Histograms {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    series: Mutex<BTreeMap<Vec<String>, Series>>,
}

impl Histograms {
    /// A family `name` with the label names `labels`.
    pub const fn new(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Self {
        Self {
            name,
            help,
            labels,
            series: Mutex::new(BTreeMap::new()),
        }
    }

    /// Records one observation for the label values `values` (same order as the names).
    pub fn observe(&self, values: &[&str], took: Duration) {
        let secs = took.as_secs_f64();
        let key: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
        let mut map = self.series.lock().unwrap_or_else(|p| p.into_inner());
        let s = map.entry(key).or_default();
        for (i, le) in BUCKETS.iter().enumerate() {
            if secs <= *le {
                s.counts[i] += 1;
            }
        }
        s.count += 1;
        s.sum += secs;
    }

    /// The total count of observations with these label values (tests and dashboards).
    pub fn count(&self, values: &[&str]) -> u64 {
        let key: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
        let map = self.series.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&key).map_or(0, |s| s.count)
    }

    /// Appends the family in the Prometheus text exposition format.
    pub fn render(&self, out: &mut String) {
        let map = self.series.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} histogram", self.name);
        for (values, s) in map.iter() {
            let labels: Vec<String> = self
                .labels
                .iter()
                .zip(values)
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let labels = labels.join(",");
            for (i, le) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{}_bucket{{{labels},le=\"{le}\"}} {}",
                    self.name, s.counts[i]
                );
            }
            let _ = writeln!(
                out,
                "{}_bucket{{{labels},le=\"+Inf\"}} {}",
                self.name, s.count
            );
            let _ = writeln!(out, "{}_sum{{{labels}}} {}", self.name, s.sum);
            let _ = writeln!(out, "{}_count{{{labels}}} {}", self.name, s.count);
        }
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_cumulative_buckets_count_and_sum() {
        let h = Histograms::new("x_seconds", "test", &["op", "code"]);
        h.observe(&["get", "ok"], Duration::from_millis(20));
        h.observe(&["get", "ok"], Duration::from_secs(3));
        let mut out = String::new();
        h.render(&mut out);
        assert!(
            out.contains("x_seconds_bucket{op=\"get\",code=\"ok\",le=\"0.025\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{op=\"get\",code=\"ok\",le=\"5\"} 2"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_count{op=\"get\",code=\"ok\"} 2"),
            "{out}"
        );
        assert_eq!(h.count(&["get", "ok"]), 2);
    }
}
