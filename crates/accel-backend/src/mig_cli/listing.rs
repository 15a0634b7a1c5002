//! Readers of the MIG listings in the `nvidia-smi mig` dialect: GPU instance profiles
//! (`-lgip`), their placements (`-lgipp`), GPU instances (`-lgi`) and compute instances
//! (`-lci`). NVIDIA's `nvidia-smi` prints them, and so does T-Head's `ppu-smi`, a fork of it
//! that says `PPU` where nvidia-smi says `GPU` (`PPU 1 profile ID 0 placements: {0,1}:1`, a `CU`
//! column where nvidia-smi has `SM`), and Hygon's `hy-smi mig`, which mirrors nvidia-smi's flag
//! for flag (its device word taken to be `DCU` or `HCU`); every spelling reads the same.
//!
//! The listings are box-drawn tables whose column widths change between driver branches (54 to
//! 81 columns, with or without a Placement column), so rows are read by their whitespace-separated
//! words, never by position. A `-lgip` profile takes two lines. Outputs of other `mig` commands or
//! errors hold no table and read as an error naming the first line, or as an empty list when
//! the tool says there is nothing ("No GPU instances found"). Nothing here runs a tool.

use serde::Serialize;

use crate::text::present;

/// Why a text is not the listing asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MigError {
    /// The text holds no such listing (another command's output, or an error).
    #[error("the mig output holds no {what} listing: first line {first_line:?}")]
    NoListing {
        what: &'static str,
        first_line: String,
    },
}

/// One GPU instance profile (`-lgip`, two table lines).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuInstanceProfile {
    pub gpu: u32,
    /// The profile name without the `MIG ` prefix (`1g.12gb+me`).
    pub name: String,
    pub id: u32,
    pub instances_free: Option<u32>,
    pub instances_total: Option<u32>,
    /// The memory column as printed (`46.50`), in [`Self::memory_unit`].
    pub memory: Option<String>,
    /// The memory column's unit from the header (`GiB`; `MiB` on some drivers).
    pub memory_unit: Option<String>,
    pub p2p: Option<bool>,
    pub multiprocessors: Option<u32>,
    pub decoders: Option<u32>,
    pub encoders: Option<u32>,
    pub copy_engines: Option<u32>,
    pub jpeg_decoders: Option<u32>,
    pub optical_flow: Option<u32>,
}

impl GpuInstanceProfile {
    /// The memory in MiB, converted from the printed figure and unit (`23.50 GiB` → 24064).
    pub fn memory_mib(&self) -> Option<u64> {
        let value: f64 = self.memory.as_deref()?.parse().ok()?;
        let mib = match self.memory_unit.as_deref()? {
            "GiB" => value * 1024.0,
            "MiB" => value,
            _ => return None,
        };
        (mib.is_finite() && mib >= 0.0).then(|| mib.round() as u64)
    }
}

/// Where instances of one profile may start (`-lgipp`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfilePlacements {
    pub gpu: u32,
    pub profile_id: u32,
    /// Allowed start slots.
    pub starts: Vec<u32>,
    /// Slots one instance takes.
    pub size: u32,
}

/// A placement `start:size` in memory slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Placement {
    pub start: u32,
    pub size: u32,
}

/// One GPU instance (`-lgi`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuInstance {
    pub gpu: u32,
    pub name: String,
    pub profile_id: u32,
    pub instance_id: u32,
    pub placement: Option<Placement>,
}

/// One compute instance (`-lci`); old drivers print no placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ComputeInstance {
    pub gpu: u32,
    pub gpu_instance_id: u32,
    pub name: String,
    pub profile_id: u32,
    pub instance_id: u32,
    pub placement: Option<Placement>,
}

