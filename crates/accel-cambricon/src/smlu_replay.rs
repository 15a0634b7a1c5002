//! A recorded Cambricon host whose sMLU state follows the commands run against it: the
//! recording's [`STATE_FILE`] (beside `recorded-host.json`) holds each card's mode, profiles and
//! instances; `cnmon set … <mode>` and `cnmon smlu -c <n> -CP | -C | -D | -DP` change it, `-p`
//! and `-l` are rendered from it, and after every change the driver's listings under the
//! recording's `root/` (`proc/driver/cambricon/mlus/<bdf>/smlu`, [`crate::procfs::render`]) and
//! the instance nodes (`dev/cambricon-caps/cap_dev<card>_mi<inst>`, empty marker files as the
//! recording's other nodes) are brought to it. Every other command goes to the wrapped replay.
//! So `detect`, the allocator and the reclaimer of one recording see one driver, across
//! processes and restarts.
//!
//! The messages are the 5.10.22 binary's (addendum C1–C2). What the replay decides where no
//! capture shows the driver's behaviour (**UNMEASURED**, written in each host's `NOTES.md` too):
//! - the mode option is the one the state names (`modeOption`: `S` for `-S`/`--smlu_mode`,
//!   `smlu` for `-smlu`); the other spelling is an unknown option (usage on stderr, status 1);
//! - the driver's own profiles 0, 1, 2 (the whole card, 1/2 and 1/4 of each resource, capacities
//!   1, 2, 4; DRV) are whatever the state lists; a made profile takes the lowest free id, holds
//!   `min(100 / quota, card MiB / MiB)` instances (at most 16), and a card holds 16 profiles;
//! - instance ids start at 1 (the vendor plugin's mock names `cap_dev0_mi1`), lowest free; the
//!   instances on a card together take at most 100 % and the card's memory
//!   (`Out of resources when creating mlu instance.`);
//! - the cap node of instance `i` of card `c` is `234:(16·c + i)`;
//! - destroying an instance a container is bound to (`bound`) is refused `This MLU Instance is
//!   in use.`; destroying a profile an instance uses fails as an unexpected cnDev code
//!   (`cndevCheckErrors(15): CNDEV_ERROR_IN_USE, …`, status 1); turning the mode off while
//!   instances exist is `This device is busy.`;
//! - a card the state marks `refuseInstances` answers every `-C` `Out of resources …`, and one
//!   marked `refuseMode` answers the mode write `Permission denied.` (tests script failures so);
//! - `-CP` run with no input never answers (cnmon loops on EOF, HAZARDS.md item 8).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use accel_host::{CommandError, CommandOutput, Commands};
use serde::{Deserialize, Serialize};

use crate::cnmon_smlu::{self, SmluProfile};
use crate::procfs::{self, ListedInstance, SmluListing, Subsystem};
use crate::smlu::CAPS_DIR;

/// The file, at the top of a recorded host, that holds its sMLU state.
pub const STATE_FILE: &str = "smlu-state.json";
/// Profiles a card holds at most (DRV: 16).
pub const MAX_PROFILES: usize = 16;
/// The major the replay gives the cap nodes.
pub const CAPS_MAJOR: u32 = 234;

/// How the recording's cnmon spells the mode switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ModeOption {
    /// `-S <0|1|OFF|ON>` / `--smlu_mode=<…>` (5.10.22).
    #[serde(rename = "S")]
    Short,
    /// `-smlu <on|off>` (HAMi's spelling).
    #[serde(rename = "smlu")]
    Smlu,
}

/// The sMLU state of a recorded host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SmluState {
    pub mode_option: ModeOption,
    pub cards: Vec<StateCard>,
    #[serde(default)]
    pub profiles: Vec<StateProfile>,
    #[serde(default)]
    pub instances: Vec<StateInstance>,
    /// Writes made (mode, profile and instance changes).
    #[serde(default)]
    pub writes: u32,
}

