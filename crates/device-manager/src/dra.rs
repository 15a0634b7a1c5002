//! `serve --dra`: the manufacturer's DRA kubelet plugin beside its device plugins, on their one
//! ledger (issue 46). What `accel-dra` serves is wired here to what the daemon has:
//!
//! - claims are granted through [`PluginLedger`], the device plugins' [`PluginHandle`]: charged,
//!   journalled and answered by the manufacturer's responder, so a card held through a claim is
//!   never granted through the device plugin (its tokens read Unhealthy) and the reverse (the
//!   ledger refuses it, and the slice stops offering it);
//! - the node's ResourceSlice follows each detection the daemon publishes and the ledger: the
//!   manufacturer's measured section, less the cards a container holds through the device
//!   plugin (a failed pass carries the last measured inventory forward, so it changes nothing);
//! - each device's health (the detection's verdict and reasons) streams to the kubelet
//!   (`DRAResourceHealth`), which shows it in the status of the Pods holding it;
//! - a sweep every [`SWEEP_EVERY`] releases the claims the ledger holds that the API server no
//!   longer has allocated here and reserved (a claim deleted with its Pod while no unprepare
//!   reached us), and removes CDI specs whose claim holds nothing.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use accel_backend::respond::Injection;
use accel_core::Manufacturer;
use accel_core::inventory::ManufacturerInventory;
use accel_core::labels::GroupNaming;
use accel_dra::cdi::CdiSpecs;
use accel_dra::claims::{ApiClaimResolver, ClaimLedger, ConsumedShare, ReservedPod};
use accel_dra::health::{self, HealthFeed};
use accel_dra::plugin::{ClaimRef, DraService, error_text};
use accel_dra::publish::SlicePublisher;
use accel_dra::slices::PartitionRef;
use accel_dra::{DriverName, ServedDriver, slices};
use accel_plugin::PluginHandle;
use accel_plugin::pods::{Phase, Pod, PodSource};
use accel_plugin::service::{ClaimGrant, ClaimPartition, ClaimRefusal, ClaimSlice};
use anyhow::Context;
use tokio::sync::watch;

use crate::daemon::Published;

/// How often the claims the ledger holds are checked against the API server.
pub const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// The claims the API server has allocated on this node and reserved now, by UID (or why they
/// could not be listed).
pub type LiveClaims = Arc<
    dyn Fn() -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<BTreeSet<String>, String>> + Send>,
        > + Send
        + Sync,
>;

/// The device plugins' ledger as the DRA driver's.
pub struct PluginLedger {
    handle: PluginHandle,
    pods: Arc<dyn PodSource>,
    driver: DriverName,
    manufacturer: Manufacturer,
    /// Asked when the ledger refuses a claim: the scheduler may have reallocated what a claim
    /// it no longer has allocated still holds here, because the kubelet's unprepare of that
    /// claim has not reached us yet (the rig showed it: a partition's slices given to the next
    /// claim before the last one's instance was destroyed; the kubelet then never retried the
    /// refused prepare). `None`: no such check.
    live: Option<LiveClaims>,
}

impl PluginLedger {
    /// The Pod the responder is asked for: the watch's copy, or (not delivered yet) one with
    /// the claim's names alone.
    fn pod(&self, reserved: &ReservedPod) -> Pod {
        self.pods
            .snapshot()
            .and_then(|pods| {
                pods.iter()
                    .find(|p| p.uid == reserved.uid)
                    .map(|p| Pod::clone(p))
            })
            .unwrap_or_else(|| Pod {
                uid: reserved.uid.clone(),
                namespace: reserved.namespace.clone(),
                name: reserved.name.clone(),
                created: 0,
                phase: Phase::Pending,
                runtime_class: None,
                containers: Vec::new(),
                allocated: None,
            })
    }

