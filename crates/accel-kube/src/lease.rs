//! Leader election on a `coordination.k8s.io/v1` Lease, so that of the worker's replicas exactly
//! one runs the cluster-level controllers (the webhooks serve on every replica).
//!
//! The rules follow the Kubernetes leader-election protocol: a candidate takes the Lease when it
//! is free or when its holder has not renewed it for `leaseDurationSeconds` *as observed on this
//! replica's own clock* (so clock skew between replicas does not matter); every write carries the
//! resourceVersion it read, so two candidates racing for one Lease cannot both win. A leader that
//! cannot renew steps down once `renew_deadline` has passed since the start of its last successful
//! renewal; `renew_deadline` is shorter than the lease duration, so it has stopped before anyone
//! else can take over. A leader that is told to stop ([`Elector::run_until`]) stops leading first,
//! then releases the Lease (no holder, a one-second duration) so another replica takes over at
//! its next try instead of waiting out the lease duration: an upgrade's rolling restart pauses
//! the controllers for about one retry period.
//!
//! The Lease API sits behind [`LeaseApi`]: [`KubeLeases`] is the thin kube-rs edge,
//! [`MemoryLeases`] the in-memory one the tests race electors on. Durations are parameters.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::chrono::{DateTime, Utc};
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::time::Instant;

/// What can go wrong talking to the Lease API (a lost race is not an error: it is `Ok(false)`).
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The API server refused or could not be reached.
    #[error("lease {name}: {source}")]
    Api {
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
    /// The in-memory API was told to fail (tests of an unreachable API server).
    #[error("lease {0}: the api server is unreachable")]
    Unreachable(String),
}

/// The parts of a Lease the election reads and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// Who holds it; `None` when released.
    pub holder: Option<String>,
    /// How long a holder's claim lasts without renewal, in seconds.
    pub lease_duration_seconds: Option<i32>,
    /// When the current holder took it.
    pub acquire_time: Option<DateTime<Utc>>,
    /// When the current holder last renewed it.
    pub renew_time: Option<DateTime<Utc>>,
    /// How many times it changed hands.
    pub transitions: Option<i32>,
    /// The version read; a write with a stale one loses.
    pub resource_version: Option<String>,
}

/// The Lease API the election needs: read, create, replace-if-unchanged.
pub trait LeaseApi: Send + Sync {
    /// The Lease, or `None` when it does not exist.
    fn get(&self) -> impl Future<Output = Result<Option<LeaseRecord>, LeaseError>> + Send;
    /// Create it; `Ok(false)` when someone else created it first.
    fn create(&self, record: &LeaseRecord)
    -> impl Future<Output = Result<bool, LeaseError>> + Send;
    /// Replace it if still at `record.resource_version`; `Ok(false)` when it changed meanwhile.
    fn replace(
        &self,
        record: &LeaseRecord,
    ) -> impl Future<Output = Result<bool, LeaseError>> + Send;
}

/// The election's timing (client-go's defaults: 15 s, 10 s, 2 s).
#[derive(Debug, Clone)]
pub struct ElectionConfig {
    /// This replica's identity (the Pod name).
    pub identity: String,
    /// How long a claim lasts without renewal.
    pub lease_duration: Duration,
    /// How long a leader keeps leading without a successful renewal; shorter than
    /// `lease_duration`.
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew.
    pub retry_period: Duration,
}

