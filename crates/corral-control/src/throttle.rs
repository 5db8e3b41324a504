//! The sign-in throttle, after OWASP's authentication guidance: failures are counted per
//! (account, client address), per client address, and per account; past a few free failures
//! each key imposes a delay that doubles with every further failure, up to a ceiling —
//! never a fixed lock of the account. The account-wide key spares addresses that signed in
//! to that account recently, and the emailed link is never throttled by password failures,
//! so a stranger's guesses cannot keep the real user out.
//!
//! Every attempt **reserves** its place before the password is verified, under one lock: a
//! burst of concurrent attempts gets exactly as many verifications as the keys allow, never
//! one per request. A reservation that is dropped counts as a failure (a verification that
//! was cut short proves nothing for the caller); a success or a refusal for another reason
//! (the hashing pool was busy, the store failed) gives the place back.
//!
//! In memory and per replica, as the request rates: a restart forgets failures, which gives
//! an attacker nothing waiting would not, and keeps the database out of an attack's path.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use corral_domain::Timestamp;

use crate::error::{ControlError, Result};

/// The address a request came from, as the throttles count it.
///
/// The web edge decides what it is: the TCP peer's address, or — only when the peer is a
/// proxy the operator trusts — the client address that proxy forwarded. IPv4-mapped IPv6
/// addresses count as the IPv4 address, and IPv6 addresses as their /64 network (one
/// subscriber usually holds a whole /64). Requests with no known address share one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientAddress(Option<IpAddr>);

impl ClientAddress {
    /// The key for `ip`: itself for IPv4, its /64 network for IPv6.
    pub fn new(ip: IpAddr) -> Self {
        let ip = match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => {
                    let s = v6.segments();
                    IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
                }
            },
            v4 => v4,
        };
        Self(Some(ip))
    }

    /// No known address (all such requests share one key).
    pub const fn unknown() -> Self {
        Self(None)
    }

    /// The address (an IPv6 /64 as its first address), if known.
    pub fn ip(&self) -> Option<IpAddr> {
        self.0
    }
}

impl From<IpAddr> for ClientAddress {
    fn from(ip: IpAddr) -> Self {
        Self::new(ip)
    }
}

impl From<Option<IpAddr>> for ClientAddress {
    fn from(ip: Option<IpAddr>) -> Self {
        ip.map_or(Self::unknown(), Self::new)
    }
}

impl fmt::Display for ClientAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(IpAddr::V6(v6)) => write!(f, "{v6}/64"),
            Some(v4) => write!(f, "{v4}"),
            None => f.write_str("unknown"),
        }
    }
}

/// One key's rule: `free` failures within the window, then each further attempt waits
/// `first_delay`, doubled for every failure beyond the free ones, at most `max_delay`, after
/// the key's last attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Failures allowed without delay within the window.
    pub free: u32,
    /// The delay after the first failure past `free`.
    pub first_delay: Duration,
    /// The longest delay.
    pub max_delay: Duration,
}

impl Backoff {
    /// The delay before the next attempt after `failures` within the window.
    fn delay(&self, failures: usize) -> Option<Duration> {
        let beyond = failures.checked_sub(self.free as usize)?;
        let doubled = self
            .first_delay
            .saturating_mul(1u32.checked_shl(beyond.min(31) as u32).unwrap_or(u32::MAX));
        Some(doubled.min(self.max_delay))
    }
}

/// How failed sign-ins are throttled; `None` switches a key off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignInThrottling {
    /// Failures older than this are forgotten.
    pub window: Duration,
    /// Password failures for one account from one client address.
    pub per_account_and_address: Option<Backoff>,
    /// Password failures from one client address, whatever the account.
    pub per_address: Option<Backoff>,
    /// Password failures for one account from every address together — except addresses
    /// that signed in to that account within [`SignInThrottling::known_address_for`].
    pub per_account: Option<Backoff>,
    /// How long a successful sign-in exempts its address from the account-wide key.
    pub known_address_for: Duration,
    /// Sign-in link tokens that did not work, from one client address.
    pub bad_links_per_address: Option<Backoff>,
    /// Wrong current passwords given to a password change by one user.
    pub reauthentication_per_user: Option<Backoff>,
}

