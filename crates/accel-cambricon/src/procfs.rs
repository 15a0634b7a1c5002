//! The driver's sMLU listing, `/proc/driver/cambricon/mlus/<bdf>/smlu` (spec/cambricon.md
//! addendum C4): whether the card supports and has sMLU mode on, and every sMLU instance that
//! exists on it — the truth the allocator and the reclaimer read, never cnmon's tables.
//!
//! Shape, as the 5.10.22 driver source prints it for a reader in the host's pid namespace (no
//! capture exists: **UNMEASURED**, so every line is read by its words, never by position):
//! `smlu_support:<0|1> smlu_enable:<0|1>`; per subsystem `subsys[<i>]:<name> total = <n>,
//! usage = <n>, overcommit factor = <n>`; after `------------instance info------------`, per
//! instance `--smlu cap node <maj>:<min>, cap_dev<card>_mi<inst>, profile_id:<p>,
//! instance_id:<i>` and its `----subsys[<i>]:<name> quota = <n>, …` lines; after
//! `------------namespace info------------`, per container namespace bound to an instance a line
//! `--smlu_cgroup:<ptr>, namespace:<ptr>, binded cap node <maj>:<min>, cap_dev…` (that instance is
//! in use), then process lists this module does not read.
//!
//! Read from a container's own pid namespace the file prints that namespace's binding instead
//! (`current_ns:<ptr> not bind any smlu_cgroup.`, HAZARDS.md item 16): that is no listing of the
//! card ([`SmluError::ContainerView`]: the daemon needs `hostPID`). A card without sMLU support
//! fails the read (EINVAL); a driver that predates sMLU has no such file. The directory is named
//! by the PCI address in **lower case** (cnmon prints it upper-case, item 13).
//!
//! Parsers are pure; [`read`] wraps [`parse`] with the host read.

use accel_host::Host;

/// Where the driver lists each card, by PCI address.
pub const MLUS_DIR: &str = "/proc/driver/cambricon/mlus";

/// The marker line before the instances.
const INSTANCE_SECTION: &str = "instance info";
/// The marker line before the bound namespaces.
const NAMESPACE_SECTION: &str = "namespace info";
/// The prefix of an instance's name, which is its device node's name under
/// `/dev/cambricon-caps/` (addendum C5).
pub const CAP_PREFIX: &str = "cap_dev";

/// The listing of the card at `bdf` (any case).
pub fn path(bdf: &str) -> String {
    format!("{MLUS_DIR}/{}/smlu", bdf.to_ascii_lowercase())
}

/// One subsystem's line (`mem` in bytes, `ipu` a percent-like quota: UNSURE).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subsystem {
    pub index: Option<u32>,
    pub name: String,
    /// `total` on the card, `quota` on an instance.
    pub amount: Option<u64>,
    pub usage: Option<u64>,
}

/// One sMLU instance the driver lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedInstance {
    /// The driver's name, `cap_dev<card>_mi<inst>`: its device node's name.
    pub name: String,
    /// The card ordinal the name carries.
    pub card: Option<u32>,
    pub instance_id: u32,
    pub profile_id: Option<u32>,
    /// The cap node's `(major, minor)`.
    pub cap_node: Option<(u32, u32)>,
    pub subsystems: Vec<Subsystem>,
}

impl ListedInstance {
    /// The instance's memory quota in MiB (`mem` quota, bytes).
    pub fn memory_mib(&self) -> Option<u64> {
        self.subsystem("mem").map(|b| b >> 20)
    }

    /// The instance's compute quota (`ipu` quota; its unit is UNSURE, read as a percent).
    pub fn compute_quota(&self) -> Option<u64> {
        self.subsystem("ipu")
    }

    fn subsystem(&self, name: &str) -> Option<u64> {
        self.subsystems
            .iter()
            .find(|s| s.name.eq_ignore_ascii_case(name))
            .and_then(|s| s.amount)
    }
}