/// One listing's rows as `parse` reads them, and why none were read where the text did not
/// parse; a listing that was never read (`None`: the call failed, which its caller noted) is no
/// rows and no reason.
pub fn rows_or_reason<T, E: std::fmt::Display>(
    text: Option<&str>,
    parse: fn(&str) -> Result<Vec<T>, E>,
) -> (Vec<T>, Option<String>) {
    match text.map(parse) {
        Some(Ok(rows)) => (rows, None),
        Some(Err(e)) => (Vec::new(), Some(e.to_string())),
        None => (Vec::new(), None),
    }
}

/// `offered` with every profile name that appears twice with differing figures taken out
/// (neither reading can be trusted), exact repeats kept once; and the names taken out, in the
/// order they first appear.
pub fn without_duplicates(
    offered: Vec<accel_core::inventory::PartitionProfile>,
) -> (Vec<accel_core::inventory::PartitionProfile>, Vec<String>) {
    let mut doubled: Vec<String> = Vec::new();
    for (i, p) in offered.iter().enumerate() {
        let differs = offered[..i].iter().any(|q| q.name == p.name && q != p);
        if differs && !doubled.contains(&p.name) {
            doubled.push(p.name.clone());
        }
    }
    let mut kept: Vec<accel_core::inventory::PartitionProfile> = Vec::new();
    for p in offered {
        if !doubled.contains(&p.name) && !kept.contains(&p) {
            kept.push(p);
        }
    }
    (kept, doubled)
}

/// A profile the cards of one group do not agree on, withheld from every card of the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    /// The group's product name (`None`: the cards name none).
    pub product: Option<String>,
    /// The group's memory in MiB.
    pub memory_mib: Option<u64>,
    /// The profile, in the inventory's spelling.
    pub profile: String,
}

/// What the cards of a group must agree on about a profile: its id, memory, instances,
/// compute units and placements (the free count is each card's own).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shape {
    id: u32,
    memory_mib: Option<u64>,
    instances_total: Option<u32>,
    multiprocessors: Option<u32>,
    placements: Vec<(u32, u32)>,
}

impl Shape {
    fn of(p: &accel_core::inventory::PartitionProfile) -> Shape {
        Shape {
            id: p.id,
            memory_mib: p.memory_mib,
            instances_total: p.instances_total,
            multiprocessors: p.multiprocessors,
            placements: p.placements.iter().map(|x| (x.start, x.size)).collect(),
        }
    }
}

/// The cards of one group must agree on every profile they offer (hygon.md §6.1, thead.md
/// §1.2 step 12): both specs group cards by product name and memory, and a profile one card of
/// a group lists differently from another (or not at all) is withheld from every card of the
/// group, and answered as a [`Disagreement`] for the caller to word. Only cards in MIG mode
/// offered at least one profile take part: a card offered none has its own note saying why.
/// Groups and profiles come out in name order.
pub fn withhold_disagreements(
    accelerators: &mut [accel_core::inventory::Accelerator],
) -> Vec<Disagreement> {
    use accel_core::inventory::{Accelerator, MigMode};
    let key = |a: &Accelerator| (a.product.clone(), a.memory_mib);
    let mut groups: Vec<(Option<String>, Option<u64>)> = accelerators.iter().map(key).collect();
    groups.sort();
    groups.dedup();
    let mut withheld = Vec::new();
    for group in groups {
        let members: Vec<usize> = accelerators
            .iter()
            .enumerate()
            .filter(|(_, a)| {
                key(a) == group
                    && a.mig_mode == Some(MigMode::Enabled)
                    && !a.partition_profiles.is_empty()
            })
            .map(|(i, _)| i)
            .collect();
        let mut names: Vec<String> = members
            .iter()
            .flat_map(|&i| accelerators[i].partition_profiles.iter())
            .map(|p| p.name.clone())
            .collect();
        names.sort();
        names.dedup();
        for name in names {
            let shapes: Vec<Option<Shape>> = members
                .iter()
                .map(|&i| {
                    accelerators[i]
                        .partition_profiles
                        .iter()
                        .find(|p| p.name == name)
                        .map(Shape::of)
                })
                .collect();
            if shapes.iter().all(|s| s.is_some() && *s == shapes[0]) {
                continue;
            }
            for &i in &members {
                accelerators[i]
                    .partition_profiles
                    .retain(|p| p.name != name);
            }
            withheld.push(Disagreement {
                product: group.0.clone(),
                memory_mib: group.1,
                profile: name,
            });
        }
    }
    withheld
}