/// One card.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StateCard {
    /// cnmon's `-c` ordinal.
    pub card: u32,
    /// The PCI address (any case).
    pub bdf: String,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
    /// `smlu_support` (a card without it has no listing at all).
    pub support: bool,
    /// `smlu_enable`.
    pub enabled: bool,
    #[serde(default)]
    pub refuse_mode: bool,
    #[serde(default)]
    pub refuse_instances: bool,
}

/// One profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StateProfile {
    pub card: u32,
    pub id: u32,
    pub quota: u32,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
    /// Instances it holds at most.
    pub capacity: u32,
}

/// One instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StateInstance {
    pub card: u32,
    pub id: u32,
    pub profile: u32,
    /// A container namespace is bound to it (in use).
    #[serde(default)]
    pub bound: bool,
}

impl SmluState {
    /// The state at `path`.
    pub fn load(path: &Path) -> Result<SmluState, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text)
            .map_err(|e| format!("{}: not an sMLU state file ({e})", path.display()))
    }

    /// Writes the state atomically.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let mut text =
            serde_json::to_string_pretty(self).map_err(|e| format!("{}: {e}", path.display()))?;
        text.push('\n');
        accel_host::atomic::write_atomic_mode(path, text.as_bytes(), 0o644)
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    fn card(&self, card: u32) -> Option<&StateCard> {
        self.cards.iter().find(|c| c.card == card)
    }

    fn profile(&self, card: u32, id: u32) -> Option<&StateProfile> {
        self.profiles.iter().find(|p| p.card == card && p.id == id)
    }

    fn instances_of(&self, card: u32) -> impl Iterator<Item = &StateInstance> {
        self.instances.iter().filter(move |i| i.card == card)
    }

    /// The driver's listing of one card.
    pub fn listing(&self, card: &StateCard) -> SmluListing {
        let mut instances: Vec<&StateInstance> = self.instances_of(card.card).collect();
        instances.sort_by_key(|i| i.id);
        let used = |f: &dyn Fn(&StateProfile) -> u64| -> u64 {
            instances
                .iter()
                .filter_map(|i| self.profile(card.card, i.profile))
                .map(f)
                .sum()
        };
        let subsystems = vec![
            Subsystem {
                index: Some(0),
                name: "mem".into(),
                amount: Some(card.memory_mib << 20),
                usage: Some(used(&|p| p.memory_mib << 20)),
            },
            Subsystem {
                index: Some(1),
                name: "ipu".into(),
                amount: Some(100),
                usage: Some(used(&|p| u64::from(p.quota))),
            },
        ];
        let listed = instances
            .iter()
            .map(|i| {
                let profile = self.profile(card.card, i.profile);
                ListedInstance {
                    name: instance_name(card.card, i.id),
                    card: Some(card.card),
                    instance_id: i.id,
                    profile_id: Some(i.profile),
                    cap_node: Some((CAPS_MAJOR, 16 * card.card + i.id)),
                    subsystems: vec![
                        Subsystem {
                            index: Some(0),
                            name: "mem".into(),
                            amount: profile.map(|p| p.memory_mib << 20),
                            usage: Some(0),
                        },
                        Subsystem {
                            index: Some(1),
                            name: "ipu".into(),
                            amount: profile.map(|p| u64::from(p.quota)),
                            usage: Some(0),
                        },
                    ],
                }
            })
            .collect();
        SmluListing {
            support: card.support,
            enabled: card.enabled,
            subsystems,
            instances: listed,
            bound: instances
                .iter()
                .filter(|i| i.bound)
                .map(|i| instance_name(card.card, i.id))
                .collect(),
        }
    }
}

/// The driver's name of instance `id` of card `card`.
pub fn instance_name(card: u32, id: u32) -> String {
    format!("{}{card}_mi{id}", procfs::CAP_PREFIX)
}

