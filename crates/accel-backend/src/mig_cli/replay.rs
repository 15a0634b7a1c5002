//! A recorded host whose MIG state follows the commands run against it, for any tool speaking
//! the `nvidia-smi mig` dialect ([`super::listing`]); the tool's own side is a [`Dialect`].
//!
//! A recorded host that carries [`STATE_FILE`] at its top (beside `recorded-host.json`) keeps
//! its GPU and compute instances there instead of in fixed recordings: `<tool> mig -cgi`, `-dci`
//! and `-dgi` change the file, and `mig -lgi` and `mig -lci` are rendered from it, as is
//! whatever else of the tool's output names instances (the dialect's [`Dialect::renders`]:
//! nvidia-smi's `-L` and `-q -x`, ppu-smi's `-L` and device table). So `detect --host-root H`
//! after `serve --host-root H` shows the instances `serve` made, and the partitioner's tests run
//! against a driver that remembers, refuses (`Insufficient Resources`, `In use by another
//! client`) and reuses GPU instance ids after a destroy, as the real one does.
//!
//! The profiles and their placements still come from the recordings (`mig -lgip`, `-lgipp`,
//! whose `-i <target>` forms are the recorded listing cut to that device). What the replay
//! decides where no capture shows the driver's answer (written down in each host's `NOTES.md`):
//! GPU instance ids are the lowest free id from the dialect's first; a created instance's MIG
//! UUID is new on every create (so a GI made again with the same id carries another UUID);
//! exit statuses are nvidia-smi's documented codes (2 bad argument, 6 not found, 255 other,
//! which covers `In use` and `Insufficient Resources`). An instance marked `busy` in the file
//! has processes on it: destroying its compute instance is refused `In use by another client`
//! until the mark is taken off, and the dialect lists a compute process on it.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use accel_host::{CommandError, CommandOutput, Commands};
use serde::{Deserialize, Serialize};

use super::listing;

/// The file, at the top of a recorded host, that holds its MIG instances.
pub const STATE_FILE: &str = "mig-state.json";

/// The exit status for a bad argument.
pub const STATUS_INVALID: i32 = 2;
/// The exit status for an object not found.
pub const STATUS_NOT_FOUND: i32 = 6;
/// The exit status for any other error (`In use`, `Insufficient Resources`).
pub const STATUS_OTHER: i32 = 255;

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
    /// The tool's device index.
    pub gpu: u32,
    pub gpu_instance: u32,
    pub profile_id: u32,
    /// The profile name as the driver spells it (`3g.40gb`, `4g48gb`).
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
    /// The state at `path`; an absent file is no instances.
    pub fn load(path: &Path) -> Result<MigState, String> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| format!("{}: not a MIG state file ({e})", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(MigState::default()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// Writes the state atomically.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let mut text =
            serde_json::to_string_pretty(self).map_err(|e| format!("{}: {e}", path.display()))?;
        text.push('\n');
        accel_host::atomic::write_atomic(path, text.as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The instances of one device (all when `None`), by device then GPU instance id.
    pub fn on(&self, gpu: Option<u32>) -> Vec<&StateInstance> {
        let mut list: Vec<&StateInstance> = self
            .instances
            .iter()
            .filter(|i| gpu.is_none_or(|g| i.gpu == g))
            .collect();
        list.sort_by_key(|i| (i.gpu, i.gpu_instance));
        list
    }

    /// `(GPU instance, compute instance)` of every compute instance of `gpu` marked busy.
    pub fn busy_on(&self, gpu: u32) -> Vec<(u32, u32)> {
        self.on(Some(gpu))
            .iter()
            .filter(|i| i.busy)
            .flat_map(|i| i.compute_instances.iter().map(|c| (i.gpu_instance, c.id)))
            .collect()
    }
}

/// What differs between the tools whose MIG state is replayed.
pub trait Dialect: Send + Sync + 'static {
    /// The program (`nvidia-smi`, `ppu-smi`).
    fn program(&self) -> &'static str;

    /// The word its listings name a device by (`GPU`, `PPU`).
    fn device_word(&self) -> &'static str;

    /// The id the driver gives the first GPU instance of a device.
    fn first_gpu_instance(&self) -> u32 {
        1
    }

    /// The device index `-i <target>` names (`None`: no such device), read from the
    /// recordings through `inner` where the tool takes something other than an index.
    fn resolve(
        &self,
        inner: &dyn Commands,
        target: &str,
        deadline: Duration,
    ) -> Result<Option<u32>, CommandError> {
        let _ = (inner, deadline);
        Ok(target.parse().ok())
    }

    /// The compute profile id of a compute instance covering `slices` compute slices.
    fn compute_profile_id(&self, slices: u32) -> u32 {
        slices
    }

    /// The first group of the MIG UUIDs the replay mints (the device index is or'ed into its
    /// low byte); every UUID also carries the GI and the host's create serial.
    fn uuid_tag(&self) -> u32 {
        0x6d69_6700
    }

    /// How many hex digits the last group of a MIG UUID has (12 in the 8-4-4-4-12 shape).
    fn uuid_last_digits(&self) -> usize {
        12
    }

    /// Whether the tool refuses to destroy a compute instance a process runs on (`In use by
    /// another client`: nvidia-smi does). A dialect that says no lets the destroy through, so
    /// what keeps a working partition is the allocator's own process check.
    fn busy_refuses_destroy(&self) -> bool {
        true
    }

    /// The reason the tool gives when it refuses to destroy a busy compute instance.
    fn in_use(&self) -> &'static str {
        "In use by another client"
    }

    /// Whether `argv` (not a `mig` call) is one whose answer [`Dialect::render`] rebuilds from
    /// the state.
    fn renders(&self, argv: &[&str]) -> bool;

    /// The answer to `argv` ([`Dialect::renders`] said yes) under `state`, built on the
    /// recordings of `inner`.
    fn render(
        &self,
        argv: &[&str],
        state: &MigState,
        inner: &dyn Commands,
        deadline: Duration,
    ) -> Result<CommandOutput, CommandError>;

    /// What else of the host follows the state, brought up to date after each change (T-Head:
    /// the driver's capability tree under the recording's `root/`). `dir` is the recording.
    fn changed(&self, dir: &Path, state: &MigState) -> Result<(), String> {
        let _ = (dir, state);
        Ok(())
    }
}

