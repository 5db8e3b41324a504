//! The webhook dispatcher's loop. Each delivery runs as a task of its own, at most
//! `concurrency` at once on this replica; the loop claims more as soon as one ends, never
//! waiting for a batch. A claim takes only what fits in the shares (`per_endpoint` in flight
//! to one endpoint, `per_project` for one project, one probe to an endpoint whose circuit is
//! half-open, none to one whose circuit is open), so a slow or failing endpoint holds at most
//! its own share and every other project's deliveries still find free slots.
//!
//! Claims are leased in the database as before: a crashed replica's deliveries are claimed
//! again once their lease lapses (at least once, never lost), and two replicas never hold the
//! same delivery at once.

use std::collections::HashMap;
use std::time::Duration;

use corral_registry::{CircuitPolicy, DeliveryRecord, FairClaim, ProjectId};
use tokio::task::{Id, JoinSet};

use crate::Service;

/// The shortest lease of a claimed delivery: well past one attempt's deadline.
const LEASE: Duration = Duration::from_secs(60);

/// The deliveries this replica's loop has in flight, counted per endpoint and per project.
#[derive(Default)]
struct InFlight {
    tasks: JoinSet<()>,
    held: HashMap<Id, (String, ProjectId)>,
    endpoints: HashMap<String, u32>,
    projects: HashMap<ProjectId, u32>,
}

impl InFlight {
    fn start(&mut self, service: &Service, d: DeliveryRecord) {
        let (endpoint, project) = (d.endpoint_id.clone(), d.project_id);
        *self.endpoints.entry(endpoint.clone()).or_default() += 1;
        *self.projects.entry(project).or_default() += 1;
        let this = service.clone();
        let task = self.tasks.spawn(async move { this.deliver(d).await });
        self.held.insert(task.id(), (endpoint, project));
    }

    /// Gives back the shares of the task `id` (ended, or ended by a panic).
    fn ended(&mut self, id: Id) {
        let Some((endpoint, project)) = self.held.remove(&id) else {
            return;
        };
        if let Some(n) = self.endpoints.get_mut(&endpoint) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.endpoints.remove(&endpoint);
            }
        }
        if let Some(n) = self.projects.get_mut(&project) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.projects.remove(&project);
            }
        }
    }

    fn settle(&mut self, joined: Result<(Id, ()), tokio::task::JoinError>) {
        match joined {
            Ok((id, ())) => self.ended(id),
            Err(e) => {
                // Its lease lapses and another pass sends it again.
                tracing::error!(error = %e, "a webhook delivery task failed");
                self.ended(e.id());
            }
        }
    }

    /// Settles the tasks that ended already.
    fn reap(&mut self) {
        while let Some(joined) = self.tasks.try_join_next_with_id() {
            self.settle(joined);
        }
    }

    /// Waits until a task ends; `false` at once when none is in flight.
    async fn next(&mut self) -> bool {
        match self.tasks.join_next_with_id().await {
            Some(joined) => {
                self.settle(joined);
                true
            }
            None => false,
        }
    }
}

/// A count for the registry's claim (configured counts are far below `u32::MAX`).
fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl Service {
    /// Runs the dispatcher: claims due deliveries into free slots and starts each as it is
    /// claimed. With `interval`, forever (looking for new due deliveries every `interval`, and
    /// at once whenever a delivery ends); without, until nothing is due or in flight. How
    /// many deliveries it started.
    pub(super) async fn dispatch(&self, interval: Option<Duration>) -> usize {
        let mut flight = InFlight::default();
        let mut started = 0;
        loop {
            flight.reap();
            let n = self.claim_into(&mut flight).await;
            started += n;
            if n > 0 {
                // The shares changed: claim again before waiting.
                continue;
            }
            match interval {
                None => {
                    if !flight.next().await {
                        return started;
                    }
                }
                Some(interval) => {
                    let busy = !flight.tasks.is_empty();
                    tokio::select! {
                        _ = flight.next(), if busy => {}
                        () = tokio::time::sleep(interval) => {}
                    }
                }
            }
        }
    }

    /// Claims what fits in `flight`'s free slots and shares and starts it; how many.
    async fn claim_into(&self, flight: &mut InFlight) -> usize {
        let config = &self.inner.config.webhooks;
        let free = config.concurrency.saturating_sub(flight.tasks.len());
        if free == 0 {
            return 0;
        }
        let claimed = self
            .inner
            .registry
            .claim_deliveries_fairly(&FairClaim {
                owner: &self.inner.replica,
                lease: LEASE.max(config.timeout.saturating_mul(3)),
                limit: count(free),
                per_endpoint: count(config.per_endpoint),
                per_project: count(config.per_project),
                in_flight_endpoints: &flight.endpoints,
                in_flight_projects: &flight.projects,
                circuit_failures: config.circuit_failures,
            })
            .await;
        let claimed = match claimed {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot claim webhook deliveries");
                return 0;
            }
        };
        let n = claimed.len();
        for d in claimed {
            flight.start(self, d);
        }
        n
    }

    /// One delivery's task: the attempt, its record, and its endpoint's circuit.
    async fn deliver(&self, d: DeliveryRecord) {
        let (outcome, reached) = self.attempt(&d).await;
        let registry = &self.inner.registry;
        if let Err(e) = registry
            .record_attempt(&d.id, &self.inner.replica, &outcome)
            .await
        {
            tracing::warn!(delivery = %d.id, error = %e, "cannot record a webhook attempt");
        }
        let Some(delivered) = reached else { return };
        let config = &self.inner.config.webhooks;
        let policy = CircuitPolicy {
            failures: config.circuit_failures,
            open: config.circuit_open,
            max_open: config.max_backoff,
        };
        match registry
            .record_circuit(&d.endpoint_id, delivered, &policy)
            .await
        {
            Ok(Some(until)) => tracing::warn!(
                endpoint = %d.endpoint_id,
                %until,
                "a webhook endpoint keeps failing: its deliveries wait until then"
            ),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(endpoint = %d.endpoint_id, error = %e, "cannot record a webhook endpoint's health");
            }
        }
    }
}