/// What the driver says of one card.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SmluListing {
    /// `smlu_support`: the driver supports sMLU on this card.
    pub support: bool,
    /// `smlu_enable`: sMLU mode is on.
    pub enabled: bool,
    pub subsystems: Vec<Subsystem>,
    pub instances: Vec<ListedInstance>,
    /// The names of the instances a container namespace is bound to (in use).
    pub bound: Vec<String>,
}

impl SmluListing {
    /// The instance of id `id`.
    pub fn instance(&self, id: u32) -> Option<&ListedInstance> {
        self.instances.iter().find(|i| i.instance_id == id)
    }

    /// Whether a container namespace is bound to the instance named `name`.
    pub fn is_bound(&self, name: &str) -> bool {
        self.bound.iter().any(|b| b == name)
    }
}

/// Why a text is no listing of the card.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SmluError {
    /// No `smlu_support:` / `smlu_enable:` words.
    #[error("not the driver's smlu listing (first line: {first_line:?})")]
    NotListing { first_line: String },
    /// The file as a container's pid namespace sees it: its own binding, not the card's.
    #[error(
        "the smlu listing is a container's own view ({first_line:?}), not the card's: the daemon must run in the host's pid namespace (hostPID)"
    )]
    ContainerView { first_line: String },
}

/// Why the card's listing could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No file: the driver lists no sMLU state for the card (a driver that predates sMLU, or a
    /// card it does not list).
    #[error("{path}: not found")]
    Absent { path: String },
    /// The file exists and cannot be read (the driver answers EINVAL on a card without sMLU
    /// support).
    #[error("{path}: {reason}")]
    Unreadable { path: String, reason: String },
    /// It reads as no listing.
    #[error("{path}: {source}")]
    Parse {
        path: String,
        #[source]
        source: SmluError,
    },
}

/// Reads the listing of the card at `bdf`.
pub fn read(host: &dyn Host, bdf: &str) -> Result<SmluListing, ReadError> {
    let path = path(bdf);
    let text = host.read_to_string(&path).map_err(|e| {
        if e.is_not_found() {
            ReadError::Absent { path: path.clone() }
        } else {
            ReadError::Unreadable {
                path: path.clone(),
                reason: match e {
                    accel_host::HostError::Io { source, .. } => source.to_string(),
                    other => other.to_string(),
                },
            }
        }
    })?;
    parse(&text).map_err(|source| ReadError::Parse { path, source })
}

fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .chars()
        .take(80)
        .collect()
}

/// The value after `key` in `line` (`key` ends in `:` or ` =`), up to a comma or a blank.
fn value_after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(key)? + key.len();
    let rest = line[at..].trim_start();
    let end = rest
        .find(|c: char| c == ',' || c.is_whitespace())
        .unwrap_or(rest.len());
    Some(&rest[..end]).filter(|v| !v.is_empty())
}

fn number(line: &str, key: &str) -> Option<u64> {
    value_after(line, key)?.parse().ok()
}

/// `0`/`1` after `key`.
fn flag(text: &str, key: &str) -> Option<bool> {
    match value_after(text, key)? {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    }
}

/// A `subsys[<i>]:<name> total|quota = <n>, usage = <n>, …` line.
fn subsystem(line: &str) -> Option<Subsystem> {
    let at = line.find("subsys[")?;
    let rest = &line[at + "subsys[".len()..];
    let (index, rest) = rest.split_once(']')?;
    let rest = rest.strip_prefix(':').unwrap_or(rest);
    let name: String = rest
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != ',')
        .collect();
    if name.is_empty() {
        return None;
    }
    Some(Subsystem {
        index: index.trim().parse().ok(),
        name,
        amount: number(line, "total =").or_else(|| number(line, "quota =")),
        usage: number(line, "usage ="),
    })
}

/// The `cap_dev<card>_mi<inst>` word of a line, and the card it names.
fn cap_name(line: &str) -> Option<(String, Option<u32>, Option<u32>)> {
    let word = line
        .split(|c: char| c == ',' || c.is_whitespace())
        .find(|w| w.starts_with(CAP_PREFIX))?;
    let (card, instance) = word[CAP_PREFIX.len()..].split_once("_mi")?;
    Some((word.to_string(), card.parse().ok(), instance.parse().ok()))
}