/// The commands of a recorded host with a MIG state: `<tool> mig …` and the dialect's
/// renders answer from [`STATE_FILE`], the rest is replayed by the wrapped commands.
pub struct MigReplay<D> {
    dir: PathBuf,
    state: PathBuf,
    inner: Box<dyn Commands>,
    lock: Mutex<()>,
    dialect: D,
}

/// `inner`, wrapped in a replay of `dialect` when the recording `dir` has a [`STATE_FILE`].
pub fn wrap<D: Dialect>(dir: &Path, inner: Box<dyn Commands>, dialect: D) -> Box<dyn Commands> {
    let state = dir.join(STATE_FILE);
    if state.is_file() {
        Box::new(MigReplay {
            dir: dir.to_path_buf(),
            state,
            inner,
            lock: Mutex::new(()),
            dialect,
        })
    } else {
        inner
    }
}

/// An answer with `status` and `stdout`.
pub fn answer(status: i32, stdout: String) -> CommandOutput {
    CommandOutput {
        status: Some(status),
        stdout: stdout.into_bytes(),
        stderr: Vec::new(),
    }
}

/// `out` with its standard output replaced.
pub fn answer_like(out: &CommandOutput, stdout: String) -> CommandOutput {
    CommandOutput {
        status: out.status,
        stdout: stdout.into_bytes(),
        stderr: out.stderr.clone(),
    }
}

/// The words of a `mig` call the replay understands.
#[derive(Debug, Default)]
struct MigArgs<'a> {
    target: Option<&'a str>,
    gpu_instance: Option<u32>,
    compute_instance: Option<u32>,
    create: Option<&'a str>,
    with_compute: bool,
    op: Option<&'static str>,
}