    /// Releases the claims the ledger holds (other than `asking`) that the API server no longer
    /// has allocated here and reserved, logging each with `why`: what the scheduler already
    /// counts free. The UIDs found so, or why the claims could not be listed; none without a
    /// lister.
    async fn release_not_live(
        &self,
        asking: Option<&str>,
        why: &str,
    ) -> Result<Vec<String>, String> {
        let Some(live) = &self.live else {
            return Ok(Vec::new());
        };
        // Read before the list: a claim granted after it is not judged by a list that
        // predates it.
        let mut held = self.handle.claim_uids();
        if let Some(asking) = asking {
            held.remove(asking);
        }
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let live = live().await?;
        let gone: Vec<String> = held.difference(&live).cloned().collect();
        for uid in &gone {
            if self.handle.release_claim(uid).await {
                tracing::info!(claim = %uid, "released a claim {why}");
            }
        }
        Ok(gone)
    }
}

impl ClaimLedger for PluginLedger {
    async fn grant(
        &self,
        claim: &ClaimRef,
        pod: &ReservedPod,
        devices: &[String],
        indexes: &[u32],
        share: Option<&ConsumedShare>,
        partition: Option<&PartitionRef>,
    ) -> Result<Injection, String> {
        let slice = share.map(|s| ClaimSlice {
            // What the claim consumed, floored to whole MiB; none named: all of the card.
            memory_mib: s.memory_bytes.map_or(u64::MAX, |b| b / (1024 * 1024)),
            cores_percentage: s.cores_percentage,
        });
        // A share's id keeps two claims' shares of one device apart in the ledger's records.
        let devices = devices
            .iter()
            .map(|d| match share.and_then(|s| s.share_id.as_deref()) {
                Some(id) => format!("{d}/{id}"),
                None => d.clone(),
            })
            .collect();
        let ask = ClaimGrant {
            claim_uid: claim.uid.clone(),
            pod: self.pod(pod),
            driver: self.driver.to_string(),
            devices,
            accelerators: indexes.to_vec(),
            slice,
            partition: partition.map(|p| ClaimPartition {
                profile: p.profile.clone(),
                start: p.start,
            }),
        };
        tracing::debug!(manufacturer = %self.manufacturer, claim = %claim.uid, "granting a claim");
        let refusal = match self.handle.grant_claim(&ask).await {
            Ok(injection) => return Ok(injection),
            Err(refusal @ ClaimRefusal::Ledger { .. }) => refusal,
            Err(other) => return Err(other.to_string()),
        };
        let why = "no longer allocated here: the scheduler gave its devices to another";
        let released = match self.release_not_live(Some(&claim.uid), why).await {
            Ok(gone) => !gone.is_empty(),
            Err(e) => {
                tracing::warn!("cannot list ResourceClaims to find stale ones: {e}");
                false
            }
        };
        if released {
            return self
                .handle
                .grant_claim(&ask)
                .await
                .map_err(|e| e.to_string());
        }
        Err(refusal.to_string())
    }

    async fn release(&self, claim_uid: &str) -> bool {
        self.handle.release_claim(claim_uid).await
    }
}

/// Where the driver runs.
#[derive(Debug, Clone)]
pub struct DraOptions {
    pub node: String,
    /// Logical slices by consumable capacity where the device plugins serve `.sliced`.
    pub sharing: slices::Sharing,
    pub manufacturer: Manufacturer,
    pub kubelet_dir: PathBuf,
    pub cdi_dir: PathBuf,
    pub naming: GroupNaming,
}

/// The served driver and its publishing and sweeping loop.
pub struct RunningDra {
    served: ServedDriver,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningDra {
    /// Stops the loop and both servers (the registration socket is removed).
    pub async fn stop(self) {
        self.stop.send_replace(true);
        let _ = self.task.await;
        match self.served.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("DRA servers: {e}"),
            Err(e) => tracing::warn!("DRA servers: {e}"),
        }
    }
}

