//! The MIG partitioner (`nvidia-smi mig`) against the recorded 8×H100 MIG host, whose MIG state
//! follows the commands run (issue 13, items 1, 2 and 9; the bad-input cases).

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use accel_backend::partition::{PartitionErrorKind, PartitionGpu, Partitioner};
use accel_host::{CommandError, CommandOutput, Commands, RecordedCommands};
use accel_nvidia::mig_replay;
use accel_nvidia::partitioner::SmiPartitioner;

/// A fresh copy of the 8×H100 MIG host, replayed with its MIG state.
fn host() -> (tempfile::TempDir, Box<dyn Commands>) {
    let dir = tempfile::tempdir().unwrap();
    accel_testkit::copy_tree(
        &accel_testkit::recorded_host("hgx-h100-8gpu-mig"),
        dir.path(),
    )
    .unwrap();
    let commands = mig_replay::wrap(
        dir.path(),
        Box::new(RecordedCommands::load(dir.path()).unwrap()),
    );
    (dir, commands)
}

fn gpu(index: u32) -> PartitionGpu {
    PartitionGpu { index, uuid: None }
}

/// A test's answer for an argv instead of the inner commands' (`None`: theirs).
type Rule<'a> = dyn Fn(&[&str], &dyn Commands, Duration) -> Option<Result<CommandOutput, CommandError>>
    + Send
    + Sync
    + 'a;

/// Runs the inner commands, but lets a test rewrite or stall the answer of an argv.
struct Tamper<'a> {
    inner: &'a dyn Commands,
    seen: Mutex<Vec<String>>,
    rule: Box<Rule<'a>>,
}

impl Commands for Tamper<'_> {
    fn run(&self, argv: &[&str], deadline: Duration) -> Result<CommandOutput, CommandError> {
        self.seen.lock().unwrap().push(argv.join(" "));
        match (self.rule)(argv, self.inner, deadline) {
            Some(answer) => answer,
            None => self.inner.run(argv, deadline),
        }
    }
    fn is_installed(&self, program: &str) -> bool {
        self.inner.is_installed(program)
    }
}

#[test]
fn geometry_leaves_out_me_profiles_and_keeps_the_h100_table() {
    let (_dir, commands) = host();
    let p = SmiPartitioner::default();
    let g = p.geometry(&*commands, &gpu(5)).unwrap();
    let got: Vec<(&str, u32, u32, &[u32])> = g
        .profiles
        .iter()
        .map(|p| (p.name.as_str(), p.id, p.size, p.starts.as_slice()))
        .collect();
    assert_eq!(
        got,
        [
            ("1g.10gb", 19, 1, &[0, 1, 2, 3, 4, 5, 6][..]),
            ("1g.20gb", 15, 2, &[0, 2, 4, 6][..]),
            ("2g.20gb", 14, 2, &[0, 2, 4][..]),
            ("3g.40gb", 9, 4, &[0, 4][..]),
            ("4g.40gb", 5, 4, &[0][..]),
            ("7g.80gb", 0, 8, &[0][..]),
        ]
    );
    assert!(g.left_out.is_empty(), "{:?}", g.left_out);
    assert_eq!(g.profiles[0].memory_mib, Some(9984));
}

