//! The ownership loop: every period it lists the Leases, renews this
//! replica's own, and carries out [`super::table::plan`] — members lost or
//! handed over are stopped (through the union) before their Leases are
//! released, and members won start after their Leases are held. On
//! [`Ownership::stop`], once the pipeline has stopped, every Lease it holds
//! is released so that others take its members at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::LeaseSettings;
use super::leases::{LeaseStore, Listed, Listing, WriteError, member_lease, replica_lease};
use super::table::{Seen, live_replicas, observe, plan};
use crate::health::Check;
use crate::metrics::Metrics;
use crate::pipeline::union::MemberUnion;

/// What `/readyz` and `/metrics` show of the Leases.
#[derive(Debug, Default)]
pub struct OwnershipHealth {
    inner: Mutex<HealthInner>,
}

#[derive(Debug, Default)]
struct HealthInner {
    listed_at: Option<Instant>,
    error: Option<String>,
    owned: BTreeSet<String>,
}

impl OwnershipHealth {
    /// The members this replica owns now.
    pub fn owned(&self) -> BTreeSet<String> {
        self.inner.lock().owned.clone()
    }

    /// Whether this replica owns `member` now (as [`OwnershipHealth::owned`]
    /// says, without copying the set).
    pub fn owns(&self, member: &str) -> bool {
        self.inner.lock().owned.contains(member)
    }

    /// Ok while the Leases were listed within `within`, else why not.
    fn state(&self, within: Duration) -> Result<(), String> {
        let inner = self.inner.lock();
        match (inner.listed_at, &inner.error) {
            (Some(at), _) if at.elapsed() <= within => Ok(()),
            (_, Some(error)) => Err(format!("lease store: {error}")),
            (_, None) => Err("lease store: not listed yet".into()),
        }
    }
}

/// The `Leases` readiness check: the host cluster's Leases were read lately.
#[derive(Debug)]
pub struct LeaseCheck {
    health: Arc<OwnershipHealth>,
    within: Duration,
}

impl Check for LeaseCheck {
    fn name(&self) -> &str {
        "Leases"
    }
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { self.health.state(self.within) })
    }
}

