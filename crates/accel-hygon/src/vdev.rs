//! Hygon's logical slices: one `vdev.conf` per container (spec §5.2), which the DTK/hyhal user
//! space reads to enforce a CU mask and a VRAM cap — no preload library, no environment. The
//! files under the pods directory **are** the slot ledger (level-based, so it survives a
//! restart with nothing kept in memory): CU bits and pipe ids are per card (same `PciBusId`),
//! vdev ids node-wide; any record that cannot be read fails the allocation, naming its path.
//!
//! [`render`] and [`parse`] are the format, byte for byte; [`allocate`] is the ledger walk and
//! the choice (the `n` lowest free CUs, the lowest free vdev id below [`VDEV_IDS`], the lowest
//! free pipe id below [`PIPE_IDS`]), written atomically. The caller holds one node-wide lock
//! across [`allocate`] (two slices must not read the same free bits).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use accel_core::busid::BusId;

/// Where a sliced container sees its `vdev<i>.conf`.
pub const CONTAINER_DIR: &str = "/etc/vdev/docker";
/// The directory under a container's working directory that holds it (mounted read-only).
pub const HOST_SUBDIR: &str = "etc/vdev/docker";
/// The most CUs two 64-bit masks can name.
pub const MAX_CUS: u32 = 128;
/// vdev ids are `0..VDEV_IDS`, node-wide.
pub const VDEV_IDS: u32 = 200;
/// pipe ids are `0..PIPE_IDS`, per card.
pub const PIPE_IDS: u32 = 20;
/// The file's mode (containers read it as any user).
pub const FILE_MODE: u32 = 0o644;
/// The directory's mode.
pub const DIR_MODE: u32 = 0o777;

/// The file name of position `i`.
pub fn file_name(position: u32) -> String {
    format!("vdev{position}.conf")
}

/// Whether a file name is a ledger record (`vdev<anything>.conf`; temporary files start with a
/// dot and are not).
pub fn is_record_name(name: &str) -> bool {
    name.starts_with("vdev") && name.ends_with(".conf")
}

/// One `vdev.conf` record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VdevConf {
    pub pci_bus_id: BusId,
    /// Bit `k` is CU `k` (the first `cu_mask` line CUs 0–63, the second 64–127).
    pub cu_mask: u128,
    pub cu_count: u32,
    /// Informational.
    pub mem_mib: Option<u64>,
    /// Informational (its meaning is not established on hardware, spec §5.2).
    pub device_id: Option<u32>,
    pub vdev_id: u32,
    pub pipe_id: u32,
}

/// The record as the file holds it, one key a line (spec §5.2).
pub fn render(conf: &VdevConf) -> String {
    let lo = u64::try_from(conf.cu_mask & u128::from(u64::MAX)).unwrap_or(u64::MAX);
    let hi = u64::try_from(conf.cu_mask >> 64).unwrap_or(u64::MAX);
    format!(
        "PciBusId: {}\ncu_mask: 0x{lo:016x}\ncu_mask: 0x{hi:016x}\ncu_count: {}\nmem: {} MiB\ndevice_id: {}\nvdev_id: {}\npipe_id: {}\nenable: 1\n",
        conf.pci_bus_id.sysfs(),
        conf.cu_mask.count_ones(),
        conf.mem_mib.unwrap_or(0),
        conf.device_id.unwrap_or(0),
        conf.vdev_id,
        conf.pipe_id,
    )
}

/// Why a record does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VdevError {
    #[error("line {line} is not `key: value`")]
    NotKeyValue { line: usize },
    #[error("key {0} is missing")]
    Missing(&'static str),
    #[error("key {0} appears twice")]
    Duplicate(String),
    #[error("{count} cu_mask lines, not two")]
    MaskLines { count: usize },
    #[error("{key}: {value:?} is not a valid value")]
    BadValue { key: String, value: String },
    #[error("{key} {value} is out of range (0..{limit})")]
    OutOfRange {
        key: &'static str,
        value: u32,
        limit: u32,
    },
}

