//! Cambricon sMLU slices (spec/cambricon.md §4.3–§4.6, addendum C1–C5): a logical slice is an
//! sMLU **instance** — made from a **profile** (compute %, memory MiB) — with its own device node
//! `/dev/cambricon-caps/cap_dev<card>_mi<instance>`, made at Allocate through cnmon and destroyed
//! by the reclaimer once its Pod has been gone three passes.
//!
//! | Step | how |
//! |---|---|
//! | is the mode on? what exists? | the driver's listing ([`crate::procfs`]), the only truth read |
//! | turn the mode on (when off; never off) | `cnmon set -c <n> -S 1` or `-smlu on`, as this cnmon's usage spells it |
//! | a profile of (cores %, MiB) | reused from `cnmon smlu -c <n> -p` (same quotas, a free slot), else made with `-CP` (asked on stdin) |
//! | the instance | `cnmon smlu -c <n> -C <profile>`, then read back from the listing |
//! | reclaim | `-D <instance>`, then `-DP <profile>` for a profile the device manager made and no instance uses |
//!
//! Every cnmon call is bounded ([`CALL_DEADLINE`]) and runs under its card's lock; the reclaim
//! pass takes the same lock card by card. Nothing is left half-made: a failed step undoes what
//! the earlier ones made (the instance, then a profile made for it). What a crash between the
//! create and the marker leaves is an instance no marker names: the restart survey
//! ([`Smlu::survey`]) reports it, and like every instance no marker names it is never touched
//! (it may be someone else's: cnmon makes instances without names).
//!
//! Markers (`<pods>/<pod uid>/c-<container>/cambricon-smlu.json`, 0600, written atomically; the
//! container directory 0777) carry the spec's `podUID`, `container`, `card` (the PCI address, the
//! frozen on-disk key), `instance` (the driver's name), `profileID`, `coresPct`, `memMiB`, and
//! two keys of this build: `instanceID` (cnmon addresses instances by id) and `profileMade`
//! (the profile was made by the device manager, so the reclaimer may destroy it once no instance
//! uses it; a driver's or an administrator's profile is never destroyed). A retried Allocate
//! finds its own marker and reuses its instance, or fails closed when the request changed or
//! the instance is gone.
//!
//! Preflight's simulation ([`Smlu::simulated`]) reads the listing but runs no cnmon at all: it
//! records what it would run, and its instance has no device node.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use accel_backend::chores::{PodDirs, make_dir};
use accel_host::{CommandOutput, Commands, Host, RunFailure, run_answered};
use serde::{Deserialize, Serialize};

use crate::cnmon_smlu::{self, ModeAnswer, ModeSpelling, Refusal, SET_USAGE_ARGV, both_spellings};
use crate::procfs::{self, ReadError, SmluListing};

/// The marker's file name in the container's working directory.
pub const MARKER_FILE: &str = "cambricon-smlu.json";
/// Where the driver's instance nodes are (addendum C5).
pub const CAPS_DIR: &str = "/dev/cambricon-caps";
/// Passes a Pod must be absent before its instances are destroyed (spec §4.6).
pub const RECLAIM_PASSES: u32 = 3;
/// Each cnmon call's deadline (nvidia-smi's: 30 s a call). `-CP` never returns after a bad
/// answer on EOF (HAZARDS.md item 8), so the deadline is what ends it.
pub const CALL_DEADLINE: Duration = Duration::from_secs(30);

/// A slice's marker (spec §4.4 step 5, plus `instanceID` and `profileMade`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    #[serde(rename = "podUID")]
    pub pod_uid: String,
    pub container: String,
    /// The card's PCI address (`0000:4f:00.0`).
    pub card: String,
    /// The driver's name of the instance (`cap_dev0_mi1`), its node's name.
    pub instance: String,
    #[serde(rename = "profileID")]
    pub profile_id: u32,
    #[serde(rename = "coresPct")]
    pub cores_pct: u32,
    #[serde(rename = "memMiB")]
    pub mem_mib: u64,
    #[serde(rename = "instanceID")]
    pub instance_id: u32,
    /// The profile was made by the device manager (for this slice or one before it).
    #[serde(rename = "profileMade", default)]
    pub profile_made: bool,
}

/// What a container asks of one card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub pod_uid: String,
    pub container: String,
    /// The card's PCI address as sysfs spells it.
    pub bdf: String,
    /// cnDev's device index (cnmon's `-c`).
    pub driver_index: u32,
    pub cores_pct: u32,
    pub mem_mib: u64,
}

/// The instance a slice holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    /// The driver's name (`cap_dev0_mi1`); empty in a simulation.
    pub instance: String,
    pub instance_id: Option<u32>,
    pub profile_id: Option<u32>,
    /// `/dev/cambricon-caps/<instance>`; `None` in a simulation (nothing was made).
    pub node: Option<String>,
}

/// A marker found on disk.
#[derive(Debug, Clone)]
struct Found {
    path: PathBuf,
    marker: Marker,
}

fn read_marker(path: &Path) -> Result<Marker, String> {
    std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str::<Marker>(&t).map_err(|e| e.to_string()))
}

/// Every readable marker under `dirs`; corrupt ones are logged and skipped.
fn scan(dirs: &PodDirs) -> Vec<Found> {
    let mut out = Vec::new();
    for container in dirs.containers() {
        let path = container.path.join(MARKER_FILE);
        if !path.is_file() {
            continue;
        }
        match read_marker(&path) {
            Ok(marker) => out.push(Found { path, marker }),
            Err(e) => {
                tracing::warn!(marker = %path.display(), "skipping an unreadable smlu marker: {e}")
            }
        }
    }
    out
}

/// Writes `marker` at `path`, 0600 and atomically; its directory made 0777.
fn write_marker(path: &Path, marker: &Marker) -> Result<(), String> {
    let dir = path
        .parent()
        .ok_or_else(|| format!("{}: no directory", path.display()))?;
    make_dir(dir, Some(0o777)).map_err(|e| e.to_string())?;
    let text = serde_json::to_string(marker).map_err(|e| e.to_string())?;
    accel_host::write_atomic(path, text.as_bytes()).map_err(|e| e.to_string())
}

/// What one reclaim pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reclaimed {
    /// Instances destroyed, as `(card address, instance name)`.
    pub destroyed: Vec<(String, String)>,
    /// Profiles destroyed, as `(card address, profile id)`.
    pub profiles: Vec<(String, u32)>,
    /// Marker files removed.
    pub markers: Vec<PathBuf>,
    /// What failed (tried again next pass).
    pub errors: Vec<String>,
}