/// The profiles device `row` of a `-lgip` reading offers, as the inventory records them, with
/// their placements from a `-lgipp` reading. A profile whose name (`name` turns the listed one
/// into the inventory's spelling) is no resource-name segment (`1g.10gb+me`, `4g48gb+gfx`) is
/// left out silently; one with no legal placement is left out with a line naming `who` and the
/// profile (a profile nothing can be placed for must not be offered). `program` names the tool.
pub fn offered(
    profiles: &[GpuInstanceProfile],
    placements: &[ProfilePlacements],
    row: u32,
    name: &dyn Fn(&str) -> String,
    who: &str,
    program: &str,
) -> (Vec<accel_core::inventory::PartitionProfile>, Vec<String>) {
    use accel_core::inventory::{PartitionPlacement, PartitionProfile};
    let mut offered = Vec::new();
    let mut notes = Vec::new();
    for profile in profiles.iter().filter(|p| p.gpu == row) {
        let published = name(&profile.name);
        if !accel_core::resources::is_profile_segment(&published) {
            continue;
        }
        let places: Vec<PartitionPlacement> = placements
            .iter()
            .filter(|p| p.gpu == row && p.profile_id == profile.id && p.size > 0)
            .flat_map(|p| {
                p.starts.iter().map(|start| PartitionPlacement {
                    start: *start,
                    size: p.size,
                })
            })
            .collect();
        if places.is_empty() {
            notes.push(format!(
                "{who}: MIG profile {published} (id {}) has no legal placement in {program} mig -lgipp, left out",
                profile.id
            ));
            continue;
        }
        offered.push(PartitionProfile {
            memory_mib: profile.memory_mib(),
            name: published,
            id: profile.id,
            instances_total: profile.instances_total,
            instances_free: profile.instances_free,
            multiprocessors: profile.multiprocessors,
            placements: places,
        });
    }
    (offered, notes)
}

/// Reads a `mig -lgip` listing.
pub fn parse_profiles(text: &str) -> Result<Vec<GpuInstanceProfile>, MigError> {
    let what = "GPU instance profiles";
    let Some(table) = table(text, "GPU instance profiles:") else {
        return nothing_or_error(text, what);
    };
    let unit = ["GiB", "MiB"]
        .into_iter()
        .find(|u| table.header.split_whitespace().any(|w| w == *u))
        .map(str::to_string);
    let mut profiles: Vec<GpuInstanceProfile> = Vec::new();
    for words in &table.rows {
        if words.get(1).map(String::as_str) == Some("MIG") {
            let Some(profile) = profile_row(words, unit.clone()) else {
                continue;
            };
            profiles.push(profile);
        } else if let Some(last) = profiles.last_mut() {
            // The second line of a profile: CE, JPEG, OFA.
            last.copy_engines = number(words.first());
            last.jpeg_decoders = number(words.get(1));
            last.optical_flow = number(words.get(2));
        }
    }
    Ok(profiles)
}

fn profile_row(words: &[String], memory_unit: Option<String>) -> Option<GpuInstanceProfile> {
    let (free, total) = match words.get(4).and_then(|w| w.split_once('/')) {
        Some((f, t)) => (f.parse().ok(), t.parse().ok()),
        None => (None, None),
    };
    Some(GpuInstanceProfile {
        gpu: number(words.first())?,
        name: words.get(2)?.clone(),
        id: number(words.get(3))?,
        instances_free: free,
        instances_total: total,
        memory: words.get(5).filter(|m| m.parse::<f64>().is_ok()).cloned(),
        memory_unit,
        p2p: words.get(6).and_then(|w| flag(w)),
        multiprocessors: number(words.get(7)),
        decoders: number(words.get(8)),
        encoders: number(words.get(9)),
        copy_engines: None,
        jpeg_decoders: None,
        optical_flow: None,
    })
}

