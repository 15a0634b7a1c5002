//! The recorded mixed host (`thead-16x-zw810e-mig2`) replayed with its MIG state: `ppu-smi mig`
//! behind the partition seam changes the state, and `-L`, the device table's `MIG devices:`
//! and `Processes:` tables, the detector and the driver's capability tree follow it.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use accel_backend::mig_cli::replay::MigState;
use accel_backend::partition::{PartitionErrorKind, PartitionGpu, Partitioner};
use accel_host::{CommandError, CommandOutput, Commands, FsHost, Host, RecordedCommands};
use accel_thead::detector::{self, DetectOptions};
use accel_thead::mig::PpuSmiPartitioner;
use accel_thead::mig_replay::{self, STATE_FILE, capability_minors};

fn replayed(dir: &Path) -> Box<dyn Commands> {
    mig_replay::wrap(dir, Box::new(RecordedCommands::load(dir).unwrap()))
}

fn card(commands: &dyn Commands, dir: &Path, ordinal: u32) -> PartitionGpu {
    let host = FsHost::new(dir.join("root"));
    let section = detector::detect(&host, commands, DetectOptions::default()).unwrap();
    PartitionGpu {
        index: ordinal,
        uuid: section.accelerators[ordinal as usize].uuid.clone(),
    }
}

#[test]
fn a_partition_made_by_uuid_is_listed_detected_and_given_capability_nodes() {
    let dir = accel_testkit::copy_recorded("thead-16x-zw810e-mig2");
    let commands = replayed(dir.path());
    let ppu15 = card(commands.as_ref(), dir.path(), 15);
    let p = PpuSmiPartitioner::default();

    let geometry = p.geometry(commands.as_ref(), &ppu15).unwrap();
    let names: Vec<&str> = geometry.profiles.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["8g.96gb", "4g.48gb"]);

    let made = p.create(commands.as_ref(), &ppu15, 5, 4).unwrap();
    assert_eq!((made.gpu_instance, made.start, made.size), (0, 4, 4));
    assert_eq!(made.profile, "4g.48gb");
    let uuid = made.uuid.clone().unwrap();
    assert!(uuid.starts_with("MIG-") && uuid.rsplit('-').next().unwrap().len() == 13);
    // The full-card profile no longer fits; the other half still does.
    let full = p.create(commands.as_ref(), &ppu15, 3, 0).unwrap_err();
    assert_eq!(full.kind, PartitionErrorKind::NoRoom);
    let other = p.create(commands.as_ref(), &ppu15, 5, 0).unwrap();
    assert_eq!(other.gpu_instance, 1);
    assert_ne!(other.uuid, made.uuid);
    let listed = p.instances(commands.as_ref(), &ppu15).unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].uuid.as_deref(), Some(uuid.as_str()));
    // PPU 14 is untouched.
    let ppu14 = card(commands.as_ref(), dir.path(), 14);
    assert!(p.instances(commands.as_ref(), &ppu14).unwrap().is_empty());

    // The detector sees the MIG devices the replay now lists.
    let host = FsHost::new(dir.path().join("root"));
    let section = detector::detect(&host, commands.as_ref(), DetectOptions::default()).unwrap();
    let devices: Vec<Option<&str>> = section.accelerators[15]
        .mig_devices
        .iter()
        .map(|m| m.uuid.as_deref())
        .collect();
    assert_eq!(devices, [Some(uuid.as_str()), other.uuid.as_deref()]);
    // Their GI and CI ids and memory from the MIG devices table, joined by card and number.
    let ids: Vec<(Option<u32>, Option<u32>, Option<u64>)> = section.accelerators[15]
        .mig_devices
        .iter()
        .map(|m| (m.gpu_instance_id, m.compute_instance_id, m.memory_mib))
        .collect();
    assert_eq!(
        ids,
        [
            (Some(0), Some(0), Some(49152)),
            (Some(1), Some(0), Some(49152))
        ]
    );
    assert_eq!(
        section.accelerators.len(),
        16,
        "the MIG table breaks no card row"
    );

    // The capability tree names both instances' nodes, each a node of its minor.
    let (gi, ci) = capability_minors(15, 0, 0);
    let access = "/proc/driver/alixpu/capabilities/ppu15/mig/gi0";
    assert_eq!(
        host.read_to_string(&format!("{access}/access")).unwrap(),
        format!("DeviceFileMinor: {gi}\n")
    );
    assert_eq!(
        host.read_to_string(&format!("{access}/ci0/access"))
            .unwrap(),
        format!("DeviceFileMinor: {ci}\n")
    );
    let node = host
        .char_device(&format!("/dev/alixpu-caps/alixpu-cap{ci}"))
        .unwrap()
        .unwrap();
    assert_eq!(node.minor, ci);

    // A busy instance shows a process (ppu-smi is not known to refuse its destroy, so the
    // replay does not: the allocator checks first); freed, it goes CI then GI.
    let path = dir.path().join(STATE_FILE);
    let mut state = MigState::load(&path).unwrap();
    state
        .instances
        .iter_mut()
        .find(|i| i.gpu_instance == 0)
        .unwrap()
        .busy = true;
    state.save(&path).unwrap();
    assert_eq!(p.busy(commands.as_ref(), &ppu15).unwrap(), [0]);
    assert!(p.busy(commands.as_ref(), &ppu14).unwrap().is_empty());
    let mut state = MigState::load(&path).unwrap();
    state.instances.iter_mut().for_each(|i| i.busy = false);
    state.save(&path).unwrap();
    p.destroy(commands.as_ref(), &ppu15, 0, Some(0)).unwrap();
    let left: Vec<u32> = p
        .instances(commands.as_ref(), &ppu15)
        .unwrap()
        .iter()
        .map(|i| i.gpu_instance)
        .collect();
    assert_eq!(left, [1]);
    assert!(
        !host.exists(access),
        "a destroyed instance's capability directory goes"
    );
    assert!(
        host.exists(&format!("/dev/alixpu-caps/alixpu-cap{ci}")),
        "its nodes stay"
    );
    // GI ids are reused from 0.
    let again = p.create(commands.as_ref(), &ppu15, 5, 4).unwrap();
    assert_eq!(again.gpu_instance, 0);
    assert_ne!(again.uuid.as_deref(), Some(uuid.as_str()));
}