fn number(key: &str, value: &str) -> Result<u32, VdevError> {
    value.trim().parse().map_err(|_| VdevError::BadValue {
        key: key.into(),
        value: value.into(),
    })
}

fn mask_word(value: &str) -> Result<u64, VdevError> {
    let t = value.trim();
    let digits = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    u64::from_str_radix(digits, 16).map_err(|_| VdevError::BadValue {
        key: "cu_mask".into(),
        value: value.into(),
    })
}

/// Reads a record: `PciBusId`, exactly two `cu_mask`, `cu_count`, `vdev_id` and `pipe_id` are
/// required; `mem` and `device_id` are informational; a key other than `cu_mask` twice, or an id
/// out of range, is refused. Blank lines and unknown keys are skipped.
pub fn parse(text: &str) -> Result<VdevConf, VdevError> {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut masks: Vec<u64> = Vec::new();
    let mut bus = None;
    let (mut cu_count, mut vdev_id, mut pipe_id) = (None, None, None);
    let (mut mem, mut device_id) = (None, None);
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_matches(|c: char| c == '\0' || c.is_whitespace());
        if line.is_empty() {
            continue;
        }
        let (key, value) = line
            .split_once(':')
            .ok_or(VdevError::NotKeyValue { line: n + 1 })?;
        let (key, value) = (key.trim(), value.trim());
        if key == "cu_mask" {
            masks.push(mask_word(value)?);
            continue;
        }
        if !seen.insert(key.to_string()) {
            return Err(VdevError::Duplicate(key.into()));
        }
        match key {
            "PciBusId" => {
                bus = Some(value.parse::<BusId>().map_err(|_| VdevError::BadValue {
                    key: key.into(),
                    value: value.into(),
                })?);
            }
            "cu_count" => cu_count = Some(number(key, value)?),
            "vdev_id" => vdev_id = Some(number(key, value)?),
            "pipe_id" => pipe_id = Some(number(key, value)?),
            "device_id" => device_id = value.parse().ok(),
            "mem" => {
                mem = value
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok());
            }
            _ => {}
        }
    }
    let pci_bus_id = bus.ok_or(VdevError::Missing("PciBusId"))?;
    if masks.len() != 2 {
        return Err(VdevError::MaskLines { count: masks.len() });
    }
    let cu_count = cu_count.ok_or(VdevError::Missing("cu_count"))?;
    let vdev_id = vdev_id.ok_or(VdevError::Missing("vdev_id"))?;
    let pipe_id = pipe_id.ok_or(VdevError::Missing("pipe_id"))?;
    if vdev_id >= VDEV_IDS {
        return Err(VdevError::OutOfRange {
            key: "vdev_id",
            value: vdev_id,
            limit: VDEV_IDS,
        });
    }
    if pipe_id >= PIPE_IDS {
        return Err(VdevError::OutOfRange {
            key: "pipe_id",
            value: pipe_id,
            limit: PIPE_IDS,
        });
    }
    Ok(VdevConf {
        pci_bus_id,
        cu_mask: u128::from(masks[0]) | (u128::from(masks[1]) << 64),
        cu_count,
        mem_mib: mem,
        device_id,
        vdev_id,
        pipe_id,
    })
}

/// The CUs a slice of `percent` takes on a card of `card_cus`: `min(ceil(pct × CUs / 100), CUs)`.
pub fn cus_for(percent: u32, card_cus: u32) -> u32 {
    let n = (u64::from(percent) * u64::from(card_cus)).div_ceil(100);
    u32::try_from(n).unwrap_or(u32::MAX).min(card_cus)
}

/// The mask of a card's CUs.
pub fn card_mask(card_cus: u32) -> u128 {
    if card_cus >= MAX_CUS {
        u128::MAX
    } else {
        (1u128 << card_cus) - 1
    }
}