/// Brings the recording's listings and instance nodes under `root` to `state`.
pub fn render(root: &Path, state: &SmluState) -> Result<(), String> {
    let io = |path: &Path, e: std::io::Error| format!("{}: {e}", path.display());
    let caps = root.join(CAPS_DIR.trim_start_matches('/'));
    for card in &state.cards {
        let listing = root.join(procfs::path(&card.bdf).trim_start_matches('/'));
        if !card.support {
            continue;
        }
        if let Some(dir) = listing.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        std::fs::write(&listing, procfs::render(&state.listing(card)))
            .map_err(|e| io(&listing, e))?;
    }
    // The nodes of the instances that exist, and no others of the cap_dev form.
    std::fs::create_dir_all(&caps).map_err(|e| io(&caps, e))?;
    let wanted: Vec<String> = state
        .instances
        .iter()
        .map(|i| instance_name(i.card, i.id))
        .collect();
    for entry in std::fs::read_dir(&caps)
        .map_err(|e| io(&caps, e))?
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(procfs::CAP_PREFIX) && !wanted.contains(&name) {
            std::fs::remove_file(entry.path()).map_err(|e| io(&entry.path(), e))?;
        }
    }
    for name in wanted {
        let node = caps.join(&name);
        if !node.exists() {
            std::fs::write(&node, "").map_err(|e| io(&node, e))?;
        }
    }
    Ok(())
}

/// The recording's cnmon with its sMLU state in [`STATE_FILE`].
pub struct SmluReplay {
    dir: PathBuf,
    inner: Box<dyn Commands>,
    lock: Mutex<()>,
}

/// The backend's replay wrapper: wraps `inner` when `dir` carries [`STATE_FILE`].
pub fn wrap(dir: &Path, inner: Box<dyn Commands>) -> Box<dyn Commands> {
    if !dir.join(STATE_FILE).is_file() {
        return inner;
    }
    Box::new(SmluReplay {
        dir: dir.to_path_buf(),
        inner,
        lock: Mutex::new(()),
    })
}

fn answer(status: i32, stdout: impl Into<String>, stderr: impl Into<String>) -> CommandOutput {
    CommandOutput {
        status: Some(status),
        stdout: stdout.into().into_bytes(),
        stderr: stderr.into().into_bytes(),
    }
}

fn say(stdout: impl Into<String>) -> CommandOutput {
    answer(0, stdout, "")
}

/// What a command changed: whether the state must be saved.
struct Reply {
    output: CommandOutput,
    changed: bool,
}

fn reply(output: CommandOutput) -> Reply {
    Reply {
        output,
        changed: false,
    }
}

fn changed(output: CommandOutput) -> Reply {
    Reply {
        output,
        changed: true,
    }
}

/// The value after `flag` in `args`.
fn value<'a>(args: &[&'a str], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| *a == flag)
        .and_then(|i| args.get(i + 1))
        .copied()
}

const USAGE_ERROR: &str = "cnmon: unknown option\nUsage: cnmon set [OPTIONS]\n";

impl SmluReplay {
    fn state_path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    fn fail(argv: &[&str], e: String) -> CommandError {
        CommandError::Io {
            argv: argv.join(" "),
            source: std::io::Error::other(e),
        }
    }

    /// Answers `argv` from the state, or `None` for a command the state does not answer.
    fn answer(
        &self,
        argv: &[&str],
        input: Option<&[u8]>,
    ) -> Option<Result<CommandOutput, CommandError>> {
        let is_set = matches!(argv, ["cnmon", "set", ..]) && argv.contains(&"-c");
        let is_smlu = matches!(argv, ["cnmon", "smlu", ..]);
        if !is_set && !is_smlu {
            return None;
        }
        let _held = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let path = self.state_path();
        let mut state = match SmluState::load(&path) {
            Ok(s) => s,
            Err(e) => return Some(Err(Self::fail(argv, e))),
        };
        let reply = if is_set {
            set(&mut state, &argv[2..])
        } else {
            smlu(&mut state, &argv[2..], input)
        };
        let reply = reply?;
        if reply.changed {
            state.writes += 1;
            let saved = state
                .save(&path)
                .and_then(|()| render(&self.dir.join(accel_host::ROOT_DIR), &state));
            if let Err(e) = saved {
                return Some(Err(Self::fail(argv, e)));
            }
        }
        Some(Ok(reply.output))
    }
}

