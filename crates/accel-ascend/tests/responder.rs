//! The responder on the recorded hosts' detections, called directly: what the emulator tests
//! cannot reach through the kubelet (a two-NPU slice, a chip of another family, the 950's logic
//! ids, a V2 driver's missing flag, a driver without the `device-share` query).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use accel_ascend::detector::{self, DetectOptions};
use accel_ascend::responder::AscendResponder;
use accel_backend::pod::{Phase, Pod};
use accel_backend::respond::{
    Answer, EngineFacts, InjectionStrategy, ResponderError, ResponderSetup,
};
use accel_core::inventory::Accelerator;
use accel_core::ledger::{Family, Seat};
use accel_host::{CommandError, CommandOutput, Commands, FsHost, RecordedCommands};

fn accelerators(name: &str) -> Vec<Accelerator> {
    let dir = accel_testkit::recorded_host(name);
    let files = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(&dir).unwrap();
    detector::detect(&files, &commands, DetectOptions::default())
        .unwrap()
        .accelerators
}

/// Counts every command it is asked to run and runs none (a driver whose tool has no
/// `device-share` type: not installed).
#[derive(Default)]
struct Counting(AtomicUsize);

impl Commands for Counting {
    fn run(&self, argv: &[&str], _: Duration) -> Result<CommandOutput, CommandError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(CommandError::NotInstalled {
            program: argv.first().unwrap_or(&"").to_string(),
        })
    }

    fn is_installed(&self, _: &str) -> bool {
        false
    }
}

fn responder(
    accelerators: Vec<Accelerator>,
    major: Option<u32>,
    pods: &Path,
    commands: Arc<dyn Commands>,
) -> AscendResponder {
    AscendResponder::from_setup(ResponderSetup {
        scratch: None,
        strategy: InjectionStrategy::Envvar,
        runtime_major: major,
        pod_dir_root: pods.join("pods"),
        preload_dir: pods.join("preload"),
        library_dir: "/var/lib/gpustack/operator/lib".into(),
        engine: Arc::new(EngineFacts::default()),
        accelerators,
        host: None,
        commands: Some(commands),
        runtime_class: None,
        writes: None,
    })
}

fn pod() -> Pod {
    Pod {
        uid: "uid-1".into(),
        namespace: "ns".into(),
        name: "p".into(),
        created: 0,
        phase: Phase::Pending,
        runtime_class: Some("ascend".into()),
        containers: Vec::new(),
        allocated: None,
    }
}

fn answer<'a>(family: Option<Family>, seats: &'a [&'a Seat], pod: &'a Pod) -> Answer<'a> {
    Answer {
        family,
        seats,
        slice_units: 400_000,
        cores_percentage: Some(50),
        partition: None,
        pod,
        container: None,
    }
}

fn refusal(e: ResponderError) -> String {
    e.to_string()
}

#[test]
fn a_two_npu_slice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let chips = accelerators("ascend-8x-910b2");
    let seats: Vec<Seat> = chips
        .iter()
        .map(|a| Seat::from_accelerator(a, 63))
        .collect();
    let r = responder(chips, Some(8), dir.path(), Arc::new(Counting::default()));
    let p = pod();
    let two = [&seats[0], &seats[1]];
    let e = r
        .respond(&answer(Some(Family::Sliced), &two, &p))
        .unwrap_err();
    assert_eq!(
        refusal(e),
        "sliced container \"main\" allocated 2 accelerators, but vcann-rt logical slicing is single-NPU"
    );
    assert!(!dir.path().join("pods/uid-1").exists(), "nothing written");
}

#[test]
fn a_slice_of_another_family_than_the_nodes_build_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut chips = accelerators("ascend-8x-910b2");
    chips[1].architecture = Some("310P".into());
    let seats: Vec<Seat> = chips
        .iter()
        .map(|a| Seat::from_accelerator(a, 63))
        .collect();
    let r = responder(chips, Some(8), dir.path(), Arc::new(Counting::default()));
    let p = pod();
    let e = r
        .respond(&answer(Some(Family::Sliced), &[&seats[1]], &p))
        .unwrap_err();
    assert!(
        refusal(e).ends_with("is a 310P NPU, but this node's vcann-rt build is cann-8-910b"),
        "refused"
    );
}

#[test]
fn the_950_names_its_logic_ids_and_lets_tenants_through_without_a_flag() {
    let dir = tempfile::tempdir().unwrap();
    let chips = accelerators("ascend-950pr-v2");
    let seats: Vec<Seat> = chips
        .iter()
        .map(|a| Seat::from_accelerator(a, 63))
        .collect();
    let counting = Arc::new(Counting::default());
    let r = responder(chips, Some(9), dir.path(), counting.clone());
    let p = pod();
    let both = [&seats[0], &seats[1]];
    let shared = r.respond(&answer(Some(Family::Shared), &both, &p)).unwrap();
    assert_eq!(shared.envs["ASCEND_VISIBLE_DEVICES"], "0,1");
    assert_eq!(
        counting.0.load(Ordering::SeqCst),
        0,
        "V2 has no flag to ask"
    );
    let slice = r
        .respond(&answer(Some(Family::Sliced), &[&seats[1]], &p))
        .unwrap();
    assert_eq!(slice.envs["ASCEND_VISIBLE_DEVICES"], "1");
    let config = std::fs::read_to_string(
        dir.path()
            .join("pods/uid-1/c-main/etc/enpu/vcann-rt/npu_info.config"),
    )
    .unwrap();
    assert!(
        config.starts_with(
            "physical-npu-id=1\nvirtual-npu-id=0\naicore-quota=50\nmemory-quota=32768\n"
        ),
        "{config}"
    );
}