/// The section the driver offers: the measured one less the cards a container holds through
/// the device plugin, and, on a card in a partitioning mode, less the placements that overlap
/// a container's partition or a live instance no grant holds (a claim's partitions stay: the
/// scheduler counts them itself).
pub fn offered_section(
    section: &ManufacturerInventory,
    handle: &PluginHandle,
) -> ManufacturerInventory {
    use accel_core::ledger::partitions;
    let mut offered = section.clone();
    handle.with_ledger(|ledger| {
        offered
            .accelerators
            .retain(|a| slices::is_partitioned(a) || !ledger.held_by_container(a.index));
        for a in offered
            .accelerators
            .iter_mut()
            .filter(|a| slices::is_partitioned(a))
        {
            let mut taken: Vec<(u32, u32)> = partitions::placed_by_containers(ledger, a.index)
                .into_iter()
                .map(|p| (p.start, p.size))
                .collect();
            taken.extend(
                partitions::outside(ledger, a.index)
                    .into_iter()
                    .map(|o| (o.start, o.size)),
            );
            for profile in &mut a.partition_profiles {
                profile.placements.retain(|p| {
                    !taken
                        .iter()
                        .any(|t| partitions::overlaps(*t, (p.start, p.size)))
                });
            }
        }
    });
    offered
}

/// Serves the driver and starts its loop (inside the daemon's runtime).
pub fn start(
    options: DraOptions,
    client: kube::Client,
    handle: PluginHandle,
    pods: Arc<dyn PodSource>,
    published: watch::Receiver<Option<Published>>,
) -> anyhow::Result<RunningDra> {
    let driver = slices::driver_for(options.manufacturer)
        .map_err(|e| anyhow::anyhow!("{}: {e}", options.manufacturer))?;
    let live: LiveClaims = {
        let (client, driver, node) = (client.clone(), driver.clone(), options.node.clone());
        Arc::new(move || {
            let (client, driver, node) = (client.clone(), driver.clone(), node.clone());
            Box::pin(async move {
                accel_dra::claims::live_claims(&client, &driver, &node)
                    .await
                    .map_err(|e| e.to_string())
            })
        })
    };
    let ledger = PluginLedger {
        handle: handle.clone(),
        pods,
        driver: driver.clone(),
        manufacturer: options.manufacturer,
        live: Some(live),
    };
    let resolver = Arc::new(ApiClaimResolver::new(
        client.clone(),
        driver.clone(),
        &options.node,
        ledger,
    ));
    let specs = CdiSpecs::new(&options.cdi_dir, options.manufacturer);
    let service = DraService::new(resolver.clone(), specs.clone());
    let (stop, stopped) = watch::channel(false);
    let health = HealthFeed::new();
    let served = accel_dra::serve(
        &options.kubelet_dir,
        driver.clone(),
        service,
        Some(health.service(&options.node)),
        stopped.clone(),
    )
    .with_context(|| format!("serving the DRA driver {driver}"))?;
    tracing::info!(
        "DRA driver {driver} at {} (registration {}), CDI specs in {}",
        served.sockets.dra.display(),
        served.sockets.registration.display(),
        options.cdi_dir.display()
    );
    let publisher =
        SlicePublisher::new(client, &options.node, options.naming).with_sharing(options.sharing);
    let task = tokio::spawn(run(Loop {
        options,
        driver,
        handle,
        resolver,
        specs,
        publisher,
        published,
        health,
        stop: stopped,
    }));
    Ok(RunningDra { served, stop, task })
}

struct Loop {
    options: DraOptions,
    driver: DriverName,
    handle: PluginHandle,
    resolver: Arc<ApiClaimResolver<PluginLedger>>,
    specs: CdiSpecs,
    publisher: SlicePublisher,
    published: watch::Receiver<Option<Published>>,
    health: HealthFeed,
    stop: watch::Receiver<bool>,
}

