//! Cambricon's preflight knowledge (spec/cambricon.md §5): tier "driver read and injection" —
//! no host cross-check, no probe container, so the sliced rows are the responder's own answers
//! asserted on (`simulated`).
//!
//! - **`smlu-mode`** (the driver-read row, per card) is established, not just read: the
//!   driver's listing ([`crate::procfs`]) says whether the mode is on; on → `ok`; off → turned
//!   on and straight back off with this node's cnmon spelling (`cnmon set -c <n> -S 1`, then
//!   `-S 0`; or `-smlu on`/`off`, read off `cnmon set -h`), the one place the device manager
//!   turns the mode off: it restores what it found, even when the pass panics in between
//!   ([`Restore`]). `--dry-run` leaves it off and says why; a failed read is `unavailable` and
//!   nothing is written past it.
//! - **Simulated grants** get a responder whose sMLU manager reads the node's listings but runs
//!   no cnmon (it is told by the recorded writes, [`accel_host::RecordingWrites`]); its
//!   instance has no node, so the quota is read off the answer's
//!   [`crate::responder::SIMULATED_SLICE`] annotation. Markers go under preflight's own render
//!   directory, away from `…/operator/pods`.

use std::collections::BTreeSet;
use std::sync::Arc;

use accel_backend::preflight::{DriverRead, NodeAccess, Preflight, State, Tier};
use accel_backend::respond::Injection;
use accel_core::Manufacturer;
use accel_core::inventory::Accelerator;
use accel_host::{Commands, HostWrites, RecordingWrites, run_answered};

use crate::cnmon_smlu::{self, ModeAnswer, ModeSpelling, SET_USAGE_ARGV};
use crate::procfs::{self, ReadError};
use crate::responder::{SIMULATED_SLICE, VIRTUAL_DEVICES};

/// The driver-read row's capability.
pub const SMLU_MODE: &str = "smlu-mode";

/// The group's note.
pub const NOTE: &str = "no container probe: cambricon's preflight is a driver read and the \
     injection; the simulated slices' cnmon calls are recorded, never made";

/// Cambricon's preflight row.
#[derive(Debug, Clone, Copy, Default)]
pub struct CambriconPreflight;

fn row(state: State, reason: impl Into<String>) -> DriverRead {
    DriverRead {
        capability: SMLU_MODE,
        state,
        reason: reason.into(),
    }
}

/// Puts the mode back off when dropped, unless disarmed: a panic between turning it on and
/// turning it off still restores it.
struct Restore<'a> {
    commands: &'a dyn Commands,
    argv: Vec<String>,
    deadline: std::time::Duration,
    armed: bool,
}

impl Restore<'_> {
    /// Turns the mode back off now: whether cnmon says it is off.
    fn now(mut self) -> Result<(), String> {
        self.armed = false;
        restore(self.commands, &self.argv, self.deadline)
    }
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        if self.armed
            && let Err(e) = restore(self.commands, &self.argv, self.deadline)
        {
            tracing::error!("smlu-mode: putting sMLU mode back off failed: {e}");
        }
    }
}

fn restore(
    commands: &dyn Commands,
    argv: &[String],
    deadline: std::time::Duration,
) -> Result<(), String> {
    let args: Vec<&str> = argv.iter().map(String::as_str).collect();
    let out = run_answered(commands, &args, None, deadline).map_err(|e| e.to_string())?;
    match cnmon_smlu::parse_mode_answer(&out.stdout_text(), &out.stderr_text()) {
        ModeAnswer::Now { on: false } | ModeAnswer::Already { on: false } => Ok(()),
        ModeAnswer::Refused(said) => Err(format!("cnmon says: {said}")),
        other => Err(format!("cnmon answered {other:?}")),
    }
}

