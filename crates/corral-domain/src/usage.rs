//! Usage and cost estimates: a sandbox's running time derived from its recorded lifecycle
//! (the statuses Corral observed, in order), split by UTC day, and priced with the provider's
//! published per-unit rates ([`PricingRate`]) for the size its evidence documents.
//!
//! Everything here is an **estimate**: Corral knows when it saw a sandbox running, not what
//! the provider metered. Pure computation, no clock: the caller passes `now`.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{Duration, NaiveDate, NaiveTime};
use serde::{Deserialize, Serialize};

use crate::capabilities::{PricingEvidence, RateUnit};
use crate::id::SandboxId;
use crate::provider::Provider;
use crate::status::SandboxStatus;
use crate::{Timestamp, wire_time};

pub use crate::money::Money;

/// A status Corral recorded for a sandbox at a moment: `sandbox.created` (with its status),
/// `sandbox.status_changed` (the new status) and `sandbox.deleted` (`deleted`), in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusMark {
    /// When the status was observed.
    pub at: Timestamp,
    /// The status from then on.
    pub status: SandboxStatus,
}

/// The half-open spans `[start, end)` in which the sandbox was running: from each mark that
/// makes it `running` to the next that does not, or to `now` if it still is. Marks are taken
/// in the order given (the log's order); a mark earlier than the span's start (clocks of two
/// replicas) ends the span without a negative length. A sandbox that never became `running`
/// has none.
pub fn running_spans(marks: &[StatusMark], now: Timestamp) -> Vec<(Timestamp, Timestamp)> {
    let mut spans = Vec::new();
    let mut started: Option<Timestamp> = None;
    for mark in marks {
        match (started, mark.status == SandboxStatus::Running) {
            (None, true) => started = Some(mark.at),
            (Some(start), false) => {
                if mark.at > start {
                    spans.push((start, mark.at));
                }
                started = None;
            }
            _ => {}
        }
    }
    if let Some(start) = started
        && now > start
    {
        spans.push((start, now));
    }
    spans
}

/// The running time of `spans` within `[from, to)`, in milliseconds per UTC day.
pub fn split_by_day(
    spans: &[(Timestamp, Timestamp)],
    from: Timestamp,
    to: Timestamp,
) -> BTreeMap<NaiveDate, u64> {
    let mut days = BTreeMap::new();
    for &(start, end) in spans {
        let (mut start, end) = (start.max(from), end.min(to));
        while start < end {
            let day = start.date_naive();
            let next_midnight = (day + Duration::days(1)).and_time(NaiveTime::MIN).and_utc();
            let piece_end = end.min(next_midnight);
            let ms = (piece_end - start).num_milliseconds().max(0) as u64;
            *days.entry(day).or_insert(0) += ms;
            start = piece_end;
        }
    }
    days
}

/// How much of a unit one running second of a sandbox of this size uses, as a fraction
/// `numerator / denominator`, and the unit's length in seconds. `None`: the unit is not
/// applied to running time (storage, creations) or the size it needs is unknown.
fn per_running_time(unit: RateUnit, evidence: &PricingEvidence) -> Option<(i128, i128, i128)> {
    let size = evidence.size.as_ref();
    let vcpus = || size.and_then(|s| s.vcpus).map(i128::from);
    let mib = || size.and_then(|s| s.memory_mib).map(i128::from);
    const GB: i128 = 1_000_000_000;
    const MIB: i128 = 1_048_576;
    match unit {
        RateUnit::VcpuSecond => Some((vcpus()?, 1, 1)),
        RateUnit::VcpuHour => Some((vcpus()?, 1, 3600)),
        RateUnit::PhysicalCoreSecond => Some((vcpus()?, 2, 1)),
        RateUnit::GibMemorySecond => Some((mib()?, 1024, 1)),
        RateUnit::GibMemoryHour => Some((mib()?, 1024, 3600)),
        RateUnit::GbMemorySecond => Some((mib()? * MIB, GB, 1)),
        RateUnit::GbMemoryHour => Some((mib()? * MIB, GB, 3600)),
        RateUnit::SandboxSecond => Some((1, 1, 1)),
        RateUnit::SandboxHour => Some((1, 1, 3600)),
        RateUnit::GbStorageSecond
        | RateUnit::GibStorageHour
        | RateUnit::GbStorageHour
        | RateUnit::GbStorageMonth
        | RateUnit::SandboxCreation => None,
    }
}