#[test]
fn create_lists_and_destroys_one_gi_with_one_ci() {
    let (_dir, commands) = host();
    let spy = Tamper {
        inner: &*commands,
        seen: Mutex::new(Vec::new()),
        rule: Box::new(|_, _, _| None),
    };
    let p = SmiPartitioner::default();
    let made = p.create(&spy, &gpu(0), 9, 4).unwrap();
    assert_eq!(
        (
            made.profile.as_str(),
            made.start,
            made.size,
            made.compute_instances.as_slice()
        ),
        ("3g.40gb", 4, 4, &[0][..])
    );
    let uuid = made.uuid.clone().unwrap();
    assert!(uuid.starts_with("MIG-"), "{uuid}");
    let listed = p.instances(&spy, &gpu(0)).unwrap();
    assert_eq!(listed, std::slice::from_ref(&made));
    assert!(p.instances(&spy, &gpu(1)).unwrap().is_empty());

    p.destroy(&spy, &gpu(0), made.gpu_instance, Some(0))
        .unwrap();
    assert!(p.instances(&spy, &gpu(0)).unwrap().is_empty());
    // Destroying what is gone is not an error.
    p.destroy(&spy, &gpu(0), made.gpu_instance, Some(0))
        .unwrap();

    let seen = spy.seen.lock().unwrap().clone();
    assert!(
        seen.contains(&"nvidia-smi mig -i 0 -cgi 9:4 -C".to_string()),
        "{seen:?}"
    );
    let dci = seen
        .iter()
        .position(|a| a == "nvidia-smi mig -i 0 -gi 1 -ci 0 -dci");
    let dgi = seen
        .iter()
        .position(|a| a == "nvidia-smi mig -i 0 -gi 1 -dgi");
    assert!(
        dci.is_some() && dci < dgi,
        "the CI first, then the GI: {seen:?}"
    );
    for argv in seen.iter().filter(|a| a.starts_with("nvidia-smi mig")) {
        assert!(argv.starts_with("nvidia-smi mig -i "), "always -i: {argv}");
        if argv.ends_with("-dgi") || argv.ends_with("-dci") {
            assert!(argv.contains(" -gi "), "never a bare destroy: {argv}");
        }
    }
}

#[test]
fn a_profile_or_placement_the_gpu_does_not_offer_is_refused_before_any_create() {
    let (_dir, commands) = host();
    let p = SmiPartitioner::default();
    let e = p.create(&*commands, &gpu(2), 20, 0).unwrap_err();
    assert_eq!(e.kind, PartitionErrorKind::NotOffered);
    assert_eq!(
        e.to_string(),
        "GPU 2: MIG profile id 20 is not offered by this accelerator"
    );
    let e = p.create(&*commands, &gpu(2), 9, 2).unwrap_err();
    assert_eq!(e.kind, PartitionErrorKind::NotOffered);
    assert!(
        e.to_string()
            .contains("3g.40gb cannot start at memory slice 2"),
        "{e}"
    );
    assert!(p.instances(&*commands, &gpu(2)).unwrap().is_empty());
}

#[test]
fn no_room_is_refused_naming_gpu_and_why() {
    let (_dir, commands) = host();
    let p = SmiPartitioner::default();
    p.create(&*commands, &gpu(3), 9, 0).unwrap();
    let e = p.create(&*commands, &gpu(3), 5, 0).unwrap_err();
    assert_eq!(e.kind, PartitionErrorKind::NoRoom);
    assert!(
        e.to_string()
            .starts_with("GPU 3: nvidia-smi mig -i 3 -cgi 5:0 -C: Unable to create")
            && e.to_string().contains("Insufficient Resources")
            && !e.to_string().contains('\n'),
        "{e}"
    );
    assert_eq!(p.instances(&*commands, &gpu(3)).unwrap().len(), 1);
}

#[test]
fn a_create_that_hangs_past_its_deadline_leaves_nothing_behind() {
    let (_dir, commands) = host();
    // The driver makes the instance, then nvidia-smi never answers.
    let hang = Tamper {
        inner: &*commands,
        seen: Mutex::new(Vec::new()),
        rule: Box::new(|argv, inner, deadline| {
            argv.contains(&"-cgi").then(|| {
                let _ = inner.run(argv, deadline);
                Err(CommandError::TimedOut {
                    argv: argv.join(" "),
                    deadline,
                    partial: CommandOutput::default(),
                })
            })
        }),
    };
    let p = SmiPartitioner::with_deadline(Duration::from_millis(50));
    let e = p.create(&hang, &gpu(4), 19, 6).unwrap_err();
    assert_eq!(e.kind, PartitionErrorKind::TimedOut);
    let text = e.to_string();
    assert!(
        text.starts_with("GPU 4: nvidia-smi mig -i 4 -cgi 19:6 -C: no answer within")
            && text.contains("GPU instance 1 it made was destroyed")
            && !text.contains('\n'),
        "{text}"
    );
    assert!(p.instances(&*commands, &gpu(4)).unwrap().is_empty());
}