async fn run(mut l: Loop) {
    let mut ledger = l.handle.changes();
    let mut sweep = tokio::time::interval(SWEEP_EVERY);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<ManufacturerInventory> = None;
    loop {
        let mut sweeping = false;
        tokio::select! {
            _ = l.stop.wait_for(|s| *s) => return,
            changed = l.published.changed() => if changed.is_err() { return },
            changed = ledger.changed() => if changed.is_err() { return },
            _ = sweep.tick() => sweeping = true,
        }
        let section = l.published.borrow().as_ref().and_then(|p| {
            p.inventory
                .manufacturers
                .iter()
                .find(|s| s.name == l.options.manufacturer)
                .map(|s| (s.clone(), p.detected_at))
        });
        if let Some((section, detected_at)) = section {
            // Every device's health, held or free, for the kubelet's Pod status.
            l.health.set(health::device_health(&section, detected_at));
            let offered = offered_section(&section, &l.handle);
            if last.as_ref() != Some(&offered) {
                match l.publisher.publish(&l.driver, &offered).await {
                    Ok(done) => {
                        tracing::info!(driver = %l.driver, "ResourceSlice: {done:?}");
                        l.resolver.set_published_section(&offered);
                        last = Some(offered);
                    }
                    Err(e) => tracing::warn!(
                        driver = %l.driver,
                        "ResourceSlice not published: {}",
                        error_text(&e)
                    ),
                }
            }
        }
        if sweeping {
            sweep_claims(&l).await;
        }
    }
}