/// The `smlu-mode` row of one card (spec §5).
pub fn smlu_mode(accelerator: &Accelerator, node: &NodeAccess<'_>) -> DriverRead {
    let Some(bdf) = accelerator.bus_id.map(|b| b.sysfs()) else {
        return row(
            State::Unavailable,
            "the accelerator reports no pci bus id, so its sMLU listing cannot be found",
        );
    };
    let Some(index) = accelerator.minor_number else {
        return row(
            State::Unavailable,
            "the accelerator carries no cnDev device index, so cnmon cannot address it",
        );
    };
    let listing = match procfs::read(node.host, &bdf) {
        Ok(l) => l,
        Err(e @ (ReadError::Absent { .. } | ReadError::Unreadable { .. })) => {
            return row(
                State::Unavailable,
                format!(
                    "the driver gives no sMLU listing for the card ({e}): this driver has no sMLU for it, so no instance can be made"
                ),
            );
        }
        Err(e) => return row(State::Unavailable, e.to_string()),
    };
    if !listing.support {
        return row(
            State::Unavailable,
            "the driver reports no sMLU support for the card (smlu_support:0), so no instance can be made",
        );
    }
    if listing.enabled {
        return row(State::Ok, "sMLU mode is on");
    }
    if node.dry_run {
        return row(
            State::Ok,
            "sMLU mode is off and was left that way: asking it on to see whether this driver accepts is a write, and this is a dry run",
        );
    }
    let spelling = match run_answered(node.commands, SET_USAGE_ARGV, None, node.deadline) {
        Ok(out) => {
            cnmon_smlu::parse_usage(&format!("{}\n{}", out.stdout_text(), out.stderr_text()))
        }
        Err(e) => return row(State::Unavailable, format!("read cnmon's usage: {e}")),
    };
    let Some(spelling) = spelling else {
        return row(
            State::Unavailable,
            format!(
                "sMLU mode is off, and this node's cnmon has no sMLU mode option (`cnmon set -h` names neither `-S`/`--smlu_mode` nor `-smlu`), so the allocator cannot turn it on; the sources spell it {}",
                cnmon_smlu::both_spellings(index, true)
            ),
        );
    };
    toggle(node, spelling, index)
}

/// Asks the mode on, then puts it straight back off.
fn toggle(node: &NodeAccess<'_>, spelling: ModeSpelling, index: u32) -> DriverRead {
    let on = spelling.argv(index, true);
    let args: Vec<&str> = on.iter().map(String::as_str).collect();
    let answered = run_answered(node.commands, &args, None, node.deadline)
        .map(|out| cnmon_smlu::parse_mode_answer(&out.stdout_text(), &out.stderr_text()));
    match answered {
        Ok(ModeAnswer::Now { on: true }) => {}
        Ok(ModeAnswer::Already { on: true }) => {
            return row(State::Ok, "sMLU mode is on");
        }
        Ok(other) => {
            return row(
                State::Unavailable,
                format!(
                    "sMLU mode is off, and asking it on (`{}`) failed: {other:?}",
                    spelling.command(index, true)
                ),
            );
        }
        Err(e) => {
            return row(
                State::Unavailable,
                format!("sMLU mode is off, and asking it on failed: {e}"),
            );
        }
    }
    let restore = Restore {
        commands: node.commands,
        argv: spelling.argv(index, false),
        deadline: node.deadline,
        armed: true,
    };
    match restore.now() {
        Ok(()) => row(
            State::Ok,
            "sMLU mode is off, and this driver accepted being asked to turn it on, so the allocator will manage to when a slice lands on this accelerator; it was put back the way it was found",
        ),
        Err(e) => row(
            State::Unavailable,
            format!(
                "sMLU mode is off, and this driver accepted being asked to turn it on -- but putting it back failed, so the card is in sMLU mode now and stays there until it is turned off (`{}`): {e}",
                spelling.command(index, false)
            ),
        ),
    }
}

