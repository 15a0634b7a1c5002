//! A recorded host whose MIG state follows the commands run against it (issue 13, item 9).
//!
//! A recorded host that carries [`STATE_FILE`] at its top (beside `recorded-host.json`) keeps
//! its MIG GPU and compute instances there instead of in fixed recordings: `nvidia-smi mig -cgi`,
//! `-dci` and `-dgi` change the file, and `mig -lgi`, `mig -lci`, `-L` and the `-q -x` report's
//! `<mig_devices>` are rendered from it. So `detect --host-root H` after `serve --host-root H`
//! shows the instances `serve` made, and the partitioner's tests run against a driver that
//! remembers, refuses (`Insufficient Resources`, `In use by another client`) and reuses GPU
//! instance ids after a destroy, as the real one does.
//!
//! The profiles and their placements still come from the recordings (`mig -lgip`, `-lgipp`,
//! whose `-i N` forms are the recorded listing cut to GPU N). Everything else is replayed by the
//! wrapped [`Commands`]. What the replay decides where no capture shows the driver's answer
//! (written down in the host's `NOTES.md` and docs/ARCHITECTURE.md): GPU instance ids are the
//! lowest free id from 1; a created instance's MIG UUID is new on every create (so a GI made
//! again with the same id carries another UUID); exit statuses are nvidia-smi's documented codes
//! (2 bad argument, 6 not found, 255 other, which covers `In use` and `Insufficient Resources`).
//! An instance marked `busy` in the file has processes on it: destroying its compute instance is
//! refused `In use by another client` until the mark is taken off, and the `-q -x` report (also
//! its `-q -x -i N` form, the report cut to GPU N) lists one compute process on each of its
//! compute instances, as nvidia-smi's process listing names them (GPU and compute instance id).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use accel_host::{CommandError, CommandOutput, Commands};
use serde::{Deserialize, Serialize};

use crate::smi;

/// The file, at the top of a recorded host, that holds its MIG instances.
pub const STATE_FILE: &str = "mig-state.json";

/// nvidia-smi's exit status for a bad argument.
const STATUS_INVALID: i32 = 2;
/// nvidia-smi's exit status for an object not found.
const STATUS_NOT_FOUND: i32 = 6;
/// nvidia-smi's exit status for any other error (`In use`, `Insufficient Resources`).
const STATUS_OTHER: i32 = 255;

/// The MIG instances of a recorded host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MigState {
    /// Instances created so far; every MIG UUID carries it, so none repeats.
    #[serde(default)]
    pub serial: u64,
    #[serde(default)]
    pub instances: Vec<StateInstance>,
}

/// One GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StateInstance {
    /// nvidia-smi's GPU index.
    pub gpu: u32,
    pub gpu_instance: u32,
    pub profile_id: u32,
    /// The profile name as the driver spells it (`3g.40gb`).
    pub profile: String,
    pub start: u32,
    pub size: u32,
    #[serde(default)]
    pub compute_instances: Vec<StateCompute>,
    /// Processes run on it: destroying its compute instances is refused.
    #[serde(default)]
    pub busy: bool,
}

/// One compute instance and the MIG device it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StateCompute {
    pub id: u32,
    pub uuid: String,
}

