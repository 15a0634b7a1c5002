//! T-Head partitions through the kubelet emulator over real unix sockets, on a copy of the
//! recorded mixed host (`thead-16x-zw810e-mig2`: PPUs 14 and 15 in MIG mode) whose MIG state
//! follows the `ppu-smi mig` commands: a partition is made at the lowest free placement and
//! answered with the control nodes, its card's proven node and the GPU and compute instance
//! capability nodes the driver's tree names (spec §6.3), its ownership record is T-Head's
//! per-card marker (spec §6.4), the owner's sidecar gets the same set, a restart rebinds it and
//! its Pod's deletion reclaims it (CI, then GI).

use accel_core::inventory::Accelerator;
use accel_host::{Commands, Host};
use accel_plugin::testing::{self, Run};
use accel_thead::mig_replay::capability_minors;

#[path = "support/partition_rig.rs"]
mod partition_rig;
use partition_rig::{Rig, Side, devices};

const PARTITIONED: &str = "alibabacloud.com/ppu.partitioned";
const HALF: &str = "alibabacloud.com/ppu.partitioned.mig-4g.48gb";
const VISIBILITY: &str = "device.gpustack.ai/thead.visibility";

fn detect(files: &dyn Host, commands: &dyn Commands) -> Vec<Accelerator> {
    accel_thead::detector::detect(files, commands, Default::default())
        .unwrap()
        .accelerators
}

async fn rig() -> Rig {
    Rig::new(Side {
        recorded: "thead-16x-zw810e-mig2",
        backend: accel_thead::backend::backend(),
        detect,
        resources: &[PARTITIONED, VISIBILITY],
        marker_prefix: "thead-mig-",
    })
    .await
}

fn owner(uid: &str, sidecar: bool) -> accel_plugin::pods::Pod {
    partition_rig::owner(uid, PARTITIONED, HALF, sidecar.then_some(VISIBILITY))
}

