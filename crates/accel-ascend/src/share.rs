//! The container-share flag (spec/ascend.md §4.2): a V1 driver lets a second container open a
//! chip only while the chip's `device-share` flag is on. Shared, sliced and visibility grants
//! ensure it on before they answer; exclusive grants never touch it; nothing here ever turns
//! it off (it persists in the driver until reboot or an operator's `npu-smi set … -d 0`; only
//! preflight's `container-share` row, [`crate::preflight`], puts back a flag it found off).
//!
//! The flag is read with `npu-smi info -t device-share -i <card> -c <chip>` and written with
//! `npu-smi set -t device-share -i <card> -c <chip> -d 1`, each bounded. A V2 (950) driver
//! declares no flag: the caller lets the grant through and logs it ([`Outcome::NotDeclared`]).
//!
//! [`ShareReplay`] is the recorded host's side: a recording carrying [`STATE_FILE`] answers the
//! two commands from it, so a write shows in the next read.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use accel_host::{CommandError, CommandOutput, Commands, RunFailure, run_bounded};
use serde::{Deserialize, Serialize};

use crate::npusmi;

/// How the flag stood, or was made to stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Read on: nothing written.
    AlreadyOn,
    /// Read off (or unreadable: `read_failed`), written on.
    TurnedOn { read_failed: Option<String> },
    /// A V2 driver: no flag exists.
    NotDeclared,
}

/// The refusal when the driver has no container-share entry point at all (spec §4.2, step 2).
pub fn no_api(card: u32, chip: u32) -> String {
    format!(
        "card {card} device {chip} cannot be shared: this driver has no dcmi container-share API"
    )
}

/// The refusal when the write failed (spec §4.2, step 4), with the command to run by hand;
/// `read_failed` joins the read's failure.
pub fn write_failed(card: u32, chip: u32, why: &str, read_failed: Option<&str>) -> String {
    let mut message = format!(
        "enable container-share mode of card {card} device {chip}: {why}; enable it on the host with `npu-smi set -t device-share -i {card} -c {chip} -d 1`"
    );
    if let Some(read) = read_failed {
        message.push_str(&format!(" (the flag read failed too: {read})"));
    }
    message
}

fn run(commands: &dyn Commands, argv: &[String], deadline: Duration) -> Result<String, RunFailure> {
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    run_bounded(commands, &argv, deadline).map(|o| o.stdout_text())
}

/// Reads the flag of (`card`, `chip`): `Ok(Some(on))`, `Ok(None)` when the output says nothing
/// readable, `Err` the failure.
pub fn read(
    commands: &dyn Commands,
    deadline: Duration,
    card: u32,
    chip: u32,
) -> Result<Option<bool>, RunFailure> {
    run(commands, &npusmi::share_query_argv(card, chip), deadline).map(|t| npusmi::parse_share(&t))
}

/// Ensures the flag of (`card`, `chip`) on, as §4.2 orders: read; on → done; a missing query
/// (the tool or its `device-share` type absent) → refused without a write; otherwise write
/// `-d 1` and read it back. `Err` is the refusal, worded for the kubelet.
pub fn ensure(
    commands: &dyn Commands,
    deadline: Duration,
    card: u32,
    chip: u32,
) -> Result<Outcome, String> {
    let read_failed = match read(commands, deadline, card, chip) {
        Ok(Some(true)) => return Ok(Outcome::AlreadyOn),
        Ok(Some(false)) => None,
        Err(RunFailure::NotInstalled { .. }) => return Err(no_api(card, chip)),
        Ok(None) => Some("npu-smi printed no device-share reading".to_string()),
        Err(e) => Some(e.to_string()),
    };
    match run(commands, &npusmi::share_enable_argv(card, chip), deadline) {
        Ok(_) => {}
        Err(RunFailure::NotInstalled { .. }) => {
            return Err(format!(
                "enable container-share mode of card {card} device {chip}: this driver has no dcmi container-share API"
            ));
        }
        Err(e) => {
            return Err(write_failed(
                card,
                chip,
                &e.to_string(),
                read_failed.as_deref(),
            ));
        }
    }
    if let Ok(Some(false)) = read(commands, deadline, card, chip) {
        return Err(write_failed(
            card,
            chip,
            "the flag still reads off after the write",
            read_failed.as_deref(),
        ));
    }
    Ok(Outcome::TurnedOn { read_failed })
}