impl SignInThrottling {
    /// The defaults (window 15 minutes):
    /// - per (account, address): 5 free, then 30 s doubling up to 15 minutes;
    /// - per address: 20 free, then 30 s doubling up to 15 minutes;
    /// - per account: 10 free, then 1 s doubling up to 2 minutes — at most about 25
    ///   guesses per 15 minutes at one account from any number of addresses (OWASP ASVS
    ///   2.2.1 asks for at most 100 an hour), while the real user waits at most 2 minutes
    ///   from a new address, not at all from one they signed in from within 30 days, and
    ///   never for an emailed link;
    /// - bad link tokens per address: 20 free, then 30 s doubling up to 15 minutes;
    /// - wrong current passwords per user: 5 free, then 30 s doubling up to 15 minutes.
    pub fn standard() -> Self {
        let backoff = |free, first, max| {
            Some(Backoff {
                free,
                first_delay: Duration::from_secs(first),
                max_delay: Duration::from_secs(max),
            })
        };
        Self {
            window: Duration::from_secs(15 * 60),
            per_account_and_address: backoff(5, 30, 15 * 60),
            per_address: backoff(20, 30, 15 * 60),
            per_account: backoff(10, 1, 120),
            known_address_for: Duration::from_secs(30 * 24 * 3600),
            bad_links_per_address: backoff(20, 30, 15 * 60),
            reauthentication_per_user: backoff(5, 30, 15 * 60),
        }
    }

    /// No throttling at all.
    pub fn none() -> Self {
        Self {
            window: Duration::from_secs(15 * 60),
            per_account_and_address: None,
            per_address: None,
            per_account: None,
            known_address_for: Duration::ZERO,
            bad_links_per_address: None,
            reauthentication_per_user: None,
        }
    }
}

impl Default for SignInThrottling {
    /// [`SignInThrottling::standard`].
    fn default() -> Self {
        Self::standard()
    }
}

/// A throttled key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    /// Password sign-in: (account email, address).
    Pair(String, ClientAddress),
    /// Password sign-in: address.
    Address(ClientAddress),
    /// Password sign-in: account email.
    Account(String),
    /// Link tokens: address.
    Links(ClientAddress),
    /// Password change: the user (by id).
    Reauth(String),
}

/// Keys tracked before those with nothing in the window are dropped.
const PRUNE_ABOVE: usize = 10_000;
/// Keys tracked at most: beyond, new keys are refused until old ones leave the window
/// (bounded memory whatever the number of addresses an attacker uses).
const MAX_KEYS: usize = 200_000;
/// Attempts kept per key, at most (the rules keep far fewer within the window).
const MAX_ATTEMPTS: usize = 64;
/// Addresses remembered as known for an account, at most (only successful sign-ins add
/// one).
const MAX_KNOWN: usize = 100_000;

#[derive(Debug, Default)]
struct State {
    /// Each key's attempts within the window (failures and reservations), oldest first.
    attempts: HashMap<Key, VecDeque<Timestamp>>,
    /// (account email, address) → last successful sign-in.
    known: HashMap<(String, ClientAddress), Timestamp>,
}

/// Failed attempts by key; see the module docs.
#[derive(Debug)]
pub(crate) struct Throttle {
    rules: SignInThrottling,
    state: Mutex<State>,
}

/// A reserved attempt. Dropped as it is, it stays recorded as a failure.
#[derive(Debug)]
pub(crate) struct Reservation {
    throttle: Arc<Throttle>,
    keys: Vec<Key>,
    at: Timestamp,
}

fn window_delta(d: Duration) -> chrono::TimeDelta {
    chrono::TimeDelta::from_std(d).unwrap_or(chrono::TimeDelta::MAX)
}

impl Throttle {
    pub(crate) fn new(rules: SignInThrottling) -> Self {
        Self {
            rules,
            state: Mutex::new(State::default()),
        }
    }

    fn rule(&self, key: &Key) -> Option<Backoff> {
        let r = &self.rules;
        match key {
            Key::Pair(..) => r.per_account_and_address,
            Key::Address(_) => r.per_address,
            Key::Account(_) => r.per_account,
            Key::Links(_) => r.bad_links_per_address,
            Key::Reauth(_) => r.reauthentication_per_user,
        }
    }