/// `cnmon set -c <n> …`: only the mode option is answered here.
fn set(state: &mut SmluState, args: &[&str]) -> Option<Reply> {
    let card: u32 = value(args, "-c")?.parse().ok()?;
    let short =
        value(args, "-S").or_else(|| args.iter().find_map(|a| a.strip_prefix("--smlu_mode=")));
    let smlu = value(args, "-smlu");
    let wanted = match (state.mode_option, short, smlu) {
        (ModeOption::Short, Some(v), _) | (ModeOption::Smlu, _, Some(v)) => v.to_ascii_uppercase(),
        (_, None, None) => return None,
        _ => return Some(reply(answer(1, "", USAGE_ERROR))),
    };
    let on = match wanted.as_str() {
        "ON" | "1" => true,
        "OFF" | "0" => false,
        _ => return Some(reply(say("Optional mode:0/OFF 1/ON\n"))),
    };
    let instances = state.instances_of(card).count();
    let Some(c) = state.cards.iter_mut().find(|c| c.card == card) else {
        return Some(reply(say("The card you selected is not existed.\n")));
    };
    let word = if on { "ON" } else { "OFF" };
    if !c.support {
        return Some(reply(say(
            "This device doesn't support setting SMLU mode.\n",
        )));
    }
    if c.enabled == on {
        return Some(reply(say(format!(
            "The device SMLU mode is already {word} now.\n"
        ))));
    }
    if c.refuse_mode {
        return Some(reply(say("Permission denied.\n")));
    }
    if !on && instances > 0 {
        return Some(reply(say("This device is busy.\n")));
    }
    c.enabled = on;
    Some(changed(say(format!(
        "The device SMLU mode is {word} now.\n"
    ))))
}

/// `cnmon smlu -c <n> <action>`.
fn smlu(state: &mut SmluState, args: &[&str], input: Option<&[u8]>) -> Option<Reply> {
    let Some(card) = value(args, "-c") else {
        return Some(reply(say("You must select a card.\n")));
    };
    let Some(c) = card
        .parse::<u32>()
        .ok()
        .and_then(|n| state.card(n))
        .cloned()
    else {
        return Some(reply(say("The card you selected is not existed.\n")));
    };
    if !c.support || !c.enabled {
        return Some(reply(say("The SMLU mode of this device is disabled.\n")));
    }
    if args.contains(&"-CP") {
        return Some(create_profile(state, &c, input));
    }
    if let Some(id) = value(args, "-DP") {
        return Some(destroy_profile(state, &c, id));
    }
    if let Some(id) = value(args, "-C") {
        return Some(create_instance(state, &c, id));
    }
    if let Some(id) = value(args, "-D") {
        return Some(destroy_instance(state, &c, id));
    }
    if args.contains(&"-p") {
        return Some(reply(say(profiles_table(state, &c))));
    }
    if args.contains(&"-l") {
        return Some(reply(say(instances_table(state, &c))));
    }
    None
}

fn profiles_table(state: &SmluState, c: &StateCard) -> String {
    let rows: Vec<SmluProfile> = state
        .profiles
        .iter()
        .filter(|p| p.card == c.card)
        .map(|p| {
            let used = state
                .instances_of(c.card)
                .filter(|i| i.profile == p.id)
                .count();
            SmluProfile {
                card: Some(c.card),
                name: Some(cnmon_smlu::profile_name(p.quota, p.memory_mib)),
                id: p.id,
                free: Some(
                    p.capacity
                        .saturating_sub(u32::try_from(used).unwrap_or(u32::MAX)),
                ),
                total: Some(p.capacity),
                quota_percent: Some(p.quota),
                memory_mib: Some(p.memory_mib),
            }
        })
        .collect();
    let mut text = cnmon_smlu::render_profiles(&rows);
    if rows.is_empty() {
        text.push_str("This device doesn't support smlu function.\n");
    }
    text
}

