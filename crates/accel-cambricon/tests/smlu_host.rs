//! The recorded sMLU host `cambricon-8x-mlu370-smlu` and its replay: its listings are what the
//! replay renders from its state (so the first change rewrites nothing else), the detector reads
//! it as the v5 host it was copied from, a restart's survey finds the hand-made instance on
//! card 7 and leaves it alone, and a slice driven through the backend's own replay wrapper (as
//! `serve --host-root` wraps it) makes, lists and destroys an instance.

use std::collections::BTreeSet;
use std::sync::Arc;

use accel_cambricon::smlu::{ForeignInstance, Request, Smlu};
use accel_cambricon::smlu_replay::{self, STATE_FILE, SmluState};
use accel_cambricon::{detector, procfs};
use accel_host::{Commands, FsHost, Host, RecordedCommands};

const HOST: &str = "cambricon-8x-mlu370-smlu";

fn cards(host: &std::path::Path) -> Vec<(String, u32)> {
    let files = FsHost::new(host.join("root"));
    let commands = RecordedCommands::load(host).unwrap();
    detector::detect(&files, &commands, &detector::DetectOptions::default())
        .unwrap()
        .accelerators
        .iter()
        .map(|a| (a.bus_id.unwrap().sysfs(), a.minor_number.unwrap()))
        .collect()
}

#[test]
fn the_recorded_listings_are_what_the_replay_renders_from_the_state() {
    let host = accel_testkit::recorded_host(HOST);
    let state = SmluState::load(&host.join(STATE_FILE)).unwrap();
    let rendered = tempfile::tempdir().unwrap();
    smlu_replay::render(rendered.path(), &state).unwrap();
    for card in &state.cards {
        let path = procfs::path(&card.bdf);
        let recorded = std::fs::read_to_string(host.join("root").join(&path[1..])).unwrap();
        let made = std::fs::read_to_string(rendered.path().join(&path[1..])).unwrap();
        assert_eq!(recorded, made, "{path}");
    }
    assert_eq!(
        accel_testkit::file_names(&rendered.path().join("dev/cambricon-caps")),
        accel_testkit::file_names(&host.join("root/dev/cambricon-caps")),
    );
}

#[test]
fn the_host_is_detected_as_eight_cards_and_its_hand_made_instance_is_foreign() {
    let host = accel_testkit::copy_recorded(HOST);
    let cards = cards(host.path());
    assert_eq!(cards.len(), 8);
    let files: Arc<dyn Host> = Arc::new(FsHost::new(host.path().join("root")));
    let commands: Arc<dyn Commands> = Arc::from(accel_cambricon::smlu_replay::wrap(
        host.path(),
        Box::new(RecordedCommands::load(host.path()).unwrap()),
    ));
    let smlu = Smlu::new(files, commands, host.path().join("pods"), cards);
    let survey = smlu.survey();
    assert_eq!(
        survey.foreign,
        [ForeignInstance {
            card: "0000:d3:00.0".to_string(),
            instance: "cap_dev7_mi1".to_string(),
            destroy: "cnmon smlu -c 7 -D 1".to_string(),
        }]
    );
    assert!(survey.owned.is_empty() && survey.errors.is_empty());
    // A quarter slice on card 0 reuses the driver's quarter profile.
    let reserved = smlu
        .reserve(&Request {
            pod_uid: "p".into(),
            container: "main".into(),
            bdf: "0000:4f:00.0".into(),
            driver_index: 0,
            cores_pct: 25,
            mem_mib: 5827,
        })
        .unwrap();
    assert_eq!(
        (reserved.node.as_deref(), reserved.profile_id),
        (Some("/dev/cambricon-caps/cap_dev0_mi1"), Some(2))
    );
    assert!(
        host.path()
            .join("root/dev/cambricon-caps/cap_dev0_mi1")
            .is_file()
    );
    let none = BTreeSet::new();
    for _ in 0..3 {
        smlu.reclaim_pass(&none);
    }
    let state = SmluState::load(&host.path().join(STATE_FILE)).unwrap();
    let left: Vec<(u32, u32)> = state.instances.iter().map(|i| (i.card, i.id)).collect();
    assert_eq!(left, [(7, 1)], "p's instance went, the hand-made one stays");
    assert_eq!(
        state.profiles.len(),
        24,
        "the driver's profiles are never destroyed"
    );
}