/// Releases the claims held here that the API server no longer has allocated here and
/// reserved, then removes the specs of claims that hold nothing.
async fn sweep_claims(l: &Loop) {
    let ledger = l.resolver.ledger();
    match ledger
        .release_not_live(None, "no longer allocated here and reserved")
        .await
    {
        Ok(gone) => {
            for uid in &gone {
                if let Err(e) = l.specs.remove(uid) {
                    tracing::warn!("{}", error_text(&e));
                }
            }
        }
        Err(e) => tracing::warn!("cannot list ResourceClaims to reclaim gone ones: {e}"),
    }
    // Specs listed before the grants are read: prepare grants before it writes a spec.
    match l.specs.claim_uids() {
        Ok(uids) => {
            let held: BTreeSet<String> = l.handle.claim_uids();
            for uid in uids.iter().filter(|u| !held.contains(*u)) {
                match l.specs.remove(uid) {
                    Ok(()) => {
                        tracing::info!(claim = %uid, "removed the CDI spec of a claim that holds nothing")
                    }
                    Err(e) => tracing::warn!("{}", error_text(&e)),
                }
            }
        }
        Err(e) => tracing::warn!(
            "cannot list the CDI specs in {}: {e}",
            l.options.cdi_dir.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use accel_core::inventory::Accelerator;
    use accel_core::ledger::GrantKey;
    use accel_nvidia::responder::{EngineFacts, NvidiaResponder};
    use accel_plugin::pods::MemoryPods;
    use accel_plugin::service::Offer;
    use accel_plugin::settings::{InjectionStrategy, Settings};
    use accel_plugin::testing::{Kubelet, gpu_uuid, pod, seat};
    use accel_plugin::{Config, DevicePlugins};

    use super::*;

    fn accelerator(index: u32) -> Accelerator {
        serde_json::from_value(serde_json::json!({
            "index": index, "uuid": gpu_uuid(index), "product": "NVIDIA A100-SXM4-80GB",
            "busId": null, "memoryMiB": 81920, "numaNode": 0, "architecture": null,
            "computeCapability": null, "migMode": null, "healthy": true, "grantable": "whole",
            "source": "driver", "cores": 6912, "brand": null, "serial": null,
            "vbiosVersion": null, "boardPartNumber": null, "minorNumber": null,
            "persistenceMode": null, "driverModel": null, "gspFirmwareVersion": null,
            "excluded": null, "ecc": null, "remappedRows": null
        }))
        .expect("an accelerator")
    }

    /// Claim `claim-1` (`ml/<name>`) as the kubelet names it, reserved for Pod `ml/<pod>`
    /// (`pod-7`).
    fn claim_of(name: &str, pod: &str) -> (ClaimRef, ReservedPod) {
        let claim = ClaimRef {
            namespace: "ml".into(),
            name: name.into(),
            uid: "claim-1".into(),
        };
        let reserved = ReservedPod {
            namespace: "ml".into(),
            name: pod.into(),
            uid: "pod-7".into(),
        };
        (claim, reserved)
    }

    /// The NVIDIA device plugins' configuration under `dir` (the environment strategy).
    fn nvidia_config(
        dir: &std::path::Path,
        seats: Vec<accel_core::ledger::Seat>,
        partitions: Option<accel_plugin::Partitions>,
    ) -> Config {
        Config {
            kubelet_dir: dir.join("kubelet"),
            data_dir: dir.join("data"),
            settings: Settings::default(),
            offer: Offer::of(Manufacturer::Nvidia),
            seats,
            responder: Arc::new(NvidiaResponder {
                strategy: InjectionStrategy::Envvar,
                cuda_major: Some(13),
                pod_dir_root: dir.join("data/pods"),
                preload_dir: dir.join("data/preload"),
                library_dir: accel_nvidia::responder::HOST_LIBRARY_DIR.into(),
                engine: Arc::new(EngineFacts::default()),
            }),
            poll_interval: Duration::from_millis(20),
            partitions,
            metrics: Default::default(),
        }
    }

    /// The NVIDIA driver's ledger over the plugins' handle.
    fn nvidia_ledger(
        handle: &PluginHandle,
        pods: Arc<dyn PodSource>,
        live: Option<LiveClaims>,
    ) -> PluginLedger {
        PluginLedger {
            handle: handle.clone(),
            pods,
            driver: slices::driver_for(Manufacturer::Nvidia).expect("a driver"),
            manufacturer: Manufacturer::Nvidia,
            live,
        }
    }

    #[tokio::test]
    async fn a_claim_is_granted_on_the_plugins_ledger_and_a_containers_card_leaves_the_slice() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
        let config = nvidia_config(dir.path(), (0..3).map(seat).collect(), None);
        let pods: Arc<dyn PodSource> = Arc::new(kubelet.pods().clone());
        let plugins = DevicePlugins::start(config, pods.clone())
            .await
            .expect("the plugins start");
        kubelet.wait_for(&["nvidia.com/gpu"]).await;
        let handle = plugins.handle();
        let ledger = nvidia_ledger(&handle, pods, None);
        let (claim, reserved) = claim_of("train", "trainer");
        // The Pod is not in the watch: the responder is asked with the claim's names alone.
        let injection = ledger
            .grant(&claim, &reserved, &["gpu-1".into()], &[1], None, None)
            .await
            .expect("granted");
        assert_eq!(injection.envs["NVIDIA_VISIBLE_DEVICES"], gpu_uuid(1));
        let grant = handle
            .ledger()
            .grant(&GrantKey::claim("claim-1", "pod-7"))
            .cloned();
        let grant = grant.expect("the claim's grant");
        assert_eq!(grant.resource, "nvidia.gpustack.ai");
        assert_eq!(grant.device_ids, ["gpu-1"]);
        // A container takes a card through the device plugin: it leaves what DRA offers; the
        // claim's card stays (its claim is allocated there).
        kubelet.create(pod("a", 1, &[("main", &[("nvidia.com/gpu", "1")])]));
        kubelet.admit("a").await.expect("admitted");
        let section = ManufacturerInventory {
            accelerators: (0..3).map(accelerator).collect(),
            ..ManufacturerInventory::empty(Manufacturer::Nvidia)
        };
        let offered: Vec<u32> = offered_section(&section, &handle)
            .accelerators
            .iter()
            .map(|a| a.index)
            .collect();
        let container = handle
            .ledger()
            .grants()
            .iter()
            .find(|(k, _)| k.claim_uid().is_none())
            .map(|(_, g)| g.accelerators[0])
            .expect("the container's grant");
        assert_ne!(container, 1, "the device plugin gave the claim's card");
        let expected: Vec<u32> = (0..3).filter(|i| *i != container).collect();
        assert_eq!(offered, expected);
        // The refusal is the ledger's one line, naming the claim.
        let other = ClaimRef {
            uid: "claim-2".into(),
            ..claim.clone()
        };
        let refused = ledger
            .grant(
                &other,
                &reserved,
                &[format!("gpu-{container}")],
                &[container],
                None,
                None,
            )
            .await
            .expect_err("a container's card");
        assert!(
            refused.starts_with("the ledger refused ResourceClaim claim-2: accelerator"),
            "{refused}"
        );
        assert!(ledger.release("claim-1").await);
        assert!(!ledger.release("claim-1").await);
        // A share of card 1 by its consumed capacity: a slice, recorded under its share's id.
        let share = ConsumedShare {
            share_id: Some("share-9".into()),
            memory_bytes: Some(20 << 30),
            cores_percentage: Some(20),
        };
        let sliced = ledger
            .grant(
                &claim,
                &reserved,
                &["gpu-1".into()],
                &[1],
                Some(&share),
                None,
            )
            .await
            .expect("a slice");
        assert_eq!(sliced.envs["CUDA_DEVICE_MEMORY_LIMIT_0"], "20480m");
        let grant = handle
            .ledger()
            .grant(&GrantKey::claim("claim-1", "pod-7"))
            .cloned();
        let grant = grant.expect("the slice's grant");
        assert_eq!(grant.family, accel_core::ledger::Family::Sliced);
        assert_eq!(grant.device_ids, ["gpu-1/share-9"]);
        assert_eq!(grant.cores_percentage, Some(20));
        plugins.stop().await;
    }

    /// On the recorded 8×H100 MIG host (its MIG state following the commands): a claim's
    /// partition is made at its allocated placement through the DRA ledger, a container's
    /// partition takes the placements it overlaps out of what DRA offers while the claim's stay
    /// published; a claim the scheduler no longer has allocated is released when another claim
    /// is given its slices, and a release destroys the claim's instance.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_claims_partition_and_a_containers_share_one_mig_card() {
        use accel_host::{FsHost, RecordedCommands};
        use accel_nvidia::mig_replay::{self, MigState};
        use accel_plugin::Partitions;
        use accel_plugin::service::Orphans;

        let dir = tempfile::tempdir().expect("a temp dir");
        let host = dir.path().join("host");
        accel_testkit::copy_tree(&accel_testkit::recorded_host("hgx-h100-8gpu-mig"), &host)
            .expect("the recorded host copied");
        let commands: Arc<dyn accel_host::Commands> = Arc::from(mig_replay::wrap(
            &host,
            Box::new(RecordedCommands::load(&host).expect("its commands")),
        ));
        let section = accel_nvidia::detector::detect(
            &FsHost::new(host.join("root")),
            commands.as_ref(),
            accel_nvidia::detector::DetectOptions::default(),
        )
        .detection
        .expect("detected");
        let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
        let seats = section
            .accelerators
            .iter()
            .map(|a| accel_core::ledger::Seat::from_accelerator(a, 0))
            .collect();
        let partitions = Partitions {
            partitioner: Arc::new(accel_nvidia::partitioner::SmiPartitioner::default()),
            commands,
            orphans: Orphans::default(),
        };
        let config = nvidia_config(dir.path(), seats, Some(partitions));
        let pods: Arc<dyn PodSource> = Arc::new(kubelet.pods().clone());
        let plugins = DevicePlugins::start(config, pods.clone())
            .await
            .expect("the plugins start");
        kubelet.wait_for(&["nvidia.com/gpu.partitioned"]).await;
        let handle = plugins.handle();
        let live: Arc<std::sync::Mutex<BTreeSet<String>>> = Arc::default();
        // What the API server has allocated here and reserved: set by the test below.
        let listed: LiveClaims = {
            let live = live.clone();
            Arc::new(move || {
                let now = live.lock().map(|l| l.clone()).unwrap_or_default();
                Box::pin(async move { Ok(now) })
            })
        };
        let ledger = nvidia_ledger(&handle, pods, Some(listed));
        let published = slices::published_devices(&offered_section(&section, &handle));
        assert_eq!(published.len(), 8 * 18, "every placement of every GPU");
        // The scheduler allocated gpu-0-3g-40gb-4: the DRA ledger makes it there.
        let Some(slices::DeviceRef::Partition(part)) = published.get("gpu-0-3g-40gb-4") else {
            panic!("gpu-0-3g-40gb-4 is not published");
        };
        let (claim, reserved) = claim_of("infer", "server");
        let injection = ledger
            .grant(
                &claim,
                &reserved,
                &["gpu-0-3g-40gb-4".into()],
                &[0],
                None,
                Some(part),
            )
            .await
            .expect("the partition granted");
        let uuid = injection.envs["NVIDIA_VISIBLE_DEVICES"].clone();
        assert!(uuid.starts_with("MIG-"), "{uuid}");
        let live_instances = |gpu: u32| -> Vec<(u32, String)> {
            let state = MigState::load(&host.join(mig_replay::STATE_FILE)).expect("MIG state");
            state
                .instances
                .iter()
                .filter(|i| i.gpu == gpu)
                .map(|i| (i.start, i.profile.clone()))
                .collect()
        };
        assert_eq!(live_instances(0), [(4, "3g.40gb".to_string())]);
        // The claim's placement stays offered (the scheduler counts it); a container's 4g.40gb
        // packs onto GPU 0 at slices 0–3, and every placement it overlaps leaves the offer.
        let profile = "nvidia.com/gpu.partitioned.mig-4g.40gb";
        kubelet.create(pod(
            "a",
            1,
            &[(
                "main",
                &[("nvidia.com/gpu.partitioned", "1"), (profile, "1")],
            )],
        ));
        kubelet.admit("a").await.expect("admitted");
        let mut now = live_instances(0);
        now.sort();
        assert_eq!(
            now,
            [(0, "4g.40gb".to_string()), (4, "3g.40gb".to_string())]
        );
        let offered = offered_section(&section, &handle);
        let gpu0: Vec<String> = slices::published_devices(&offered)
            .into_iter()
            .filter(|(_, d)| d.index() == 0)
            .map(|(name, _)| name)
            .collect();
        // Slices 0–3 are the container's: only placements within slices 4–7 remain.
        assert_eq!(
            gpu0,
            [
                "gpu-0-1g-10gb-4",
                "gpu-0-1g-10gb-5",
                "gpu-0-1g-10gb-6",
                "gpu-0-1g-20gb-4",
                "gpu-0-1g-20gb-6",
                "gpu-0-2g-20gb-4",
                "gpu-0-3g-40gb-4"
            ]
        );
        assert!(
            offered
                .accelerators
                .iter()
                .all(|a| a.index != 0 || !a.partition_profiles.is_empty())
        );
        // The scheduler gives the claim's slices to claim-2 while claim-1 is still allocated
        // here: refused, and claim-1 keeps its instance.
        let second = |uid: &str| ClaimRef {
            uid: uid.into(),
            ..claim.clone()
        };
        let Some(slices::DeviceRef::Partition(small)) = published.get("gpu-0-1g-10gb-5") else {
            panic!("gpu-0-1g-10gb-5 is not published");
        };
        let names = ["gpu-0-1g-10gb-5".to_string()];
        let claim_2 = second("claim-2");
        let grant_2 = || ledger.grant(&claim_2, &reserved, &names, &[0], None, Some(small));
        *live.lock().expect("live") = ["claim-1".to_string(), "claim-2".to_string()].into();
        let refused = grant_2().await.expect_err("claim-1 still holds slices 4-7");
        assert!(
            refused.starts_with("the ledger refused ResourceClaim claim-2"),
            "{refused}"
        );
        assert_eq!(handle.claim_uids(), ["claim-1".to_string()].into());
        // claim-1 is no longer allocated (its Pod went; the kubelet's unprepare has not come):
        // what the scheduler counts free is freed, and claim-2 is made where it was allocated.
        *live.lock().expect("live") = ["claim-2".to_string()].into();
        let injection = grant_2()
            .await
            .expect("claim-1's stale hold released first");
        assert!(injection.envs["NVIDIA_VISIBLE_DEVICES"].starts_with("MIG-"));
        let mut now = live_instances(0);
        now.sort();
        assert_eq!(
            now,
            [(0, "4g.40gb".to_string()), (5, "1g.10gb".to_string())]
        );
        assert_eq!(handle.claim_uids(), ["claim-2".to_string()].into());
        // The kubelet's late unprepare of claim-1 finds nothing; claim-2's destroys its instance.
        assert!(!ledger.release("claim-1").await);
        assert!(ledger.release("claim-2").await);
        assert_eq!(live_instances(0), [(0, "4g.40gb".to_string())]);
        assert!(handle.claim_uids().is_empty());
        plugins.stop().await;
    }
}