#[test]
fn an_lgipp_answer_that_does_not_parse_is_one_line_naming_it() {
    let (_dir, commands) = host();
    let garbled = Tamper {
        inner: &*commands,
        seen: Mutex::new(Vec::new()),
        rule: Box::new(|argv, _, _| {
            argv.contains(&"-lgipp").then(|| {
                Ok(CommandOutput {
                    status: Some(0),
                    stdout: b"GPU 0 Profile ID x Placements: {0,1:1\n".to_vec(),
                    stderr: Vec::new(),
                })
            })
        }),
    };
    let p = SmiPartitioner::default();
    let e = p.geometry(&garbled, &gpu(0)).unwrap_err();
    assert_eq!(e.kind, PartitionErrorKind::Unreadable);
    assert!(
        e.to_string()
            .starts_with("GPU 0: nvidia-smi mig -i 0 -lgipp: ")
            && !e.to_string().contains('\n'),
        "{e}"
    );
    // And nothing is created against a geometry that cannot be read.
    assert!(p.create(&garbled, &gpu(0), 19, 0).is_err());
    assert!(p.instances(&*commands, &gpu(0)).unwrap().is_empty());
}

#[test]
fn a_busy_instance_refuses_its_destroy_as_in_use() {
    let (dir, commands) = host();
    let p = SmiPartitioner::default();
    let made = p.create(&*commands, &gpu(6), 0, 0).unwrap();
    let path = dir.path().join(mig_replay::STATE_FILE);
    let mut state = mig_replay::MigState::load(&path).unwrap();
    state.instances[0].busy = true;
    state.save(&path).unwrap();
    let e = p
        .destroy(&*commands, &gpu(6), made.gpu_instance, Some(0))
        .unwrap_err();
    assert_eq!(e.kind, PartitionErrorKind::InUse);
    assert!(e.to_string().contains("In use by another client"), "{e}");
    assert_eq!(p.instances(&*commands, &gpu(6)).unwrap().len(), 1);
}

#[test]
fn busy_names_the_gpu_instances_a_compute_process_runs_on() {
    let (dir, commands) = host();
    let p = SmiPartitioner::default();
    let first = p.create(&*commands, &gpu(3), 19, 0).unwrap();
    let second = p.create(&*commands, &gpu(3), 19, 1).unwrap();
    assert_eq!(p.busy(&*commands, &gpu(3)), Ok(vec![]));
    let path = dir.path().join(mig_replay::STATE_FILE);
    let mut state = mig_replay::MigState::load(&path).unwrap();
    state
        .instances
        .iter_mut()
        .filter(|i| i.gpu_instance == second.gpu_instance)
        .for_each(|i| i.busy = true);
    state.save(&path).unwrap();
    assert_eq!(p.busy(&*commands, &gpu(3)), Ok(vec![second.gpu_instance]));
    assert_ne!(first.gpu_instance, second.gpu_instance);
    // Another GPU's processes are not this one's.
    assert_eq!(p.busy(&*commands, &gpu(4)), Ok(vec![]));

    // A report of another GPU than the inventory's, or one that does not parse: one line.
    let wrong = PartitionGpu {
        index: 3,
        uuid: Some("GPU-not-this-one".into()),
    };
    let e = p.busy(&*commands, &wrong).unwrap_err();
    assert_eq!(e.kind, PartitionErrorKind::Unreadable);
    assert!(
        e.to_string()
            .contains("nvidia-smi -q -x -i 3: reports GPU-")
            && !e.to_string().contains('\n'),
        "{e}"
    );
    let garbled = Tamper {
        inner: &*commands,
        seen: Mutex::new(Vec::new()),
        rule: Box::new(|argv: &[&str], _: &dyn Commands, _| {
            (argv.get(1) == Some(&"-q")).then(|| {
                Ok(CommandOutput {
                    status: Some(0),
                    stdout: b"<nvidia_smi_log><gpu id=".to_vec(),
                    stderr: Vec::new(),
                })
            })
        }),
    };
    let e = p.busy(&garbled, &gpu(3)).unwrap_err();
    assert_eq!(e.kind, PartitionErrorKind::Unreadable);
    assert!(
        e.to_string().starts_with("GPU 3: nvidia-smi -q -x -i 3: "),
        "{e}"
    );
}