impl ElectionConfig {
    /// The defaults for `identity`.
    pub fn new(identity: impl Into<String>) -> Self {
        ElectionConfig {
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// One candidate in the election.
pub struct Elector<A> {
    api: A,
    config: ElectionConfig,
    /// The record last read and when this replica first saw it in that state.
    observed: Option<(LeaseRecord, Instant)>,
}

impl<A: LeaseApi> Elector<A> {
    /// A candidate; the renew deadline is capped below the lease duration.
    pub fn new(api: A, mut config: ElectionConfig) -> Self {
        if config.renew_deadline >= config.lease_duration {
            config.renew_deadline = config.lease_duration.mul_f64(2.0 / 3.0);
        }
        Elector {
            api,
            config,
            observed: None,
        }
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.config.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// One round: take the Lease if free or expired, renew it if ours. `Ok(true)` when this
    /// replica holds it after the round.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaseError> {
        let wall = Utc::now();
        let me = self.config.identity.clone();
        let Some(current) = self.api.get().await? else {
            let record = LeaseRecord {
                holder: Some(me),
                lease_duration_seconds: Some(self.duration_seconds()),
                acquire_time: Some(wall),
                renew_time: Some(wall),
                transitions: Some(0),
                resource_version: None,
            };
            return self.api.create(&record).await;
        };
        let now = Instant::now();
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|(seen, _)| *seen != current);
        if changed {
            self.observed = Some((current.clone(), now));
        }
        let held_by_me = current.holder.as_deref() == Some(me.as_str());
        let held_by_other = current.holder.as_deref().is_some_and(|h| !h.is_empty()) && !held_by_me;
        if held_by_other {
            let lasts = current
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(self.config.lease_duration, Duration::from_secs);
            let seen_at = self.observed.as_ref().map_or(now, |(_, at)| *at);
            if seen_at + lasts > now {
                return Ok(false);
            }
        }
        let mut record = LeaseRecord {
            holder: Some(me),
            lease_duration_seconds: Some(self.duration_seconds()),
            renew_time: Some(wall),
            ..current.clone()
        };
        if !held_by_me {
            record.acquire_time = Some(wall);
            record.transitions = Some(current.transitions.unwrap_or(0) + 1);
        }
        self.api.replace(&record).await
    }

    /// Campaign for ever, publishing whether this replica leads on `leading`. A leader steps
    /// down (`false`) once `renew_deadline` has passed since the start of its last successful
    /// renewal, even while a renewal is still hanging.
    pub async fn run(self, leading: watch::Sender<bool>) {
        self.run_until(leading, std::future::pending()).await;
    }

    /// [`Elector::run`] until `stop` completes; then, if this replica leads, it stops leading
    /// (`false` on `leading`, so the controllers stop first) and releases the Lease, bounded by
    /// the renew deadline. Returns once released (or the release has failed, logged).
    pub async fn run_until(mut self, leading: watch::Sender<bool>, stop: impl Future<Output = ()>) {
        let mut last_renew: Option<Instant> = None;
        tokio::pin!(stop);
        loop {
            let round = async {
                let started = Instant::now();
                // A leader's attempt may take no longer than what is left of its deadline.
                let budget = match last_renew {
                    Some(at) => {
                        (at + self.config.renew_deadline).saturating_duration_since(started)
                    }
                    None => self.config.renew_deadline,
                };
                let attempt = tokio::time::timeout(budget, self.try_acquire_or_renew()).await;
                let holds = match attempt {
                    Ok(Ok(holds)) => holds,
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "leader election: cannot reach the lease");
                        false
                    }
                    Err(_) => {
                        tracing::warn!("leader election: the lease request timed out");
                        false
                    }
                };
                if holds {
                    last_renew = Some(started);
                    if !*leading.borrow() {
                        tracing::info!(identity = %self.config.identity, "leading: starting the controllers");
                        leading.send_replace(true);
                    }
                } else if let Some(at) = last_renew
                    && Instant::now() >= at + self.config.renew_deadline
                {
                    tracing::warn!(identity = %self.config.identity, "lost the lease: stopping the controllers");
                    last_renew = None;
                    leading.send_replace(false);
                }
                let next = started + self.config.retry_period;
                match last_renew {
                    // Never sleep past the deadline while leading: step down on time.
                    Some(at) => {
                        tokio::time::sleep_until(next.min(at + self.config.renew_deadline)).await;
                    }
                    None => tokio::time::sleep_until(next).await,
                }
            };
            tokio::select! {
                () = round => {}
                () = &mut stop => break,
            }
        }
        // A round cut short may have renewed without saying so: ask the Lease, not `leading`.
        let was_leading = leading.send_replace(false);
        let released = tokio::time::timeout(self.config.renew_deadline, self.release()).await;
        match released {
            Ok(Ok(true)) => {
                tracing::info!(identity = %self.config.identity, "stopping: released the lease")
            }
            Ok(Ok(false)) if was_leading => tracing::warn!(
                identity = %self.config.identity,
                "stopping: the lease changed hands while it was being released"
            ),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => tracing::warn!(
                error = %e,
                "stopping: cannot release the lease; another replica takes over once it expires"
            ),
            Err(_) => tracing::warn!(
                "stopping: releasing the lease timed out; another replica takes over once it expires"
            ),
        }
    }

    /// Gives the Lease up if this replica holds it: no holder, a one-second duration, so any
    /// candidate takes it at its next try (client-go's `ReleaseOnCancel`). `Ok(false)` when it
    /// is not ours (nothing is written) or changed meanwhile.
    pub async fn release(&mut self) -> Result<bool, LeaseError> {
        let Some(current) = self.api.get().await? else {
            return Ok(false);
        };
        if current.holder.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(false);
        }
        let now = Utc::now();
        let record = LeaseRecord {
            holder: None,
            lease_duration_seconds: Some(1),
            acquire_time: Some(now),
            renew_time: Some(now),
            ..current
        };
        self.api.replace(&record).await
    }
}

/// The kube-rs Lease API for one Lease.
#[derive(Clone)]
pub struct KubeLeases {
    api: Api<Lease>,
    name: String,
}

