//! Hygon MIG through the partition seam on the stateful replay of the recorded BW hosts: the
//! create form Hygon documents (`hy-smi mig -cgi <profile id> -C -i <dev>`, no placement: the
//! driver picks it), and the live instances read from the driver's registry files in Hygon's
//! grammar (spec/hygon.md addendum H1–H3) — those the replay writes, and those of
//! `hygon-8x-bw150-mig-4-live`, written apart from it by `scripts/make-hygon-hosts.py`.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accel_backend::partition::{Instance, PartitionErrorKind, PartitionGpu, Partitioner};
use accel_host::{CommandError, CommandOutput, Commands, FsHost, Host, RecordedCommands};
use accel_hygon::detector::{self, DetectOptions};
use accel_hygon::mig::HySmiPartitioner;
use accel_hygon::{mig_replay, registry};

/// The replayed commands, with every argv it was asked to run kept; `blank_create`: the
/// create's answer comes back with nothing on standard output (its ids unprinted).
struct Runs {
    inner: Box<dyn Commands>,
    seen: Mutex<Vec<String>>,
    blank_create: bool,
}

impl Commands for Runs {
    fn run(&self, argv: &[&str], deadline: Duration) -> Result<CommandOutput, CommandError> {
        self.seen.lock().unwrap().push(argv.join(" "));
        let mut out = self.inner.run(argv, deadline)?;
        if self.blank_create && argv.contains(&"-cgi") {
            out.stdout.clear();
        }
        Ok(out)
    }

    fn is_installed(&self, program: &str) -> bool {
        self.inner.is_installed(program)
    }
}

impl Runs {
    fn on(dir: &Path, blank_create: bool) -> Runs {
        Runs {
            inner: mig_replay::wrap(dir, Box::new(RecordedCommands::load(dir).unwrap())),
            seen: Mutex::new(Vec::new()),
            blank_create,
        }
    }

    fn creates(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.contains("-cgi"))
            .cloned()
            .collect()
    }
}

/// The partitioner reading the registry under the copy's `root/`.
fn partitioner(dir: &Path) -> Arc<dyn Partitioner> {
    let host: Arc<dyn Host> = Arc::new(FsHost::new(dir.join("root")));
    HySmiPartitioner::default().on_host(host).unwrap()
}

fn card(dir: &Path, index: u32) -> PartitionGpu {
    let files = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(dir).unwrap();
    let section = detector::detect(&files, &commands, DetectOptions::default()).unwrap();
    PartitionGpu {
        index,
        uuid: section.accelerators[index as usize].uuid.clone(),
    }
}

fn conf(dir: &Path, dev: u32, gi: u32, ci: u32) -> registry::CiConf {
    let path = dir.join(format!(
        "root/etc/dmi_mig_config/ci/dev{dev}gi{gi}ci{ci}.conf"
    ));
    registry::parse_conf(&std::fs::read_to_string(path).unwrap()).unwrap()
}

type Seen = (u32, u32, String, u32, u32, Vec<u32>);

fn seen(instances: &[Instance]) -> Vec<Seen> {
    instances
        .iter()
        .map(|i| {
            (
                i.gpu_instance,
                i.profile_id,
                i.profile.clone(),
                i.start,
                i.size,
                i.compute_instances.clone(),
            )
        })
        .collect()
}

/// Addendum H1–H3: the partition is made with `hy-smi mig -cgi 3 -C -i 2`; the driver's
/// registry file it leaves is in Hygon's grammar (GI block, then CI block, `mig_uuid` last) and
/// is what the instance is read back from, named as Hygon's library names it (`2g.15gb`: two
/// shader engines a slice on the BW card, 16380 MiB floored to 15 GiB).
#[test]
fn a_partition_is_made_with_hygons_form_and_read_back_from_its_registry_file() {
    let dir = accel_testkit::copy_recorded("hygon-8x-bw150-mig");
    let runs = Runs::on(dir.path(), false);
    let p = partitioner(dir.path());
    let dcu2 = card(dir.path(), 2);
    let made = p.create(&runs, &dcu2, 3, 0).unwrap();
    assert_eq!(runs.creates(), ["hy-smi mig -cgi 3 -C -i 2"]);
    assert_eq!(
        seen(std::slice::from_ref(&made)),
        [(3, 3, "2g.15gb".to_string(), 0, 1, vec![0])]
    );
    let file = conf(dir.path(), 2, 3, 0);
    assert_eq!(file.gi.pci.as_deref(), Some("0000:48:00.0"));
    assert_eq!(
        (
            file.gi.profile_id,
            file.gi.memory_size_mb,
            file.gi.gpu_slice_count
        ),
        (Some(3), Some(16380), Some(1))
    );
    assert_eq!((file.ci.gi_id, file.ci.id), (Some(3), Some(0)));
    let uuid = made.uuid.clone().unwrap();
    assert_eq!(
        file.ci.mig_uuid.as_deref(),
        uuid.strip_prefix("MIG-"),
        "MIG-<mig_uuid>"
    );
    // Another, then the first one destroyed: its file goes, the other's stays.
    let second = p.create(&runs, &dcu2, 3, 1).unwrap();
    assert_eq!((second.gpu_instance, second.start), (4, 1));
    p.destroy(&runs, &dcu2, 3, Some(0)).unwrap();
    assert_eq!(
        seen(&p.instances(&runs, &dcu2).unwrap()),
        [(4, 3, "2g.15gb".to_string(), 1, 1, vec![0])]
    );
    assert!(
        !dir.path()
            .join("root/etc/dmi_mig_config/ci/dev2gi3ci0.conf")
            .exists()
    );
    assert!(p.instances(&runs, &card(dir.path(), 1)).unwrap().is_empty());
}