/// The words a placement line names its device by: nvidia-smi's `GPU`, ppu-smi's `PPU`, and
/// hy-smi's `DCU` (`HCU` in the DTK releases that renamed the device; both unmeasured in a
/// `mig` listing).
pub const DEVICE_WORDS: [&str; 4] = ["GPU", "PPU", "DCU", "HCU"];

/// Reads a `mig -lgipp` listing: `GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1`
/// (nvidia-smi), `PPU 1 profile ID 0 placements: {0,1,2,3,4,5,6,7}:1` (ppu-smi).
pub fn parse_placements(text: &str) -> Result<Vec<ProfilePlacements>, MigError> {
    let placements: Vec<ProfilePlacements> = text.lines().filter_map(placement_line).collect();
    if placements.is_empty() {
        return nothing_or_error(text, "GPU instance profile placements");
    }
    Ok(placements)
}

fn placement_line(line: &str) -> Option<ProfilePlacements> {
    let line = line.trim();
    let rest = DEVICE_WORDS
        .iter()
        .find_map(|word| line.strip_prefix(word))?;
    let (gpu, rest) = split_word(rest, "profile id")?;
    let (profile_id, rest) = split_word(rest, "placement")?;
    let (_, rest) = rest.split_once(':')?;
    let rest = rest.trim();
    let (set, size) = rest.strip_prefix('{')?.split_once("}:")?;
    let starts = set
        .split(',')
        .map(|s| s.trim().parse().ok())
        .collect::<Option<Vec<u32>>>()?;
    Some(ProfilePlacements {
        gpu: gpu.trim().parse().ok()?,
        profile_id: profile_id.trim().parse().ok()?,
        starts,
        size: size.trim().parse().ok()?,
    })
}

/// Reads a `mig -lgi` listing. Rows keep the table's order, which is not instance-id order.
pub fn parse_gpu_instances(text: &str) -> Result<Vec<GpuInstance>, MigError> {
    let what = "GPU instances";
    let Some(table) = table(text, "GPU instances:") else {
        return nothing_or_error(text, what);
    };
    Ok(table
        .rows
        .iter()
        .filter_map(|w| {
            if w.get(1).map(String::as_str) != Some("MIG") {
                return None;
            }
            Some(GpuInstance {
                gpu: number(w.first())?,
                name: w.get(2)?.clone(),
                profile_id: number(w.get(3))?,
                instance_id: number(w.get(4))?,
                placement: w.get(5).and_then(|p| placement(p)),
            })
        })
        .collect())
}

/// Reads a `mig -lci` listing.
pub fn parse_compute_instances(text: &str) -> Result<Vec<ComputeInstance>, MigError> {
    let what = "compute instances";
    let Some(table) = table(text, "Compute instances:") else {
        return nothing_or_error(text, what);
    };
    Ok(table
        .rows
        .iter()
        .filter_map(|w| {
            if w.get(2).map(String::as_str) != Some("MIG") {
                return None;
            }
            Some(ComputeInstance {
                gpu: number(w.first())?,
                gpu_instance_id: number(w.get(1))?,
                name: w.get(3)?.clone(),
                profile_id: number(w.get(4))?,
                instance_id: number(w.get(5))?,
                placement: w.get(6).and_then(|p| placement(p)),
            })
        })
        .collect())
}

/// A box table: the header lines between the title and the `===` rule, then the words of each
/// row line (border lines left out).
struct Table {
    header: String,
    rows: Vec<Vec<String>>,
}