fn instances_table(state: &SmluState, c: &StateCard) -> String {
    let mut instances: Vec<&StateInstance> = state.instances_of(c.card).collect();
    if instances.is_empty() {
        return "No MLU instance found.\n".into();
    }
    instances.sort_by_key(|i| i.id);
    let rule = format!("+{}+\n", "-".repeat(62));
    let mut out = format!(
        "{rule}| MLU instances:{:<48}|\n{rule}| Card  Name                 BDF       Profile ID  Instance ID |\n|{}|\n",
        "",
        "=".repeat(62)
    );
    let bdf = c.bdf.to_ascii_uppercase();
    for i in instances {
        let name = state
            .profile(c.card, i.profile)
            .map(|p| cnmon_smlu::profile_name(p.quota, p.memory_mib))
            .unwrap_or_default();
        out.push_str(&format!(
            "| {:<2}    {name:<20} {bdf}      {:>2}           {:>2} |\n{rule}",
            c.card, i.profile, i.id
        ));
    }
    out
}

/// The two numbers `-CP` reads from its input, one a line.
fn two_answers(input: &[u8]) -> Option<(u32, u64)> {
    let text = std::str::from_utf8(input).ok()?;
    let mut lines = text.lines();
    let quota = lines.next()?.trim().parse().ok()?;
    let memory = lines.next()?.trim().parse().ok()?;
    Some((quota, memory))
}

fn create_profile(state: &mut SmluState, c: &StateCard, input: Option<&[u8]>) -> Reply {
    let prompts = format!(
        "Please input MLU quota:(1 - 100)\nPlease input memory size quota:(1 - {} MiB)\n",
        c.memory_mib
    );
    let Some((quota, memory)) = input.and_then(two_answers) else {
        // cnmon loops on end-of-file after an answer it cannot read (HAZARDS.md item 8).
        return reply(answer(-1, "", ""));
    };
    if !(1..=100).contains(&quota) || memory == 0 || memory > c.memory_mib {
        return reply(answer(-1, "", ""));
    }
    if state.profiles.iter().filter(|p| p.card == c.card).count() >= MAX_PROFILES {
        return reply(say(format!(
            "{prompts}This device doesn't support smlu function.\n"
        )));
    }
    let id = (0..)
        .find(|id| state.profile(c.card, *id).is_none())
        .unwrap_or(0);
    let by_quota = 100 / quota;
    let by_memory = u32::try_from(c.memory_mib / memory).unwrap_or(u32::MAX);
    state.profiles.push(StateProfile {
        card: c.card,
        id,
        quota,
        memory_mib: memory,
        capacity: by_quota.min(by_memory).clamp(1, 16),
    });
    changed(say(format!(
        "{prompts}Successfully created smlu profile ID {id} on card {}.\n    MLU Quota: {quota}\n    MemorySize Quota: {memory} MiB\n",
        c.card
    )))
}

fn create_instance(state: &mut SmluState, c: &StateCard, id: &str) -> Reply {
    let Some(profile) = id
        .parse()
        .ok()
        .and_then(|p| state.profile(c.card, p))
        .cloned()
    else {
        return reply(say("Please input the correct Profile ID.\n"));
    };
    let on_card: Vec<&StateInstance> = state.instances_of(c.card).collect();
    let (quota, memory) = on_card
        .iter()
        .filter_map(|i| state.profile(c.card, i.profile))
        .fold((0u64, 0u64), |(q, m), p| {
            (q + u64::from(p.quota), m + p.memory_mib)
        });
    let of_profile = on_card.iter().filter(|i| i.profile == profile.id).count();
    let full = of_profile >= profile.capacity as usize
        || quota + u64::from(profile.quota) > 100
        || memory + profile.memory_mib > c.memory_mib;
    if full || c.refuse_instances {
        return reply(say("Out of resources when creating mlu instance.\n"));
    }
    let instance = (1..)
        .find(|n| !on_card.iter().any(|i| i.id == *n))
        .unwrap_or(1);
    state.instances.push(StateInstance {
        card: c.card,
        id: instance,
        profile: profile.id,
        bound: false,
    });
    changed(say(format!(
        "Successfully created smlu instance ID {instance} on card {}, using profile ID {}\n",
        c.card, profile.id
    )))
}