/// The live host's registry files (written in Hygon's grammar by the host script, not by the
/// replay) are its instances: two `2g.15gb` on DCU 0, a `4g.31gb` on DCU 1, an `8g.63gb` on
/// DCU 2, each with the UUID its file names.
#[test]
fn a_registry_written_in_hygons_grammar_is_read_as_the_cards_instances() {
    let dir = accel_testkit::copy_recorded("hygon-8x-bw150-mig-4-live");
    let runs = Runs::on(dir.path(), false);
    let p = partitioner(dir.path());
    let on = |n: u32| p.instances(&runs, &card(dir.path(), n)).unwrap();
    let two = "2g.15gb".to_string();
    assert_eq!(
        seen(&on(0)),
        [
            (3, 3, two.clone(), 0, 1, vec![0]),
            (4, 3, two, 1, 1, vec![0])
        ]
    );
    assert_eq!(seen(&on(1)), [(3, 1, "4g.31gb".to_string(), 0, 2, vec![0])]);
    assert_eq!(seen(&on(2)), [(3, 0, "8g.63gb".to_string(), 0, 4, vec![0])]);
    assert!(on(3).is_empty());
    assert_eq!(
        on(1)[0].uuid.as_deref(),
        Some("MIG-68796701-0003-0000-0000-000000000003")
    );
    assert!(
        runs.seen.lock().unwrap().is_empty(),
        "no listing asked: Hygon's own discovery reads the registry alone"
    );
}

/// `-cgi` names no placement: the driver takes the lowest free one. Asked for the slice it
/// takes, the instance is kept; asked for another (a grant placed elsewhere), what the driver
/// made is destroyed and the create refused, naming both.
#[test]
fn the_driver_places_the_instance_and_another_placement_is_refused_with_nothing_left() {
    let dir = accel_testkit::copy_recorded("hygon-8x-bw150-mig-4-live");
    let runs = Runs::on(dir.path(), false);
    let p = partitioner(dir.path());
    let dcu0 = card(dir.path(), 0);
    let refused = p.create(&runs, &dcu0, 3, 3).unwrap_err();
    assert_eq!(refused.kind, PartitionErrorKind::NoRoom);
    assert!(
        refused.reason.contains(
            "hy-smi mig -cgi 3 -C -i 0: the driver placed GPU instance 5 at memory slice 2, not at 3"
        ) && refused.reason.ends_with("GPU instance 5 it made was destroyed"),
        "{}",
        refused.reason
    );
    assert_eq!(p.instances(&runs, &dcu0).unwrap().len(), 2, "nothing left");
    let made = p.create(&runs, &dcu0, 3, 2).unwrap();
    assert_eq!((made.gpu_instance, made.start), (5, 2));
    // The 4g.31gb of DCU 1 fills its first half: the other half is the driver's choice.
    let made = p.create(&runs, &card(dir.path(), 1), 1, 2).unwrap();
    assert_eq!(
        (made.profile.as_str(), made.start, made.size),
        ("4g.31gb", 2, 2)
    );
}

/// The create's answer is in no capture: one that names no ids still gives the instance, found
/// as the one the registry lists now and did not before.
#[test]
fn a_create_whose_answer_names_no_ids_is_found_in_the_registry() {
    let dir = accel_testkit::copy_recorded("hygon-8x-bw150-mig-4-live");
    let runs = Runs::on(dir.path(), true);
    let p = partitioner(dir.path());
    let made = p.create(&runs, &card(dir.path(), 3), 0, 0).unwrap();
    assert_eq!(
        seen(std::slice::from_ref(&made)),
        [(3, 0, "8g.63gb".to_string(), 0, 4, vec![0])]
    );
    assert!(made.uuid.is_some());
}

/// A registry file whose blocks name another instance than its file name is refused, naming
/// it; one without a compute-instance block too.
#[test]
fn a_registry_file_that_contradicts_its_name_is_unreadable_never_guessed() {
    let dir = accel_testkit::copy_recorded("hygon-8x-bw150-mig-4-live");
    let runs = Runs::on(dir.path(), false);
    let p = partitioner(dir.path());
    let path = dir
        .path()
        .join("root/etc/dmi_mig_config/ci/dev1gi3ci0.conf");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("gi_id: 3", "gi_id: 7", 1)).unwrap();
    let e = p.instances(&runs, &card(dir.path(), 1)).unwrap_err();
    assert_eq!(e.kind, PartitionErrorKind::Unreadable);
    assert!(
        e.reason.ends_with(
            "registry file /etc/dmi_mig_config/ci/dev1gi3ci0.conf: its compute-instance block gi_id is 7, not the 3 its name says"
        ),
        "{}",
        e.reason
    );
    std::fs::write(&path, "pci: 0000:34:00.0\nmig_uuid: x\n").unwrap();
    let e = p.instances(&runs, &card(dir.path(), 1)).unwrap_err();
    assert!(
        e.reason
            .contains("fewer than the 13 of a GPU-instance block"),
        "{}",
        e.reason
    );
}