#[test]
fn an_unknown_card_uuid_is_not_found() {
    let dir = accel_testkit::copy_recorded("thead-16x-zw810e-mig2");
    let commands = replayed(dir.path());
    let ghost = PartitionGpu {
        index: 15,
        uuid: Some("GPU-no-such-card".into()),
    };
    let e = PpuSmiPartitioner::default()
        .geometry(commands.as_ref(), &ghost)
        .unwrap_err();
    assert!(e.to_string().contains("GPU-no-such-card"), "{e}");
}

/// The replay, counting the `ppu-smi mig` calls that make or take down an instance.
struct Counted {
    inner: Box<dyn Commands>,
    creates: AtomicUsize,
    destroys: AtomicUsize,
}

impl Commands for Counted {
    fn run(&self, argv: &[&str], deadline: Duration) -> Result<CommandOutput, CommandError> {
        if argv.contains(&"-cgi") {
            self.creates.fetch_add(1, Ordering::SeqCst);
        }
        if argv.contains(&"-dgi") || argv.contains(&"-dci") {
            self.destroys.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.run(argv, deadline)
    }

    fn is_installed(&self, program: &str) -> bool {
        self.inner.is_installed(program)
    }
}

/// Spec §6.3 step 2: the card's node is proven **before** any create. On the node's files (as
/// `serve` puts the partitioner), a card whose `/dev/alixpu_ppu<ordinal>` carries another minor
/// is refused on every try with no instance made and none destroyed; set right, the next try
/// makes one.
#[test]
fn a_card_whose_node_fails_its_proof_is_refused_before_any_create() {
    let dir = accel_testkit::copy_recorded("thead-16x-zw810e-mig2");
    let commands = Counted {
        inner: replayed(dir.path()),
        creates: AtomicUsize::new(0),
        destroys: AtomicUsize::new(0),
    };
    let ppu15 = card(&commands, dir.path(), 15);
    let node = dir.path().join("root/dev/alixpu_ppu15");
    let recorded = std::fs::read_to_string(&node).unwrap();
    assert_eq!(recorded.trim(), "c 509:16", "the recording's node");
    // The node now carries another card's minor (the ordinals shifted since detection).
    std::fs::write(&node, "c 509:7\n").unwrap();
    let files: Arc<dyn Host> = Arc::new(FsHost::new(dir.path().join("root")));
    let bare: Arc<dyn Partitioner> = Arc::new(PpuSmiPartitioner::default());
    let p = bare.on_host(files).unwrap_or(bare);
    for attempt in 1..=3 {
        let refused = p.create(&commands, &ppu15, 5, 4).unwrap_err();
        assert!(
            refused.reason.contains(
                "device node \"/dev/alixpu_ppu15\" carries minor 7, want 16: fail closed"
            ),
            "try {attempt}: {refused}"
        );
    }
    assert_eq!(
        commands.creates.load(Ordering::SeqCst),
        0,
        "no instance made"
    );
    assert_eq!(
        commands.destroys.load(Ordering::SeqCst),
        0,
        "none destroyed"
    );
    let state = MigState::load(&dir.path().join(STATE_FILE)).unwrap();
    assert!(state.instances.is_empty(), "{state:?}");

    // The node set right: the next try makes the instance, once.
    std::fs::write(&node, recorded).unwrap();
    let made = p.create(&commands, &ppu15, 5, 4).unwrap();
    assert_eq!((made.start, made.size), (4, 4));
    assert_eq!(commands.creates.load(Ordering::SeqCst), 1);
    assert_eq!(commands.destroys.load(Ordering::SeqCst), 0);

    // A missing control node refuses the same way, before anything is made.
    std::fs::remove_file(dir.path().join("root/dev/alixpu_ctl")).unwrap();
    let refused = p.create(&commands, &ppu15, 5, 0).unwrap_err();
    assert!(
        refused.reason.contains("device node \"/dev/alixpu_ctl\""),
        "{refused}"
    );
    assert_eq!(commands.creates.load(Ordering::SeqCst), 1);
}