/// The file, at the top of a recorded host, that holds its chips' container-share flags.
pub const STATE_FILE: &str = "share-state.json";

/// The flags of a recorded host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShareState {
    /// The chips (`<card>:<chip>`) whose flag is on.
    #[serde(default)]
    pub on: Vec<String>,
    /// The chips whose driver refuses the write (answered as npu-smi refuses: status 255).
    #[serde(default)]
    pub refuse: Vec<String>,
    /// The chips whose driver refuses turning the flag off (`-d 0`) though it turns it on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refuse_off: Vec<String>,
    /// How many writes were made (each `npu-smi set -t device-share`).
    #[serde(default)]
    pub writes: u32,
}

/// A recorded host's `npu-smi` with its flags in [`STATE_FILE`]; every other command goes to
/// the wrapped replay.
pub struct ShareReplay {
    state: PathBuf,
    inner: Box<dyn Commands>,
    lock: Mutex<()>,
}

/// The backend's replay wrapper: wraps `inner` when `dir` carries [`STATE_FILE`].
pub fn wrap(dir: &Path, inner: Box<dyn Commands>) -> Box<dyn Commands> {
    let state = dir.join(STATE_FILE);
    if !state.is_file() {
        return inner;
    }
    Box::new(ShareReplay {
        state,
        inner,
        lock: Mutex::new(()),
    })
}

fn output(status: i32, stdout: String) -> CommandOutput {
    CommandOutput {
        status: Some(status),
        stdout: stdout.into_bytes(),
        stderr: Vec::new(),
    }
}

/// `(kind, card, chip, value)` of `npu-smi info|set -t device-share -i C -c D [-d V]`.
fn share_args(argv: &[&str]) -> Option<(bool, String, Option<String>)> {
    let write = match argv {
        ["npu-smi", "info", "-t", "device-share", ..] => false,
        ["npu-smi", "set", "-t", "device-share", ..] => true,
        _ => return None,
    };
    let rest = &argv[4..];
    let get = |flag: &str| {
        rest.iter()
            .position(|a| *a == flag)
            .and_then(|i| rest.get(i + 1))
            .map(|v| v.to_string())
    };
    let chip = format!("{}:{}", get("-i")?, get("-c")?);
    Some((write, chip, get("-d")))
}

impl ShareReplay {
    fn load(&self) -> Result<ShareState, CommandError> {
        let text = std::fs::read_to_string(&self.state).map_err(|source| CommandError::Io {
            argv: "npu-smi".into(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|e| CommandError::Io {
            argv: "npu-smi".into(),
            source: std::io::Error::other(format!("{}: {e}", self.state.display())),
        })
    }

    fn save(&self, state: &ShareState) -> Result<(), CommandError> {
        let text = serde_json::to_string_pretty(state).unwrap_or_default();
        std::fs::write(&self.state, text + "\n").map_err(|source| CommandError::Io {
            argv: "npu-smi".into(),
            source,
        })
    }
}

impl Commands for ShareReplay {
    fn run(&self, argv: &[&str], deadline: Duration) -> Result<CommandOutput, CommandError> {
        let Some((write, chip, value)) = share_args(argv) else {
            return self.inner.run(argv, deadline);
        };
        let _held = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let mut state = self.load()?;
        if !write {
            let on = state.on.contains(&chip);
            let word = if on { "True" } else { "False" };
            return Ok(output(
                0,
                format!("Device-share Status            : {word}\n"),
            ));
        }
        state.writes += 1;
        let refused_off = value.as_deref() == Some("0") && state.refuse_off.contains(&chip);
        if state.refuse.contains(&chip) || refused_off {
            self.save(&state)?;
            return Ok(CommandOutput {
                status: Some(255),
                stdout: Vec::new(),
                stderr: b"Error: the device-share of the chip cannot be set (error code 8)\n"
                    .to_vec(),
            });
        }
        match value.as_deref() {
            Some("1") => {
                if !state.on.contains(&chip) {
                    state.on.push(chip);
                }
            }
            Some("0") => state.on.retain(|c| *c != chip),
            _ => return Ok(output(2, "Error: parameter error\n".into())),
        }
        self.save(&state)?;
        Ok(output(
            0,
            "Status                         : OK\nMessage                        : The device-share of the chip is set successfully.\n".into(),
        ))
    }

    fn is_installed(&self, program: &str) -> bool {
        program == "npu-smi" || self.inner.is_installed(program)
    }
}