fn destroy_instance(state: &mut SmluState, c: &StateCard, id: &str) -> Reply {
    let Some(at) = id.parse::<u32>().ok().and_then(|n| {
        state
            .instances
            .iter()
            .position(|i| i.card == c.card && i.id == n)
    }) else {
        return reply(say("Please input the correct Instance ID.\n"));
    };
    if state.instances[at].bound {
        return reply(say("This MLU Instance is in use.\n"));
    }
    let gone = state.instances.remove(at);
    changed(say(format!(
        "Successfully destroyed mlu instance ID {} on card {}\n",
        gone.id, c.card
    )))
}

fn destroy_profile(state: &mut SmluState, c: &StateCard, id: &str) -> Reply {
    let Some(n) = id.parse::<u32>().ok().filter(|n| *n != 0) else {
        return reply(say("Please input the correct profile ID.\n"));
    };
    let Some(at) = state
        .profiles
        .iter()
        .position(|p| p.card == c.card && p.id == n)
    else {
        return reply(say("Please input the correct profile ID.\n"));
    };
    if state.instances_of(c.card).any(|i| i.profile == n) {
        return reply(answer(
            1,
            "",
            "cndevCheckErrors(15): CNDEV_ERROR_IN_USE, from file cnmon_smlu.cpp, line 0.\n",
        ));
    }
    state.profiles.remove(at);
    changed(say(format!(
        "Successfully destroyed profile ID {n} on card {}\n",
        c.card
    )))
}

impl Commands for SmluReplay {
    fn run(&self, argv: &[&str], deadline: Duration) -> Result<CommandOutput, CommandError> {
        self.run_input(argv, None, deadline)
    }

    fn run_with_input(
        &self,
        argv: &[&str],
        input: &[u8],
        deadline: Duration,
    ) -> Result<CommandOutput, CommandError> {
        self.run_input(argv, Some(input), deadline)
    }

    fn is_installed(&self, program: &str) -> bool {
        self.inner.is_installed(program)
    }

    fn search_note(&self, program: &str) -> Option<String> {
        self.inner.search_note(program)
    }
}

