//! The control plane's request and mail limits: token buckets per user, account, project,
//! recipient and client address, in memory, per replica (as the sandbox API's
//! `corral_service::limiter`, whose [`Rate`] they share).
//!
//! What each bucket bounds, and its default, is in [`ControlLimits::standard`]; the sign-in
//! throttle (failures, with progressive delays) is [`crate::SignInThrottling`].
//!
//! Time is the store's clock (`ControlStore::now`), not `Instant`: these windows run for
//! minutes to hours, and tests move the store's clock to cross them.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use corral_domain::Timestamp;
pub use corral_service::limiter::Rate;

use corral_control_store::UserId;
use corral_registry::ProjectId;

use crate::error::{ControlError, Result};
use crate::throttle::SignInThrottling;
use crate::{Actor, Control};

/// Every limit of the control plane; `None` switches a bucket off.
#[derive(Debug, Clone)]
pub struct ControlLimits {
    /// Every session-authenticated request of one user (JSON API and console).
    pub requests_per_user: Option<Rate>,
    /// Creations by one user: organizations, projects and API keys.
    pub creations_per_user: Option<Rate>,
    /// Deep verifications (`…/profiles/{provider}/test`) of one project: each one creates,
    /// uses and deletes a sandbox at the provider.
    pub profile_tests_per_project: Option<Rate>,
    /// Invitations sent from one organization.
    pub invitations_per_account: Option<Rate>,
    /// Invitations sent by one user, whatever the organization (an attacker's many new
    /// organizations share it).
    pub invitations_per_inviter: Option<Rate>,
    /// Invitations mailed to one address, from every organization together.
    pub invitations_per_recipient: Option<Rate>,
    /// Sign-in links mailed to one address at the request of one client address: a
    /// stranger asking from their own address never holds up the owner's requests.
    pub sign_in_links_per_recipient_and_address: Option<Rate>,
    /// Sign-in links mailed to one address, whoever asks (bounds a flood from many
    /// addresses). Keep the refill intervals (`1 / per_second`) of this bucket and the one
    /// above below the link lifetime: then whenever a request is refused, a link mailed to
    /// that address within one interval is still valid, so nobody else's requests keep the
    /// owner of the address from signing in.
    pub sign_in_links_per_recipient: Option<Rate>,
    /// Sign-in link requests from one client address (counted whether or not the address
    /// asked for is known, so the answer says nothing about it).
    pub sign_in_links_per_address: Option<Rate>,
    /// Failed sign-ins.
    pub sign_in: SignInThrottling,
}

impl ControlLimits {
    /// The defaults:
    /// - requests: 20/s with bursts of 100 per user (the sandbox API's per-key rate);
    /// - creations: 20 at once, then one every 10 s, per user;
    /// - profile tests: 5 at once, then one every 30 s, per project;
    /// - invitations: 10 at once, then 20 an hour, per organization; 20 at once, then 20 an
    ///   hour, per inviter; 3 at once, then one every 20 minutes, per recipient;
    /// - sign-in links (which live 15 minutes): 3 at once, then one every 5 minutes, per
    ///   recipient and requesting address; 10 at once, then one every 5 minutes, per
    ///   recipient; requests: 10 at once, then one a minute, per client address;
    /// - failed sign-ins: [`SignInThrottling::standard`].
    pub fn standard() -> Self {
        let every = |seconds: f64, burst: u32| {
            Some(Rate {
                per_second: 1.0 / seconds,
                burst,
            })
        };
        Self {
            requests_per_user: Some(Rate {
                per_second: 20.0,
                burst: 100,
            }),
            creations_per_user: every(10.0, 20),
            profile_tests_per_project: every(30.0, 5),
            invitations_per_account: every(180.0, 10),
            invitations_per_inviter: every(180.0, 20),
            invitations_per_recipient: every(1200.0, 3),
            sign_in_links_per_recipient_and_address: every(300.0, 3),
            sign_in_links_per_recipient: every(300.0, 10),
            sign_in_links_per_address: every(60.0, 10),
            sign_in: SignInThrottling::standard(),
        }
    }

