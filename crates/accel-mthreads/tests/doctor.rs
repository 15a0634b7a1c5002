//! Moore Threads' doctor reports its one health source (issue 43): for how many GPUs
//! `mthreads-gmi -q` printed the volatile uncorrected DRAM ECC counter, which it did not and
//! whether the table's `ECC Mode` says they have none, and which GPUs it takes out of service.

use std::path::Path;

use accel_backend::doctor::{Check, Options, Status};
use accel_host::{FsHost, RecordedCommands};
use accel_mthreads::doctor;

fn health_ecc(dir: &Path) -> Check {
    let files = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(dir).unwrap();
    let report = doctor::run(&files, &commands, &Options::default());
    report
        .checks
        .into_iter()
        .find(|c| c.name == "health-ecc")
        .expect("a health-ecc row")
}

#[test]
fn the_ecc_counter_row_names_the_gpu_out_of_service() {
    let sick = health_ecc(&accel_testkit::recorded_host("mthreads-3x-s5000-gpu2-ecc"));
    assert_eq!(
        (sick.status, sick.reason.as_str()),
        (
            Status::Warn,
            "mthreads-gmi -q volatile DRAM ECC counter read for 3 of 3 GPU(s); out of service: GPU 2 (0000:4c:00.0): 2 uncorrected"
        )
    );
}

#[test]
fn a_counter_not_printed_is_said_and_ecc_mode_n_a_explains_it() {
    let s4000 = health_ecc(&accel_testkit::recorded_host("mthreads-8x-s4000"));
    assert_eq!(s4000.status, Status::Ok);
    assert!(
        s4000
            .reason
            .contains("not printed for 8, whose ECC Mode is N/A")
    );
    // The S5000 has ECC on ("On-die, EDC") and this report prints no counter: a warning.
    let s5000 = health_ecc(&accel_testkit::recorded_host("mthreads-s5000"));
    assert_eq!(s5000.status, Status::Warn);
    assert_eq!(
        s5000.reason,
        "mthreads-gmi -q volatile DRAM ECC counter read for 0 of 1 GPU(s); not printed for 1, so their uncorrected ECC errors are not seen"
    );
}