fn table(text: &str, title: &str) -> Option<Table> {
    let mut lines = text.lines().map(str::trim);
    lines
        .by_ref()
        .find(|l| inner(l).is_some_and(|i| i.starts_with(title)))?;
    let mut header = String::new();
    for line in lines.by_ref() {
        // nvidia-smi rules the header off with `|===|`, ppu-smi with `+===+`.
        if line.starts_with("|=") || line.starts_with("+=") {
            break;
        }
        header.push_str(inner(line).unwrap_or(""));
        header.push(' ');
    }
    let rows = lines
        .filter_map(inner)
        .map(|i| i.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .filter(|w| !w.is_empty())
        .collect();
    Some(Table { header, rows })
}

/// The text between a table line's `|` borders; `None` for rules and other lines.
fn inner(line: &str) -> Option<&str> {
    let inner = line.strip_prefix('|')?;
    Some(inner.strip_suffix('|').unwrap_or(inner).trim())
}

/// `text` split around the first case-insensitive occurrence of `word` (ASCII).
fn split_word<'a>(text: &'a str, word: &str) -> Option<(&'a str, &'a str)> {
    let at = text.to_ascii_lowercase().find(word)?;
    Some((&text[..at], &text[at + word.len()..]))
}

/// An enabled/disabled word (`Yes`, `No`, `Enabled` …); `None` for anything else.
fn flag(raw: &str) -> Option<bool> {
    match present(raw)?.to_ascii_lowercase().as_str() {
        "enabled" | "yes" | "on" | "true" => Some(true),
        "disabled" | "no" | "off" | "false" => Some(false),
        _ => None,
    }
}

fn number(word: Option<&String>) -> Option<u32> {
    word.and_then(|w| present(w)).and_then(|w| w.parse().ok())
}

fn placement(word: &str) -> Option<Placement> {
    let (start, size) = word.split_once(':')?;
    Some(Placement {
        start: start.parse().ok()?,
        size: size.parse().ok()?,
    })
}