    /// Every bucket off and the sign-in throttle off (for tests of other rules).
    pub fn none() -> Self {
        Self {
            requests_per_user: None,
            creations_per_user: None,
            profile_tests_per_project: None,
            invitations_per_account: None,
            invitations_per_inviter: None,
            invitations_per_recipient: None,
            sign_in_links_per_recipient_and_address: None,
            sign_in_links_per_recipient: None,
            sign_in_links_per_address: None,
            sign_in: SignInThrottling::none(),
        }
    }
}

impl Default for ControlLimits {
    /// [`ControlLimits::standard`].
    fn default() -> Self {
        Self::standard()
    }
}

/// A bucket's name, for the key and the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Policy {
    Requests,
    Creations,
    ProfileTests,
    InvitationsAccount,
    InvitationsInviter,
    InvitationsRecipient,
    LinksPair,
    LinksRecipient,
    LinksAddress,
}

impl Policy {
    fn what(self) -> &'static str {
        match self {
            Policy::Requests => "requests by this user",
            Policy::Creations => "creations by this user",
            Policy::ProfileTests => "connection tests of this project",
            Policy::InvitationsAccount => "invitations from this organization",
            Policy::InvitationsInviter => "invitations by this user",
            Policy::InvitationsRecipient => "invitations to this address",
            Policy::LinksPair => "sign-in links to this address asked for from here",
            Policy::LinksRecipient => "sign-in links to this address",
            Policy::LinksAddress => "sign-in link requests from this address",
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Timestamp,
}

/// Entries kept before full buckets (which carry no information) are dropped.
const PRUNE_ABOVE: usize = 10_000;

/// Token buckets by (policy, key).
#[derive(Debug, Default)]
pub(crate) struct Buckets {
    map: Mutex<HashMap<(Policy, String), Bucket>>,
}

fn refilled(b: Bucket, rate: Rate, now: Timestamp) -> Bucket {
    let elapsed = (now - b.at).num_milliseconds().max(0) as f64 / 1000.0;
    Bucket {
        tokens: (b.tokens + elapsed * rate.per_second).min(f64::from(rate.burst)),
        at: now.max(b.at),
    }
}

impl Buckets {
    /// Takes one token from every bucket in `wanted` (those with a rate), all or none: a
    /// refusal takes nothing. Refused: `rate_limited`, `Retry-After` the longest wait.
    pub(crate) fn take_all(
        &self,
        wanted: &[(Policy, &str, Option<Rate>)],
        now: Timestamp,
    ) -> Result<()> {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() > PRUNE_ABOVE {
            let rates: HashMap<Policy, Rate> = wanted
                .iter()
                .filter_map(|(p, _, r)| r.map(|r| (*p, r)))
                .collect();
            // A bucket whose rate is unknown here is kept; a full one is dropped (a new
            // bucket starts full, so nothing is forgotten).
            map.retain(|(p, _), b| {
                rates
                    .get(p)
                    .is_none_or(|r| refilled(*b, *r, now).tokens < f64::from(r.burst))
            });
        }
        let mut refused: Option<(Policy, f64)> = None;
        let mut after = Vec::with_capacity(wanted.len());
        for (policy, key, rate) in wanted {
            let Some(rate) = rate else { continue };
            let b = map.get(&(*policy, (*key).to_owned())).map_or(
                Bucket {
                    tokens: f64::from(rate.burst),
                    at: now,
                },
                |b| refilled(*b, *rate, now),
            );
            if b.tokens < 1.0 {
                let wait = (1.0 - b.tokens) / rate.per_second;
                if refused.is_none_or(|(_, w)| wait > w) {
                    refused = Some((*policy, wait));
                }
            }
            after.push((*policy, (*key).to_owned(), b));
        }
        if let Some((policy, wait)) = refused {
            let retry_after = wait.ceil().max(1.0) as u64;
            return Err(ControlError::Throttled {
                message: format!(
                    "too many {} for now; retry after {retry_after} seconds",
                    policy.what()
                ),
                retry_after,
            });
        }
        for (policy, key, mut b) in after {
            b.tokens -= 1.0;
            map.insert((policy, key), b);
        }
        Ok(())
    }
}

impl Buckets {
    /// Whole tokens left in one bucket and seconds until it is full, without taking any (a
    /// bucket never used is full).
    fn peek(&self, policy: Policy, key: &str, rate: Rate, now: Timestamp) -> (u32, u64) {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let tokens = map
            .get(&(policy, key.to_owned()))
            .map_or(f64::from(rate.burst), |b| refilled(*b, rate, now).tokens);
        let missing = (f64::from(rate.burst) - tokens).max(0.0);
        let reset = if rate.per_second > 0.0 {
            (missing / rate.per_second).ceil() as u64
        } else {
            0
        };
        (tokens.max(0.0).floor() as u32, reset)
    }
}

impl Control {
    /// Where `user`'s request bucket stands ([`ControlLimits::requests_per_user`]), for the
    /// `RateLimit` and `RateLimit-Policy` fields of an answer; `None` when the limit is off.
    pub fn request_quota(&self, user: UserId) -> Option<corral_service::limiter::PolicyState> {
        let rate = self.config().limits.requests_per_user?;
        let (remaining, reset_seconds) = self.buckets().peek(
            Policy::Requests,
            &user.to_string(),
            rate,
            self.store().now(),
        );
        Some(corral_service::limiter::PolicyState {
            name: "per-user",
            rate,
            remaining,
            reset_seconds,
        })
    }

