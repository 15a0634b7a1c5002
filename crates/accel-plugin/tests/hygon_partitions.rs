//! Hygon partitions through the kubelet emulator over real unix sockets, on a copy of the
//! recorded BW host in node-wide MIG mode (`hygon-8x-bw150-mig`) whose MIG state follows the
//! `hy-smi mig` commands and whose driver registry (`/etc/dmi_mig_config`) follows the state: a
//! `2g.15gb` partition is made at the lowest free placement (GI, then CI) and answered with the
//! control nodes, its card's DRM nodes, the driver's user space, its registry file mounted
//! read-only at its own host path and `DMI_MIG_VISIBLE_DEVICE=MIG-<uuid>` (spec §6.3); its
//! ownership record is Hygon's per-card marker (spec §6.4); a restart rebinds it; its Pod's
//! deletion reclaims it (CI, then GI), leaving an instance the driver says is in use for a later
//! pass (spec §6.5). The instance is made with the form Hygon documents (`hy-smi mig -cgi
//! <profile id> -C -i <dev>`, addendum H1) and read back from its registry file, in Hygon's
//! grammar (H2); on the live host the instances its registry holds are claimed.

use accel_core::inventory::Accelerator;
use accel_host::{Commands, Host};
use accel_plugin::testing::{Admission, Run};

#[path = "support/partition_rig.rs"]
mod partition_rig;
use partition_rig::{Rig, Side, devices};

const PARTITIONED: &str = "hygon.com/dcu.partitioned";
const SMALL: &str = "hygon.com/dcu.partitioned.mig-2g.15gb";
const VISIBILITY: &str = "device.gpustack.ai/hygon.visibility";

fn detect(files: &dyn Host, commands: &dyn Commands) -> Vec<Accelerator> {
    accel_hygon::detector::detect(files, commands, Default::default())
        .unwrap()
        .accelerators
}

async fn rig() -> Rig {
    Rig::new(Side {
        recorded: "hygon-8x-bw150-mig",
        backend: accel_hygon::backend::backend(),
        detect,
        resources: &[PARTITIONED, VISIBILITY],
        marker_prefix: "hygon-mig-",
    })
    .await
}

fn owner(uid: &str, sidecar: bool) -> accel_plugin::pods::Pod {
    partition_rig::owner(uid, PARTITIONED, SMALL, sidecar.then_some(VISIBILITY))
}