impl KubeLeases {
    /// The Lease `name` in `namespace`.
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        KubeLeases {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
        }
    }

    fn error(&self, source: kube::Error) -> LeaseError {
        LeaseError::Api {
            name: self.name.clone(),
            source: Box::new(source),
        }
    }

    fn lease(&self, record: &LeaseRecord) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                resource_version: record.resource_version.clone(),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: record.holder.clone(),
                lease_duration_seconds: record.lease_duration_seconds,
                acquire_time: record.acquire_time.map(MicroTime),
                renew_time: record.renew_time.map(MicroTime),
                lease_transitions: record.transitions,
            }),
        }
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 409)
}

impl LeaseApi for KubeLeases {
    async fn get(&self) -> Result<Option<LeaseRecord>, LeaseError> {
        let lease = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.error(e))?;
        Ok(lease.map(|lease| {
            let spec = lease.spec.unwrap_or_default();
            LeaseRecord {
                holder: spec.holder_identity,
                lease_duration_seconds: spec.lease_duration_seconds,
                acquire_time: spec.acquire_time.map(|t| t.0),
                renew_time: spec.renew_time.map(|t| t.0),
                transitions: spec.lease_transitions,
                resource_version: lease.metadata.resource_version,
            }
        }))
    }

    async fn create(&self, record: &LeaseRecord) -> Result<bool, LeaseError> {
        match self
            .api
            .create(&PostParams::default(), &self.lease(record))
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(self.error(e)),
        }
    }

    async fn replace(&self, record: &LeaseRecord) -> Result<bool, LeaseError> {
        match self
            .api
            .replace(&self.name, &PostParams::default(), &self.lease(record))
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(self.error(e)),
        }
    }
}

#[derive(Default)]
struct MemoryState {
    lease: Option<LeaseRecord>,
    version: u64,
    unreachable: HashMap<String, bool>,
}

/// An in-memory Lease shared by several candidates: create fails when it exists, replace fails
/// on a stale resourceVersion, exactly as the API server behaves. Each candidate gets a handle
/// ([`MemoryLeases::for_candidate`]) that can be cut off from the "API server".
#[derive(Clone, Default)]
pub struct MemoryLeases {
    state: Arc<Mutex<MemoryState>>,
    candidate: String,
}

impl MemoryLeases {
    /// A handle on the same Lease for `candidate`.
    pub fn for_candidate(&self, candidate: &str) -> MemoryLeases {
        MemoryLeases {
            state: self.state.clone(),
            candidate: candidate.to_string(),
        }
    }

    /// Cut `candidate` off from the API server (or reconnect it).
    pub fn set_unreachable(&self, candidate: &str, unreachable: bool) {
        if let Ok(mut state) = self.state.lock() {
            state.unreachable.insert(candidate.to_string(), unreachable);
        }
    }

    /// The Lease as stored.
    pub fn current(&self) -> Option<LeaseRecord> {
        self.state.lock().ok().and_then(|s| s.lease.clone())
    }

    fn with<T>(&self, f: impl FnOnce(&mut MemoryState) -> T) -> Result<T, LeaseError> {
        let mut state = self
            .state
            .lock()
            .map_err(|_| LeaseError::Unreachable(self.candidate.clone()))?;
        if state
            .unreachable
            .get(&self.candidate)
            .copied()
            .unwrap_or(false)
        {
            return Err(LeaseError::Unreachable(self.candidate.clone()));
        }
        Ok(f(&mut state))
    }
}

impl LeaseApi for MemoryLeases {
    async fn get(&self) -> Result<Option<LeaseRecord>, LeaseError> {
        self.with(|s| s.lease.clone())
    }

    async fn create(&self, record: &LeaseRecord) -> Result<bool, LeaseError> {
        self.with(|s| {
            if s.lease.is_some() {
                return false;
            }
            s.version += 1;
            s.lease = Some(LeaseRecord {
                resource_version: Some(s.version.to_string()),
                ..record.clone()
            });
            true
        })
    }

    async fn replace(&self, record: &LeaseRecord) -> Result<bool, LeaseError> {
        self.with(|s| {
            let current = s.lease.as_ref().and_then(|l| l.resource_version.clone());
            if current.is_none() || current != record.resource_version {
                return false;
            }
            s.version += 1;
            s.lease = Some(LeaseRecord {
                resource_version: Some(s.version.to_string()),
                ..record.clone()
            });
            true
        })
    }
}

/// Run `start()`'s work while `leading` says this replica leads, and abort it as soon as it
/// stops leading (the work is started afresh on the next win). Returns when the election ends.
pub async fn while_leading<F, Fut>(mut leading: watch::Receiver<bool>, start: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut running: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        let leads = *leading.borrow_and_update();
        match (leads, running.take()) {
            (true, Some(task)) if !task.is_finished() => running = Some(task),
            (true, _) => running = Some(tokio::spawn(start())),
            (false, Some(task)) => task.abort(),
            (false, None) => {}
        }
        if leading.changed().await.is_err() {
            if let Some(task) = running.take() {
                task.abort();
            }
            return;
        }
    }
}