fn rw(path: &str) -> String {
    format!("{path}={path}:rw")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_is_made_injected_marked_rebound_after_a_restart_and_reclaimed() {
    let mut rig = rig().await;
    // Two cards in MIG mode, two 4g.48gb tokens each.
    assert_eq!(rig.kubelet.devices(PARTITIONED).len(), 4);

    rig.kubelet.create(owner("a", true));
    let admission = rig.kubelet.admit("a").await.unwrap();
    let state = rig.state();
    assert_eq!(state.instances.len(), 1, "{state:?}");
    let made = &state.instances[0];
    assert_eq!(
        (
            made.profile.as_str(),
            made.profile_id,
            made.start,
            made.size
        ),
        ("4g48gb", 5, 0, 4),
        "the vendor's profile at the lowest free placement"
    );
    let ordinal = made.gpu; // ppu-smi's index is the ordinal on this host
    let (gi, ci) = capability_minors(ordinal, made.gpu_instance, 0);
    let want = vec![
        rw("/dev/alixpu"),
        rw("/dev/alixpu_ctl"),
        rw(&format!("/dev/alixpu_ppu{ordinal}")),
        rw(&format!("/dev/alixpu-caps/alixpu-cap{gi}")),
        rw(&format!("/dev/alixpu-caps/alixpu-cap{ci}")),
    ];
    assert_eq!(devices(&admission, "main", PARTITIONED), want);
    assert!(admission["main"][PARTITIONED].envs.is_empty(), "no env");
    assert!(
        admission["main"][PARTITIONED].mounts.is_empty(),
        "no mounts"
    );
    // The owner's sidecar: the same set, never the parent card alone.
    assert_eq!(devices(&admission, "sshd", VISIBILITY), want);

    // T-Head's marker, in the vendor's spelling, in the container's directory.
    let card = rig.accelerators[ordinal as usize].uuid.clone().unwrap();
    let marker = rig.read_marker("a", &card);
    assert_eq!(marker["card"], card.as_str());
    assert_eq!(marker["profile"], "4g48gb");
    assert_eq!(marker["profileID"], 5);
    assert_eq!(marker["giID"], made.gpu_instance);
    assert_eq!(marker["migUUID"], made.compute_instances[0].uuid.as_str());
    assert_eq!(
        (marker["start"].clone(), marker["length"].clone()),
        (0.into(), 4.into())
    );

    // A restart, then the kubelet's retry: the same instance, nothing new made.
    rig.restart_plugins().await;
    let again = rig.allocate_again("a", PARTITIONED).await.unwrap();
    let again: Vec<String> = again
        .devices
        .iter()
        .map(|d| format!("{}={}:{}", d.host_path, d.container_path, d.permissions))
        .collect();
    assert_eq!(again, want, "rebound");
    assert_eq!(rig.state().instances.len(), 1, "nothing re-created");

    // The Pod goes: the reclaim loop destroys the instance and the marker goes with it.
    rig.kubelet.delete("a");
    rig.wait_state("a's instance destroyed", |s| s.instances.is_empty())
        .await;
    rig.wait_gone("a's marker removed", &rig.marker("a", &card))
        .await;
    let access = format!(
        "/proc/driver/alixpu/capabilities/ppu{ordinal}/mig/gi{}",
        made.gpu_instance
    );
    assert!(!rig.host(&access).exists(), "the driver's tree follows");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capability_node_of_another_minor_refuses_and_leaves_nothing_made() {
    let rig = rig().await;
    // PPU 14's GI 0 node exists but carries another minor (a node left by another driver load).
    let (gi, _) = capability_minors(14, 0, 0);
    let node = rig.host(&format!("/dev/alixpu-caps/alixpu-cap{gi}"));
    std::fs::create_dir_all(node.parent().unwrap()).unwrap();
    std::fs::write(&node, "c 505:7\n").unwrap();
    rig.kubelet.create(owner("b", false));
    let refused = rig.kubelet.admit("b").await.unwrap_err();
    assert!(
        refused
            .message()
            .contains(&format!("carries minor 7, want {gi}")),
        "{}",
        refused.message()
    );
    assert!(rig.state().instances.is_empty(), "{:?}", rig.state());
    let card = rig.accelerators[14].uuid.clone().unwrap();
    assert!(!rig.marker("b", &card).exists(), "its marker is taken back");
    let plugins = rig.plugins();
    assert!(
        plugins.ledger().grants().is_empty(),
        "its reservation is given back"
    );
    // The node set right, the same container's retry is answered.
    std::fs::write(&node, format!("c 505:{gi}\n")).unwrap();
    rig.kubelet.admit("b").await.unwrap();
    assert_eq!(rig.state().instances.len(), 1);
    assert!(rig.marker("b", &card).exists());
}

/// Spec §6.5: a gone Pod's partition a compute process runs on is not destroyed (ppu-smi is
/// not known to refuse that destroy, so the replay lets it through: only the allocator's own
/// process check keeps it); it stays charged and occupied, and goes once the process ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_pods_partition_is_kept_while_a_process_runs_on_it() {
    let rig = rig().await;
    rig.kubelet.create(owner("c", false));
    rig.kubelet.admit("c").await.unwrap();
    rig.set_busy(true);
    let card = rig.accelerators[rig.state().instances[0].gpu as usize]
        .uuid
        .clone()
        .unwrap();
    // The process table (`ppu-smi`) is what the reclaim reads before it destroys.
    let table = |run: &Run| run.argv == "ppu-smi";
    let read = rig.runs(table);
    rig.kubelet.delete("c");
    // The first pass has looked: still there, still charged.
    rig.wait_runs("c's reclaim read the process table", read, 1, table)
        .await;
    assert_eq!(rig.state().instances.len(), 1, "destroyed while busy");
    assert!(rig.marker("c", &card).exists(), "its marker is kept");
    let plugins = rig.plugins();
    assert_eq!(plugins.ledger().grants().len(), 1, "still charged");
    // The process ends: the next pass reclaims it.
    rig.set_busy(false);
    rig.wait_state("c's instance destroyed once idle", |s| {
        s.instances.is_empty()
    })
    .await;
    testing::wait_released(plugins, "c").await;
}

/// A ResourceClaim's T-Head partition (issue 46): made at the placement the scheduler allocated
/// (T-Head's create names it, `<profile id>:<start>`), not the lowest free one, and destroyed at
/// release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claims_partition_is_made_at_its_placement_and_destroyed_at_release() {
    let rig = rig().await;
    let handle = rig.plugins().handle();
    let ask = testing::partition_claim("thead.gpustack.ai", "ppu", "t1", 15, "4g.48gb", 4);
    handle.grant_claim(&ask).await.unwrap();
    let state = rig.state();
    let made: Vec<(u32, &str, u32)> = state
        .instances
        .iter()
        .map(|i| (i.start, i.profile.as_str(), i.size))
        .collect();
    assert_eq!(made, [(4, "4g48gb", 4)], "{state:?}");
    let create = rig.runs(|r| r.has("-cgi") && r.argv.contains(":4") && r.success);
    assert_eq!(create, 1, "the create named the claim's placement");
    // The claim's instance is no device-plugin token: of the four, the other card's two and
    // the one 4g.48gb still free beside the claim's stay Healthy.
    let healthy = |n: usize| {
        move |d: &[accel_plugin::api::deviceplugin::Device]| {
            d.iter().filter(|t| t.health == "Healthy").count() == n
        }
    };
    rig.kubelet.wait_devices(PARTITIONED, healthy(3)).await;
    assert!(handle.release_claim("t1").await);
    assert!(rig.state().instances.is_empty());
    assert!(handle.claim_uids().is_empty());
    rig.kubelet.wait_devices(PARTITIONED, healthy(4)).await;
}