/// No listing: an empty list when the tool said there is nothing, else an error.
fn nothing_or_error<T>(text: &str, what: &'static str) -> Result<Vec<T>, MigError> {
    let first_line = text.lines().map(str::trim).find(|l| !l.is_empty());
    match first_line {
        None => Ok(Vec::new()),
        Some(line) if line.starts_with("No ") && line.contains("found") => Ok(Vec::new()),
        Some(line) => Err(MigError::NoListing {
            what,
            first_line: line.chars().take(120).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LGIP: &str = "\
+-----------------------------------------------------------------------------+
| GPU instance profiles:                                                      |
| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                              Free/Total   GiB              CE    JPEG  OFA  |
|=============================================================================|
|   0  MIG 1g.12gb+me    20     1/1        11.00      No     16     1     0   |
|                                                             1     1     1   |
+-----------------------------------------------------------------------------+
|   0  MIG 4g.24gb        0     0/1        23.50      No     56     4     0   |
|                                                             4     1     1   |
+-----------------------------------------------------------------------------+
";

    fn mig_card(
        index: u32,
        memory_mib: u64,
        profiles: &[(&str, &[u32])],
    ) -> accel_core::inventory::Accelerator {
        use accel_core::inventory::{
            Accelerator, MigMode, PartitionPlacement, PartitionProfile, Source,
        };
        let mut a = Accelerator::new(index, Source::Driver);
        a.product = Some("PPU-ZW810E".into());
        a.memory_mib = Some(memory_mib);
        a.mig_mode = Some(MigMode::Enabled);
        a.partition_profiles = profiles
            .iter()
            .map(|(name, starts)| PartitionProfile {
                name: (*name).to_string(),
                id: 5,
                memory_mib: Some(49152),
                instances_total: Some(2),
                instances_free: Some(index + 1),
                multiprocessors: Some(32),
                placements: starts
                    .iter()
                    .map(|start| PartitionPlacement {
                        start: *start,
                        size: 4,
                    })
                    .collect(),
            })
            .collect();
        a
    }

    fn offered(a: &accel_core::inventory::Accelerator) -> Vec<&str> {
        a.partition_profiles
            .iter()
            .map(|p| p.name.as_str())
            .collect()
    }

    #[test]
    fn a_profile_the_cards_of_a_group_disagree_on_is_withheld_from_all_of_them() {
        let mut cards = vec![
            mig_card(0, 98304, &[("4g.48gb", &[0, 4]), ("8g.96gb", &[0])]),
            // Lists 4g.48gb at one placement only; the free count differs and does not matter.
            mig_card(1, 98304, &[("4g.48gb", &[0]), ("8g.96gb", &[0])]),
            // Another group (another memory) is not compared with the first.
            mig_card(2, 65536, &[("4g.48gb", &[4])]),
            // A card offered nothing takes no part, and one not in MIG mode neither.
            mig_card(3, 98304, &[]),
            {
                let mut whole = mig_card(4, 98304, &[("2g.24gb", &[0])]);
                whole.mig_mode = Some(accel_core::inventory::MigMode::Disabled);
                whole
            },
        ];
        let withheld = withhold_disagreements(&mut cards);
        assert_eq!(
            withheld,
            [Disagreement {
                product: Some("PPU-ZW810E".into()),
                memory_mib: Some(98304),
                profile: "4g.48gb".into(),
            }]
        );
        assert_eq!(offered(&cards[0]), ["8g.96gb"]);
        assert_eq!(offered(&cards[1]), ["8g.96gb"]);
        assert_eq!(offered(&cards[2]), ["4g.48gb"]);
        assert_eq!(offered(&cards[4]), ["2g.24gb"]);

        // A profile one card of the group does not list at all is withheld too.
        let mut cards = vec![
            mig_card(0, 98304, &[("4g.48gb", &[0, 4]), ("8g.96gb", &[0])]),
            mig_card(1, 98304, &[("8g.96gb", &[0])]),
        ];
        assert_eq!(withhold_disagreements(&mut cards).len(), 1);
        assert_eq!(offered(&cards[0]), ["8g.96gb"]);
        // Cards that agree keep everything.
        let mut cards = vec![
            mig_card(0, 98304, &[("4g.48gb", &[0, 4])]),
            mig_card(1, 98304, &[("4g.48gb", &[0, 4])]),
        ];
        assert!(withhold_disagreements(&mut cards).is_empty());
        assert_eq!(offered(&cards[1]), ["4g.48gb"]);
    }

    #[test]
    fn profiles_two_lines_each() {
        let profiles = parse_profiles(LGIP).unwrap();
        assert_eq!(profiles.len(), 2);
        let p = &profiles[0];
        assert_eq!((p.gpu, p.name.as_str(), p.id), (0, "1g.12gb+me", 20));
        assert_eq!((p.instances_free, p.instances_total), (Some(1), Some(1)));
        assert_eq!(p.memory.as_deref(), Some("11.00"));
        assert_eq!(p.memory_unit.as_deref(), Some("GiB"));
        assert_eq!(p.p2p, Some(false));
        assert_eq!(
            (p.multiprocessors, p.decoders, p.encoders),
            (Some(16), Some(1), Some(0))
        );
        assert_eq!(
            (p.copy_engines, p.jpeg_decoders, p.optical_flow),
            (Some(1), Some(1), Some(1))
        );
        assert_eq!(profiles[1].instances_free, Some(0));
        assert_eq!(profiles[1].memory_mib(), Some(24064));
    }

    #[test]
    fn placements() {
        let text = "GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1\nGPU  0 Profile ID  0 Placement : {0}:12\n";
        let p = parse_placements(text).unwrap();
        assert_eq!(p[0].starts, [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(
            (p[1].profile_id, p[1].starts.as_slice(), p[1].size),
            (0, &[0][..], 12)
        );
    }

    #[test]
    fn gpu_and_compute_instances() {
        let lgi = "+----+\n| GPU instances:  |\n| GPU   Name   Profile  Instance   Placement  |\n|   ID  ID  Start:Size |\n|=====|\n|   0  MIG 1g.24gb   14   5   6:3  |\n+---+\n|   0  MIG 2g.48gb    5   1   0:6  |\n+---+\n";
        let gis = parse_gpu_instances(lgi).unwrap();
        assert_eq!(gis.len(), 2);
        assert_eq!(
            (gis[0].instance_id, gis[0].placement),
            (5, Some(Placement { start: 6, size: 3 }))
        );
        assert_eq!(gis[1].name, "2g.48gb");
        let lci = "| Compute instances: |\n| GPU  GPU  Name  Profile  Instance |\n|  Instance  ID  ID |\n|  ID |\n|=====|\n|   0      1       MIG 1c.3g.20gb       0         2     |\n+--+\n";
        let cis = parse_compute_instances(lci).unwrap();
        assert_eq!(
            cis,
            vec![ComputeInstance {
                gpu: 0,
                gpu_instance_id: 1,
                name: "1c.3g.20gb".into(),
                profile_id: 0,
                instance_id: 2,
                placement: None,
            }]
        );
    }

    #[test]
    fn nothing_found_and_other_outputs() {
        assert_eq!(
            parse_gpu_instances("No GPU instances found: Not Found\n"),
            Ok(vec![])
        );
        assert_eq!(parse_profiles(""), Ok(vec![]));
        let err = parse_gpu_instances(
            "Unable to destroy GPU instance ID  3 from GPU  0: In use by another client\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("Unable to destroy"));
        assert!(
            parse_placements("Successfully destroyed GPU instance ID  1 from GPU  0\n").is_err()
        );
        assert!(parse_compute_instances(LGIP).is_err());
    }

    #[test]
    fn ppu_smi_spells_the_device_ppu_and_lowercases_the_placement_words() {
        let lgip = "\
+--------------------------------------------------------------------------+
| GPU instance profiles:                                                   |
| PPU  Name            Profile  Instances   Memory  P2P  CU      DEC   ENC |
|                        ID     Free/Total   GiB         CpyEng  JPEG  OFA |
+==========================================================================+
| 3    MIG 4g48gb         2        2/2      48.00   No   32      2     2   |
|                                                        2       2     0   |
+--------------------------------------------------------------------------+
";
        let profiles = parse_profiles(lgip).unwrap();
        assert_eq!(profiles.len(), 1);
        let p = &profiles[0];
        assert_eq!((p.gpu, p.name.as_str(), p.id), (3, "4g48gb", 2));
        assert_eq!((p.multiprocessors, p.copy_engines), (Some(32), Some(2)));
        assert_eq!(p.memory_mib(), Some(49152));
        let placements =
            parse_placements("PPU 3 profile ID 2 placements: {0,4}:4\nPPU 3 profile ID 0 placements: {0,1,2,3,4,5,6,7}:1\n")
                .unwrap();
        assert_eq!(
            (
                placements[0].gpu,
                placements[0].profile_id,
                placements[0].starts.as_slice(),
                placements[0].size
            ),
            (3, 2, &[0, 4][..], 4)
        );
        assert_eq!(placements[1].starts.len(), 8);
        let lgi = "| GPU instances:  |\n| PPU  Name  Profile  Instance  Placement |\n|  ID  ID  Start:Size |\n+=====+\n| 3    MIG 4g48gb   2   1   4:4  |\n+---+\n";
        let gis = parse_gpu_instances(lgi).unwrap();
        assert_eq!(
            (gis[0].gpu, gis[0].instance_id, gis[0].placement),
            (3, 1, Some(Placement { start: 4, size: 4 }))
        );
    }
}