/// Counts the nvidia-smi calls in flight per GPU; a call on GPU 0 waits (bounded) until a call
/// on GPU 1 has been in flight.
struct Overlap<'a> {
    inner: &'a dyn Commands,
    state: Mutex<(BTreeMap<String, u32>, BTreeMap<String, u32>)>,
    wake: Condvar,
}

impl Commands for Overlap<'_> {
    fn run(&self, argv: &[&str], deadline: Duration) -> Result<CommandOutput, CommandError> {
        let gpu = argv
            .iter()
            .position(|a| *a == "-i")
            .and_then(|at| argv.get(at + 1))
            .map_or_else(|| "all".to_string(), |g| g.to_string());
        {
            let mut s = self.state.lock().unwrap();
            let now = {
                let n = s.0.entry(gpu.clone()).or_default();
                *n += 1;
                *n
            };
            let max = s.1.entry(gpu.clone()).or_default();
            *max = (*max).max(now);
            self.wake.notify_all();
            if gpu == "0" {
                let _ = self
                    .wake
                    .wait_timeout_while(s, Duration::from_secs(5), |s| {
                        s.1.get("1").copied().unwrap_or(0) == 0
                    })
                    .unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(2));
        let answer = self.inner.run(argv, deadline);
        let mut s = self.state.lock().unwrap();
        if let Some(n) = s.0.get_mut(&gpu) {
            *n -= 1;
        }
        answer
    }
    fn is_installed(&self, program: &str) -> bool {
        self.inner.is_installed(program)
    }
}

#[test]
fn one_gpu_at_a_time_per_gpu_and_gpus_do_not_wait_for_each_other() {
    let (_dir, commands) = host();
    let overlap = Overlap {
        inner: &*commands,
        state: Mutex::new((BTreeMap::new(), BTreeMap::new())),
        wake: Condvar::new(),
    };
    let p = Arc::new(SmiPartitioner::default());
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for (index, start) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
            let p = p.clone();
            let overlap = &overlap;
            scope.spawn(move || p.create(overlap, &gpu(index), 19, start).unwrap());
        }
    });
    let max = overlap.state.lock().unwrap().1.clone();
    assert_eq!(
        max.get("0"),
        Some(&1),
        "one call at a time on GPU 0: {max:?}"
    );
    assert_eq!(
        max.get("1"),
        Some(&1),
        "one call at a time on GPU 1: {max:?}"
    );
    // GPU 0's calls waited for GPU 1's to be in flight; with one lock for all they would have
    // timed out (5 s each).
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(p.instances(&*commands, &gpu(0)).unwrap().len(), 2);
    assert_eq!(p.instances(&*commands, &gpu(1)).unwrap().len(), 2);
}

#[test]
fn detection_reads_the_instances_the_partitioner_made_and_no_me_profiles() {
    let (dir, commands) = host();
    let p = SmiPartitioner::default();
    let made = p.create(&*commands, &gpu(0), 9, 0).unwrap();
    let host = accel_host::FsHost::new(dir.path().join("root"));
    let outcome = accel_nvidia::detector::detect(
        &host,
        &*commands,
        accel_nvidia::detector::DetectOptions::default(),
    );
    let section = outcome.detection.unwrap();
    assert_eq!(section.accelerators.len(), 8);
    for a in &section.accelerators {
        assert_eq!(
            a.grantable,
            accel_core::inventory::Grantable::PartitionsOnly
        );
        let mut names: Vec<&str> = a
            .partition_profiles
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"
            ],
            "GPU {}: no 1g.10gb+me",
            a.index
        );
    }
    let gpu0 = &section.accelerators[0];
    assert_eq!(gpu0.mig_devices.len(), 1);
    assert_eq!(gpu0.mig_devices[0].uuid, made.uuid);
    assert_eq!(gpu0.mig_devices[0].profile.as_deref(), Some("3g.40gb"));
    assert_eq!(gpu0.mig_devices[0].gpu_instance_id, Some(made.gpu_instance));
    assert!(section.accelerators[1].mig_devices.is_empty());
}