fn mounts(admission: &Admission, container: &str, resource: &str) -> Vec<String> {
    admission[container][resource]
        .mounts
        .iter()
        .map(|m| format!("{}={}:{}", m.host_path, m.container_path, m.read_only))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_is_made_injected_marked_rebound_after_a_restart_and_reclaimed() {
    let mut rig = rig().await;
    // The spec's worked example: eight BW cards, four 2g.15gb each.
    assert_eq!(rig.kubelet.devices(PARTITIONED).len(), 32);
    assert!(
        rig.kubelet.devices("hygon.com/dcu").is_empty(),
        "a MIG node serves partitions only"
    );

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
        ("2g.15gb", 3, 0, 1),
        "the driver's profile at the lowest free placement"
    );
    assert_eq!(made.compute_instances.len(), 1, "one CI covering the GI");
    let dev = made.gpu;
    let conf = format!(
        "/etc/dmi_mig_config/ci/dev{dev}gi{}ci{}.conf",
        made.gpu_instance, made.compute_instances[0].id
    );
    assert!(
        rig.host(&conf).is_file(),
        "the driver wrote its registry file"
    );
    // Hygon's create form: the profile id, `-C`, the card; no placement.
    let create = format!("hy-smi mig -cgi 3 -C -i {dev}");
    assert_eq!(rig.runs(|r| r.argv == create && r.success), 1, "{create}");
    assert_eq!(rig.runs(|r| r.has("-cgi") && r.argv != create), 0);
    let uuid = made.compute_instances[0].uuid.clone();
    let file =
        accel_hygon::registry::parse_conf(&std::fs::read_to_string(rig.host(&conf)).unwrap())
            .unwrap();
    assert_eq!(
        (
            file.gi.profile_id,
            file.gi.memory_size_mb,
            file.ci.mig_uuid.as_deref()
        ),
        (Some(3), Some(16380), uuid.strip_prefix("MIG-")),
        "the GI block first, the CI block naming the partition"
    );
    assert!(uuid.starts_with("MIG-"), "{uuid}");
    let card = dev + 1; // card0 is the BMC's display on this host
    let want = vec![
        "/dev/kfd=/dev/kfd:rwm".to_string(),
        "/dev/mkfd=/dev/mkfd:rwm".to_string(),
        format!("/dev/dri/card{card}=/dev/dri/card{card}:rw"),
        format!("/dev/dri/renderD{r}=/dev/dri/renderD{r}:rw", r = 128 + dev),
    ];
    assert_eq!(devices(&admission, "main", PARTITIONED), want);
    let main_mounts = mounts(&admission, "main", PARTITIONED);
    assert!(
        main_mounts.contains(&format!("{conf}={conf}:true")),
        "the registry file at its own host path, read-only: {main_mounts:?}"
    );
    assert!(main_mounts.contains(&"/opt/hyhal=/opt/hyhal:true".to_string()));
    assert_eq!(
        admission["main"][PARTITIONED]
            .envs
            .get("DMI_MIG_VISIBLE_DEVICE"),
        Some(&uuid),
        "the MIG- prefixed UUID the registry file names"
    );
    // The owner's sidecar: the same answer.
    assert_eq!(devices(&admission, "sshd", VISIBILITY), want);
    assert_eq!(mounts(&admission, "sshd", VISIBILITY), main_mounts);

    // Hygon's marker in the container's directory.
    let card_uuid = rig.accelerators[dev as usize].uuid.clone().unwrap();
    let marker = rig.read_marker("a", &card_uuid);
    assert_eq!(marker["card"], card_uuid.as_str());
    assert_eq!(marker["profile"], "2g.15gb");
    assert_eq!(marker["profileID"], 3);
    assert_eq!(marker["giID"], made.gpu_instance);
    assert_eq!(marker["migUUID"], uuid.as_str());
    assert_eq!(
        marker["pciBusID"],
        rig.accelerators[dev as usize]
            .bus_id
            .unwrap()
            .sysfs()
            .as_str()
    );
    assert_eq!(marker["confPath"], conf.as_str());

    // A restart, then the kubelet's retry: the same instance, nothing new made.
    rig.restart_plugins().await;
    let again = rig.allocate_again("a", PARTITIONED).await.unwrap();
    assert_eq!(
        again.envs.get("DMI_MIG_VISIBLE_DEVICE"),
        Some(&uuid),
        "rebound"
    );
    assert_eq!(rig.state().instances.len(), 1, "nothing re-created");

    // The Pod goes: the reclaim loop destroys the instance; its marker and registry file go.
    rig.kubelet.delete("a");
    rig.wait_state("a's instance destroyed", |s| s.instances.is_empty())
        .await;
    rig.wait_gone("a's marker removed", &rig.marker("a", &card_uuid))
        .await;
    assert!(!rig.host(&conf).exists(), "the registry follows the driver");
}

/// Spec §6.5: the driver refuses to destroy an instance in use (`The device is exist and may
/// be in use.`); the partition stays charged and occupied, and goes on a later pass once idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_the_driver_says_is_in_use_is_left_for_a_later_pass() {
    let rig = rig().await;
    rig.kubelet.create(owner("c", false));
    rig.kubelet.admit("c").await.unwrap();
    rig.set_busy(true);
    let card = rig.accelerators[rig.state().instances[0].gpu as usize]
        .uuid
        .clone()
        .unwrap();
    let refused = |run: &Run| run.has("-dci") && !run.success;
    let before = rig.runs(refused);
    rig.kubelet.delete("c");
    // The reclaim has tried, and the driver said in use.
    rig.wait_runs(
        "the driver refused to destroy c's instance",
        before,
        1,
        refused,
    )
    .await;
    assert_eq!(rig.state().instances.len(), 1, "destroyed while in use");
    assert!(rig.marker("c", &card).exists(), "its marker is kept");
    let plugins = rig.plugins();
    assert_eq!(plugins.ledger().grants().len(), 1, "still charged");
    rig.set_busy(false);
    rig.wait_state("c's instance destroyed once idle", |s| {
        s.instances.is_empty()
    })
    .await;
}

/// A partition whose registry file is gone (a reboot, a hand) cannot be activated by the
/// container: the kubelet's retry is refused with the spec's words, naming the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_without_its_registry_file_is_refused_naming_it() {
    let rig = rig().await;
    rig.kubelet.create(owner("b", false));
    rig.kubelet.admit("b").await.unwrap();
    let made = rig.state().instances[0].clone();
    let conf = format!(
        "/etc/dmi_mig_config/ci/dev{}gi{}ci{}.conf",
        made.gpu, made.gpu_instance, made.compute_instances[0].id
    );
    std::fs::remove_file(rig.host(&conf)).unwrap();
    let refused = rig.allocate_again("b", PARTITIONED).await.unwrap_err();
    assert!(
        refused
            .message()
            .contains("so the container could not activate it"),
        "{}",
        refused.message()
    );
}