/// An estimated cost: amounts per currency, and the rates that could not be applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Estimate {
    /// Total per currency code.
    pub amounts: BTreeMap<String, Money>,
    /// Units of published rates left out: not charged by running time (storage, creations),
    /// or charged per resource whose size the evidence does not know.
    pub not_estimated: BTreeSet<RateUnit>,
}

impl Estimate {
    /// The amounts as wire values.
    pub fn costs(&self) -> Vec<CostAmount> {
        self.amounts
            .iter()
            .map(|(currency, m)| CostAmount {
                currency: currency.clone(),
                amount: m.to_decimal(),
            })
            .collect()
    }
}

/// The estimated cost of `running_ms` milliseconds of running time on a provider with this
/// `evidence`: each time-based rate × the time × the size it applies to, rounded half up to
/// 10^-12 per rate. Rates whose figure does not parse (never, for checked capabilities) or
/// whose product would overflow are listed as not estimated.
pub fn estimate(evidence: &PricingEvidence, running_ms: u64) -> Estimate {
    let mut out = Estimate::default();
    for rate in &evidence.rates {
        let (Some(price), Some((num, den, period))) = (
            Money::parse(&rate.rate),
            per_running_time(rate.unit, evidence),
        ) else {
            out.not_estimated.insert(rate.unit);
            continue;
        };
        // picos × ms × num / (den × period × 1000), rounded half up.
        let product = price
            .picos()
            .checked_mul(i128::from(running_ms))
            .and_then(|p| p.checked_mul(num));
        let divisor = den * period * 1000;
        let Some(product) = product else {
            out.not_estimated.insert(rate.unit);
            continue;
        };
        let cost = (product + divisor / 2) / divisor;
        let total = out.amounts.entry(rate.currency.clone()).or_default();
        total.add_picos(cost);
    }
    out
}

/// One sandbox's recorded lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxLifecycle {
    /// The sandbox.
    pub id: SandboxId,
    /// Its provider.
    pub provider: Provider,
    /// Its statuses, in the log's order.
    pub marks: Vec<StatusMark>,
}

/// An amount in one currency, as a decimal string (see [`PricingRate`](crate::PricingRate)
/// for why not a number).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct CostAmount {
    /// ISO 4217 currency code.
    pub currency: String,
    /// The amount, a decimal with at most 12 places.
    #[cfg_attr(feature = "utoipa", schema(example = "0.0504"))]
    pub amount: String,
}

/// What every usage answer says about itself.
pub const ESTIMATE_BASIS: &str = "Estimates, not a bill: running time is the time Corral \
recorded each sandbox as running (from its lifecycle events, from a running status until the \
next other status, or now), priced with the provider's published per-unit rates for the size \
its pricing evidence documents. Rates that cannot be applied are listed in notEstimated.";

/// One provider's usage on one UTC day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct UsageRow {
    /// The UTC day, `YYYY-MM-DD`.
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = Date))]
    pub day: NaiveDate,
    /// The provider.
    pub provider: Provider,
    /// Seconds of running time that day, summed over sandboxes (rounded down).
    pub running_seconds: u64,
    /// Sandboxes that ran that day.
    pub sandboxes: u64,
    /// The estimated cost per currency (empty where the provider publishes no rate that
    /// applies, e.g. `local`, which costs nothing).
    pub estimated_cost: Vec<CostAmount>,
    /// Units of published rates left out of the estimate.
    pub not_estimated: Vec<RateUnit>,
    /// The rates and size the estimate rests on; absent for a provider not configured now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<PricingEvidence>,
}

/// `GET /v1/usage`: a project's estimated usage per provider and UTC day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct UsageReport {
    /// Start of the range (inclusive).
    #[serde(with = "wire_time")]
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub from: Timestamp,
    /// End of the range (exclusive; at most now).
    #[serde(with = "wire_time")]
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub to: Timestamp,
    /// How the figures were made: they are estimates.
    pub basis: String,
    /// One row per provider and day with running time, by day then provider.
    pub rows: Vec<UsageRow>,
}

/// `GET /v1/sandboxes/{id}/usage`: one sandbox's estimated usage over its whole recorded
/// lifecycle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SandboxUsage {
    /// The sandbox.
    pub sandbox_id: SandboxId,
    /// Its provider.
    pub provider: Provider,
    /// Seconds it was recorded running (rounded down).
    pub running_seconds: u64,
    /// The estimated cost so far per currency.
    pub estimated_cost: Vec<CostAmount>,
    /// Units of published rates left out of the estimate.
    pub not_estimated: Vec<RateUnit>,
    /// The rates and size the estimate rests on; absent for a provider not configured now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<PricingEvidence>,
    /// How the figures were made: they are estimates.
    pub basis: String,
}