/// What a restart finds on the node ([`Smlu::survey`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Survey {
    /// Instances a marker names: `(card, instance, pod uid)`.
    pub owned: Vec<(String, String, String)>,
    /// Instances no marker names (never touched).
    pub foreign: Vec<ForeignInstance>,
    /// Markers whose instance the driver no longer lists: `(marker, instance)`.
    pub missing: Vec<(PathBuf, String)>,
    /// Cards whose listing could not be read.
    pub errors: Vec<String>,
}

/// An instance no marker names: left alone, and told with the command that destroys it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignInstance {
    /// The card's PCI address.
    pub card: String,
    /// The driver's name of the instance (`cap_dev7_mi1`).
    pub instance: String,
    /// The command an administrator runs to destroy it if nothing uses it
    /// (`cnmon smlu -c 7 -D 1`).
    pub destroy: String,
}

/// How cnmon is reached.
enum Driver {
    /// The node's cnmon.
    Cnmon(Arc<dyn Commands>),
    /// Preflight's simulation: nothing run, what would be run recorded.
    Simulated(Mutex<Vec<String>>),
}

/// The node's sMLU manager.
pub struct Smlu {
    host: Arc<dyn Host>,
    driver: Driver,
    dirs: PodDirs,
    /// cnDev's device index of each card, by PCI address.
    cards: BTreeMap<String, u32>,
    /// One lock per card (by PCI address); `spare` for a card the detection did not name.
    locks: BTreeMap<String, Mutex<()>>,
    spare: Mutex<()>,
    /// The spelling this cnmon's usage names, once read.
    spelling: Mutex<Option<ModeSpelling>>,
    /// How many passes each absent Pod has been seen.
    absent: Mutex<BTreeMap<String, u32>>,
    deadline: Duration,
}

impl std::fmt::Debug for Smlu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Smlu")
            .field("pods", &self.dirs.root())
            .field("cards", &self.cards)
            .finish_non_exhaustive()
    }
}