/// The live host (`hygon-8x-bw150-mig-4-live`): four instances its registry holds in Hygon's
/// grammar and no marker names. A request of a profile one of them has is served by claiming
/// it (its `MIG-<mig_uuid>`, its registry file), not by making another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unowned_instance_of_the_registry_is_claimed_by_a_request_of_its_profile() {
    let rig = Rig::new(Side {
        recorded: "hygon-8x-bw150-mig-4-live",
        backend: accel_hygon::backend::backend(),
        detect,
        resources: &[PARTITIONED, VISIBILITY],
        marker_prefix: "hygon-mig-",
    })
    .await;
    let big = "hygon.com/dcu.partitioned.mig-8g.63gb";
    rig.kubelet
        .create(partition_rig::owner("a", PARTITIONED, big, None));
    let admission = rig.kubelet.admit("a").await.unwrap();
    let uuid = "MIG-68796702-0003-0000-0000-000000000004";
    assert_eq!(
        admission["main"][PARTITIONED]
            .envs
            .get("DMI_MIG_VISIBLE_DEVICE")
            .map(String::as_str),
        Some(uuid),
        "DCU 2's live 8g.63gb, as its registry file names it"
    );
    let conf = "/etc/dmi_mig_config/ci/dev2gi3ci0.conf";
    assert!(
        mounts(&admission, "main", PARTITIONED).contains(&format!("{conf}={conf}:true")),
        "its registry file, read-only at its own path"
    );
    assert_eq!(rig.state().instances.len(), 4, "nothing made");
    assert_eq!(rig.runs(|r| r.has("-cgi")), 0);
    let marker = rig.read_marker("a", rig.accelerators[2].uuid.as_deref().unwrap());
    assert_eq!(
        (marker["giID"].as_u64(), marker["profile"].as_str()),
        (Some(3), Some("8g.63gb"))
    );
}

/// A ResourceClaim's Hygon partition (issue 46): the profile at the placement the scheduler
/// allocated. Hygon's driver picks the placement itself (its create names none), so a claim is
/// made where the driver agrees, and refused with nothing left where it does not.
fn dcu_claim(
    uid: &str,
    index: u32,
    profile: &str,
    start: u32,
) -> accel_plugin::service::ClaimGrant {
    accel_plugin::testing::partition_claim("hygon.gpustack.ai", "dcu", uid, index, profile, start)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claims_partition_is_made_where_the_driver_agrees_and_destroyed_at_release() {
    let rig = rig().await;
    let handle = rig.plugins().handle();
    let placed = |rig: &Rig| -> Vec<(u32, u32, String)> {
        let mut all: Vec<(u32, u32, String)> = rig
            .state()
            .instances
            .iter()
            .map(|i| (i.gpu, i.start, i.profile.clone()))
            .collect();
        all.sort();
        all
    };
    // A 2g.15gb at the first slice of card 2, then a 4g.31gb at slice 2 beside it: where the
    // driver places them too.
    let small = handle
        .grant_claim(&dcu_claim("c1", 2, "2g.15gb", 0))
        .await
        .unwrap();
    assert!(
        small.envs["DMI_MIG_VISIBLE_DEVICE"].starts_with("MIG-"),
        "{small:?}"
    );
    let big = handle
        .grant_claim(&dcu_claim("c2", 2, "4g.31gb", 2))
        .await
        .unwrap();
    assert_ne!(
        big.envs["DMI_MIG_VISIBLE_DEVICE"],
        small.envs["DMI_MIG_VISIBLE_DEVICE"]
    );
    assert_eq!(
        placed(&rig),
        [(2, 0, "2g.15gb".to_string()), (2, 2, "4g.31gb".to_string())]
    );
    // The scheduler allocated slice 3 of an empty card, but the driver takes slice 0: refused,
    // naming both, and nothing is left on the card or in the ledger.
    let refused = handle
        .grant_claim(&dcu_claim("c3", 5, "2g.15gb", 3))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("the driver placed GPU instance") && refused.contains("not at 3"),
        "{refused}"
    );
    assert_eq!(placed(&rig).len(), 2);
    assert_eq!(
        handle.claim_uids(),
        ["c1".to_string(), "c2".to_string()].into()
    );
    // Released: CI, then GI destroyed, each in turn.
    assert!(handle.release_claim("c1").await);
    assert!(handle.release_claim("c2").await);
    assert!(placed(&rig).is_empty());
    assert!(handle.claim_uids().is_empty());
}