/// A running ownership loop.
#[derive(Debug)]
pub struct Ownership {
    health: Arc<OwnershipHealth>,
    duration: Duration,
    release: CancellationToken,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Ownership {
    /// Starts taking members for this replica. The loop stops taking and
    /// renewing when `shutdown` is cancelled; [`Ownership::stop`] then
    /// releases its Leases.
    pub fn spawn(
        settings: LeaseSettings,
        union: Arc<MemberUnion>,
        metrics: Arc<Metrics>,
        shutdown: &CancellationToken,
    ) -> crate::Result<Self> {
        let client = kube::Client::try_from(settings.client.clone())
            .map_err(|e| crate::Error::Settings(format!("lease kubeconfig: {e}")))?;
        let health = Arc::new(OwnershipHealth::default());
        metrics.leases.start(&settings.namespace);
        let release = CancellationToken::new();
        let looped = Loop {
            store: LeaseStore::new(client, &settings.namespace, settings.period()),
            me: settings.replica.clone(),
            settings: settings.clone(),
            desired: union.desired(),
            union,
            metrics,
            health: health.clone(),
            members: BTreeMap::new(),
            replicas: BTreeMap::new(),
            listing: Listing::default(),
            owned: BTreeMap::new(),
            presence: None,
        };
        let task = tokio::spawn(looped.run(shutdown.clone(), release.clone()));
        Ok(Self {
            health,
            duration: settings.duration,
            release,
            task: Mutex::new(Some(task)),
        })
    }

    /// The readiness check of the lease store.
    pub fn check(&self) -> LeaseCheck {
        LeaseCheck {
            health: self.health.clone(),
            within: self.duration,
        }
    }

    /// What the loop knows (owned members, the store's state).
    pub fn health(&self) -> &Arc<OwnershipHealth> {
        &self.health
    }

    /// Stops the loop and releases its Leases. Call once the pipeline has
    /// stopped (no member of this replica runs any more).
    pub async fn stop(&self) {
        self.release.cancel();
        let task = self.task.lock().take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

/// An owned member: until when it may run, and its Lease as last written.
#[derive(Debug)]
struct Owned {
    until: Instant,
    lease: Listed,
}

struct Loop {
    store: LeaseStore,
    me: String,
    settings: LeaseSettings,
    union: Arc<MemberUnion>,
    desired: tokio::sync::watch::Receiver<BTreeSet<String>>,
    metrics: Arc<Metrics>,
    health: Arc<OwnershipHealth>,
    /// Member Leases as seen, by member (absent ones too).
    members: BTreeMap<String, Seen>,
    /// Replica Leases as seen, by replica id.
    replicas: BTreeMap<String, Seen>,
    /// The last listing (the objects a write starts from).
    listing: Listing,
    owned: BTreeMap<String, Owned>,
    /// This replica's own Lease as last written.
    presence: Option<Listed>,
}

impl Loop {
    async fn run(mut self, shutdown: CancellationToken, release: CancellationToken) {
        let period = self.settings.period();
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // A member must stop at its deadline even between rounds.
            let deadline = self.earliest_deadline();
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = release.cancelled() => break,
                _ = ticks.tick() => self.round().await,
                _ = sleep_until_some(deadline) => { self.enforce().await; }
            }
        }
        // Stopping: the pipeline stops its members; release only once it
        // has (or let the Leases expire when nobody says so in time).
        tokio::select! {
            _ = release.cancelled() => self.release_all().await,
            _ = tokio::time::sleep(self.settings.duration) => {}
        }
        self.publish();
    }

    /// The earliest instant at which an owned member must stop.
    fn earliest_deadline(&self) -> Option<Instant> {
        self.owned.values().map(|o| o.until).min()
    }

    /// Runs a Lease request, but gives up on it at the earliest deadline of
    /// an owned member, so that no request (however slowly the host
    /// apiserver answers) keeps this loop from stopping that member in time.
    async fn bounded<T>(
        &self,
        request: impl Future<Output = Result<T, WriteError>>,
    ) -> Result<T, WriteError> {
        tokio::select! {
            result = request => result,
            _ = sleep_until_some(self.earliest_deadline()) => Err(WriteError::Failed(
                "no answer before an owned member's renewal deadline".into(),
            )),
        }
    }

    /// Stops the owned members whose deadline has come (their Leases were
    /// not renewed in time): others may take those Leases a duration after
    /// the last renewal they saw, so these must not run any more.
    async fn enforce(&mut self) {
        let now = Instant::now();
        let late: Vec<String> = self
            .owned
            .iter()
            .filter(|(_, o)| o.until <= now)
            .map(|(m, _)| m.clone())
            .collect();
        if late.is_empty() {
            return;
        }
        for member in &late {
            self.owned.remove(member);
            self.metrics.leases.change("lost");
            tracing::warn!(cluster = %member, "member Lease not renewed in time: its sources stop");
        }
        self.apply().await;
    }

    /// One round: list, renew presence, plan, stop, release, renew, take.
    /// Deadlines are enforced between requests, and every request is cut
    /// short at the earliest one ([`Loop::bounded`]).
    async fn round(&mut self) {
        self.enforce().await;
        match self.bounded(self.store.list()).await {
            Ok(listing) => {
                // A version is first seen when the answer came, not when
                // the request left: its writer sent it before that.
                let listed_at = Instant::now();
                self.record(listed_at, listing);
                let mut health = self.health.inner.lock();
                health.listed_at = Some(listed_at);
                health.error = None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the Leases; members run until their renewal deadline");
                self.health.inner.lock().error = Some(e.to_string());
            }
        }
        // As `/readyz/Leases`: down once no list has succeeded for a duration.
        let up = self.health.state(self.settings.duration).is_ok();
        self.metrics.leases.store(&self.settings.namespace, up);
        self.enforce().await;
        self.renew_presence().await;
        self.enforce().await;
        let now = Instant::now();
        let desired = self.desired.borrow().clone();
        let live = live_replicas(&self.replicas, &self.me, now);
        let until: BTreeMap<String, Instant> = self
            .owned
            .iter()
            .map(|(m, o)| (m.clone(), o.until))
            .collect();
        let plan = plan(&self.me, now, &desired, &live, &self.members, &until);
        // Stop before any Lease is written: dropped and handed-over members.
        let mut handed = Vec::new();
        for member in &plan.drop {
            self.owned.remove(member);
            self.metrics.leases.change("lost");
            tracing::warn!(cluster = %member, "member Lease lost: its sources stop");
        }
        for member in &plan.release {
            if let Some(owned) = self.owned.remove(member) {
                handed.push((member.clone(), owned.lease));
            }
        }
        if !plan.drop.is_empty() || !handed.is_empty() {
            self.apply().await;
        }
        for (member, lease) in handed {
            let released = self
                .bounded(self.store.release(&member_lease(&member), &lease))
                .await;
            match released {
                Ok(()) => {
                    self.metrics.leases.change("released");
                    tracing::info!(cluster = %member, "member handed over: Lease released");
                }
                Err(e) => {
                    tracing::warn!(cluster = %member, error = %e, "member stopped, its Lease not released (it expires)")
                }
            }
        }
        let mut lost = false;
        for member in plan.renew {
            let Some(owned) = self.owned.get(&member) else {
                continue;
            };
            let current = self.listing.members.get(&member).filter(|l| {
                l.holder().as_deref() == Some(&self.me) && l.version() != owned.lease.version()
            });
            let current = current.unwrap_or(&owned.lease).clone();
            let sent = Instant::now();
            let name = member_lease(&member);
            let written = self
                .bounded(self.store.hold(
                    &name,
                    Some(&member),
                    Some(&current),
                    &self.me,
                    self.settings.duration,
                ))
                .await;
            match written {
                Ok(lease) => {
                    let until = sent + self.settings.stop_after();
                    self.owned.insert(member, Owned { until, lease });
                }
                Err(WriteError::Conflict) => {
                    self.owned.remove(&member);
                    self.metrics.leases.change("lost");
                    tracing::warn!(cluster = %member, "member Lease changed by another replica: its sources stop");
                    lost = true;
                }
                Err(WriteError::Failed(e)) => {
                    tracing::warn!(cluster = %member, error = %e, "cannot renew the member Lease; retrying")
                }
            }
        }
        if lost {
            self.apply().await;
        }
        self.enforce().await;
        let mut won = Vec::new();
        for member in plan.acquire {
            let current = self.listing.members.get(&member).cloned();
            let sent = Instant::now();
            let name = member_lease(&member);
            let written = self
                .bounded(self.store.hold(
                    &name,
                    Some(&member),
                    current.as_ref(),
                    &self.me,
                    self.settings.duration,
                ))
                .await;
            match written {
                Ok(lease) => {
                    let until = sent + self.settings.stop_after();
                    self.owned.insert(member.clone(), Owned { until, lease });
                    self.metrics.leases.change("acquired");
                    tracing::info!(cluster = %member, "member Lease acquired: its sources start");
                    won.push(member);
                }
                Err(WriteError::Conflict) => {
                    tracing::debug!(cluster = %member, "another replica took the member Lease first")
                }
                Err(WriteError::Failed(e)) => {
                    tracing::warn!(cluster = %member, error = %e, "cannot take the member Lease")
                }
            }
        }
        if !won.is_empty() && !self.apply().await {
            // The pipeline did not take them (it is stopping): give them back.
            for member in won {
                if let Some(owned) = self.owned.remove(&member) {
                    let _ = self
                        .store
                        .release(&member_lease(&member), &owned.lease)
                        .await;
                }
            }
        }
        self.publish();
    }

    /// Records a listing: new versions restart their clocks.
    fn record(&mut self, now: Instant, listing: Listing) {
        let duration = self.settings.duration;
        let seen = |l: &Listed| Seen {
            holder: l.holder(),
            version: l.version(),
            duration: l.duration().unwrap_or(duration),
            since: now,
        };
        let desired = self.desired.borrow().clone();
        let names: BTreeSet<&String> = listing.members.keys().chain(&desired).collect();
        let mut members = std::mem::take(&mut self.members);
        members.retain(|m, _| names.contains(m));
        for name in names {
            let listed = listing
                .members
                .get(name)
                .map(seen)
                .unwrap_or_else(|| Seen::absent(now, duration));
            observe(&mut members, name, listed);
        }
        self.members = members;
        let mut replicas = std::mem::take(&mut self.replicas);
        replicas.retain(|r, _| listing.replicas.contains_key(r));
        for (id, listed) in &listing.replicas {
            observe(&mut replicas, id, seen(listed));
        }
        self.replicas = replicas;
        self.listing = listing;
    }

    /// Renews (or creates) this replica's own Lease.
    async fn renew_presence(&mut self) {
        let name = replica_lease(&self.me);
        let current = self.listing.replicas.get(&self.me).cloned();
        let current = match (&self.presence, current) {
            (Some(mine), Some(listed)) if listed.version() == mine.version() => Some(listed),
            (_, listed) => listed,
        };
        let written = self
            .bounded(self.store.hold(
                &name,
                None,
                current.as_ref(),
                &self.me,
                self.settings.duration,
            ))
            .await;
        match written {
            Ok(lease) => self.presence = Some(lease),
            Err(e) => tracing::warn!(error = %e, "cannot renew this replica's Lease"),
        }
    }

    /// Passes the owned members to the union; false when it refused.
    async fn apply(&mut self) -> bool {
        let owned: BTreeSet<String> = self.owned.keys().cloned().collect();
        self.publish();
        match self.union.set_owned(owned).await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %e, "the pipeline did not take the owned members");
                false
            }
        }
    }

    fn publish(&self) {
        let owned: BTreeSet<String> = self.owned.keys().cloned().collect();
        self.metrics
            .leases
            .owned
            .set(i64::try_from(owned.len()).unwrap_or(i64::MAX));
        self.health.inner.lock().owned = owned;
    }

    /// Releases every Lease this replica holds, its own last.
    async fn release_all(&mut self) {
        for (member, owned) in std::mem::take(&mut self.owned) {
            match self
                .store
                .release(&member_lease(&member), &owned.lease)
                .await
            {
                Ok(()) => self.metrics.leases.change("released"),
                Err(e) => {
                    tracing::warn!(cluster = %member, error = %e, "cannot release the member Lease (it expires)")
                }
            }
        }
        if let Some(presence) = self.presence.take() {
            let _ = self
                .store
                .release(&replica_lease(&self.me), &presence)
                .await;
        }
        tracing::info!("member Leases released");
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