/// One sandbox's usage over its whole recorded lifecycle, up to `now`.
pub fn sandbox_usage(
    sandbox: &SandboxLifecycle,
    evidence: Option<&PricingEvidence>,
    now: Timestamp,
) -> SandboxUsage {
    let ms: u64 = running_spans(&sandbox.marks, now)
        .iter()
        .map(|(s, e)| (*e - *s).num_milliseconds().max(0) as u64)
        .sum();
    let est = evidence.map(|e| estimate(e, ms)).unwrap_or_default();
    SandboxUsage {
        sandbox_id: sandbox.id,
        provider: sandbox.provider,
        running_seconds: ms / 1000,
        estimated_cost: est.costs(),
        not_estimated: est.not_estimated.into_iter().collect(),
        evidence: evidence.cloned(),
        basis: ESTIMATE_BASIS.to_owned(),
    }
}

/// The rollup of `sandboxes` per provider and UTC day over `[from, to)`, with running
/// sandboxes counted up to `now`; `evidence` gives each provider's pricing evidence.
pub fn rollup<'e>(
    sandboxes: &[SandboxLifecycle],
    evidence: impl Fn(Provider) -> Option<&'e PricingEvidence>,
    from: Timestamp,
    to: Timestamp,
    now: Timestamp,
) -> UsageReport {
    // (day, provider) -> (milliseconds, sandboxes)
    let mut cells: BTreeMap<(NaiveDate, &'static str), (Provider, u64, u64)> = BTreeMap::new();
    for sandbox in sandboxes {
        let spans = running_spans(&sandbox.marks, now);
        for (day, ms) in split_by_day(&spans, from, to) {
            if ms == 0 {
                continue;
            }
            let cell =
                cells
                    .entry((day, sandbox.provider.as_str()))
                    .or_insert((sandbox.provider, 0, 0));
            cell.1 += ms;
            cell.2 += 1;
        }
    }
    let rows = cells
        .into_iter()
        .map(|((day, _), (provider, ms, count))| {
            let ev = evidence(provider);
            let est = ev.map(|e| estimate(e, ms)).unwrap_or_default();
            UsageRow {
                day,
                provider,
                running_seconds: ms / 1000,
                sandboxes: count,
                estimated_cost: est.costs(),
                not_estimated: est.not_estimated.into_iter().collect(),
                evidence: ev.cloned(),
            }
        })
        .collect();
    UsageReport {
        from,
        to,
        basis: ESTIMATE_BASIS.to_owned(),
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::{PricingRate, SandboxSize};
    use chrono::TimeZone;

    fn t(d: u32, h: u32, m: u32, s: u32) -> Timestamp {
        chrono::Utc.with_ymd_and_hms(2026, 11, d, h, m, s).unwrap()
    }

    fn mark(at: Timestamp, status: SandboxStatus) -> StatusMark {
        StatusMark { at, status }
    }

    fn rate(unit: RateUnit, rate: &str) -> PricingRate {
        PricingRate {
            unit,
            rate: rate.into(),
            currency: "USD".into(),
            plan: "pay as you go".into(),
            source_url: "https://example.com/pricing".into(),
            read_on: "2026-11-27".into(),
            note: None,
        }
    }

    fn evidence(rates: Vec<PricingRate>, vcpus: Option<u32>, mib: Option<u64>) -> PricingEvidence {
        PricingEvidence {
            summary: "test".into(),
            source_url: "https://example.com/pricing".into(),
            read_on: "2026-11-27".into(),
            rates,
            size: Some(SandboxSize {
                vcpus,
                memory_mib: mib,
                note: "test".into(),
            }),
        }
    }

    #[test]
    fn money_parses_exact_decimals_and_refuses_the_rest() {
        assert_eq!(Money::parse("0.000014").unwrap().picos(), 14_000_000);
        assert_eq!(Money::parse("5").unwrap().picos(), 5 * crate::money::SCALE);
        assert_eq!(Money::parse("0.000000000001").unwrap().picos(), 1);
        for bad in [
            "",
            ".5",
            "5.",
            "-1",
            "+1",
            "1e-5",
            "0.0000000000001",
            "1234567",
            "1,5",
            " 1",
        ] {
            assert_eq!(Money::parse(bad), None, "{bad:?}");
        }
        assert_eq!(Money::parse("0.0504").unwrap().to_decimal(), "0.0504");
        assert_eq!(Money::parse("12").unwrap().to_decimal(), "12");
        assert_eq!(Money::default().to_decimal(), "0");
    }

    #[test]
    fn a_still_running_sandbox_runs_until_now() {
        let marks = [
            mark(t(1, 10, 0, 0), SandboxStatus::Creating),
            mark(t(1, 10, 0, 5), SandboxStatus::Running),
        ];
        let spans = running_spans(&marks, t(1, 11, 0, 5));
        assert_eq!(spans, vec![(t(1, 10, 0, 5), t(1, 11, 0, 5))]);
    }

    #[test]
    fn a_deleted_sandbox_stops_at_its_deletion_and_pauses_do_not_count() {
        let marks = [
            mark(t(1, 10, 0, 0), SandboxStatus::Running),
            mark(t(1, 10, 10, 0), SandboxStatus::Paused),
            mark(t(1, 10, 20, 0), SandboxStatus::Running),
            mark(t(1, 10, 25, 0), SandboxStatus::Deleted),
        ];
        let spans = running_spans(&marks, t(2, 0, 0, 0));
        assert_eq!(
            spans,
            vec![
                (t(1, 10, 0, 0), t(1, 10, 10, 0)),
                (t(1, 10, 20, 0), t(1, 10, 25, 0))
            ]
        );
        let days = split_by_day(&spans, t(1, 0, 0, 0), t(3, 0, 0, 0));
        assert_eq!(
            days.values().copied().collect::<Vec<_>>(),
            vec![15 * 60_000]
        );
    }

    #[test]
    fn a_sandbox_that_never_became_ready_has_no_running_time() {
        let marks = [
            mark(t(1, 10, 0, 0), SandboxStatus::Creating),
            mark(t(1, 10, 1, 0), SandboxStatus::Failed),
            mark(t(1, 10, 2, 0), SandboxStatus::Deleted),
        ];
        assert!(running_spans(&marks, t(2, 0, 0, 0)).is_empty());
        let sb = SandboxLifecycle {
            id: "sbx_e2b_01jd5qk3s8r7m0b2c4d6e8f0gh".parse().unwrap(),
            provider: Provider::E2b,
            marks: marks.to_vec(),
        };
        let ev = evidence(vec![rate(RateUnit::SandboxSecond, "1")], None, None);
        let report = rollup(
            std::slice::from_ref(&sb),
            |_| Some(&ev),
            t(1, 0, 0, 0),
            t(2, 0, 0, 0),
            t(2, 0, 0, 0),
        );
        assert!(report.rows.is_empty());
        let one = sandbox_usage(&sb, Some(&ev), t(2, 0, 0, 0));
        assert_eq!(one.running_seconds, 0);
        assert_eq!(one.estimated_cost[0].amount, "0");
    }

    #[test]
    fn an_expired_sandbox_stops_at_expiry() {
        let marks = [
            mark(t(1, 10, 0, 0), SandboxStatus::Running),
            mark(t(1, 10, 0, 30), SandboxStatus::Expired),
        ];
        let ms: u64 = split_by_day(
            &running_spans(&marks, t(5, 0, 0, 0)),
            t(1, 0, 0, 0),
            t(5, 0, 0, 0),
        )
        .values()
        .sum();
        assert_eq!(ms, 30_000);
    }

    #[test]
    fn running_time_is_split_at_utc_midnight_and_clipped_to_the_range() {
        // 22:00 on the 1st to 02:00 on the 3rd: 2 h, 24 h, 2 h.
        let spans = [(t(1, 22, 0, 0), t(3, 2, 0, 0))];
        let days = split_by_day(&spans, t(1, 0, 0, 0), t(4, 0, 0, 0));
        let hours: Vec<(u32, u64)> = days
            .iter()
            .map(|(d, ms)| (chrono::Datelike::day(d), ms / 3_600_000))
            .collect();
        assert_eq!(hours, vec![(1, 2), (2, 24), (3, 2)]);
        // A range starting at 23:00 on the 1st and ending at 01:00 on the 3rd.
        let days = split_by_day(&spans, t(1, 23, 0, 0), t(3, 1, 0, 0));
        let hours: Vec<u64> = days.values().map(|ms| ms / 3_600_000).collect();
        assert_eq!(hours, vec![1, 24, 1]);
    }

    #[test]
    fn per_resource_rates_use_the_documented_size_and_unknown_sizes_are_not_estimated() {
        // 1 hour of a 2 vCPU, 1024 MiB sandbox.
        let ev = evidence(
            vec![
                rate(RateUnit::VcpuHour, "0.0504"),
                rate(RateUnit::GibMemoryHour, "0.0162"),
                rate(RateUnit::GbStorageMonth, "0.20"),
            ],
            Some(2),
            Some(1024),
        );
        let est = estimate(&ev, 3_600_000);
        assert_eq!(est.amounts["USD"].to_decimal(), "0.117"); // 2 × 0.0504 + 0.0162
        assert_eq!(
            est.not_estimated.iter().copied().collect::<Vec<_>>(),
            vec![RateUnit::GbStorageMonth]
        );
        // Without a memory size the memory rate is left out, and said to be.
        let ev = evidence(ev.rates.clone(), Some(2), None);
        let est = estimate(&ev, 3_600_000);
        assert_eq!(est.amounts["USD"].to_decimal(), "0.1008");
        assert!(est.not_estimated.contains(&RateUnit::GibMemoryHour));
    }

    #[test]
    fn per_second_and_gb_rates_are_exact() {
        // E2B's figures: 10 s of 2 vCPU at 0.000014 = 0.00028.
        let ev = evidence(vec![rate(RateUnit::VcpuSecond, "0.000014")], Some(2), None);
        assert_eq!(estimate(&ev, 10_000).amounts["USD"].to_decimal(), "0.00028");
        // 1 s of 4096 MiB at 0.0000115 per GB-second: 4.294967296 GB × 0.0000115.
        let ev = evidence(
            vec![rate(RateUnit::GbMemorySecond, "0.0000115")],
            None,
            Some(4096),
        );
        assert_eq!(
            estimate(&ev, 1_000).amounts["USD"].to_decimal(),
            "0.000049392124"
        );
        // A physical core is 2 vCPU: 2 vCPU for 1 s at 0.00003942 per core-second.
        let ev = evidence(
            vec![rate(RateUnit::PhysicalCoreSecond, "0.00003942")],
            Some(2),
            None,
        );
        assert_eq!(
            estimate(&ev, 1_000).amounts["USD"].to_decimal(),
            "0.00003942"
        );
    }

    #[test]
    fn the_rollup_counts_sandboxes_per_provider_and_day() {
        let ev = evidence(vec![rate(RateUnit::SandboxHour, "1")], None, None);
        let a = SandboxLifecycle {
            id: "sbx_e2b_01jd5qk3s8r7m0b2c4d6e8f0gh".parse().unwrap(),
            provider: Provider::E2b,
            marks: vec![
                mark(t(1, 23, 0, 0), SandboxStatus::Running),
                mark(t(2, 1, 0, 0), SandboxStatus::Deleted),
            ],
        };
        let b = SandboxLifecycle {
            id: "sbx_local_01jd5qk3s8r7m0b2c4d6e8f0gj".parse().unwrap(),
            provider: Provider::Local,
            marks: vec![mark(t(2, 12, 0, 0), SandboxStatus::Running)],
        };
        let c = SandboxLifecycle {
            id: "sbx_e2b_01jd5qk3s8r7m0b2c4d6e8f0gk".parse().unwrap(),
            provider: Provider::E2b,
            marks: vec![
                mark(t(2, 0, 30, 0), SandboxStatus::Running),
                mark(t(2, 0, 45, 0), SandboxStatus::Stopped),
            ],
        };
        let report = rollup(
            &[a, b, c],
            |p| (p == Provider::E2b).then_some(&ev),
            t(1, 0, 0, 0),
            t(3, 0, 0, 0),
            t(2, 13, 0, 0),
        );
        let rows: Vec<(u32, Provider, u64, u64, Vec<CostAmount>)> = report
            .rows
            .iter()
            .map(|r| {
                (
                    chrono::Datelike::day(&r.day),
                    r.provider,
                    r.running_seconds,
                    r.sandboxes,
                    r.estimated_cost.clone(),
                )
            })
            .collect();
        let usd = |a: &str| {
            vec![CostAmount {
                currency: "USD".into(),
                amount: a.into(),
            }]
        };
        assert_eq!(
            rows,
            vec![
                (1, Provider::E2b, 3600, 1, usd("1")),
                (2, Provider::E2b, 3600 + 900, 2, usd("1.25")),
                (2, Provider::Local, 3600, 1, vec![]),
            ]
        );
        assert!(report.rows[2].evidence.is_none());
    }
}