impl SmluReplay {
    fn run_input(
        &self,
        argv: &[&str],
        input: Option<&[u8]>,
        deadline: Duration,
    ) -> Result<CommandOutput, CommandError> {
        match self.answer(argv, input) {
            // A `-CP` that never answers: it hangs until the caller's deadline.
            Some(Ok(out)) if out.status == Some(-1) => {
                std::thread::sleep(deadline);
                Err(CommandError::TimedOut {
                    argv: argv.join(" "),
                    deadline,
                    partial: CommandOutput::default(),
                })
            }
            Some(answered) => answered,
            None => match input {
                Some(input) => self.inner.run_with_input(argv, input, deadline),
                None => self.inner.run(argv, deadline),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_host::{FsHost, RecordedCommands};

    const LONG: Duration = Duration::from_secs(5);

    fn state() -> SmluState {
        SmluState {
            mode_option: ModeOption::Short,
            cards: vec![StateCard {
                card: 0,
                bdf: "0000:4f:00.0".into(),
                memory_mib: 23308,
                support: true,
                enabled: false,
                refuse_mode: false,
                refuse_instances: false,
            }],
            profiles: vec![StateProfile {
                card: 0,
                id: 0,
                quota: 100,
                memory_mib: 23308,
                capacity: 1,
            }],
            instances: Vec::new(),
            writes: 0,
        }
    }

    fn host() -> (tempfile::TempDir, Box<dyn Commands>) {
        let dir = tempfile::tempdir().unwrap();
        state().save(&dir.path().join(STATE_FILE)).unwrap();
        std::fs::create_dir_all(dir.path().join("root")).unwrap();
        render(&dir.path().join("root"), &state()).unwrap();
        let commands = wrap(
            dir.path(),
            Box::new(RecordedCommands::load(dir.path()).unwrap()),
        );
        (dir, commands)
    }

    fn text(commands: &dyn Commands, argv: &[&str]) -> String {
        commands.run(argv, LONG).unwrap().stdout_text()
    }

    #[test]
    fn the_mode_profiles_and_instances_follow_the_commands() {
        let (dir, c) = host();
        let c = c.as_ref();
        let files = FsHost::new(dir.path().join("root"));
        assert_eq!(
            text(c, &["cnmon", "smlu", "-c", "0", "-p"]),
            "The SMLU mode of this device is disabled.\n"
        );
        assert!(!procfs::read(&files, "0000:4f:00.0").unwrap().enabled);
        // The other spelling is an unknown option.
        let wrong = c
            .run(&["cnmon", "set", "-c", "0", "-smlu", "on"], LONG)
            .unwrap();
        assert_eq!(wrong.status, Some(1));
        assert_eq!(
            text(c, &["cnmon", "set", "-c", "0", "-S", "1"]),
            "The device SMLU mode is ON now.\n"
        );
        assert!(procfs::read(&files, "0000:4f:00.0").unwrap().enabled);
        assert_eq!(
            text(c, &["cnmon", "set", "-c", "0", "--smlu_mode=on"]),
            "The device SMLU mode is already ON now.\n"
        );
        let made = c
            .run_with_input(&["cnmon", "smlu", "-c", "0", "-CP"], b"25\n4096\n", LONG)
            .unwrap()
            .stdout_text();
        assert!(
            made.contains("Successfully created smlu profile ID 1 on card 0."),
            "{made}"
        );
        assert_eq!(
            text(c, &["cnmon", "smlu", "-c", "0", "-C", "1"]),
            "Successfully created smlu instance ID 1 on card 0, using profile ID 1\n"
        );
        let listing = procfs::read(&files, "0000:4f:00.0").unwrap();
        let one = listing.instance(1).unwrap();
        assert_eq!(one.name, "cap_dev0_mi1");
        assert_eq!(
            (one.memory_mib(), one.compute_quota()),
            (Some(4096), Some(25))
        );
        assert!(
            dir.path()
                .join("root/dev/cambricon-caps/cap_dev0_mi1")
                .is_file()
        );
        let profiles =
            cnmon_smlu::parse_profiles(&text(c, &["cnmon", "smlu", "-c", "0", "-p"]), "").unwrap();
        assert_eq!(profiles[1].free, Some(3), "{profiles:?}");
        // A profile in use cannot go; the mode cannot go off while an instance exists.
        let busy = c
            .run(&["cnmon", "smlu", "-c", "0", "-DP", "1"], LONG)
            .unwrap();
        assert_eq!(busy.status, Some(1));
        assert_eq!(
            text(c, &["cnmon", "set", "-c", "0", "-S", "0"]),
            "This device is busy.\n"
        );
        assert_eq!(
            text(c, &["cnmon", "smlu", "-c", "0", "-D", "1"]),
            "Successfully destroyed mlu instance ID 1 on card 0\n"
        );
        assert_eq!(
            text(c, &["cnmon", "smlu", "-c", "0", "-DP", "1"]),
            "Successfully destroyed profile ID 1 on card 0\n"
        );
        assert!(
            !dir.path()
                .join("root/dev/cambricon-caps/cap_dev0_mi1")
                .exists()
        );
        assert!(
            procfs::read(&files, "0000:4f:00.0")
                .unwrap()
                .instances
                .is_empty()
        );
        assert_eq!(
            SmluState::load(&dir.path().join(STATE_FILE))
                .unwrap()
                .writes,
            5,
            "mode, profile, instance, instance, profile"
        );
    }

    #[test]
    fn a_profile_asked_without_input_never_answers() {
        let (_dir, c) = host();
        text(c.as_ref(), &["cnmon", "set", "-c", "0", "-S", "1"]);
        let e = c
            .run(
                &["cnmon", "smlu", "-c", "0", "-CP"],
                Duration::from_millis(50),
            )
            .unwrap_err();
        assert!(matches!(e, CommandError::TimedOut { .. }), "{e:?}");
    }

    #[test]
    fn a_recording_without_the_state_file_is_not_wrapped() {
        let dir = tempfile::tempdir().unwrap();
        let inner: Box<dyn Commands> = Box::new(RecordedCommands::empty());
        let c = wrap(dir.path(), inner);
        assert!(matches!(
            c.run(&["cnmon", "smlu", "-c", "0", "-p"], LONG),
            Err(CommandError::NotInstalled { .. })
        ));
    }
}