/// Why a walk of the ledger failed: the path and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct LedgerError {
    pub path: String,
    pub reason: String,
}

/// How deep the ledger walk goes below the pods directory (`<pod>/c-<container>/etc/vdev/docker`
/// is five).
const WALK_DEPTH: usize = 8;

/// Every ledger record under `root` but `skip` (symlinks not followed); an unreadable directory
/// or record is an error naming it. A missing root is no record.
pub fn scan(root: &Path, skip: &Path) -> Result<Vec<(PathBuf, VdevConf)>, LedgerError> {
    let mut found = Vec::new();
    let mut pending = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = pending.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir == root => continue,
            Err(e) => {
                return Err(LedgerError {
                    path: dir.display().to_string(),
                    reason: e.to_string(),
                });
            }
        };
        for entry in entries {
            let entry = entry.map_err(|e| LedgerError {
                path: dir.display().to_string(),
                reason: e.to_string(),
            })?;
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let name = entry.file_name().to_string_lossy().into_owned();
            if kind.is_dir() && depth < WALK_DEPTH {
                pending.push((path, depth + 1));
            } else if kind.is_file() && is_record_name(&name) && path != skip {
                let text = std::fs::read_to_string(&path).map_err(|e| LedgerError {
                    path: path.display().to_string(),
                    reason: e.to_string(),
                })?;
                let conf = parse(&text).map_err(|e| LedgerError {
                    path: path.display().to_string(),
                    reason: e.to_string(),
                })?;
                found.push((path, conf));
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(found)
}

/// What one slice asks for on one card.
#[derive(Debug, Clone)]
pub struct SliceRequest<'a> {
    pub bus: BusId,
    pub card_cus: u32,
    /// CUs wanted ([`cus_for`]).
    pub cus: u32,
    pub mem_mib: u64,
    /// The loop position `i` (`vdev<i>.conf`, `device_id`).
    pub position: u32,
    /// This container's own file.
    pub own: &'a Path,
}

fn lowest_free(used: &BTreeSet<u32>, limit: u32) -> Option<u32> {
    (0..limit).find(|id| !used.contains(id))
}