/// A `--smlu cap node <maj>:<min>, cap_dev…, profile_id:<p>, instance_id:<i>` line.
fn instance_line(line: &str) -> Option<ListedInstance> {
    let (name, card, from_name) = cap_name(line)?;
    let instance_id = number(line, "instance_id:")
        .and_then(|n| u32::try_from(n).ok())
        .or(from_name)?;
    let cap_node = value_after(line, "cap node").and_then(|v| {
        let (major, minor) = v.split_once(':')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    });
    Some(ListedInstance {
        name,
        card,
        instance_id,
        profile_id: number(line, "profile_id:").and_then(|n| u32::try_from(n).ok()),
        cap_node,
        subsystems: Vec::new(),
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Section {
    Card,
    Instances,
    Namespaces,
}

/// Reads a listing. `Err` only for a text that is not one (no `smlu_support:`/`smlu_enable:`
/// words), naming a container's own view apart.
pub fn parse(text: &str) -> Result<SmluListing, SmluError> {
    let (Some(support), Some(enabled)) = (flag(text, "smlu_support:"), flag(text, "smlu_enable:"))
    else {
        let first_line = first_line(text);
        if text.contains("current_ns:") || text.contains("smlu_cgroup") {
            return Err(SmluError::ContainerView { first_line });
        }
        return Err(SmluError::NotListing { first_line });
    };
    let mut listing = SmluListing {
        support,
        enabled,
        ..SmluListing::default()
    };
    let mut section = Section::Card;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("---") && trimmed.contains(INSTANCE_SECTION) {
            section = Section::Instances;
            continue;
        }
        if trimmed.starts_with("---") && trimmed.contains(NAMESPACE_SECTION) {
            section = Section::Namespaces;
            continue;
        }
        match section {
            Section::Card => {
                if let Some(s) = subsystem(trimmed) {
                    listing.subsystems.push(s);
                }
            }
            Section::Instances => {
                if trimmed.contains("cap node") {
                    if let Some(instance) = instance_line(trimmed) {
                        listing.instances.push(instance);
                    }
                } else if let (Some(s), Some(last)) =
                    (subsystem(trimmed), listing.instances.last_mut())
                {
                    last.subsystems.push(s);
                }
            }
            Section::Namespaces => {
                if trimmed.contains("binded cap node")
                    && let Some((name, _, _)) = cap_name(trimmed)
                    && !listing.bound.contains(&name)
                {
                    listing.bound.push(name);
                }
            }
        }
    }
    Ok(listing)
}

/// A listing as the 5.10.22 driver prints it (for the recorded host's replay, and tests): the
/// card's flags and subsystems, each instance with its `mem` (bytes) and `ipu` quotas, and one
/// namespace line per bound instance.
pub fn render(listing: &SmluListing) -> String {
    let mut out = format!(
        "smlu_support:{} smlu_enable:{}\n",
        u8::from(listing.support),
        u8::from(listing.enabled)
    );
    let line = |s: &Subsystem, word: &str| {
        format!(
            "subsys[{}]:{} {word} = {}, usage = {}, overcommit factor = 0\n",
            s.index.unwrap_or(0),
            s.name,
            s.amount.unwrap_or(0),
            s.usage.unwrap_or(0)
        )
    };
    for s in &listing.subsystems {
        out.push_str(&line(s, "total"));
        out.push('\n');
    }
    out.push_str("------------instance info------------\n");
    for i in &listing.instances {
        let (major, minor) = i.cap_node.unwrap_or((0, 0));
        out.push_str(&format!(
            "--smlu cap node {major}:{minor}, {}, profile_id:{}, instance_id:{}\n",
            i.name,
            i.profile_id.unwrap_or(0),
            i.instance_id
        ));
        for s in &i.subsystems {
            out.push_str("----");
            out.push_str(&line(s, "quota"));
        }
        out.push('\n');
    }
    out.push('\n');
    out.push_str("------------namespace info------------\n");
    for name in &listing.bound {
        let node = listing
            .instances
            .iter()
            .find(|i| &i.name == name)
            .and_then(|i| i.cap_node)
            .unwrap_or((0, 0));
        out.push_str(&format!(
            "--smlu_cgroup:0000000000000000, namespace:0000000000000000, binded cap node {}:{}, {name}\n",
            node.0, node.1
        ));
        out.push_str("mm:\n\ttgid:4242 active_pid:4242 comm:python3, mem used:0\n");
        out.push_str("namespace ipu_util:0\n");
    }
    out.push_str("ipu_chip_util:0\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host form, built from the driver's printf formats (addendum C4).
    const HOST_FORM: &str = "smlu_support:1 smlu_enable:1\n\
subsys[0]:mem total = 24440012800, usage = 4294967296, overcommit factor = 0\n\
\n\
subsys[1]:ipu total = 100, usage = 25, overcommit factor = 0\n\
\n\
------------instance info------------\n\
--smlu cap node 234:1, cap_dev0_mi1, profile_id:3, instance_id:1\n\
----subsys[0]:mem quota = 4294967296, usage = 0, overcommit factor = 0\n\
----subsys[1]:ipu quota = 25, usage = 0, overcommit factor = 0\n\
\n\
--smlu cap node 234:2, cap_dev0_mi2, profile_id:3, instance_id:2\n\
----subsys[0]:mem quota = 4294967296, usage = 0, overcommit factor = 0\n\
----subsys[1]:ipu quota = 25, usage = 0, overcommit factor = 0\n\
\n\
\n\
------------namespace info------------\n\
--smlu_cgroup:0000000000000000, namespace:0000000000000000, binded cap node 234:2, cap_dev0_mi2\n\
mm:\n\
\ttgid:100 active_pid:100 comm:python3, mem used:1024\n\
vmm:\n\
mlu:\n\
\ttgid:100 active_pid:100 comm:python3, mlu used:3\n\
namespace ipu_util:3\n\
ipu_chip_util:3\n";

    #[test]
    fn the_host_form_gives_the_flags_the_instances_and_which_are_bound() {
        let l = parse(HOST_FORM).unwrap();
        assert!(l.support && l.enabled);
        assert_eq!(l.subsystems.len(), 2);
        assert_eq!(l.subsystems[0].amount, Some(24_440_012_800));
        assert_eq!(l.instances.len(), 2);
        let one = l.instance(1).unwrap();
        assert_eq!(one.name, "cap_dev0_mi1");
        assert_eq!(one.card, Some(0));
        assert_eq!(one.profile_id, Some(3));
        assert_eq!(one.cap_node, Some((234, 1)));
        assert_eq!(one.memory_mib(), Some(4096));
        assert_eq!(one.compute_quota(), Some(25));
        assert_eq!(l.bound, ["cap_dev0_mi2"]);
        assert!(l.is_bound("cap_dev0_mi2") && !l.is_bound("cap_dev0_mi1"));
    }

    #[test]
    fn a_card_with_the_mode_off_lists_nothing() {
        let l = parse("smlu_support:1 smlu_enable:0\n------------instance info------------\n\n\n------------namespace info------------\nipu_chip_util:0\n").unwrap();
        assert!(l.support && !l.enabled);
        assert!(l.instances.is_empty() && l.bound.is_empty());
    }

    #[test]
    fn a_containers_view_and_other_text_are_no_listing() {
        assert!(matches!(
            parse("current_ns:0000000000000000 not bind any smlu_cgroup.\n"),
            Err(SmluError::ContainerView { .. })
        ));
        assert!(matches!(parse(""), Err(SmluError::NotListing { .. })));
        assert!(matches!(
            parse("smlu_support:yes smlu_enable:1"),
            Err(SmluError::NotListing { .. })
        ));
    }

    #[test]
    fn render_reads_back_as_it_was_made() {
        let l = parse(HOST_FORM).unwrap();
        assert_eq!(parse(&render(&l)).unwrap(), l);
    }

    #[test]
    fn the_path_is_the_lower_case_address() {
        assert_eq!(
            path("0000:4F:00.0"),
            "/proc/driver/cambricon/mlus/0000:4f:00.0/smlu"
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics(text in ".{0,400}") {
            let _ = parse(&text);
        }
    }
}