fn lock(m: &Mutex<()>) -> MutexGuard<'_, ()> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Smlu {
    /// The manager of `cards` (`(PCI address, cnDev index)`), running cnmon through `commands`,
    /// reading the listings through `host`, the markers under `pods`.
    pub fn new(
        host: Arc<dyn Host>,
        commands: Arc<dyn Commands>,
        pods: PathBuf,
        cards: impl IntoIterator<Item = (String, u32)>,
    ) -> Smlu {
        Smlu::with_driver(host, Driver::Cnmon(commands), pods, cards)
    }

    /// Preflight's: reads the listings, runs nothing, records what it would run.
    pub fn simulated(
        host: Arc<dyn Host>,
        pods: PathBuf,
        cards: impl IntoIterator<Item = (String, u32)>,
    ) -> Smlu {
        Smlu::with_driver(host, Driver::Simulated(Mutex::default()), pods, cards)
    }

    fn with_driver(
        host: Arc<dyn Host>,
        driver: Driver,
        pods: PathBuf,
        cards: impl IntoIterator<Item = (String, u32)>,
    ) -> Smlu {
        let cards: BTreeMap<String, u32> = cards
            .into_iter()
            .map(|(bdf, index)| (bdf.to_ascii_lowercase(), index))
            .collect();
        Smlu {
            host,
            driver,
            dirs: PodDirs::new(pods),
            locks: cards.keys().map(|b| (b.clone(), Mutex::new(()))).collect(),
            cards,
            spare: Mutex::new(()),
            spelling: Mutex::new(None),
            absent: Mutex::new(BTreeMap::new()),
            deadline: CALL_DEADLINE,
        }
    }

    /// The same manager with each cnmon call bounded by `deadline` (tests).
    pub fn with_deadline(mut self, deadline: Duration) -> Smlu {
        self.deadline = deadline;
        self
    }

    /// Whether this is preflight's simulation.
    pub fn is_simulated(&self) -> bool {
        matches!(self.driver, Driver::Simulated(_))
    }

    /// What a simulation would have run, in order.
    pub fn simulated_calls(&self) -> Vec<String> {
        match &self.driver {
            Driver::Simulated(log) => log.lock().unwrap_or_else(PoisonError::into_inner).clone(),
            Driver::Cnmon(_) => Vec::new(),
        }
    }

    fn card_lock(&self, bdf: &str) -> MutexGuard<'_, ()> {
        lock(self.locks.get(bdf).unwrap_or(&self.spare))
    }

    /// Whether a marker of `pod_uid` is on disk.
    pub fn holds(&self, pod_uid: &str) -> bool {
        self.dirs
            .containers()
            .iter()
            .any(|c| c.pod_uid == pod_uid && c.path.join(MARKER_FILE).is_file())
    }

    /// The marker path of one container.
    pub fn marker_path(&self, pod_uid: &str, container: &str) -> Result<PathBuf, String> {
        self.dirs
            .container(pod_uid, container)
            .map(|dir| dir.join(MARKER_FILE))
            .map_err(|e| e.to_string())
    }

    fn run(
        &self,
        commands: &dyn Commands,
        argv: &[String],
        input: Option<&[u8]>,
    ) -> Result<CommandOutput, RunFailure> {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        run_answered(commands, &argv, input, self.deadline)
    }

    /// The spelling `cnmon set -h` names (read once; a usage naming neither is read again
    /// next time).
    pub fn spelling(&self, commands: &dyn Commands) -> Result<Option<ModeSpelling>, RunFailure> {
        let mut known = self.spelling.lock().unwrap_or_else(PoisonError::into_inner);
        if known.is_some() {
            return Ok(*known);
        }
        let out = run_answered(commands, SET_USAGE_ARGV, None, self.deadline)?;
        let text = format!("{}\n{}", out.stdout_text(), out.stderr_text());
        *known = cnmon_smlu::parse_usage(&text);
        Ok(*known)
    }

    /// The command that turns the card's mode on: this cnmon's spelling, else both sources'.
    fn turn_on_command(&self, r: &Request) -> String {
        let spelling = match &self.driver {
            Driver::Cnmon(commands) => self.spelling(commands.as_ref()).ok().flatten(),
            Driver::Simulated(_) => None,
        };
        match spelling {
            Some(s) => format!("`{}`", s.command(r.driver_index, true)),
            None => both_spellings(r.driver_index, true),
        }
    }

    /// The spec's refusal for a card whose driver or cnmon has no sMLU (§4.4 step 2).
    fn cannot_be_sliced(&self, r: &Request, why: &str) -> String {
        format!(
            "card {} (device index {}) cannot be sliced: {why}; where the driver and cnmon have sMLU, {} turns its mode on",
            r.bdf,
            r.driver_index,
            self.turn_on_command(r)
        )
    }

    /// The spec's refusal for a mode write that failed (§4.4 step 2).
    fn enable_failed(&self, r: &Request, what: &str, command: &str) -> String {
        format!(
            "card {} (device index {}): enable sMLU mode: {what}; to enable it on the host for the card at this PCI address run {command}, confirming the ordinal with `cnmon`",
            r.bdf, r.driver_index
        )
    }

    /// The card's listing, a card without sMLU worded as the spec's refusal.
    fn listing(&self, r: &Request) -> Result<SmluListing, String> {
        match procfs::read(self.host.as_ref(), &r.bdf) {
            Ok(l) if !l.support => Err(self.cannot_be_sliced(
                r,
                &format!(
                    "the driver reports no sMLU support for it (smlu_support:0 in {})",
                    procfs::path(&r.bdf)
                ),
            )),
            Ok(l) => Ok(l),
            Err(ReadError::Absent { path }) => Err(self.cannot_be_sliced(
                r,
                &format!("the driver lists no sMLU state for it ({path} is absent: a driver without sMLU)"),
            )),
            Err(ReadError::Unreadable { path, reason }) => Err(self.cannot_be_sliced(
                r,
                &format!("the driver refuses its sMLU listing ({path}: {reason}), as it does for a card without sMLU support"),
            )),
            Err(e @ ReadError::Parse { .. }) => {
                Err(format!("card {}: read the sMLU listing: {e}", r.bdf))
            }
        }
    }

    /// Turns the card's sMLU mode on when it is off (never off).
    fn ensure_mode(&self, r: &Request) -> Result<(), String> {
        if self.listing(r)?.enabled {
            return Ok(());
        }
        let commands = match &self.driver {
            Driver::Simulated(log) => {
                log.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(format!("turn card {}'s sMLU mode on", r.driver_index));
                return Ok(());
            }
            Driver::Cnmon(commands) => commands.as_ref(),
        };
        let spelling = match self.spelling(commands) {
            Ok(Some(s)) => s,
            Ok(None) => {
                return Err(self.cannot_be_sliced(
                    r,
                    "this node's cnmon has no sMLU mode option (`cnmon set -h` names neither `-S`/`--smlu_mode` nor `-smlu`)",
                ));
            }
            Err(e) => {
                let both = both_spellings(r.driver_index, true);
                return Err(self.enable_failed(r, &format!("read its usage: {e}"), &both));
            }
        };
        let command = format!("`{}`", spelling.command(r.driver_index, true));
        let out = self
            .run(commands, &spelling.argv(r.driver_index, true), None)
            .map_err(|e| self.enable_failed(r, &e.to_string(), &command))?;
        match cnmon_smlu::parse_mode_answer(&out.stdout_text(), &out.stderr_text()) {
            ModeAnswer::Now { on: true } | ModeAnswer::Already { on: true } => {}
            ModeAnswer::NotSupported => {
                return Err(self.cannot_be_sliced(
                    r,
                    "cnmon answers `This device doesn't support setting SMLU mode.`",
                ));
            }
            ModeAnswer::Now { on: false } | ModeAnswer::Already { on: false } => {
                return Err(self.enable_failed(r, "cnmon answers that the mode is OFF", &command));
            }
            ModeAnswer::Refused(said) => {
                return Err(self.enable_failed(r, &format!("cnmon says: {said}"), &command));
            }
        }
        if !self.listing(r)?.enabled {
            return Err(self.enable_failed(
                r,
                "cnmon answered ON, but the driver's listing still reads smlu_enable:0",
                &command,
            ));
        }
        tracing::info!(card = %r.bdf, index = r.driver_index, "turned sMLU mode on ({command}); it stays on");
        Ok(())
    }

    /// Reserves `r`'s instance (spec §4.4): its own marker's, or a new one.
    pub fn reserve(&self, r: &Request) -> Result<Reserved, String> {
        let _card = self.card_lock(&r.bdf);
        let own = self.marker_path(&r.pod_uid, &r.container)?;
        if own.exists() {
            return self.reuse_own(r, &own);
        }
        if !(1..=100).contains(&r.cores_pct) {
            return Err(format!(
                "card {}: an sMLU profile's MLU quota is 1-100 %, not {}",
                r.bdf, r.cores_pct
            ));
        }
        if r.mem_mib == 0 {
            return Err(format!("card {}: the slice asks for no memory", r.bdf));
        }
        self.ensure_mode(r)?;
        match &self.driver {
            Driver::Cnmon(commands) => self.make(commands.as_ref(), r, &own),
            Driver::Simulated(log) => {
                log.lock().unwrap_or_else(PoisonError::into_inner).push(format!(
                    "make an sMLU instance of {} % and {} MiB on card {} (`cnmon smlu -c {} -CP`, then `-C`)",
                    r.cores_pct, r.mem_mib, r.driver_index, r.driver_index
                ));
                Ok(Reserved {
                    instance: String::new(),
                    instance_id: None,
                    profile_id: None,
                    node: None,
                })
            }
        }
    }

    /// A retried Allocate: the instance its marker names, or a fail-closed refusal.
    fn reuse_own(&self, r: &Request, own: &Path) -> Result<Reserved, String> {
        let marker = read_marker(own).map_err(|e| format!("read self marker {own:?}: {e}"))?;
        if marker.card != r.bdf || marker.cores_pct != r.cores_pct || marker.mem_mib != r.mem_mib {
            return Err(format!(
                "marker {own:?} mismatches request (card={} cores={} mem={}): fail closed",
                r.bdf, r.cores_pct, r.mem_mib
            ));
        }
        let listing = procfs::read(self.host.as_ref(), &r.bdf)
            .map_err(|e| format!("card {}: read the sMLU listing: {e}", r.bdf))?;
        match listing
            .instance(marker.instance_id)
            .filter(|i| i.name == marker.instance)
        {
            Some(i) => Ok(Reserved {
                instance: i.name.clone(),
                instance_id: Some(i.instance_id),
                profile_id: Some(marker.profile_id),
                node: Some(format!("{CAPS_DIR}/{}", i.name)),
            }),
            None => Err(format!(
                "marker {own:?} references missing instance {:?}: fail closed",
                marker.instance
            )),
        }
    }

    /// The profile for `r`: a listed one of the same quotas with a free slot, else a new one
    /// (`(id, made now)`).
    fn profile_for(&self, commands: &dyn Commands, r: &Request) -> Result<(u32, bool), String> {
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("card {}: {what}: {e}", r.bdf);
        let out = self
            .run(commands, &cnmon_smlu::profiles_argv(r.driver_index), None)
            .map_err(|e| fail("list smlu profiles", &e))?;
        let profiles = cnmon_smlu::parse_profiles(&out.stdout_text(), &out.stderr_text())
            .map_err(|e| fail("list smlu profiles", &e))?;
        if let Some(p) = profiles.iter().find(|p| {
            p.quota_percent == Some(r.cores_pct)
                && p.memory_mib == Some(r.mem_mib)
                && p.free.is_some_and(|f| f > 0)
        }) {
            return Ok((p.id, false));
        }
        let input = cnmon_smlu::create_profile_input(r.cores_pct, r.mem_mib);
        let out = self
            .run(
                commands,
                &cnmon_smlu::create_profile_argv(r.driver_index),
                Some(&input),
            )
            .map_err(|e| fail("create smlu profile", &e))?;
        cnmon_smlu::parse_created_profile(&out.stdout_text(), &out.stderr_text())
            .map(|id| (id, true))
            .map_err(|e| fail("create smlu profile", &e))
    }

    /// Makes `r`'s profile (or reuses one), its instance, and its marker; undoes what it made
    /// when a later step fails.
    fn make(&self, commands: &dyn Commands, r: &Request, own: &Path) -> Result<Reserved, String> {
        let (profile_id, fresh) = self.profile_for(commands, r)?;
        let created = self
            .run(
                commands,
                &cnmon_smlu::create_instance_argv(r.driver_index, profile_id),
                None,
            )
            .map_err(|e| e.to_string())
            .and_then(|out| {
                cnmon_smlu::parse_created_instance(&out.stdout_text(), &out.stderr_text())
                    .map_err(|e| e.to_string())
            });
        let instance_id = match created {
            Ok((id, _)) => id,
            Err(e) => {
                self.undo(commands, r, None, fresh.then_some(profile_id));
                return Err(format!("card {}: create smlu instance: {e}", r.bdf));
            }
        };
        let fail = |why: String| {
            self.undo(commands, r, Some(instance_id), fresh.then_some(profile_id));
            format!("card {}: {why}", r.bdf)
        };
        let listing = procfs::read(self.host.as_ref(), &r.bdf).map_err(|e| {
            fail(format!(
                "read the sMLU listing after creating instance {instance_id}: {e}"
            ))
        })?;
        let Some(listed) = listing.instance(instance_id) else {
            return Err(fail(format!(
                "cnmon created sMLU instance {instance_id}, but the driver's listing does not show it"
            )));
        };
        if listed.profile_id.is_some_and(|p| p != profile_id) {
            return Err(fail(format!(
                "the driver lists instance {instance_id} with profile {:?}, not {profile_id}",
                listed.profile_id
            )));
        }
        let node = format!("{CAPS_DIR}/{}", listed.name);
        if !self.host.exists(&node) {
            return Err(fail(format!(
                "sMLU instance {} has no device node {node}",
                listed.name
            )));
        }
        let made = fresh
            || scan(&self.dirs).iter().any(|f| {
                f.marker.card == r.bdf && f.marker.profile_id == profile_id && f.marker.profile_made
            });
        let marker = Marker {
            pod_uid: r.pod_uid.clone(),
            container: r.container.clone(),
            card: r.bdf.clone(),
            instance: listed.name.clone(),
            profile_id,
            cores_pct: r.cores_pct,
            mem_mib: r.mem_mib,
            instance_id,
            profile_made: made,
        };
        if let Err(e) = write_marker(own, &marker) {
            self.undo(commands, r, Some(instance_id), fresh.then_some(profile_id));
            return Err(format!("write marker {own:?}: {e}"));
        }
        Ok(Reserved {
            instance: listed.name.clone(),
            instance_id: Some(instance_id),
            profile_id: Some(profile_id),
            node: Some(node),
        })
    }

    /// Destroys what a failed reserve made: its instance, then the profile made for it.
    fn undo(
        &self,
        commands: &dyn Commands,
        r: &Request,
        instance: Option<u32>,
        profile: Option<u32>,
    ) {
        if let Some(id) = instance {
            let argv = cnmon_smlu::destroy_instance_argv(r.driver_index, id);
            let done = self
                .run(commands, &argv, None)
                .map_err(|e| e.to_string())
                .and_then(|out| {
                    cnmon_smlu::parse_destroyed_instance(&out.stdout_text(), &out.stderr_text())
                        .map_err(|e| e.to_string())
                });
            if let Err(e) = done {
                tracing::error!(card = %r.bdf, "undo: destroy smlu instance {id}: {e}; destroy it with `{}`", argv.join(" "));
            }
        }
        if let Some(id) = profile {
            let argv = cnmon_smlu::destroy_profile_argv(r.driver_index, id);
            if let Err(e) = self.destroy_profile(commands, &argv) {
                tracing::error!(card = %r.bdf, "undo: destroy smlu profile {id}: {e}; destroy it with `{}`", argv.join(" "));
            }
        }
    }

    fn destroy_profile(&self, commands: &dyn Commands, argv: &[String]) -> Result<(), String> {
        let out = self.run(commands, argv, None).map_err(|e| e.to_string())?;
        match cnmon_smlu::parse_destroyed_profile(&out.stdout_text(), &out.stderr_text()) {
            Ok(_) => Ok(()),
            // No such profile (any more): nothing to destroy.
            Err(Refusal::Rejected(_)) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The cnDev index of a card, from the detection, else from an instance name.
    fn index_of(&self, bdf: &str, instance: &str) -> Option<u32> {
        self.cards.get(bdf).copied().or_else(|| {
            instance
                .strip_prefix(procfs::CAP_PREFIX)?
                .split_once("_mi")?
                .0
                .parse()
                .ok()
        })
    }

    /// Releases one gone Pod's marker under its card's lock: its instance (unless `shared`,
    /// another Pod's marker naming it too), then its profile when the device manager made it
    /// and nothing uses it any more (`others`: the markers that stay).
    fn release(
        &self,
        commands: &dyn Commands,
        m: &Marker,
        shared: bool,
        others: &[&Marker],
        done: &mut Reclaimed,
    ) -> Result<(), String> {
        let _card = self.card_lock(&m.card);
        let index = self
            .index_of(&m.card, &m.instance)
            .ok_or_else(|| format!("card {}: no cnDev index is known for it", m.card))?;
        let read = || {
            procfs::read(self.host.as_ref(), &m.card)
                .map_err(|e| format!("card {}: read the sMLU listing: {e}", m.card))
        };
        let listing = read()?;
        let ours = listing
            .instance(m.instance_id)
            .filter(|i| i.name == m.instance && i.profile_id.is_none_or(|p| p == m.profile_id));
        if let (Some(listed), false) = (ours, shared) {
            if listing.is_bound(&listed.name) {
                return Err(format!(
                    "card {}: sMLU instance {} is still bound to a container; kept",
                    m.card, listed.name
                ));
            }
            let out = self
                .run(
                    commands,
                    &cnmon_smlu::destroy_instance_argv(index, m.instance_id),
                    None,
                )
                .map_err(|e| {
                    format!(
                        "card {}: destroy smlu instance {}: {e}",
                        m.card, m.instance_id
                    )
                })?;
            cnmon_smlu::parse_destroyed_instance(&out.stdout_text(), &out.stderr_text()).map_err(
                |e| {
                    format!(
                        "card {}: destroy smlu instance {}: {e}",
                        m.card, m.instance_id
                    )
                },
            )?;
            done.destroyed.push((m.card.clone(), m.instance.clone()));
        }
        if !m.profile_made {
            return Ok(());
        }
        let listing = read()?;
        let used = listing
            .instances
            .iter()
            .any(|i| i.profile_id == Some(m.profile_id))
            || others
                .iter()
                .any(|o| o.card == m.card && o.profile_id == m.profile_id);
        if used {
            return Ok(());
        }
        self.destroy_profile(
            commands,
            &cnmon_smlu::destroy_profile_argv(index, m.profile_id),
        )
        .map_err(|e| {
            format!(
                "card {}: destroy smlu profile {}: {e}",
                m.card, m.profile_id
            )
        })?;
        done.profiles.push((m.card.clone(), m.profile_id));
        Ok(())
    }

    /// One reclaim pass (spec §4.6) given the live Pod UIDs: a Pod with markers absent for
    /// [`RECLAIM_PASSES`] passes in a row loses its instances (never one a container is still
    /// bound to), then the profiles the device manager made for them that nothing uses, then
    /// its markers and empty directories. Instances no marker names are never touched.
    pub fn reclaim_pass(&self, live: &BTreeSet<String>) -> Reclaimed {
        let mut done = Reclaimed::default();
        let Driver::Cnmon(commands) = &self.driver else {
            return done;
        };
        let mut absent = self.absent.lock().unwrap_or_else(PoisonError::into_inner);
        let markers = scan(&self.dirs);
        let mut holders: BTreeMap<&str, Vec<&Found>> = BTreeMap::new();
        for f in &markers {
            holders
                .entry(f.marker.pod_uid.as_str())
                .or_default()
                .push(f);
        }
        absent.retain(|uid, _| holders.contains_key(uid.as_str()) && !live.contains(uid));
        let mut due: BTreeSet<&str> = BTreeSet::new();
        for uid in holders.keys() {
            if live.contains(*uid) {
                continue;
            }
            let seen = absent.entry(uid.to_string()).or_insert(0);
            *seen += 1;
            if *seen >= RECLAIM_PASSES {
                due.insert(uid);
            }
        }
        let staying: Vec<&Marker> = markers
            .iter()
            .filter(|f| !due.contains(f.marker.pod_uid.as_str()))
            .map(|f| &f.marker)
            .collect();
        for uid in &due {
            let mut failed = false;
            for f in &holders[uid] {
                let shared = staying
                    .iter()
                    .any(|o| o.card == f.marker.card && o.instance_id == f.marker.instance_id);
                if let Err(e) =
                    self.release(commands.as_ref(), &f.marker, shared, &staying, &mut done)
                {
                    failed = true;
                    done.errors.push(e);
                }
            }
            if failed {
                continue; // The markers stay until what they record is gone.
            }
            for f in &holders[uid] {
                match std::fs::remove_file(&f.path) {
                    Ok(()) => done.markers.push(f.path.clone()),
                    Err(e) => done
                        .errors
                        .push(format!("remove {}: {e}", f.path.display())),
                }
                if let Some(container) = f.path.parent() {
                    let _ = std::fs::remove_dir(container);
                    if let Some(pod) = container.parent() {
                        let _ = std::fs::remove_dir(pod);
                    }
                }
            }
            absent.remove(*uid);
        }
        done
    }

    /// What a (re)started daemon finds: every instance each card's listing shows with the Pod
    /// its marker names, the instances no marker names, and the markers whose instance is gone.
    pub fn survey(&self) -> Survey {
        let mut survey = Survey::default();
        let markers = scan(&self.dirs);
        let mut read: BTreeSet<&str> = BTreeSet::new();
        for (bdf, index) in &self.cards {
            let listing = match procfs::read(self.host.as_ref(), bdf) {
                Ok(l) => l,
                // A card without sMLU state holds no instance.
                Err(ReadError::Absent { .. }) => continue,
                Err(e) => {
                    survey.errors.push(format!("card {bdf}: {e}"));
                    continue;
                }
            };
            read.insert(bdf);
            for i in &listing.instances {
                let owner = markers.iter().find(|f| {
                    f.marker.card == *bdf
                        && f.marker.instance_id == i.instance_id
                        && f.marker.instance == i.name
                });
                match owner {
                    Some(f) => {
                        survey
                            .owned
                            .push((bdf.clone(), i.name.clone(), f.marker.pod_uid.clone()))
                    }
                    None => survey.foreign.push(ForeignInstance {
                        card: bdf.clone(),
                        instance: i.name.clone(),
                        destroy: cnmon_smlu::destroy_instance_argv(*index, i.instance_id).join(" "),
                    }),
                }
            }
        }
        for f in &markers {
            let listed = survey
                .owned
                .iter()
                .any(|(b, n, _)| *b == f.marker.card && *n == f.marker.instance);
            if read.contains(f.marker.card.as_str()) && !listed {
                survey
                    .missing
                    .push((f.path.clone(), f.marker.instance.clone()));
            }
        }
        survey
    }

    /// Logs what [`Smlu::survey`] found, once at start.
    pub fn log_survey(&self) {
        let survey = self.survey();
        for (bdf, name, uid) in &survey.owned {
            tracing::info!(card = %bdf, instance = %name, pod = %uid, "found a live sMLU instance and its Pod");
        }
        for f in &survey.foreign {
            tracing::warn!(card = %f.card, instance = %f.instance, "an sMLU instance no marker records: left alone (made by hand, or by a daemon stopped between creating it and recording it); if nothing uses it, destroy it with `{}`", f.destroy);
        }
        for (path, name) in &survey.missing {
            tracing::warn!(marker = %path.display(), instance = %name, "a marker names an sMLU instance the driver no longer lists: its Pod's retried Allocate fails closed, and the reclaimer drops the marker once the Pod is gone");
        }
        for e in &survey.errors {
            tracing::warn!("sMLU survey: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smlu_replay::{self, ModeOption, STATE_FILE, SmluState, StateCard, StateProfile};
    use accel_host::{FsHost, RecordedCommands};
    use std::os::unix::fs::PermissionsExt;

    const BDF: &str = "0000:4f:00.0";
    const USAGE_S: &str = "Usage: cnmon set [OPTIONS]\n  -c, --card=<int>            only set card X\n  -S, --smlu_mode=<string>    only set card X's SMLU mode: 0/OFF 1/ON. Requires administrator privileges\n";

    struct Node {
        dir: tempfile::TempDir,
        smlu: Smlu,
    }

    fn card(enabled: bool) -> StateCard {
        StateCard {
            card: 0,
            bdf: BDF.into(),
            memory_mib: 23308,
            support: true,
            enabled,
            refuse_mode: false,
            refuse_instances: false,
        }
    }

    fn state(enabled: bool) -> SmluState {
        SmluState {
            mode_option: ModeOption::Short,
            cards: vec![card(enabled)],
            // The driver's own whole-card profile.
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

    fn node_with(state: &SmluState, usage: &str) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let usage_dir = dir.path().join("commands/cnmon-set-h");
        std::fs::create_dir_all(&usage_dir).unwrap();
        std::fs::write(usage_dir.join("argv"), "cnmon\nset\n-h\n").unwrap();
        std::fs::write(usage_dir.join("stdout"), usage).unwrap();
        state.save(&dir.path().join(STATE_FILE)).unwrap();
        smlu_replay::render(&dir.path().join("root"), state).unwrap();
        let commands: Arc<dyn Commands> = Arc::from(smlu_replay::wrap(
            dir.path(),
            Box::new(RecordedCommands::load(dir.path()).unwrap()),
        ));
        let host: Arc<dyn Host> = Arc::new(FsHost::new(dir.path().join("root")));
        let smlu = Smlu::new(
            host,
            commands,
            dir.path().join("pods"),
            [(BDF.to_string(), 0)],
        )
        .with_deadline(Duration::from_millis(500));
        Node { dir, smlu }
    }

    fn node(enabled: bool) -> Node {
        node_with(&state(enabled), USAGE_S)
    }

    fn request(uid: &str, cores: u32, mem: u64) -> Request {
        Request {
            pod_uid: uid.into(),
            container: "main".into(),
            bdf: BDF.into(),
            driver_index: 0,
            cores_pct: cores,
            mem_mib: mem,
        }
    }

    impl Node {
        fn state(&self) -> SmluState {
            SmluState::load(&self.dir.path().join(STATE_FILE)).unwrap()
        }

        fn edit(&self, f: impl FnOnce(&mut SmluState)) {
            let mut s = self.state();
            f(&mut s);
            s.save(&self.dir.path().join(STATE_FILE)).unwrap();
            smlu_replay::render(&self.dir.path().join("root"), &s).unwrap();
        }

        fn instances(&self) -> Vec<(u32, u32)> {
            self.state()
                .instances
                .iter()
                .map(|i| (i.id, i.profile))
                .collect()
        }

        fn profiles(&self) -> Vec<u32> {
            self.state().profiles.iter().map(|p| p.id).collect()
        }
    }

    #[test]
    fn a_slice_turns_the_mode_on_makes_a_profile_and_an_instance_and_is_marked() {
        let n = node(false);
        let got = n.smlu.reserve(&request("a", 25, 4096)).unwrap();
        assert_eq!(
            got,
            Reserved {
                instance: "cap_dev0_mi1".into(),
                instance_id: Some(1),
                profile_id: Some(1),
                node: Some("/dev/cambricon-caps/cap_dev0_mi1".into()),
            }
        );
        assert!(n.state().cards[0].enabled, "the mode was turned on");
        assert_eq!(n.instances(), [(1, 1)]);
        let path = n.smlu.marker_path("a", "main").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            r#"{"podUID":"a","container":"main","card":"0000:4f:00.0","instance":"cap_dev0_mi1","profileID":1,"coresPct":25,"memMiB":4096,"instanceID":1,"profileMade":true}"#
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dir_mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o777);
        // The same quotas reuse the profile (it has free slots), and its marker knows the
        // profile is the device manager's.
        let b = n.smlu.reserve(&request("b", 25, 4096)).unwrap();
        assert_eq!((b.instance_id, b.profile_id), (Some(2), Some(1)));
        assert_eq!(n.profiles(), [0, 1]);
        let marker = read_marker(&n.smlu.marker_path("b", "main").unwrap()).unwrap();
        assert!(marker.profile_made);
        // A retry finds its own marker; a changed request fails closed.
        assert_eq!(n.smlu.reserve(&request("a", 25, 4096)).unwrap(), got);
        let e = n.smlu.reserve(&request("a", 50, 4096)).unwrap_err();
        assert!(
            e.ends_with("mismatches request (card=0000:4f:00.0 cores=50 mem=4096): fail closed"),
            "{e}"
        );
        // The driver's whole-card profile is reused as it is.
        let whole = n.smlu.reserve(&request("w", 100, 23308));
        assert!(
            whole.is_err(),
            "no room left next to two quarter slices: {whole:?}"
        );
        assert_eq!(n.instances(), [(1, 1), (2, 1)], "nothing half-made");
        assert_eq!(n.profiles(), [0, 1]);
    }

    #[test]
    fn a_card_in_smlu_mode_is_not_written_and_the_other_spelling_is_used_where_the_usage_says() {
        let n = node(true);
        n.smlu.reserve(&request("a", 50, 8192)).unwrap();
        assert_eq!(n.state().writes, 2, "profile and instance only");
        let mut smlu_on = state(false);
        smlu_on.mode_option = ModeOption::Smlu;
        let n = node_with(
            &smlu_on,
            "Usage: cnmon set [OPTIONS]\n  -c <card>\n  -smlu <on|off>   set the card's sMLU mode\n",
        );
        n.smlu.reserve(&request("a", 50, 8192)).unwrap();
        assert!(n.state().cards[0].enabled);
    }

    #[test]
    fn a_cnmon_or_driver_without_smlu_is_refused_naming_the_card_and_the_command() {
        // cnmon's usage names neither spelling: both the sources give are named.
        let n = node_with(
            &state(false),
            "Usage: cnmon set [OPTIONS]\n  -c, --card=<int>\n",
        );
        let e = n.smlu.reserve(&request("a", 50, 8192)).unwrap_err();
        assert_eq!(
            e,
            "card 0000:4f:00.0 (device index 0) cannot be sliced: this node's cnmon has no sMLU mode option (`cnmon set -h` names neither `-S`/`--smlu_mode` nor `-smlu`); where the driver and cnmon have sMLU, `cnmon set -c 0 -S 1` (cnmon 5.10.22's option) or `cnmon set -c 0 -smlu on` (HAMi's spelling) turns its mode on"
        );
        assert_eq!(n.state().writes, 0);
        // The driver has no listing for the card: this cnmon's own spelling is named.
        let n = node(false);
        std::fs::remove_dir_all(n.dir.path().join("root/proc")).unwrap();
        let e = n.smlu.reserve(&request("a", 50, 8192)).unwrap_err();
        assert!(
            e.starts_with("card 0000:4f:00.0 (device index 0) cannot be sliced: the driver lists no sMLU state for it (/proc/driver/cambricon/mlus/0000:4f:00.0/smlu is absent")
                && e.ends_with("where the driver and cnmon have sMLU, `cnmon set -c 0 -S 1` turns its mode on"),
            "{e}"
        );
        // cnmon refuses the write: the spec's remediation, with this cnmon's spelling.
        let n = node(false);
        n.edit(|s| s.cards[0].refuse_mode = true);
        let e = n.smlu.reserve(&request("a", 50, 8192)).unwrap_err();
        assert_eq!(
            e,
            "card 0000:4f:00.0 (device index 0): enable sMLU mode: cnmon says: Permission denied.; to enable it on the host for the card at this PCI address run `cnmon set -c 0 -S 1`, confirming the ordinal with `cnmon`"
        );
        // The card does not support it.
        let n = node(false);
        n.edit(|s| s.cards[0].support = false);
        std::fs::create_dir_all(
            n.dir
                .path()
                .join("root/proc/driver/cambricon/mlus/0000:4f:00.0"),
        )
        .unwrap();
        std::fs::write(
            n.dir
                .path()
                .join("root/proc/driver/cambricon/mlus/0000:4f:00.0/smlu"),
            "smlu_support:0 smlu_enable:0\n",
        )
        .unwrap();
        let e = n.smlu.reserve(&request("a", 50, 8192)).unwrap_err();
        assert!(
            e.contains("cannot be sliced: the driver reports no sMLU support for it"),
            "{e}"
        );
    }

    #[test]
    fn a_failed_step_undoes_what_the_earlier_ones_made() {
        // The instance is refused: the profile made for it goes.
        let n = node(true);
        n.edit(|s| s.cards[0].refuse_instances = true);
        let e = n.smlu.reserve(&request("a", 25, 4096)).unwrap_err();
        assert_eq!(
            e,
            "card 0000:4f:00.0: create smlu instance: cnmon says: Out of resources when creating mlu instance."
        );
        assert_eq!(n.profiles(), [0], "the fresh profile was destroyed");
        assert!(n.instances().is_empty());
        // The instance has no device node: instance and profile go.
        let n = node(true);
        let blind = Smlu::new(
            Arc::new(NoCaps(FsHost::new(n.dir.path().join("root")))),
            Arc::from(smlu_replay::wrap(
                n.dir.path(),
                Box::new(RecordedCommands::load(n.dir.path()).unwrap()),
            )),
            n.dir.path().join("pods"),
            [(BDF.to_string(), 0)],
        );
        let e = blind.reserve(&request("a", 25, 4096)).unwrap_err();
        assert_eq!(
            e,
            "card 0000:4f:00.0: sMLU instance cap_dev0_mi1 has no device node /dev/cambricon-caps/cap_dev0_mi1"
        );
        assert!(
            n.instances().is_empty() && n.profiles() == [0],
            "{:?}",
            n.state()
        );
        // The marker cannot be written: instance and profile go.
        let n = node(true);
        std::fs::create_dir_all(n.dir.path().join("pods")).unwrap();
        std::fs::write(n.dir.path().join("pods/a"), "not a directory").unwrap();
        let e = n.smlu.reserve(&request("a", 25, 4096)).unwrap_err();
        assert!(e.starts_with("write marker "), "{e}");
        assert!(n.instances().is_empty() && n.profiles() == [0]);
        // A quota outside 1-100 is refused before anything runs.
        let n = node(false);
        assert!(n.smlu.reserve(&request("a", 0, 4096)).is_err());
        assert_eq!(n.state().writes, 0);
    }

    /// A host whose `/dev/cambricon-caps` shows no node.
    struct NoCaps(FsHost);

    impl Host for NoCaps {
        fn root(&self) -> &Path {
            self.0.root()
        }
        fn read(&self, path: &str) -> Result<Vec<u8>, accel_host::HostError> {
            self.0.read(path)
        }
        fn list(&self, path: &str) -> Result<Vec<String>, accel_host::HostError> {
            self.0.list(path)
        }
        fn read_link(&self, path: &str) -> Result<PathBuf, accel_host::HostError> {
            self.0.read_link(path)
        }
        fn exists(&self, path: &str) -> bool {
            !path.starts_with(CAPS_DIR) && self.0.exists(path)
        }
    }

    /// A host whose listing of the card stays what it read first, whatever cnmon changes.
    struct FrozenListing {
        host: FsHost,
        listing: Vec<u8>,
    }

    impl FrozenListing {
        fn of(n: &Node) -> Arc<dyn Host> {
            let host = FsHost::new(n.dir.path().join("root"));
            let listing = host.read(&procfs::path(BDF)).unwrap();
            Arc::new(FrozenListing { host, listing })
        }
    }

    impl Host for FrozenListing {
        fn root(&self) -> &Path {
            self.host.root()
        }
        fn read(&self, path: &str) -> Result<Vec<u8>, accel_host::HostError> {
            if path == procfs::path(BDF) {
                return Ok(self.listing.clone());
            }
            self.host.read(path)
        }
        fn list(&self, path: &str) -> Result<Vec<String>, accel_host::HostError> {
            self.host.list(path)
        }
        fn read_link(&self, path: &str) -> Result<PathBuf, accel_host::HostError> {
            self.host.read_link(path)
        }
        fn exists(&self, path: &str) -> bool {
            self.host.exists(path)
        }
    }

    fn with_host(n: &Node, host: Arc<dyn Host>) -> Smlu {
        Smlu::new(
            host,
            Arc::from(smlu_replay::wrap(
                n.dir.path(),
                Box::new(RecordedCommands::load(n.dir.path()).unwrap()),
            )),
            n.dir.path().join("pods"),
            [(BDF.to_string(), 0)],
        )
    }

    #[test]
    fn the_drivers_listing_not_cnmon_says_what_exists() {
        // cnmon answers that the mode is ON, the listing still reads it off: refused, and
        // nothing is made on its word.
        let n = node(false);
        let e = with_host(&n, FrozenListing::of(&n))
            .reserve(&request("a", 25, 4096))
            .unwrap_err();
        assert_eq!(
            e,
            "card 0000:4f:00.0 (device index 0): enable sMLU mode: cnmon answered ON, but the driver's listing still reads smlu_enable:0; to enable it on the host for the card at this PCI address run `cnmon set -c 0 -S 1`, confirming the ordinal with `cnmon`"
        );
        assert_eq!(n.state().writes, 1, "the mode write only");
        assert!(n.instances().is_empty() && n.profiles() == [0]);
        // cnmon says it created the instance, the listing does not show it: undone, refused.
        let n = node(true);
        let e = with_host(&n, FrozenListing::of(&n))
            .reserve(&request("a", 25, 4096))
            .unwrap_err();
        assert_eq!(
            e,
            "card 0000:4f:00.0: cnmon created sMLU instance 1, but the driver's listing does not show it"
        );
        assert!(
            n.instances().is_empty(),
            "the instance cnmon made was destroyed"
        );
        assert_eq!(n.profiles(), [0], "then the profile made for it");
        assert!(!n.smlu.marker_path("a", "main").unwrap().exists());
        // An instance the listing no longer shows (destroyed by hand) is not destroyed again:
        // its gone Pod's marker goes at the third pass.
        let n = node(true);
        n.smlu.reserve(&request("a", 25, 4096)).unwrap();
        n.edit(|s| s.instances.clear());
        let writes = n.state().writes;
        let none = BTreeSet::new();
        n.smlu.reclaim_pass(&none);
        n.smlu.reclaim_pass(&none);
        let done = n.smlu.reclaim_pass(&none);
        assert!(
            done.destroyed.is_empty() && done.errors.is_empty(),
            "{done:?}"
        );
        assert_eq!(done.markers, [n.smlu.marker_path("a", "main").unwrap()]);
        assert_eq!(
            done.profiles,
            [(BDF.to_string(), 1)],
            "its unused profile goes"
        );
        assert_eq!(
            n.state().writes,
            writes + 1,
            "the profile's destruction only"
        );
    }

    #[test]
    fn a_missing_instance_fails_its_retry_closed() {
        let n = node(true);
        n.smlu.reserve(&request("a", 25, 4096)).unwrap();
        n.edit(|s| s.instances.clear());
        let e = n.smlu.reserve(&request("a", 25, 4096)).unwrap_err();
        assert!(
            e.ends_with("references missing instance \"cap_dev0_mi1\": fail closed"),
            "{e}"
        );
    }

    #[test]
    fn a_pod_gone_three_passes_loses_its_instance_then_the_profile_nobody_uses() {
        let n = node(true);
        n.smlu.reserve(&request("a", 25, 4096)).unwrap();
        n.smlu.reserve(&request("b", 25, 4096)).unwrap();
        n.smlu.reserve(&request("c", 50, 8192)).unwrap();
        let live = BTreeSet::from(["b".to_string(), "c".to_string()]);
        assert_eq!(n.smlu.reclaim_pass(&live), Reclaimed::default());
        assert_eq!(n.smlu.reclaim_pass(&live), Reclaimed::default());
        let done = n.smlu.reclaim_pass(&live);
        assert_eq!(
            done.destroyed,
            [(BDF.to_string(), "cap_dev0_mi1".to_string())]
        );
        assert!(done.profiles.is_empty(), "b still uses profile 1");
        assert_eq!(done.markers, [n.smlu.marker_path("a", "main").unwrap()]);
        assert!(
            !n.dir.path().join("pods/a").exists(),
            "its empty dirs go too"
        );
        assert_eq!(n.instances(), [(2, 1), (3, 2)]);
        // c is gone, but a container is still bound to its instance: kept, retried.
        n.edit(|s| s.instances.iter_mut().for_each(|i| i.bound = i.id == 3));
        let live = BTreeSet::from(["b".to_string()]);
        n.smlu.reclaim_pass(&live);
        n.smlu.reclaim_pass(&live);
        let done = n.smlu.reclaim_pass(&live);
        assert!(done.destroyed.is_empty());
        assert_eq!(
            done.errors,
            ["card 0000:4f:00.0: sMLU instance cap_dev0_mi3 is still bound to a container; kept"]
        );
        assert!(n.smlu.marker_path("c", "main").unwrap().exists());
        n.edit(|s| s.instances.iter_mut().for_each(|i| i.bound = false));
        let done = n.smlu.reclaim_pass(&live);
        assert_eq!(
            done.destroyed,
            [(BDF.to_string(), "cap_dev0_mi3".to_string())]
        );
        assert_eq!(
            done.profiles,
            [(BDF.to_string(), 2)],
            "its own profile, unused now"
        );
        // b goes: its instance, then profile 1, which a's marker made; the driver's stays.
        let none = BTreeSet::new();
        for _ in 0..2 {
            n.smlu.reclaim_pass(&none);
        }
        let done = n.smlu.reclaim_pass(&none);
        assert_eq!(done.profiles, [(BDF.to_string(), 1)]);
        assert!(n.instances().is_empty());
        assert_eq!(n.profiles(), [0]);
        // A Pod seen again restarts its count.
        n.smlu.reserve(&request("d", 25, 4096)).unwrap();
        let d = BTreeSet::from(["d".to_string()]);
        n.smlu.reclaim_pass(&none);
        n.smlu.reclaim_pass(&d);
        n.smlu.reclaim_pass(&none);
        assert!(
            n.smlu.reclaim_pass(&none).destroyed.is_empty(),
            "two in a row only"
        );
        assert_eq!(n.smlu.reclaim_pass(&none).destroyed.len(), 1);
    }

    #[test]
    fn instances_no_marker_names_are_never_touched_and_the_survey_names_every_owner() {
        let n = node(true);
        n.smlu.reserve(&request("a", 25, 4096)).unwrap();
        // One made by hand (no marker), of a profile made by hand too.
        n.edit(|s| {
            s.profiles.push(StateProfile {
                card: 0,
                id: 7,
                quota: 10,
                memory_mib: 1024,
                capacity: 4,
            });
            s.instances.push(smlu_replay::StateInstance {
                card: 0,
                id: 9,
                profile: 7,
                bound: false,
            });
        });
        let survey = n.smlu.survey();
        assert_eq!(
            survey.owned,
            [(BDF.to_string(), "cap_dev0_mi1".to_string(), "a".to_string())]
        );
        assert_eq!(
            survey.foreign,
            [ForeignInstance {
                card: BDF.to_string(),
                instance: "cap_dev0_mi9".to_string(),
                destroy: "cnmon smlu -c 0 -D 9".to_string(),
            }]
        );
        assert!(survey.missing.is_empty() && survey.errors.is_empty());
        let none = BTreeSet::new();
        for _ in 0..5 {
            n.smlu.reclaim_pass(&none);
        }
        assert_eq!(n.instances(), [(9, 7)], "the hand-made one stays");
        assert_eq!(n.profiles(), [0, 7]);
        // A marker whose instance is gone is reported missing.
        n.smlu.reserve(&request("b", 25, 4096)).unwrap();
        n.edit(|s| s.instances.retain(|i| i.id != 1));
        let survey = n.smlu.survey();
        assert_eq!(survey.missing.len(), 1, "{survey:?}");
    }

    #[test]
    fn a_simulation_reads_the_listing_and_runs_nothing() {
        let n = node(false);
        let host: Arc<dyn Host> = Arc::new(FsHost::new(n.dir.path().join("root")));
        let sim = Smlu::simulated(host, n.dir.path().join("sim"), [(BDF.to_string(), 0)]);
        let got = sim.reserve(&request("p", 25, 4096)).unwrap();
        assert_eq!(got.node, None);
        assert_eq!(n.state().writes, 0, "nothing written");
        assert_eq!(
            sim.simulated_calls().len(),
            2,
            "{:?}",
            sim.simulated_calls()
        );
        assert!(!sim.holds("p"), "no marker for what was not made");
        assert_eq!(sim.reclaim_pass(&BTreeSet::new()), Reclaimed::default());
    }
}