/// The ledger's answer for one slice: this container's own file when it names the same card
/// (reused verbatim), else a new record chosen around every other record under `root`, written.
/// `Err` is the spec's one line (`allocate vdev for card …: …`).
pub fn allocate(root: &Path, request: &SliceRequest<'_>) -> Result<VdevConf, String> {
    let card = request.bus.sysfs();
    let wrap = |e: String| format!("allocate vdev for card {card}: {e}");
    if request.card_cus > MAX_CUS {
        return Err(wrap(format!(
            "the card has {} compute units, more than the {MAX_CUS} a vdev.conf mask names",
            request.card_cus
        )));
    }
    match std::fs::read_to_string(request.own) {
        Ok(text) => {
            let own = parse(&text).map_err(|e| wrap(format!("{}: {e}", request.own.display())))?;
            if own.pci_bus_id == request.bus {
                return Ok(own);
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(wrap(format!("{}: {e}", request.own.display()))),
    }
    let records = scan(root, request.own).map_err(|e| wrap(e.to_string()))?;
    let all = card_mask(request.card_cus);
    let mut used_cus = 0u128;
    let mut pipes = BTreeSet::new();
    let mut vdevs = BTreeSet::new();
    for (path, conf) in &records {
        vdevs.insert(conf.vdev_id);
        if conf.pci_bus_id != request.bus {
            continue;
        }
        if conf.cu_mask & !all != 0 {
            return Err(wrap(format!(
                "{}: cu_mask names compute units beyond the card's {}",
                path.display(),
                request.card_cus
            )));
        }
        used_cus |= conf.cu_mask;
        pipes.insert(conf.pipe_id);
    }
    let free = all & !used_cus;
    if free.count_ones() < request.cus {
        return Err(wrap(format!(
            "insufficient free compute units: need {}, {} of {} free",
            request.cus,
            free.count_ones(),
            request.card_cus
        )));
    }
    let mut mask = 0u128;
    let mut left = request.cus;
    for bit in 0..request.card_cus.min(MAX_CUS) {
        if left == 0 {
            break;
        }
        if free & (1u128 << bit) != 0 {
            mask |= 1u128 << bit;
            left -= 1;
        }
    }
    let vdev_id = lowest_free(&vdevs, VDEV_IDS).ok_or_else(|| {
        wrap(format!(
            "vdev_id pool exhausted: all {VDEV_IDS} ids are in use"
        ))
    })?;
    let pipe_id = lowest_free(&pipes, PIPE_IDS).ok_or_else(|| {
        wrap(format!(
            "pipe_id pool exhausted for card {card}: all {PIPE_IDS} ids are in use"
        ))
    })?;
    let conf = VdevConf {
        pci_bus_id: request.bus,
        cu_mask: mask,
        cu_count: mask.count_ones(),
        mem_mib: Some(request.mem_mib),
        device_id: Some(request.position),
        vdev_id,
        pipe_id,
    };
    write(request.own, &conf).map_err(wrap)?;
    Ok(conf)
}

/// Writes a record atomically and durably (file 0644, its directory 0777).
pub fn write(path: &Path, conf: &VdevConf) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        accel_backend::chores::make_dir(dir, Some(DIR_MODE)).map_err(|e| e.to_string())?;
    }
    accel_host::atomic::write_atomic_mode(path, render(conf).as_bytes(), FILE_MODE)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bus(s: &str) -> BusId {
        s.parse().unwrap()
    }

    #[test]
    fn the_record_renders_byte_for_byte_and_reads_back() {
        let conf = VdevConf {
            pci_bus_id: bus("0000:09:00.0"),
            cu_mask: (1u128 << 64) | 0b111,
            cu_count: 4,
            mem_mib: Some(32760),
            device_id: Some(0),
            vdev_id: 3,
            pipe_id: 1,
        };
        let text = render(&conf);
        assert_eq!(
            text,
            "PciBusId: 0000:09:00.0\ncu_mask: 0x0000000000000007\ncu_mask: 0x0000000000000001\ncu_count: 4\nmem: 32760 MiB\ndevice_id: 0\nvdev_id: 3\npipe_id: 1\nenable: 1\n"
        );
        assert_eq!(parse(&text).unwrap(), conf);
    }

    #[test]
    fn malformed_records_are_refused_by_rule() {
        let good = "PciBusId: 0000:09:00.0\ncu_mask: 0x1\ncu_mask: 0x0\ncu_count: 1\nvdev_id: 0\npipe_id: 0\n";
        assert!(parse(good).is_ok());
        let cases = [
            (
                good.replace("PciBusId: 0000:09:00.0\n", ""),
                "key PciBusId is missing",
            ),
            (
                good.replace("cu_mask: 0x0\n", ""),
                "1 cu_mask lines, not two",
            ),
            (format!("{good}vdev_id: 1\n"), "key vdev_id appears twice"),
            (
                good.replace("vdev_id: 0", "vdev_id: 200"),
                "vdev_id 200 is out of range (0..200)",
            ),
            (
                good.replace("pipe_id: 0", "pipe_id: 20"),
                "pipe_id 20 is out of range (0..20)",
            ),
            (
                good.replace("cu_mask: 0x1", "cu_mask: zz"),
                "cu_mask: \"zz\" is not a valid value",
            ),
            (format!("{good}garbage\n"), "line 7 is not `key: value`"),
        ];
        for (text, message) in cases {
            assert_eq!(parse(&text).unwrap_err().to_string(), message, "{text}");
        }
    }

    #[test]
    fn compute_units_round_up_and_cap() {
        assert_eq!(cus_for(50, 120), 60);
        assert_eq!(cus_for(33, 80), 27);
        assert_eq!(cus_for(100, 80), 80);
        assert_eq!(cus_for(150, 80), 80);
        assert_eq!(cus_for(0, 80), 0);
        assert_eq!(card_mask(128), u128::MAX);
        assert_eq!(card_mask(3), 0b111);
    }

    fn request<'a>(own: &'a Path, cus: u32) -> SliceRequest<'a> {
        SliceRequest {
            bus: bus("0000:09:00.0"),
            card_cus: 120,
            cus,
            mem_mib: 32760,
            position: 0,
            own,
        }
    }

    #[test]
    fn slices_take_disjoint_masks_and_distinct_ids_and_a_retry_reuses_its_file() {
        let root = tempfile::tempdir().unwrap();
        let own = |pod: &str| {
            root.path()
                .join(pod)
                .join("c-main")
                .join(HOST_SUBDIR)
                .join("vdev0.conf")
        };
        let (a, b) = (own("a"), own("b"));
        let first = allocate(root.path(), &request(&a, 60)).unwrap();
        let second = allocate(root.path(), &request(&b, 60)).unwrap();
        assert_eq!(first.cu_mask & second.cu_mask, 0);
        assert_eq!(
            first.cu_mask.count_ones() + second.cu_mask.count_ones(),
            120
        );
        assert_ne!(first.vdev_id, second.vdev_id);
        assert_ne!(first.pipe_id, second.pipe_id);
        assert_eq!(allocate(root.path(), &request(&a, 60)).unwrap(), first);
        let e = allocate(root.path(), &request(&own("c"), 1)).unwrap_err();
        assert_eq!(
            e,
            "allocate vdev for card 0000:09:00.0: insufficient free compute units: need 1, 0 of 120 free"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&a).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, FILE_MODE);
        let dir_mode = std::fs::metadata(a.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dir_mode, DIR_MODE);
    }

    #[test]
    fn a_malformed_record_fails_the_allocation_by_name() {
        let root = tempfile::tempdir().unwrap();
        let bad = root
            .path()
            .join("x/c-main")
            .join(HOST_SUBDIR)
            .join("vdev0.conf");
        std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
        std::fs::write(&bad, "PciBusId: 0000:09:00.0\n").unwrap();
        let own = root
            .path()
            .join("y/c-main")
            .join(HOST_SUBDIR)
            .join("vdev0.conf");
        let e = allocate(root.path(), &request(&own, 10)).unwrap_err();
        assert_eq!(
            e,
            format!(
                "allocate vdev for card 0000:09:00.0: {}: 0 cu_mask lines, not two",
                bad.display()
            )
        );
        assert!(!own.exists());
    }

    #[test]
    fn the_pools_run_out_with_the_specs_words() {
        let root = tempfile::tempdir().unwrap();
        for p in 0..PIPE_IDS {
            let path = root
                .path()
                .join(format!("p{p}/c-main"))
                .join(HOST_SUBDIR)
                .join("vdev0.conf");
            let conf = VdevConf {
                pci_bus_id: bus("0000:09:00.0"),
                cu_mask: 1u128 << p,
                cu_count: 1,
                mem_mib: Some(1),
                device_id: Some(0),
                vdev_id: p,
                pipe_id: p,
            };
            write(&path, &conf).unwrap();
        }
        let own = root
            .path()
            .join("new/c-main")
            .join(HOST_SUBDIR)
            .join("vdev0.conf");
        assert_eq!(
            allocate(root.path(), &request(&own, 1)).unwrap_err(),
            "allocate vdev for card 0000:09:00.0: pipe_id pool exhausted for card 0000:09:00.0: all 20 ids are in use"
        );
        // Another card has its own pipes and CUs, but vdev ids are node-wide.
        let other = SliceRequest {
            bus: bus("0000:0c:00.0"),
            ..request(&own, 1)
        };
        assert_eq!(allocate(root.path(), &other).unwrap().vdev_id, PIPE_IDS);
    }
}
