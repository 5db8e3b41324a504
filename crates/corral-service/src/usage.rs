//! Usage and cost estimates: `GET /v1/usage` (a project's rollup per provider and UTC day)
//! and `GET /v1/sandboxes/{id}/usage` (one sandbox so far). Running time comes from the
//! recorded lifecycle (the registry's event log), prices from the configured providers'
//! pricing evidence; the computation is `corral_domain::usage`.

use chrono::{Duration, NaiveDate, NaiveTime};
use corral_domain::usage::{rollup, sandbox_usage};
use corral_domain::{PricingEvidence, Provider, SandboxUsage, Timestamp, UsageReport};
use corral_registry::{Lifecycles, MAX_USAGE_SANDBOXES, UsageLog};

use crate::error::{ServiceError, registry_error};
use crate::{Caller, Service};

/// The longest range one usage read covers, in days.
pub const MAX_USAGE_DAYS: i64 = 93;
/// Days covered when `from` is absent: the day of `to` and the six before it.
pub const DEFAULT_USAGE_DAYS: i64 = 7;

/// Parses a range bound: an RFC 3339 timestamp, or a date `YYYY-MM-DD` (its UTC midnight).
fn parse_bound(name: &str, value: &str) -> Result<Timestamp, ServiceError> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(value) {
        return Ok(t.to_utc());
    }
    if let Ok(d) = NaiveDate::parse_from_str(value, "%Y-%m-%d")
        && value.len() == 10
    {
        return Ok(d.and_time(NaiveTime::MIN).and_utc());
    }
    Err(ServiceError::invalid(format!(
        "`{name}` must be a date (YYYY-MM-DD, UTC) or an RFC 3339 timestamp"
    )))
}

/// The range `[from, to)` a usage read covers: `to` defaults to now and is never later;
/// `from` defaults to the UTC midnight [`DEFAULT_USAGE_DAYS`] − 1 days before `to`'s day.
/// A range longer than [`MAX_USAGE_DAYS`] is cut to the days before `to`; a `from` not
/// before `to` is an empty range (both read back in the answer). Refused: unparseable bounds.
pub fn usage_range(
    from: Option<&str>,
    to: Option<&str>,
    now: Timestamp,
) -> Result<(Timestamp, Timestamp), ServiceError> {
    let to = match to {
        Some(t) => parse_bound("to", t)?.min(now),
        None => now,
    };
    let from = match from {
        Some(f) => parse_bound("from", f)?,
        None => (to.date_naive() - Duration::days(DEFAULT_USAGE_DAYS - 1))
            .and_time(NaiveTime::MIN)
            .and_utc(),
    };
    let earliest = to - Duration::days(MAX_USAGE_DAYS);
    Ok((from.clamp(earliest, to), to))
}

impl Service {
    fn usage_log(&self) -> UsageLog {
        UsageLog::new(self.inner.registry.database().clone())
    }

    /// The pricing evidence of `provider`, if it is configured.
    fn evidence(&self, provider: Provider) -> Option<&PricingEvidence> {
        self.inner
            .catalog
            .providers
            .iter()
            .find(|c| c.provider == provider)
            .map(|c| &c.pricing)
    }

    /// `GET /v1/usage`: the caller's project's estimated usage per provider and UTC day
    /// over `[from, to)` (see [`usage_range`]).
    pub async fn usage(
        &self,
        caller: &Caller,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<UsageReport, ServiceError> {
        let now = self.inner.registry.database().now();
        let (from, to) = usage_range(from, to, now)?;
        let found = self
            .usage_log()
            .lifecycles(caller.project_id(), from, to)
            .await
            .map_err(registry_error)?;
        let Lifecycles::Found(sandboxes) = found else {
            return Err(ServiceError::invalid(format!(
                "more than {MAX_USAGE_SANDBOXES} sandboxes may have run in this range; ask for a shorter one"
            )));
        };
        Ok(rollup(&sandboxes, |p| self.evidence(p), from, to, now))
    }

    /// `GET /v1/sandboxes/{id}/usage`: one sandbox's estimated usage so far (tombstones
    /// included; another project's id is not found, as everywhere).
    pub async fn sandbox_usage(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<SandboxUsage, ServiceError> {
        let rec = self.record(caller, id).await?;
        let now = self.inner.registry.database().now();
        let lifecycle = self
            .usage_log()
            .lifecycle(caller.project_id(), rec.id)
            .await
            .map_err(registry_error)?;
        Ok(sandbox_usage(
            &lifecycle,
            self.evidence(rec.id.provider()),
            now,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use corral_errors::ErrorCode;

    fn now() -> Timestamp {
        chrono::Utc.with_ymd_and_hms(2026, 11, 27, 5, 0, 0).unwrap()
    }

    fn code(e: ServiceError) -> ErrorCode {
        e.code()
    }

    #[test]
    fn the_default_range_is_the_last_seven_utc_days_up_to_now() {
        let (from, to) = usage_range(None, None, now()).unwrap();
        assert_eq!(to, now());
        assert_eq!(
            from,
            chrono::Utc.with_ymd_and_hms(2026, 11, 21, 0, 0, 0).unwrap()
        );
    }

    #[test]
    fn dates_and_timestamps_are_accepted_and_to_is_clipped_to_now() {
        let (from, to) =
            usage_range(Some("2026-11-01"), Some("2026-12-31T00:00:00Z"), now()).unwrap();
        assert_eq!(
            from,
            chrono::Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap()
        );
        assert_eq!(to, now());
        let (from, _) = usage_range(Some("2026-11-26T10:00:00+02:00"), None, now()).unwrap();
        assert_eq!(
            from,
            chrono::Utc.with_ymd_and_hms(2026, 11, 26, 8, 0, 0).unwrap()
        );
    }

    #[test]
    fn unparseable_bounds_are_invalid_requests() {
        for (from, to) in [
            (Some("yesterday"), None),
            (None, Some("2026-13-01")),
            (Some("2026-11-1"), None),
            (None, Some("0000-00-00")),
        ] {
            let e = usage_range(from, to, now()).unwrap_err();
            assert_eq!(code(e), ErrorCode::InvalidRequest, "{from:?} {to:?}");
        }
    }

    #[test]
    fn long_ranges_are_cut_and_reversed_ones_are_empty() {
        let n = now();
        // Longer than 93 days: the 93 days before `to`.
        let (from, to) = usage_range(Some("2026-01-01"), Some("2026-11-01"), n).unwrap();
        assert_eq!(to - from, Duration::days(MAX_USAGE_DAYS));
        assert_eq!(
            to,
            chrono::Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap()
        );
        let (from, _) = usage_range(Some("0001-01-01"), None, n).unwrap();
        assert_eq!(n - from, Duration::days(MAX_USAGE_DAYS));
        // Exactly 93 days is kept as asked.
        let (from, _) = usage_range(Some("2026-08-26T05:00:00Z"), None, n).unwrap();
        assert_eq!(
            from,
            chrono::Utc.with_ymd_and_hms(2026, 8, 26, 5, 0, 0).unwrap()
        );
        // `from` at or after `to` (or after now): an empty range ending at `to`.
        for (from, to) in [
            (Some("2026-11-27"), Some("2026-11-26")),
            (Some("2026-11-27T05:00:00Z"), None),
            (Some("9999-12-31"), None),
        ] {
            let (f, t) = usage_range(from, to, n).unwrap();
            assert_eq!(f, t, "{from:?} {to:?}");
        }
    }
}