    /// Reserves one attempt under every key of `keys` that has a rule, all or none:
    /// `rate_limited` (with the longest wait) when any key asks for a delay not yet over.
    pub(crate) fn reserve(self: &Arc<Self>, keys: Vec<Key>, now: Timestamp) -> Result<Reservation> {
        let window = window_delta(self.rules.window);
        let keys: Vec<Key> = keys
            .into_iter()
            .filter(|k| self.rule(k).is_some())
            .collect();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.attempts.len() > PRUNE_ABOVE {
            state
                .attempts
                .retain(|_, times| times.back().is_some_and(|t| *t + window > now));
        }
        let mut wait = chrono::TimeDelta::zero();
        let mut new_keys = 0;
        for key in &keys {
            let Some(rule) = self.rule(key) else { continue };
            let Some(times) = state.attempts.get_mut(key) else {
                new_keys += 1;
                continue;
            };
            while times.front().is_some_and(|t| *t + window <= now) {
                times.pop_front();
            }
            if let (Some(delay), Some(last)) = (rule.delay(times.len()), times.back()) {
                wait = wait.max(*last + window_delta(delay) - now);
            }
        }
        if wait > chrono::TimeDelta::zero() {
            // Whole seconds, rounded up: retrying after `Retry-After` is not refused again
            // by the same key.
            let retry_after = u64::try_from((wait.num_milliseconds() + 999) / 1000)
                .unwrap_or(1)
                .max(1);
            return Err(ControlError::Throttled {
                message: format!(
                    "too many failed sign-in attempts; retry after {retry_after} seconds, or sign in with an emailed link"
                ),
                retry_after,
            });
        }
        if state.attempts.len() + new_keys > MAX_KEYS {
            tracing::warn!("sign-in throttle full: refusing attempts under new keys");
            return Err(ControlError::Throttled {
                message: "too many sign-in attempts on this server; retry in a minute".into(),
                retry_after: 60,
            });
        }
        for key in &keys {
            let times = state.attempts.entry(key.clone()).or_default();
            if times.len() >= MAX_ATTEMPTS {
                times.pop_front();
            }
            times.push_back(now);
        }
        Ok(Reservation {
            throttle: self.clone(),
            keys,
            at: now,
        })
    }

    /// Whether `address` signed in to `email`'s account within the known-address period.
    pub(crate) fn is_known(&self, email: &str, address: ClientAddress, now: Timestamp) -> bool {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .known
            .get(&(email.to_owned(), address))
            .is_some_and(|t| *t + window_delta(self.rules.known_address_for) > now)
    }

    fn remember(&self, email: &str, address: ClientAddress, now: Timestamp) {
        if self.rules.known_address_for.is_zero() {
            return;
        }
        let keep = window_delta(self.rules.known_address_for);
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.known.len() >= MAX_KNOWN {
            state.known.retain(|_, t| *t + keep > now);
            if state.known.len() >= MAX_KNOWN {
                // Still full of live entries: forget the oldest (only a convenience is lost).
                if let Some(oldest) = state
                    .known
                    .iter()
                    .min_by_key(|(_, t)| **t)
                    .map(|(k, _)| k.clone())
                {
                    state.known.remove(&oldest);
                }
            }
        }
        state.known.insert((email.to_owned(), address), now);
    }

    /// Attempts recorded under `key` within the window (for tests).
    #[cfg(test)]
    fn count(&self, key: &Key, now: Timestamp) -> usize {
        let window = window_delta(self.rules.window);
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .attempts
            .get(key)
            .map_or(0, |t| t.iter().filter(|t| **t + window > now).count())
    }
}

impl Reservation {
    /// Takes the attempt back (it was no guess: the pool was busy, the store failed).
    pub(crate) fn refund(self) {
        let mut state = self
            .throttle
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for key in &self.keys {
            if let Some(times) = state.attempts.get_mut(key) {
                if let Some(i) = times.iter().rposition(|t| *t == self.at) {
                    times.remove(i);
                }
                if times.is_empty() {
                    state.attempts.remove(key);
                }
            }
        }
    }

    /// The attempt succeeded: taken back, and the failures under `clear` forgotten (whoever
    /// is there knows the secret).
    pub(crate) fn succeeded(self, clear: &[Key]) {
        let throttle = self.throttle.clone();
        self.refund();
        let mut state = throttle
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for key in clear {
            state.attempts.remove(key);
        }
    }