    /// Counts one session-authenticated request of `user`.
    pub(crate) fn admit_request(&self, user: UserId) -> Result<()> {
        let rate = self.config().limits.requests_per_user;
        self.buckets().take_all(
            &[(Policy::Requests, &user.to_string(), rate)],
            self.store().now(),
        )
    }

    /// Counts one creation (organization, project, API key) by `actor`.
    pub(crate) fn admit_creation(&self, actor: &Actor) -> Result<()> {
        let rate = self.config().limits.creations_per_user;
        self.buckets().take_all(
            &[(Policy::Creations, &actor.user_id.to_string(), rate)],
            self.store().now(),
        )
    }

    /// Counts one deep verification of `project`'s profiles.
    pub(crate) fn admit_profile_test(&self, project: ProjectId) -> Result<()> {
        let rate = self.config().limits.profile_tests_per_project;
        self.buckets().take_all(
            &[(Policy::ProfileTests, &project.to_string(), rate)],
            self.store().now(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_take_all_or_nothing_and_refill_with_the_clock() {
        let buckets = Buckets::default();
        let t0 = chrono::Utc::now();
        let two_rate = Rate {
            per_second: 0.1,
            burst: 2,
        };
        let ten_rate = Rate {
            per_second: 1.0,
            burst: 10,
        };
        let (two, ten) = (Some(two_rate), Some(ten_rate));
        let both = [(Policy::Creations, "u", two), (Policy::Requests, "u", ten)];
        buckets.take_all(&both, t0).unwrap();
        buckets.take_all(&both, t0).unwrap();
        let Err(ControlError::Throttled { retry_after, .. }) = buckets.take_all(&both, t0) else {
            panic!("the small bucket is empty");
        };
        assert_eq!(retry_after, 10);
        // The refusal took nothing from the other bucket: 8 left there.
        for _ in 0..8 {
            buckets
                .take_all(&[(Policy::Requests, "u", ten)], t0)
                .unwrap();
        }
        assert!(
            buckets
                .take_all(&[(Policy::Requests, "u", ten)], t0)
                .is_err()
        );
        // Another key has its own bucket; time refills.
        buckets
            .take_all(&[(Policy::Creations, "v", two)], t0)
            .unwrap();
        buckets
            .take_all(&both, t0 + chrono::TimeDelta::seconds(10))
            .unwrap();
        // Peeking takes nothing: empty at t0, refilled to 10 by t0 + 10 s, one taken then.
        let later = t0 + chrono::TimeDelta::seconds(10);
        for _ in 0..2 {
            assert_eq!(buckets.peek(Policy::Requests, "u", ten_rate, later), (9, 1));
        }
        assert_eq!(buckets.peek(Policy::Requests, "w", ten_rate, t0), (10, 0));
        assert_eq!(buckets.peek(Policy::Creations, "v", two_rate, t0), (1, 10));
        // A bucket switched off is no bucket.
        for _ in 0..100 {
            buckets
                .take_all(&[(Policy::Creations, "u", None)], t0)
                .unwrap();
        }
    }
}