/// `None` for any word the replay does not know (the call is replayed as recorded).
fn parse_args<'a>(rest: &[&'a str]) -> Option<MigArgs<'a>> {
    let mut args = MigArgs::default();
    let mut words = rest.iter();
    while let Some(word) = words.next() {
        match *word {
            "-i" => args.target = Some(words.next()?),
            "-gi" => args.gpu_instance = Some(words.next()?.parse().ok()?),
            "-ci" => args.compute_instance = Some(words.next()?.parse().ok()?),
            "-cgi" => {
                args.create = Some(words.next()?);
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

impl<D: Dialect> Commands for MigReplay<D> {
    fn run(&self, argv: &[&str], deadline: Duration) -> Result<CommandOutput, CommandError> {
        let io = |message: String| CommandError::Io {
            argv: argv.join(" "),
            source: std::io::Error::other(message),
        };
        let program = self.dialect.program();
        match argv {
            [p, "mig", rest @ ..] if *p == program => {
                let Some(args) = parse_args(rest) else {
                    return self.inner.run(argv, deadline);
                };
                let _held = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
                self.mig(&args, deadline).map_err(io)?
            }
            [p, ..] if *p == program && self.dialect.renders(argv) => {
                let _held = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
                let state = MigState::load(&self.state).map_err(io)?;
                self.dialect
                    .render(argv, &state, self.inner.as_ref(), deadline)
            }
            _ => self.inner.run(argv, deadline),
        }
    }

    fn is_installed(&self, program: &str) -> bool {
        self.inner.is_installed(program)
    }
}

/// A profile the recordings offer one device.
struct Profile {
    id: u32,
    name: String,
    size: u32,
    starts: Vec<u32>,
}

impl<D: Dialect> MigReplay<D> {
    fn save(&self, state: &MigState) -> Result<(), String> {
        state.save(&self.state)?;
        self.dialect.changed(&self.dir, state)
    }

    #[allow(clippy::type_complexity)]
    fn mig(
        &self,
        args: &MigArgs<'_>,
        deadline: Duration,
    ) -> Result<Result<CommandOutput, CommandError>, String> {
        let word = self.dialect.device_word();
        let gpu = match args.target {
            None => None,
            Some(target) => match self.dialect.resolve(self.inner.as_ref(), target, deadline) {
                Ok(Some(gpu)) => Some(gpu),
                Ok(None) => {
                    return Ok(Ok(answer(
                        STATUS_NOT_FOUND,
                        "No devices were found\n".to_string(),
                    )));
                }
                Err(e) => return Ok(Err(e)),
            },
        };
        let program = self.dialect.program();
        match (args.op, gpu) {
            (Some(op @ ("-lgip" | "-lgipp")), gpu) => {
                let out = match self.inner.run(&[program, "mig", op], deadline) {
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
                Ok(Ok(render_gpu_instances(word, &state.on(gpu))))
            }
            (Some("-lci"), gpu) => {
                let state = MigState::load(&self.state)?;
                Ok(Ok(self.render_compute_instances(&state.on(gpu))))
            }
            (Some("-cgi"), Some(gpu)) => {
                let profiles = match self.profiles(gpu, deadline) {
                    Ok(p) => p,
                    Err(e) => return Ok(Err(e)),
                };
                let mut state = MigState::load(&self.state)?;
                let out = self.create(
                    &mut state,
                    &profiles,
                    gpu,
                    args.create.unwrap_or(""),
                    args.with_compute,
                );
                if out.success() {
                    self.save(&state)?;
                }
                Ok(Ok(out))
            }
            (Some("-dci"), Some(gpu)) => {
                let mut state = MigState::load(&self.state)?;
                let out = destroy_compute(
                    word,
                    &mut state,
                    gpu,
                    args,
                    self.dialect
                        .busy_refuses_destroy()
                        .then(|| self.dialect.in_use()),
                );
                self.save(&state)?;
                Ok(Ok(out))
            }
            (Some("-dgi"), Some(gpu)) => {
                let mut state = MigState::load(&self.state)?;
                let out = destroy_gpu_instances(word, &mut state, gpu, args.gpu_instance);
                self.save(&state)?;
                Ok(Ok(out))
            }
            _ => Ok(Ok(answer(
                STATUS_INVALID,
                format!(
                    "the recorded host's MIG replay needs -i <{}> for -cgi, -dci and -dgi\n",
                    word.to_ascii_lowercase()
                ),
            ))),
        }
    }

    /// The profiles and placements the recordings offer `gpu`.
    fn profiles(&self, gpu: u32, deadline: Duration) -> Result<Vec<Profile>, CommandError> {
        let program = self.dialect.program();
        let lgip = self.inner.run(&[program, "mig", "-lgip"], deadline)?;
        let lgipp = self.inner.run(&[program, "mig", "-lgipp"], deadline)?;
        let profiles = listing::parse_profiles(&lgip.stdout_text()).unwrap_or_default();
        let placements = listing::parse_placements(&lgipp.stdout_text()).unwrap_or_default();
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

    /// `-cgi <profile>[:<start>] [-C]`: one GPU instance at the lowest free legal placement
    /// (or the one named), with its one compute instance when `-C` is given.
    fn create(
        &self,
        state: &mut MigState,
        profiles: &[Profile],
        gpu: u32,
        spec: &str,
        with_compute: bool,
    ) -> CommandOutput {
        let word = self.dialect.device_word();
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
                    "Unable to create a GPU instance on {word} {gpu:>2} using profile {wanted}: Not Found\nFailed to create GPU instances: Not Found\n"
                ),
            );
        };
        let start = match start.map(str::parse::<u32>) {
            Some(Ok(s)) if profile.starts.contains(&s) => Some(s),
            Some(_) => {
                return answer(
                    STATUS_INVALID,
                    format!(
                        "Unable to create a GPU instance on {word} {gpu:>2} using profile {}: Invalid Argument\nFailed to create GPU instances: Invalid Argument\n",
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
                    "Unable to create a GPU instance on {word} {gpu:>2} using profile {}: Insufficient Resources\nFailed to create GPU instances: Insufficient Resources\n",
                    profile.id
                ),
            );
        };
        let ids: Vec<u32> = state.on(Some(gpu)).iter().map(|i| i.gpu_instance).collect();
        let first = self.dialect.first_gpu_instance();
        let gpu_instance = (first..).find(|id| !ids.contains(id)).unwrap_or(first);
        let mut text = format!(
            "Successfully created GPU instance ID {gpu_instance:>2} on {word} {gpu:>2} using profile MIG {} (ID {:>2})\n",
            profile.name, profile.id
        );
        let mut compute_instances = Vec::new();
        if with_compute {
            state.serial += 1;
            compute_instances.push(StateCompute {
                id: 0,
                uuid: mig_uuid(&self.dialect, gpu, gpu_instance, state.serial),
            });
            text.push_str(&format!(
                "Successfully created compute instance ID  0 on {word} {gpu:>2} GPU instance ID {gpu_instance:>2} using profile MIG {} (ID {:>2})\n",
                profile.name,
                self.dialect.compute_profile_id(compute_slices(&profile.name))
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

    fn render_compute_instances(&self, instances: &[&StateInstance]) -> CommandOutput {
        let word = self.dialect.device_word();
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
            "{CI_RULE}\n| Compute instances:                                                 |\n| {word}     GPU       Name             Profile   Instance   Placement  |\n|       Instance                       ID        ID       Start:Size |\n|         ID                                                         |\n|====================================================================|\n"
        );
        for (i, c) in rows {
            let slices = compute_slices(&i.profile);
            let place = format!("0:{slices}");
            text.push_str(&format!(
                "|  {:>2}     {:>2}       MIG {:<14} {:>3}       {:>3}        {:<7}  |\n{CI_RULE}\n",
                i.gpu,
                i.gpu_instance,
                i.profile,
                self.dialect.compute_profile_id(slices),
                c.id,
                place
            ));
        }
        answer(0, text)
    }
}

/// The device UUID of the compute instance made on `gpu`'s GI `gpu_instance`, the `serial`th
/// made on this host, in the dialect's shape.
fn mig_uuid(dialect: &impl Dialect, gpu: u32, gpu_instance: u32, serial: u64) -> String {
    format!(
        "MIG-{:08x}-{:04x}-{:04x}-{:04x}-{:0width$x}",
        dialect.uuid_tag() | (gpu & 0xff),
        gpu_instance & 0xffff,
        (serial >> 48) & 0xffff,
        (serial >> 32) & 0xffff,
        serial & 0xffff_ffff_ffff,
        width = dialect.uuid_last_digits()
    )
}

/// A recorded device list (`<word> <n>: …` lines, as `-L` prints them) with the recorded MIG
/// children dropped and the state's listed under each device instead: `child` renders one
/// compute instance, given its number on the device (from 0, GI then CI order).
pub fn list_with_children(
    text: &str,
    state: &MigState,
    word: &str,
    child: &dyn Fn(usize, &StateInstance, &StateCompute) -> String,
) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("MIG ") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
        let index = trimmed
            .strip_prefix(word)
            .and_then(|rest| rest.trim_start().split_once(':'))
            .and_then(|(n, _)| n.trim().parse::<u32>().ok());
        let Some(gpu) = index else { continue };
        let computes = state
            .on(Some(gpu))
            .into_iter()
            .flat_map(|i| i.compute_instances.iter().map(move |c| (i, c)));
        for (device, (instance, compute)) in computes.enumerate() {
            out.push_str(&child(device, instance, compute));
            out.push('\n');
        }
    }
    out
}

/// The compute slices a profile name states (`3g.40gb`, `4g48gb` → 3, 4); 1 when none.
pub fn compute_slices(profile: &str) -> u32 {
    profile
        .split('g')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

fn destroy_compute(
    word: &str,
    state: &mut MigState,
    gpu: u32,
    args: &MigArgs<'_>,
    busy_refuses: Option<&str>,
) -> CommandOutput {
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
                "Unable to find GPU instance ID {gi:>2} on {word} {gpu:>2}: Not Found\nFailed to destroy compute instances: Not Found\n"
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
                "Unable to destroy compute instance ID {:>2} from {word} {gpu:>2} GPU instance ID {gi:>2}: Not Found\nFailed to destroy compute instances: Not Found\n",
                args.compute_instance.unwrap_or(0)
            ),
        );
    }
    if instance.busy
        && let Some(reason) = busy_refuses
    {
        return answer(
            STATUS_OTHER,
            format!(
                "Unable to destroy compute instance ID {:>2} from {word} {gpu:>2} GPU instance ID {gi:>2}: {reason}\nFailed to destroy compute instances: {reason}\n",
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
                "Successfully destroyed compute instance ID {ci:>2} from {word} {gpu:>2} GPU instance ID {gi:>2}\n"
            )
        })
        .collect();
    answer(0, text)
}

fn destroy_gpu_instances(
    word: &str,
    state: &mut MigState,
    gpu: u32,
    gi: Option<u32>,
) -> CommandOutput {
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
                "Unable to destroy GPU instance ID {:>2} from {word} {gpu:>2}: Not Found\nFailed to destroy GPU instances: Not Found\n",
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
                "Unable to destroy GPU instance ID {id:>2} from {word} {gpu:>2}: In use by another client\n"
            ));
        } else {
            state
                .instances
                .retain(|i| !(i.gpu == gpu && i.gpu_instance == id));
            text.push_str(&format!(
                "Successfully destroyed GPU instance ID {id:>2} from {word} {gpu:>2}\n"
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
const CI_RULE: &str = "+--------------------------------------------------------------------+";

fn render_gpu_instances(word: &str, instances: &[&StateInstance]) -> CommandOutput {
    if instances.is_empty() {
        return answer(
            STATUS_NOT_FOUND,
            "No GPU instances found: Not Found\n".into(),
        );
    }
    let mut text = format!(
        "{GI_RULE}\n| GPU instances:                                        |\n| {word}   Name             Profile  Instance   Placement  |\n|                          ID       ID       Start:Size |\n|=======================================================|\n"
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

/// A `-lgip` listing cut to device `gpu` (its header kept).
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
            if trimmed.starts_with("|=") || trimmed.starts_with("+=") {
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

/// A `-lgipp` listing cut to device `gpu`.
fn cut_placements(text: &str, gpu: u32) -> String {
    let wanted = gpu.to_string();
    text.lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(wanted.as_str()))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_listing_keeps_the_header_and_only_that_devices_rows() {
        let lgip = "\
+------------------+
| PPU  Name   Profile |
+==================+
| 1    MIG 8g96gb   3   1/1  96.00 |
|                    2   4   0 |
+------------------+
| 2    MIG 8g96gb   3   1/1  96.00 |
|                    2   4   0 |
+------------------+
";
        let cut = cut_profiles(lgip, 2);
        assert!(cut.contains("| PPU  Name"), "{cut}");
        assert!(
            cut.contains("| 2    MIG") && !cut.contains("| 1    MIG"),
            "{cut}"
        );
        let lgipp = "PPU 1 profile ID 3 placements: {0}:8\nPPU 2 profile ID 3 placements: {0}:8\n";
        assert_eq!(
            cut_placements(lgipp, 1),
            "PPU 1 profile ID 3 placements: {0}:8\n"
        );
    }

    #[test]
    fn unknown_words_are_not_the_replays() {
        assert!(parse_args(&["-i", "0", "-lgi"]).is_some());
        assert!(parse_args(&["-i", "0", "-lgi", "--format=csv"]).is_none());
        assert!(parse_args(&["-gi", "x", "-dgi"]).is_none());
    }
}