/// A `key=value` field of the simulated slice's annotation.
fn simulated_field<'a>(injection: &'a Injection, key: &str) -> Option<&'a str> {
    injection
        .annotations
        .get(SIMULATED_SLICE)?
        .split(';')
        .find_map(|part| {
            let (k, v) = part.split_once('=')?;
            (k.trim() == key).then_some(v.trim())
        })
}

impl Preflight for CambriconPreflight {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Cambricon
    }

    fn tier(&self) -> Tier {
        Tier::DriverReadAndInjection
    }

    fn note(&self) -> Option<String> {
        Some(NOTE.to_string())
    }

    fn driver_read_on(
        &self,
        accelerator: &Accelerator,
        node: &NodeAccess<'_>,
    ) -> Option<DriverRead> {
        Some(smlu_mode(accelerator, node))
    }

    /// A recorder: it tells the responder to simulate (no cnmon is run for a simulated grant).
    fn simulation_writes(&self) -> Option<Arc<dyn HostWrites>> {
        Some(Arc::new(RecordingWrites::default()))
    }

    /// No partitioned family exists for Cambricon.
    fn partition_backed(&self, _accelerator: &Accelerator) -> bool {
        false
    }

    /// The simulated slice's memory (one card a slice).
    fn quota_mib(&self, injection: &Injection, position: usize) -> Option<u64> {
        if position != 0 {
            return None;
        }
        simulated_field(injection, "memMiB")?.parse().ok()
    }

    fn slice_runtime(&self, injection: &Injection) -> Option<String> {
        if let Some(node) = injection.envs.get(VIRTUAL_DEVICES) {
            return Some(format!(
                "hands sMLU instance {node} and names it in {VIRTUAL_DEVICES}"
            ));
        }
        let card = simulated_field(injection, "card")?;
        let cores = simulated_field(injection, "cores")?;
        let memory = simulated_field(injection, "memMiB")?;
        Some(format!(
            "reserves an sMLU instance of {cores} % and {memory} MiB on card {card} (its cnmon calls recorded, not made)"
        ))
    }

    /// No preload library: the driver enforces the slice.
    fn library_in_container(&self, _injection: &Injection) -> Option<String> {
        None
    }

    /// The card nodes handed.
    fn visible(&self, injection: &Injection) -> BTreeSet<String> {
        injection
            .devices
            .iter()
            .filter(|d| d.container_path.starts_with("/dev/cambricon_dev"))
            .map(|d| d.container_path.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    use accel_core::busid::BusId;
    use accel_host::{CommandError, CommandOutput, FsHost};

    /// A cnmon that answers the usage and the mode writes, keeping the mode, and records them.
    struct Mode {
        on: Mutex<bool>,
        refuse_off: bool,
        calls: Mutex<Vec<String>>,
    }

    impl Commands for Mode {
        fn run(&self, argv: &[&str], _: Duration) -> Result<CommandOutput, CommandError> {
            self.calls.lock().unwrap().push(argv.join(" "));
            let say = |s: &str| {
                Ok(CommandOutput {
                    status: Some(0),
                    stdout: s.as_bytes().to_vec(),
                    stderr: Vec::new(),
                })
            };
            match argv {
                ["cnmon", "set", "-h"] => say("  -S, --smlu_mode=<string>  0/OFF 1/ON\n"),
                ["cnmon", "set", "-c", _, "-S", "1"] => {
                    *self.on.lock().unwrap() = true;
                    say("The device SMLU mode is ON now.\n")
                }
                ["cnmon", "set", "-c", _, "-S", "0"] if self.refuse_off => {
                    say("This device is busy.\n")
                }
                ["cnmon", "set", "-c", _, "-S", "0"] => {
                    *self.on.lock().unwrap() = false;
                    say("The device SMLU mode is OFF now.\n")
                }
                _ => Err(CommandError::NotInstalled {
                    program: "cnmon".into(),
                }),
            }
        }
        fn is_installed(&self, _: &str) -> bool {
            true
        }
    }

    fn card() -> Accelerator {
        let mut a = Accelerator::new(0, accel_core::inventory::Source::Driver);
        a.bus_id = Some("0000:4f:00.0".parse::<BusId>().unwrap());
        a.minor_number = Some(0);
        a
    }

    fn listing(dir: &std::path::Path, enabled: bool) {
        let path = dir.join("proc/driver/cambricon/mlus/0000:4f:00.0");
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(
            path.join("smlu"),
            format!("smlu_support:1 smlu_enable:{}\n", u8::from(enabled)),
        )
        .unwrap();
    }

    fn access<'a>(commands: &'a dyn Commands, host: &'a FsHost, dry_run: bool) -> NodeAccess<'a> {
        NodeAccess {
            commands,
            host,
            dry_run,
            deadline: Duration::from_secs(5),
        }
    }

    fn mode(refuse_off: bool) -> Mode {
        Mode {
            on: Mutex::new(false),
            refuse_off,
            calls: Mutex::new(Vec::new()),
        }
    }

    #[test]
    fn off_is_asked_on_and_put_straight_back_off() {
        let dir = tempfile::tempdir().unwrap();
        listing(dir.path(), false);
        let host = FsHost::new(dir.path());
        let cnmon = mode(false);
        let read = smlu_mode(&card(), &access(&cnmon, &host, false));
        assert_eq!(read.state, State::Ok, "{}", read.reason);
        assert!(
            read.reason
                .ends_with("it was put back the way it was found")
        );
        assert!(!*cnmon.on.lock().unwrap());
        assert_eq!(
            *cnmon.calls.lock().unwrap(),
            ["cnmon set -h", "cnmon set -c 0 -S 1", "cnmon set -c 0 -S 0"]
        );
        // A dry run writes nothing.
        let cnmon = mode(false);
        let read = smlu_mode(&card(), &access(&cnmon, &host, true));
        assert_eq!(read.state, State::Ok);
        assert!(read.reason.contains("this is a dry run"), "{}", read.reason);
        assert!(cnmon.calls.lock().unwrap().is_empty());
    }

    #[test]
    fn a_restore_that_fails_says_the_card_stays_in_smlu_mode() {
        let dir = tempfile::tempdir().unwrap();
        listing(dir.path(), false);
        let host = FsHost::new(dir.path());
        let cnmon = mode(true);
        let read = smlu_mode(&card(), &access(&cnmon, &host, false));
        assert_eq!(read.state, State::Unavailable);
        assert!(
            read.reason
                .contains("putting it back failed, so the card is in sMLU mode now")
                && read.reason.contains("`cnmon set -c 0 -S 0`"),
            "{}",
            read.reason
        );
    }

    #[test]
    fn on_is_ok_and_a_missing_listing_is_unavailable_with_nothing_written() {
        let dir = tempfile::tempdir().unwrap();
        let host = FsHost::new(dir.path());
        let cnmon = mode(false);
        let read = smlu_mode(&card(), &access(&cnmon, &host, false));
        assert_eq!(read.state, State::Unavailable);
        assert!(cnmon.calls.lock().unwrap().is_empty(), "never written past");
        listing(dir.path(), true);
        let read = smlu_mode(&card(), &access(&cnmon, &host, false));
        assert_eq!(
            (read.state, read.reason.as_str()),
            (State::Ok, "sMLU mode is on")
        );
    }

    #[test]
    fn a_panic_after_turning_it_on_still_restores() {
        let cnmon = mode(false);
        *cnmon.on.lock().unwrap() = true;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _restore = Restore {
                commands: &cnmon,
                argv: ModeSpelling::ShortS.argv(0, false),
                deadline: Duration::from_secs(5),
                armed: true,
            };
            panic!("between on and off");
        }));
        assert!(result.is_err());
        assert!(!*cnmon.on.lock().unwrap(), "put back off by the guard");
    }
}