    /// The password sign-in of `email` from `address` succeeded: as
    /// [`Reservation::succeeded`] for the (account, address) key, and the address becomes
    /// known for the account.
    pub(crate) fn signed_in(self, email: &str, address: ClientAddress) {
        let throttle = self.throttle.clone();
        let now = self.at;
        self.succeeded(&[Key::Pair(email.to_owned(), address)]);
        throttle.remember(email, address, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Timestamp, secs: i64) -> Timestamp {
        t0 + chrono::TimeDelta::seconds(secs)
    }

    #[test]
    fn client_addresses_key_ipv6_by_its_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(ClientAddress::new(a), ClientAddress::new(b));
        assert_ne!(ClientAddress::new(a), ClientAddress::new(c));
        assert_eq!(ClientAddress::new(a).to_string(), "2001:db8:1:2::/64");
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        assert_eq!(ClientAddress::new(mapped), ClientAddress::new(v4));
        assert_eq!(ClientAddress::from(None), ClientAddress::unknown());
    }

    #[test]
    fn delays_double_past_the_free_failures_up_to_the_ceiling() {
        let b = Backoff {
            free: 5,
            first_delay: Duration::from_secs(30),
            max_delay: Duration::from_secs(900),
        };
        assert_eq!(b.delay(4), None);
        assert_eq!(b.delay(5), Some(Duration::from_secs(30)));
        assert_eq!(b.delay(6), Some(Duration::from_secs(60)));
        assert_eq!(b.delay(9), Some(Duration::from_secs(480)));
        assert_eq!(b.delay(10), Some(Duration::from_secs(900)));
        assert_eq!(b.delay(1000), Some(Duration::from_secs(900)));
    }

    #[test]
    fn reservations_are_taken_before_the_outcome_and_delays_grow() {
        let t = Arc::new(Throttle::new(SignInThrottling::standard()));
        let t0 = chrono::Utc::now();
        let addr = ClientAddress::new([192, 0, 2, 1].into());
        let keys = || vec![Key::Pair("a@x.io".into(), addr), Key::Address(addr)];
        // Five reservations at once, outcomes unknown: the sixth is refused already.
        let held: Vec<Reservation> = (0..5).map(|_| t.reserve(keys(), t0).unwrap()).collect();
        let Err(ControlError::Throttled { retry_after, .. }) = t.reserve(keys(), t0) else {
            panic!("the sixth attempt must wait");
        };
        assert_eq!(retry_after, 30);
        drop(held); // five failures
        // 30 s after the last attempt, one more; then 60 s, then 120 s.
        assert!(t.reserve(keys(), at(t0, 29)).is_err());
        drop(t.reserve(keys(), at(t0, 30)).unwrap());
        assert!(t.reserve(keys(), at(t0, 89)).is_err());
        drop(t.reserve(keys(), at(t0, 90)).unwrap());
        let Err(ControlError::Throttled { retry_after, .. }) = t.reserve(keys(), at(t0, 91)) else {
            panic!("120 s now");
        };
        assert_eq!(retry_after, 119);
        // A refund gives the place back; a success clears the pair.
        let r = t.reserve(keys(), at(t0, 210)).unwrap();
        r.refund();
        assert_eq!(t.count(&Key::Pair("a@x.io".into(), addr), at(t0, 210)), 7);
        t.reserve(keys(), at(t0, 210))
            .unwrap()
            .signed_in("a@x.io", addr);
        assert_eq!(t.count(&Key::Pair("a@x.io".into(), addr), at(t0, 210)), 0);
        assert_eq!(t.count(&Key::Address(addr), at(t0, 210)), 7);
        assert!(t.is_known("a@x.io", addr, at(t0, 210)));
        // Failures leave the window after 15 minutes.
        assert_eq!(t.count(&Key::Address(addr), at(t0, 15 * 60 + 91)), 0);
    }

    #[test]
    fn switched_off_keys_are_not_tracked() {
        let t = Arc::new(Throttle::new(SignInThrottling::none()));
        let t0 = chrono::Utc::now();
        let addr = ClientAddress::unknown();
        for _ in 0..100 {
            drop(t.reserve(vec![Key::Address(addr)], t0).unwrap());
        }
        assert_eq!(t.count(&Key::Address(addr), t0), 0);
    }
}