impl MigState {
    /// Reads the state file; a missing file is no instances.
    pub fn load(path: &Path) -> Result<MigState, String> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| format!("{}: not a MIG state file ({e})", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(MigState::default()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// Writes the state file atomically.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let mut text =
            serde_json::to_string_pretty(self).map_err(|e| format!("{}: {e}", path.display()))?;
        text.push('\n');
        accel_host::atomic::write_atomic(path, text.as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    fn on(&self, gpu: Option<u32>) -> Vec<&StateInstance> {
        let mut list: Vec<&StateInstance> = self
            .instances
            .iter()
            .filter(|i| gpu.is_none_or(|g| i.gpu == g))
            .collect();
        list.sort_by_key(|i| (i.gpu, i.gpu_instance));
        list
    }
}

/// Replays a recorded host's MIG commands from its state file, the rest from `inner`.
pub struct MigReplay {
    state: PathBuf,
    inner: Box<dyn Commands>,
    lock: Mutex<()>,
}

/// `inner` with MIG state when the recorded host `dir` carries [`STATE_FILE`], else `inner`.
pub fn wrap(dir: &Path, inner: Box<dyn Commands>) -> Box<dyn Commands> {
    let state = dir.join(STATE_FILE);
    if state.is_file() {
        Box::new(MigReplay {
            state,
            inner,
            lock: Mutex::new(()),
        })
    } else {
        inner
    }
}

fn answer(status: i32, stdout: String) -> CommandOutput {
    CommandOutput {
        status: Some(status),
        stdout: stdout.into_bytes(),
        stderr: Vec::new(),
    }
}

/// What a `nvidia-smi mig …` command line asks.
#[derive(Debug, Default)]
struct MigArgs {
    gpu: Option<u32>,
    gpu_instance: Option<u32>,
    compute_instance: Option<u32>,
    create: Option<String>,
    with_compute: bool,
    op: Option<&'static str>,
}

fn parse_args(rest: &[&str]) -> Option<MigArgs> {
    let mut args = MigArgs::default();
    let mut words = rest.iter();
    while let Some(word) = words.next() {
        match *word {
            "-i" => args.gpu = Some(words.next()?.parse().ok()?),
            "-gi" => args.gpu_instance = Some(words.next()?.parse().ok()?),
            "-ci" => args.compute_instance = Some(words.next()?.parse().ok()?),
            "-cgi" => {
                args.create = Some(words.next()?.to_string());
                args.op = Some("-cgi");
            }
            "-C" => args.with_compute = true,
            "-lgip" => args.op = Some("-lgip"),
            "-lgipp" => args.op = Some("-lgipp"),
            "-lgi" => args.op = Some("-lgi"),
            "-lci" => args.op = Some("-lci"),
            "-dci" => args.op = Some("-dci"),
            "-dgi" => args.op = Some("-dgi"),
            _ => return None,
        }
    }
    Some(args)
}

impl Commands for MigReplay {
    fn run(&self, argv: &[&str], deadline: Duration) -> Result<CommandOutput, CommandError> {
        let io = |message: String| CommandError::Io {
            argv: argv.join(" "),
            source: std::io::Error::other(message),
        };
        match argv {
            ["nvidia-smi", "mig", rest @ ..] => {
                let Some(args) = parse_args(rest) else {
                    return self.inner.run(argv, deadline);
                };
                let _held = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
                self.mig(&args, deadline).map_err(io)?
            }
            ["nvidia-smi", "-L"] => {
                let _held = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
                let state = MigState::load(&self.state).map_err(io)?;
                let out = self.inner.run(argv, deadline)?;
                Ok(answer_like(&out, list_with(&out.stdout_text(), &state)))
            }
            ["nvidia-smi", "-q", "-x"] => {
                let _held = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
                let state = MigState::load(&self.state).map_err(io)?;
                let out = self.inner.run(argv, deadline)?;
                Ok(answer_like(&out, xml_with(&out.stdout_text(), &state)))
            }
            ["nvidia-smi", "-q", "-x", "-i", index] => {
                let Ok(gpu) = index.parse::<u32>() else {
                    return Ok(answer(
                        STATUS_INVALID,
                        format!("Invalid GPU index {index}\n"),
                    ));
                };
                let _held = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
                let state = MigState::load(&self.state).map_err(io)?;
                let out = self.inner.run(&["nvidia-smi", "-q", "-x"], deadline)?;
                match xml_cut(&xml_with(&out.stdout_text(), &state), gpu) {
                    Some(one) => Ok(answer_like(&out, one)),
                    None => Ok(answer(
                        STATUS_NOT_FOUND,
                        format!("No GPU with index {gpu} found\n"),
                    )),
                }
            }
            _ => self.inner.run(argv, deadline),
        }
    }

    fn is_installed(&self, program: &str) -> bool {
        self.inner.is_installed(program)
    }
}

fn answer_like(out: &CommandOutput, stdout: String) -> CommandOutput {
    CommandOutput {
        status: out.status,
        stdout: stdout.into_bytes(),
        stderr: out.stderr.clone(),
    }
}

/// A profile of one GPU as the recordings list it.
struct Profile {
    id: u32,
    name: String,
    size: u32,
    starts: Vec<u32>,
}

impl MigReplay {
    /// One `mig` command: `Ok(Err(..))` is the inner runner's error, `Err` the state's.
    #[allow(clippy::type_complexity)]
    fn mig(
        &self,
        args: &MigArgs,
        deadline: Duration,
    ) -> Result<Result<CommandOutput, CommandError>, String> {
        match (args.op, args.gpu) {
            (Some(op @ ("-lgip" | "-lgipp")), gpu) => {
                let out = match self.inner.run(&["nvidia-smi", "mig", op], deadline) {
                    Ok(out) => out,
                    Err(e) => return Ok(Err(e)),
                };
                let Some(gpu) = gpu else { return Ok(Ok(out)) };
                let text = out.stdout_text();
                let cut = if op == "-lgip" {
                    cut_profiles(&text, gpu)
                } else {
                    cut_placements(&text, gpu)
                };
                Ok(Ok(answer_like(&out, cut)))
            }
            (Some("-lgi"), gpu) => {
                let state = MigState::load(&self.state)?;
                Ok(Ok(render_gpu_instances(&state.on(gpu))))
            }
            (Some("-lci"), gpu) => {
                let state = MigState::load(&self.state)?;
                Ok(Ok(render_compute_instances(&state.on(gpu))))
            }
            (Some("-cgi"), Some(gpu)) => {
                let profiles = match self.profiles(gpu, deadline) {
                    Ok(p) => p,
                    Err(e) => return Ok(Err(e)),
                };
                let mut state = MigState::load(&self.state)?;
                let out = create(
                    &mut state,
                    &profiles,
                    gpu,
                    args.create.as_deref().unwrap_or(""),
                    args.with_compute,
                );
                if out.success() {
                    state.save(&self.state)?;
                }
                Ok(Ok(out))
            }
            (Some("-dci"), Some(gpu)) => {
                let mut state = MigState::load(&self.state)?;
                let out = destroy_compute(&mut state, gpu, args);
                state.save(&self.state)?;
                Ok(Ok(out))
            }
            (Some("-dgi"), Some(gpu)) => {
                let mut state = MigState::load(&self.state)?;
                let out = destroy_gpu_instances(&mut state, gpu, args.gpu_instance);
                state.save(&self.state)?;
                Ok(Ok(out))
            }
            _ => Ok(Ok(answer(
                STATUS_INVALID,
                "the recorded host's MIG replay needs -i <gpu> for -cgi, -dci and -dgi\n".into(),
            ))),
        }
    }

    /// The profiles of `gpu` with their placements, from the recorded listings.
    fn profiles(&self, gpu: u32, deadline: Duration) -> Result<Vec<Profile>, CommandError> {
        let lgip = self.inner.run(smi::mig::PROFILES_ARGV, deadline)?;
        let lgipp = self.inner.run(smi::mig::PLACEMENTS_ARGV, deadline)?;
        let profiles = smi::mig::parse_profiles(&lgip.stdout_text()).unwrap_or_default();
        let placements = smi::mig::parse_placements(&lgipp.stdout_text()).unwrap_or_default();
        Ok(profiles
            .into_iter()
            .filter(|p| p.gpu == gpu)
            .filter_map(|p| {
                let place = placements
                    .iter()
                    .find(|pl| pl.gpu == gpu && pl.profile_id == p.id)?;
                Some(Profile {
                    id: p.id,
                    name: p.name,
                    size: place.size,
                    starts: place.starts.clone(),
                })
            })
            .collect())
    }
}

/// Compute slices of a profile name (`3g.40gb` → 3).
fn compute_slices(profile: &str) -> u32 {
    profile
        .split('g')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// The compute instance profile id covering a whole GPU instance of `slices` compute slices.
fn full_compute_profile_id(slices: u32) -> u32 {
    match slices {
        1 => 0,
        2 => 1,
        3 => 2,
        4 => 3,
        7 => 4,
        6 => 5,
        other => other,
    }
}

fn create(
    state: &mut MigState,
    profiles: &[Profile],
    gpu: u32,
    spec: &str,
    with_compute: bool,
) -> CommandOutput {
    let (wanted, start) = match spec.split_once(':') {
        Some((p, s)) => (p, Some(s)),
        None => (spec, None),
    };
    let Some(profile) = profiles
        .iter()
        .find(|p| p.id.to_string() == wanted || p.name == wanted)
    else {
        return answer(
            STATUS_NOT_FOUND,
            format!(
                "Unable to create a GPU instance on GPU {gpu:>2} using profile {wanted}: Not Found\nFailed to create GPU instances: Not Found\n"
            ),
        );
    };
    let start = match start.map(str::parse::<u32>) {
        Some(Ok(s)) if profile.starts.contains(&s) => Some(s),
        Some(_) => {
            return answer(
                STATUS_INVALID,
                format!(
                    "Unable to create a GPU instance on GPU {gpu:>2} using profile {}: Invalid Argument\nFailed to create GPU instances: Invalid Argument\n",
                    profile.id
                ),
            );
        }
        None => None,
    };
    let taken: Vec<(u32, u32)> = state
        .on(Some(gpu))
        .iter()
        .map(|i| (i.start, i.start + i.size))
        .collect();
    let free = |s: u32| taken.iter().all(|(a, b)| s + profile.size <= *a || s >= *b);
    let chosen = match start {
        Some(s) => free(s).then_some(s),
        None => profile.starts.iter().copied().find(|s| free(*s)),
    };
    let Some(start) = chosen else {
        return answer(
            STATUS_OTHER,
            format!(
                "Unable to create a GPU instance on GPU {gpu:>2} using profile {}: Insufficient Resources\nFailed to create GPU instances: Insufficient Resources\n",
                profile.id
            ),
        );
    };
    let ids: Vec<u32> = state.on(Some(gpu)).iter().map(|i| i.gpu_instance).collect();
    let gpu_instance = (1..).find(|id| !ids.contains(id)).unwrap_or(1);
    let mut text = format!(
        "Successfully created GPU instance ID {gpu_instance:>2} on GPU {gpu:>2} using profile MIG {} (ID {:>2})\n",
        profile.name, profile.id
    );
    let mut compute_instances = Vec::new();
    if with_compute {
        state.serial += 1;
        compute_instances.push(StateCompute {
            id: 0,
            uuid: mig_uuid(gpu, gpu_instance, state.serial),
        });
        text.push_str(&format!(
            "Successfully created compute instance ID  0 on GPU {gpu:>2} GPU instance ID {gpu_instance:>2} using profile MIG {} (ID {:>2})\n",
            profile.name,
            full_compute_profile_id(compute_slices(&profile.name))
        ));
    }
    state.instances.push(StateInstance {
        gpu,
        gpu_instance,
        profile_id: profile.id,
        profile: profile.name.clone(),
        start,
        size: profile.size,
        compute_instances,
        busy: false,
    });
    answer(0, text)
}

fn mig_uuid(gpu: u32, gpu_instance: u32, serial: u64) -> String {
    format!(
        "MIG-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        0x6d69_6700_u32 | (gpu & 0xff),
        gpu_instance & 0xffff,
        (serial >> 48) & 0xffff,
        (serial >> 32) & 0xffff,
        serial & 0xffff_ffff_ffff
    )
}

fn destroy_compute(state: &mut MigState, gpu: u32, args: &MigArgs) -> CommandOutput {
    let Some(gi) = args.gpu_instance else {
        return answer(
            STATUS_INVALID,
            "the recorded host's MIG replay needs -gi <id> for -dci\n".into(),
        );
    };
    let Some(instance) = state
        .instances
        .iter_mut()
        .find(|i| i.gpu == gpu && i.gpu_instance == gi)
    else {
        return answer(
            STATUS_NOT_FOUND,
            format!(
                "Unable to find GPU instance ID {gi:>2} on GPU {gpu:>2}: Not Found\nFailed to destroy compute instances: Not Found\n"
            ),
        );
    };
    let wanted: Vec<u32> = instance
        .compute_instances
        .iter()
        .map(|c| c.id)
        .filter(|id| args.compute_instance.is_none_or(|c| c == *id))
        .collect();
    if wanted.is_empty() {
        return answer(
            STATUS_NOT_FOUND,
            format!(
                "Unable to destroy compute instance ID {:>2} from GPU {gpu:>2} GPU instance ID {gi:>2}: Not Found\nFailed to destroy compute instances: Not Found\n",
                args.compute_instance.unwrap_or(0)
            ),
        );
    }
    if instance.busy {
        return answer(
            STATUS_OTHER,
            format!(
                "Unable to destroy compute instance ID {:>2} from GPU {gpu:>2} GPU instance ID {gi:>2}: In use by another client\nFailed to destroy compute instances: In use by another client\n",
                wanted[0]
            ),
        );
    }
    instance
        .compute_instances
        .retain(|c| !wanted.contains(&c.id));
    let text: String = wanted
        .iter()
        .map(|ci| {
            format!(
                "Successfully destroyed compute instance ID {ci:>2} from GPU {gpu:>2} GPU instance ID {gi:>2}\n"
            )
        })
        .collect();
    answer(0, text)
}

fn destroy_gpu_instances(state: &mut MigState, gpu: u32, gi: Option<u32>) -> CommandOutput {
    let targets: Vec<u32> = state
        .on(Some(gpu))
        .iter()
        .map(|i| i.gpu_instance)
        .filter(|id| gi.is_none_or(|g| g == *id))
        .collect();
    if targets.is_empty() {
        return answer(
            STATUS_NOT_FOUND,
            format!(
                "Unable to destroy GPU instance ID {:>2} from GPU {gpu:>2}: Not Found\nFailed to destroy GPU instances: Not Found\n",
                gi.unwrap_or(0)
            ),
        );
    }
    let mut text = String::new();
    let mut failed = false;
    for id in targets {
        let in_use = state
            .instances
            .iter()
            .any(|i| i.gpu == gpu && i.gpu_instance == id && !i.compute_instances.is_empty());
        if in_use {
            failed = true;
            text.push_str(&format!(
                "Unable to destroy GPU instance ID {id:>2} from GPU {gpu:>2}: In use by another client\n"
            ));
        } else {
            state
                .instances
                .retain(|i| !(i.gpu == gpu && i.gpu_instance == id));
            text.push_str(&format!(
                "Successfully destroyed GPU instance ID {id:>2} from GPU {gpu:>2}\n"
            ));
        }
    }
    if failed {
        text.push_str("Failed to destroy GPU instances: In use by another client\n");
        return answer(STATUS_OTHER, text);
    }
    answer(0, text)
}

const GI_RULE: &str = "+-------------------------------------------------------+";

fn render_gpu_instances(instances: &[&StateInstance]) -> CommandOutput {
    if instances.is_empty() {
        return answer(
            STATUS_NOT_FOUND,
            "No GPU instances found: Not Found\n".into(),
        );
    }
    let mut text = format!(
        "{GI_RULE}\n| GPU instances:                                        |\n| GPU   Name             Profile  Instance   Placement  |\n|                          ID       ID       Start:Size |\n|=======================================================|\n"
    );
    for i in instances {
        let place = format!("{}:{}", i.start, i.size);
        text.push_str(&format!(
            "|  {:>2}  MIG {:<14} {:>3}      {:>3}        {:<8}  |\n{GI_RULE}\n",
            i.gpu, i.profile, i.profile_id, i.gpu_instance, place
        ));
    }
    answer(0, text)
}

const CI_RULE: &str = "+--------------------------------------------------------------------+";

fn render_compute_instances(instances: &[&StateInstance]) -> CommandOutput {
    let rows: Vec<(&StateInstance, &StateCompute)> = instances
        .iter()
        .flat_map(|i| i.compute_instances.iter().map(move |c| (*i, c)))
        .collect();
    if rows.is_empty() {
        return answer(
            STATUS_NOT_FOUND,
            "No compute instances found: Not Found\n".into(),
        );
    }
    let mut text = format!(
        "{CI_RULE}\n| Compute instances:                                                 |\n| GPU     GPU       Name             Profile   Instance   Placement  |\n|       Instance                       ID        ID       Start:Size |\n|         ID                                                         |\n|====================================================================|\n"
    );
    for (i, c) in rows {
        let slices = compute_slices(&i.profile);
        let place = format!("0:{slices}");
        text.push_str(&format!(
            "|  {:>2}     {:>2}       MIG {:<14} {:>3}       {:>3}        {:<7}  |\n{CI_RULE}\n",
            i.gpu,
            i.gpu_instance,
            i.profile,
            full_compute_profile_id(slices),
            c.id,
            place
        ));
    }
    answer(0, text)
}

/// The recorded `-lgip` listing cut to GPU `gpu` (its header, then that GPU's rows).
fn cut_profiles(text: &str, gpu: u32) -> String {
    let mut out = String::new();
    let mut in_header = true;
    let mut keep = false;
    let wanted = gpu.to_string();
    for line in text.lines() {
        let trimmed = line.trim();
        if in_header {
            out.push_str(line);
            out.push('\n');
            if trimmed.starts_with("|=") {
                in_header = false;
            }
            continue;
        }
        if trimmed.starts_with('+') {
            if keep {
                out.push_str(line);
                out.push('\n');
            }
            continue;
        }
        let words: Vec<&str> = trimmed.trim_matches('|').split_whitespace().collect();
        if words.get(1) == Some(&"MIG") {
            keep = words.first() == Some(&wanted.as_str());
        }
        if keep {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The recorded `-lgipp` listing cut to GPU `gpu`.
fn cut_placements(text: &str, gpu: u32) -> String {
    let wanted = gpu.to_string();
    text.lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(wanted.as_str()))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The recorded `-L` with each GPU's MIG devices from the state (recorded MIG lines dropped).
fn list_with(text: &str, state: &MigState) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("MIG ") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
        let index = trimmed
            .strip_prefix("GPU ")
            .and_then(|rest| rest.split_once(':'))
            .and_then(|(n, _)| n.trim().parse::<u32>().ok());
        let Some(gpu) = index else { continue };
        let mut device = 0;
        for instance in state.on(Some(gpu)) {
            for compute in &instance.compute_instances {
                out.push_str(&format!(
                    "  MIG {:<12} Device {device:>2}: (UUID: {})\n",
                    instance.profile, compute.uuid
                ));
                device += 1;
            }
        }
    }
    out
}

/// nvidia-smi's index of each `<gpu id="…">` element of a report, by document position: GPUs
/// are numbered in bus order.
fn smi_indexes(text: &str) -> Vec<Option<u32>> {
    let ids: Vec<String> = text
        .split("<gpu id=\"")
        .skip(1)
        .map(|piece| piece.split('"').next().unwrap_or("").to_ascii_lowercase())
        .collect();
    let mut order: Vec<(&String, usize)> = ids.iter().zip(0..).collect();
    order.sort();
    (0..ids.len())
        .map(|doc| {
            order
                .iter()
                .position(|(_, n)| *n == doc)
                .and_then(|p| u32::try_from(p).ok())
        })
        .collect()
}

/// The report cut to GPU `gpu` (what `nvidia-smi -q -x -i N` prints): the header, that GPU's
/// element, the closing tag. `None` when the report has no such GPU.
fn xml_cut(text: &str, gpu: u32) -> Option<String> {
    const OPEN: &str = "<gpu id=\"";
    const END: &str = "</nvidia_smi_log>";
    let doc = smi_indexes(text).iter().position(|i| *i == Some(gpu))?;
    let header = &text[..text.find(OPEN)?];
    let piece = text.split(OPEN).nth(doc + 1)?;
    let body = piece.split(END).next().unwrap_or(piece).trim_end();
    Some(format!("{header}{OPEN}{body}\n\n{END}\n"))
}

/// `<process_info>` of one compute process on a GPU and compute instance (the order of the v11+
/// report).
fn process_info(gi: u32, ci: u32, pid: u32) -> String {
    format!(
        "\t\t\t<process_info>\n\t\t\t\t<gpu_instance_id>{gi}</gpu_instance_id>\n\t\t\t\t<compute_instance_id>{ci}</compute_instance_id>\n\t\t\t\t<pid>{pid}</pid>\n\t\t\t\t<type>C</type>\n\t\t\t\t<process_name>python3</process_name>\n\t\t\t\t<used_memory>512 MiB</used_memory>\n\t\t\t</process_info>\n"
    )
}

/// The recorded `-q -x` report with each GPU's `<mig_devices>` from the state, and its
/// `<processes>` listing one compute process on each compute instance of a `busy` instance.
/// GPUs are matched to nvidia-smi's index by bus order (`<gpu id="…">`), as nvidia-smi numbers
/// them.
fn xml_with(text: &str, state: &MigState) -> String {
    let text = processes_with(text, state);
    mig_devices_with(&text, state)
}

fn processes_with(text: &str, state: &MigState) -> String {
    const OPEN: &str = "<processes>";
    const CLOSE: &str = "</processes>";
    let indexes = smi_indexes(text);
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut doc = 0usize;
    while let Some(at) = rest.find(OPEN) {
        let Some(end) = rest[at..].find(CLOSE) else {
            break;
        };
        let busy: Vec<(u32, u32)> = indexes
            .get(doc)
            .copied()
            .flatten()
            .map(|gpu| {
                state
                    .on(Some(gpu))
                    .iter()
                    .filter(|i| i.busy)
                    .flat_map(|i| i.compute_instances.iter().map(|c| (i.gpu_instance, c.id)))
                    .collect()
            })
            .unwrap_or_default();
        if busy.is_empty() {
            out.push_str(&rest[..at + end + CLOSE.len()]);
        } else {
            out.push_str(&rest[..at]);
            out.push_str(OPEN);
            out.push('\n');
            for (n, (gi, ci)) in busy.iter().enumerate() {
                let pid = 4000 + 100 * indexes[doc].unwrap_or(0) + u32::try_from(n).unwrap_or(0);
                out.push_str(&process_info(*gi, *ci, pid));
            }
            out.push_str("\t\t");
            out.push_str(CLOSE);
        }
        rest = &rest[at + end + CLOSE.len()..];
        doc += 1;
    }
    out.push_str(rest);
    out
}

fn mig_devices_with(text: &str, state: &MigState) -> String {
    const OPEN: &str = "<mig_devices>";
    const CLOSE: &str = "</mig_devices>";
    let indexes = smi_indexes(text);
    let smi_index = |doc: usize| indexes.get(doc).copied().flatten();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut doc = 0usize;
    while let Some(at) = rest.find(OPEN) {
        let Some(end) = rest[at..].find(CLOSE) else {
            break;
        };
        out.push_str(&rest[..at]);
        out.push_str(OPEN);
        let devices: Vec<(u32, u32)> = smi_index(doc)
            .map(|gpu| {
                state
                    .on(Some(gpu))
                    .iter()
                    .flat_map(|i| i.compute_instances.iter().map(|c| (i.gpu_instance, c.id)))
                    .collect()
            })
            .unwrap_or_default();
        if devices.is_empty() {
            out.push_str("\n\t\t\tNone\n\t\t");
        } else {
            out.push('\n');
            for (k, (gi, ci)) in devices.iter().enumerate() {
                out.push_str(&format!(
                    "\t\t\t<mig_device>\n\t\t\t\t<index>{k}</index>\n\t\t\t\t<gpu_instance_id>{gi}</gpu_instance_id>\n\t\t\t\t<compute_instance_id>{ci}</compute_instance_id>\n\t\t\t</mig_device>\n"
                ));
            }
            out.push_str("\t\t");
        }
        out.push_str(CLOSE);
        rest = &rest[at + end + CLOSE.len()..];
        doc += 1;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_host::RecordedCommands;

    const LONG: Duration = Duration::from_secs(20);

    fn host() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let src =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/hosts/hgx-h100-8gpu-mig");
        copy(&src, dir.path());
        dir
    }

    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            let target = to.join(entry.file_name());
            if kind.is_dir() {
                copy(&entry.path(), &target);
            } else if kind.is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(entry.path()).unwrap(), target)
                    .unwrap();
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }

    fn replay(dir: &Path) -> Box<dyn Commands> {
        wrap(dir, Box::new(RecordedCommands::load(dir).unwrap()))
    }

    fn run(c: &dyn Commands, argv: &[&str]) -> CommandOutput {
        c.run(argv, LONG).unwrap()
    }

    #[test]
    fn instances_follow_the_commands_and_gi_ids_are_reused() {
        let dir = host();
        let c = replay(dir.path());
        let lgi = run(&*c, &["nvidia-smi", "mig", "-i", "0", "-lgi"]);
        assert_eq!(lgi.status, Some(6));
        assert_eq!(
            smi::mig::parse_gpu_instances(&lgi.stdout_text()),
            Ok(vec![])
        );

        let made = run(&*c, &["nvidia-smi", "mig", "-i", "0", "-cgi", "9:4", "-C"]);
        assert!(made.success(), "{}", made.stdout_text());
        assert!(made.stdout_text().starts_with(
            "Successfully created GPU instance ID  1 on GPU  0 using profile MIG 3g.40gb (ID  9)"
        ));
        let overlapping = run(&*c, &["nvidia-smi", "mig", "-i", "0", "-cgi", "14:4", "-C"]);
        assert_eq!(
            overlapping.status,
            Some(255),
            "a 2g at 4 overlaps the 3g at 4"
        );
        assert!(overlapping.stdout_text().contains("Insufficient Resources"));
        let second = run(&*c, &["nvidia-smi", "mig", "-i", "0", "-cgi", "19:0", "-C"]);
        assert!(second.success());

        let gis = smi::mig::parse_gpu_instances(
            &run(&*c, &["nvidia-smi", "mig", "-i", "0", "-lgi"]).stdout_text(),
        )
        .unwrap();
        let got: Vec<(String, u32, u32, u32)> = gis
            .iter()
            .map(|g| {
                let p = g.placement.unwrap();
                (g.name.clone(), g.instance_id, p.start, p.size)
            })
            .collect();
        assert_eq!(
            got,
            [
                ("3g.40gb".to_string(), 1, 4, 4),
                ("1g.10gb".to_string(), 2, 0, 1)
            ]
        );
        let cis = smi::mig::parse_compute_instances(
            &run(&*c, &["nvidia-smi", "mig", "-lci"]).stdout_text(),
        )
        .unwrap();
        assert_eq!(cis.len(), 2);
        assert_eq!((cis[0].gpu_instance_id, cis[0].instance_id), (1, 0));

        // -L and the XML name them; another GPU shows none.
        let list = smi::list::parse(&run(&*c, &["nvidia-smi", "-L"]).stdout_text()).unwrap();
        assert_eq!(list.len(), 8);
        assert_eq!(list[0].mig_devices.len(), 2);
        assert_eq!(list[0].mig_devices[0].profile, "3g.40gb");
        assert!(list[1].mig_devices.is_empty());
        let report = smi::xml::parse(&run(&*c, &["nvidia-smi", "-q", "-x"]).stdout).unwrap();
        assert_eq!(report.gpus[0].mig_devices.len(), 2);
        assert_eq!(report.gpus[0].mig_devices[1].gpu_instance_id, Some(2));
        assert!(report.gpus[7].mig_devices.is_empty());

        // A busy instance refuses its CI's destroy; a GI with a CI refuses its destroy.
        let mut state = MigState::load(&dir.path().join(STATE_FILE)).unwrap();
        let old_uuid = state.instances[0].compute_instances[0].uuid.clone();
        state.instances[0].busy = true;
        state.save(&dir.path().join(STATE_FILE)).unwrap();
        // Its process shows in the report, on its GPU and compute instance, and in GPU 0's cut.
        let report = smi::xml::parse(&run(&*c, &["nvidia-smi", "-q", "-x"]).stdout).unwrap();
        let on = |g: usize| -> Vec<(Option<u32>, Option<u32>, bool)> {
            report.gpus[g]
                .processes
                .iter()
                .map(|p| (p.gpu_instance_id, p.compute_instance_id, p.is_compute()))
                .collect()
        };
        assert_eq!(on(0), [(Some(1), Some(0), true)]);
        assert!(on(1).is_empty());
        let cut =
            smi::xml::parse(&run(&*c, &["nvidia-smi", "-q", "-x", "-i", "0"]).stdout).unwrap();
        assert_eq!(cut.gpus.len(), 1);
        assert_eq!(cut.gpus[0].uuid, report.gpus[0].uuid);
        assert_eq!(cut.gpus[0].processes.len(), 1);
        assert_eq!(cut.gpus[0].mig_devices.len(), 2);
        let seventh =
            smi::xml::parse(&run(&*c, &["nvidia-smi", "-q", "-x", "-i", "7"]).stdout).unwrap();
        assert_eq!(seventh.gpus[0].uuid, report.gpus[7].uuid);
        assert!(seventh.gpus[0].processes.is_empty());
        assert_eq!(
            run(&*c, &["nvidia-smi", "-q", "-x", "-i", "8"]).status,
            Some(6)
        );
        let busy = run(
            &*c,
            &[
                "nvidia-smi",
                "mig",
                "-i",
                "0",
                "-gi",
                "1",
                "-ci",
                "0",
                "-dci",
            ],
        );
        assert_eq!(busy.status, Some(255));
        assert!(busy.stdout_text().contains("In use by another client"));
        let with_ci = run(&*c, &["nvidia-smi", "mig", "-i", "0", "-gi", "1", "-dgi"]);
        assert!(with_ci.stdout_text().contains("In use by another client"));
        state.instances[0].busy = false;
        state.save(&dir.path().join(STATE_FILE)).unwrap();
        assert!(
            run(
                &*c,
                &[
                    "nvidia-smi",
                    "mig",
                    "-i",
                    "0",
                    "-gi",
                    "1",
                    "-ci",
                    "0",
                    "-dci"
                ]
            )
            .success()
        );
        assert!(run(&*c, &["nvidia-smi", "mig", "-i", "0", "-gi", "1", "-dgi"]).success());

        // GI id 1 is free again and taken by the next create, with another MIG UUID.
        let again = run(&*c, &["nvidia-smi", "mig", "-i", "0", "-cgi", "9:4", "-C"]);
        assert!(
            again.stdout_text().contains("GPU instance ID  1 "),
            "{}",
            again.stdout_text()
        );
        let state = MigState::load(&dir.path().join(STATE_FILE)).unwrap();
        let reborn = state.on(Some(0))[0];
        assert_eq!(reborn.gpu_instance, 1);
        assert_ne!(reborn.compute_instances[0].uuid, old_uuid);
    }

    #[test]
    fn per_gpu_listings_are_the_recording_cut_to_that_gpu() {
        let dir = host();
        let c = replay(dir.path());
        let lgip = smi::mig::parse_profiles(
            &run(&*c, &["nvidia-smi", "mig", "-i", "3", "-lgip"]).stdout_text(),
        )
        .unwrap();
        assert_eq!(lgip.len(), 7);
        assert!(lgip.iter().all(|p| p.gpu == 3));
        let lgipp = smi::mig::parse_placements(
            &run(&*c, &["nvidia-smi", "mig", "-i", "3", "-lgipp"]).stdout_text(),
        )
        .unwrap();
        assert_eq!(lgipp.len(), 7);
        assert!(lgipp.iter().all(|p| p.gpu == 3));
    }

    #[test]
    fn a_corrupt_state_file_is_an_error_naming_it() {
        let dir = host();
        std::fs::write(dir.path().join(STATE_FILE), "{not json").unwrap();
        let c = replay(dir.path());
        let err = c
            .run(&["nvidia-smi", "mig", "-i", "0", "-lgi"], LONG)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(STATE_FILE) && err.contains("not a MIG state file"),
            "{err}"
        );
    }
}