#[test]
fn a_driver_without_the_share_query_refuses_tenants_but_serves_exclusive() {
    let dir = tempfile::tempdir().unwrap();
    let chips = accelerators("ascend-310p-2chips-gapped");
    let seats: Vec<Seat> = chips
        .iter()
        .map(|a| Seat::from_accelerator(a, 63))
        .collect();
    let counting = Arc::new(Counting::default());
    let r = responder(chips, Some(9), dir.path(), counting.clone());
    let p = pod();
    let e = r
        .respond(&answer(Some(Family::Shared), &[&seats[3]], &p))
        .unwrap_err();
    assert_eq!(
        refusal(e),
        "card 2 device 1 cannot be shared: this driver has no dcmi container-share API"
    );
    assert_eq!(
        counting.0.load(Ordering::SeqCst),
        1,
        "read once, never written"
    );
    let exclusive = r
        .respond(&answer(Some(Family::Exclusive), &[&seats[3]], &p))
        .unwrap();
    assert_eq!(exclusive.envs["ASCEND_VISIBLE_DEVICES"], "5");
    assert_eq!(
        counting.0.load(Ordering::SeqCst),
        1,
        "exclusive asks nothing"
    );
}

/// Spec §4.4: a grant of 950 NPUs whose product form resolved names its topology file in
/// `HCCL_TOPO_FILE_PATH`, in every family (a slice too); NPUs of no form, or of two forms,
/// get none; a container that sets the variable itself keeps its own; other families never get
/// it.
#[test]
fn a_950_grant_names_its_topology_file_only_for_one_resolved_form() {
    const TOPO: &str = "HCCL_TOPO_FILE_PATH";
    const FILE: &str = "/usr/local/Ascend/driver/topo/950/atlas_850_2.json";
    let dir = tempfile::tempdir().unwrap();
    let mut chips = accelerators("ascend-950-server-16p");
    chips[3].product_type = None;
    chips[4].product_type = Some("server-32p".into());
    let seats: Vec<Seat> = chips
        .iter()
        .map(|a| Seat::from_accelerator(a, 63))
        .collect();
    let r = responder(chips, Some(9), dir.path(), Arc::new(Counting::default()));
    let p = pod();
    let two = [&seats[0], &seats[1]];
    for family in [Family::Exclusive, Family::Shared] {
        let out = r.respond(&answer(Some(family), &two, &p)).unwrap();
        assert_eq!(
            out.envs.get(TOPO).map(String::as_str),
            Some(FILE),
            "{family:?}"
        );
    }
    let slice = r
        .respond(&answer(Some(Family::Sliced), &[&seats[2]], &p))
        .unwrap();
    assert_eq!(
        slice.envs.get(TOPO).map(String::as_str),
        Some(FILE),
        "sliced"
    );
    let unresolved = [&seats[0], &seats[3]];
    let out = r
        .respond(&answer(Some(Family::Exclusive), &unresolved, &p))
        .unwrap();
    assert_eq!(out.envs.get(TOPO), None, "an NPU of no form");
    let mixed = [&seats[0], &seats[4]];
    let out = r
        .respond(&answer(Some(Family::Exclusive), &mixed, &p))
        .unwrap();
    assert_eq!(out.envs.get(TOPO), None, "two forms");
    assert_eq!(
        out.envs["ASCEND_VISIBLE_DEVICES"], "0,4",
        "the grant goes through"
    );

    let mut own = pod();
    own.containers.push(accel_backend::pod::Container {
        name: "main".into(),
        limits: Default::default(),
        env: [(TOPO.to_string(), "/mine.json".to_string())].into(),
    });
    let container = own.containers.first().cloned();
    let mut mine = answer(Some(Family::Exclusive), &two, &own);
    mine.container = container.as_ref();
    assert_eq!(
        r.respond(&mine).unwrap().envs.get(TOPO),
        None,
        "the container's own"
    );

    let other = tempfile::tempdir().unwrap();
    let chips = accelerators("ascend-8x-910b2");
    let seats: Vec<Seat> = chips
        .iter()
        .map(|a| Seat::from_accelerator(a, 63))
        .collect();
    let r = responder(chips, Some(8), other.path(), Arc::new(Counting::default()));
    let out = r
        .respond(&answer(Some(Family::Exclusive), &[&seats[0]], &p))
        .unwrap();
    assert_eq!(out.envs.get(TOPO), None, "a 910B has no fabric file");
}
