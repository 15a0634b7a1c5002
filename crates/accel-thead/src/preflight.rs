//! T-Head's preflight knowledge behind accel-backend's [`Preflight`] (spec/thead.md §8): tier
//! full, but **no host cross-check** (no host reader of the PPUs is established, so the
//! detection row stands on the container's own view).
//!
//! - **`mig-partitioning`** (the driver-read row) is read off the detection, as NVIDIA's is:
//!   `ok` when the card is in MIG mode and `ppu-smi mig -lgip` named a profile, `unavailable`
//!   when the mode is on and no profile could be read, `not-declared` otherwise. A MIG card is
//!   partition-backed: its management rows stop at `declared`, and it has no sliced rows.
//!   Preflight never creates an instance.
//! - **The slice probe** needs `--probe-image` (the workload image brings the SDK; there is no
//!   default) and no vendor runtime: the devices travel as the injection's own `--device`
//!   nodes. The probe runs with `LIBHGGC_LOG_LEVEL=2`, prints its maps between markers, then
//!   what the mounted `ppu-monitor` prints, then card 0's memory quota read straight out of the
//!   ledger region (its layout is a documented contract: the slot of card `N` starts at
//!   `96 + 576·N`, its first u64 is the quota in bytes).
//! - **`ppu-monitor`'s output shape is in no capture.** The reader takes the ledger's figure
//!   when the probe could read it; otherwise a figure on a `ppu-monitor` line that names a
//!   memory quota, in the unit the line gives (bytes, KiB, MiB, GiB), and nothing else. A line
//!   it cannot read is not a quota: the row then says the probe showed none.

use std::collections::BTreeSet;

use accel_backend::preflight::{
    ContainerCli, DriverRead, Preflight, ProbeReading, Tier, mig_partitioning,
};
use accel_backend::respond::Injection;
use accel_core::Manufacturer;
use accel_core::inventory::{Accelerator, Grantable};

use crate::devnode;
use crate::responder::{CONTAINER_DIR, LEDGER_PATH, MONITOR, QUOTA_SHIM};

/// The marker a probe prints before its maps.
pub const MAPS_BEGIN: &str = "gpustack-preflight-maps-begin";
/// The marker a probe prints after its maps.
pub const MAPS_END: &str = "gpustack-preflight-maps-end";
/// The marker a probe prints before the ledger's quota figure.
pub const LEDGER_BEGIN: &str = "gpustack-preflight-ledger-begin";
/// The marker a probe prints after it.
pub const LEDGER_END: &str = "gpustack-preflight-ledger-end";
/// Where card 0's slot starts in the ledger region (its header is 96 bytes).
pub const LEDGER_SLOT_0: u64 = 96;
/// The shim's debug level: a probe's output then carries its `[vppu]` lines.
pub const PROBE_LOG_LEVEL: (&str, &str) = ("LIBHGGC_LOG_LEVEL", "2");

/// T-Head's preflight row.
#[derive(Debug, Clone, Copy, Default)]
pub struct TheadPreflight;

impl Preflight for TheadPreflight {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Thead
    }

    fn tier(&self) -> Tier {
        Tier::Full
    }

    fn driver_read(&self, accelerator: &Accelerator) -> Option<DriverRead> {
        Some(mig_partitioning(accelerator, "PPU", "ppu-smi mig -lgip"))
    }

    fn partition_backed(&self, accelerator: &Accelerator) -> bool {
        accelerator.grantable == Grantable::PartitionsOnly
    }

    /// The devices are the injection's own nodes (`--device`), so every CLI that runs a
    /// container can pass them; `ctr` has no `--device`, so its steps are printed instead.
    fn device_flags(&self, cli: ContainerCli) -> Option<Vec<String>> {
        match cli {
            ContainerCli::Docker | ContainerCli::Nerdctl => Some(Vec::new()),
            ContainerCli::Ctr => None,
        }
    }

    fn probe_env(&self) -> Vec<(&'static str, &'static str)> {
        vec![PROBE_LOG_LEVEL]
    }

    fn probe_script(&self) -> String {
        format!(
            "echo {MAPS_BEGIN}; cat /proc/self/maps; echo {MAPS_END}; \
             {CONTAINER_DIR}/{MONITOR} 2>&1; \
             echo {LEDGER_BEGIN}; od -An -t u8 -j {LEDGER_SLOT_0} -N 8 {LEDGER_PATH}; echo {LEDGER_END}"
        )
    }

    fn read_probe(&self, stdout: &str) -> ProbeReading {
        let lines: Vec<&str> = stdout.lines().map(str::trim).collect();
        let between = |begin: &str, end: &str| {
            let b = lines.iter().position(|l| *l == begin)?;
            let e = lines.iter().skip(b).position(|l| *l == end)? + b;
            Some((b, e))
        };
        let maps = between(MAPS_BEGIN, MAPS_END)
            .map(|(b, e)| lines[b + 1..e].iter().map(|l| l.to_string()).collect());
        let ledger: Vec<u64> = between(LEDGER_BEGIN, LEDGER_END)
            .map(|(b, e)| {
                lines[b + 1..e]
                    .iter()
                    .filter_map(|l| l.parse::<u64>().ok())
                    .filter(|bytes| *bytes > 0)
                    .map(|bytes| bytes / (1024 * 1024))
                    .collect()
            })
            .unwrap_or_default();
        let memory_mib = if ledger.is_empty() {
            let start = between(MAPS_BEGIN, MAPS_END).map_or(0, |(_, e)| e + 1);
            let stop = lines
                .iter()
                .position(|l| *l == LEDGER_BEGIN)
                .unwrap_or(lines.len())
                .max(start);
            lines[start..stop]
                .iter()
                .filter_map(|l| monitor_quota_mib(l))
                .collect()
        } else {
            ledger
        };
        ProbeReading {
            maps,
            memory_mib,
            ..ProbeReading::default()
        }
    }

    fn quota_mib(&self, injection: &Injection, position: usize) -> Option<u64> {
        injection
            .envs
            .get(&format!("HGGC_DEVICE_MEMORY_LIMIT_{position}"))
            .and_then(|v| v.trim().parse().ok())
    }

    fn slice_runtime(&self, injection: &Injection) -> Option<String> {
        self.library_in_container(injection)
            .map(|path| format!("mounts the HGGC quota shim at {path}"))
    }

    fn library_in_container(&self, injection: &Injection) -> Option<String> {
        injection
            .mounts
            .iter()
            .find(|m| m.container_path == format!("{CONTAINER_DIR}/{QUOTA_SHIM}"))
            .map(|m| m.container_path.clone())
    }

    /// The cards' own nodes (`/dev/alixpu_ppu<N>`); the control nodes name no card.
    fn visible(&self, injection: &Injection) -> BTreeSet<String> {
        injection
            .devices
            .iter()
            .filter(|d| {
                d.container_path
                    .strip_prefix(devnode::CARD_PREFIX)
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
            .map(|d| d.container_path.clone())
            .collect()
    }
}

/// A memory quota on one line of `ppu-monitor`'s output, in MiB: the line must name a quota
/// (`quota`, any case) and memory (`mem`), and carry a number with a unit or `bytes` after it;
/// a bare number on such a line is read as MiB only when the line says `MiB` nowhere else.
fn monitor_quota_mib(line: &str) -> Option<u64> {
    let lower = line.to_ascii_lowercase();
    if !lower.contains("quota") || !lower.contains("mem") {
        return None;
    }
    let words: Vec<&str> = lower
        .split(|c: char| c.is_whitespace() || c == '=' || c == ':' || c == ',')
        .filter(|w| !w.is_empty())
        .collect();
    for (i, word) in words.iter().enumerate() {
        let (digits, unit) = match word.find(|c: char| !c.is_ascii_digit()) {
            Some(0) => continue,
            Some(at) => (&word[..at], &word[at..]),
            None => (*word, words.get(i + 1).copied().unwrap_or("")),
        };
        let Ok(n) = digits.parse::<u64>() else {
            continue;
        };
        let mib = match unit {
            "b" | "bytes" | "byte" => n / (1024 * 1024),
            "kib" | "kb" | "k" => n / 1024,
            "mib" | "mb" | "m" => n,
            "gib" | "gb" | "g" => n * 1024,
            _ => continue,
        };
        return Some(mib);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_backend::preflight::State;
    use accel_backend::respond::{DeviceNode, Mount};
    use accel_core::inventory::{MigMode, PartitionProfile, Source};

    #[test]
    fn mig_partitioning_reads_the_cards_mode_and_profiles() {
        let mut card = Accelerator::new(0, Source::Driver);
        let read = |c: &Accelerator| TheadPreflight.driver_read(c).unwrap();
        assert_eq!(read(&card).state, State::NotDeclared);
        assert_eq!(
            read(&card).reason,
            "the PPU has no MIG mode (not MIG-capable)"
        );
        card.mig_mode = Some(MigMode::Enabled);
        assert_eq!(read(&card).state, State::Unavailable);
        assert!(read(&card).reason.contains("ppu-smi mig -lgip"));
        card.partition_profiles.push(PartitionProfile {
            name: "4g.48gb".into(),
            id: 5,
            memory_mib: Some(49152),
            instances_total: Some(2),
            instances_free: Some(2),
            multiprocessors: None,
            placements: Vec::new(),
        });
        assert_eq!(read(&card).state, State::Ok);
        assert_eq!(read(&card).reason, "MIG mode is on; profiles 4g.48gb");
    }

    #[test]
    fn the_ledger_figure_is_read_before_what_ppu_monitor_prints() {
        let out = format!(
            "{MAPS_BEGIN}\n7f00-7f01 r-xp 0 0:0 1 /usr/local/vppu/hggc_quota.so\n{MAPS_END}\n\
             [vppu] init device=0 quota=49152MiB\nmemory quota: 999 MiB\n\
             {LEDGER_BEGIN}\n 51539607552\n{LEDGER_END}\n"
        );
        let reading = TheadPreflight.read_probe(&out);
        assert_eq!(reading.maps.unwrap().len(), 1);
        assert_eq!(reading.memory_mib, vec![49152]);
    }

    #[test]
    fn without_the_ledger_a_monitor_line_naming_a_memory_quota_is_read_in_its_unit() {
        let out = format!(
            "{MAPS_BEGIN}\n{MAPS_END}\ncard 0 compute quota 50 %\ncard 0 memory quota 48 GiB\n\
             {LEDGER_BEGIN}\nod: /var/run/vppu/ledger: No such file or directory\n{LEDGER_END}\n"
        );
        assert_eq!(TheadPreflight.read_probe(&out).memory_mib, vec![49152]);
        assert_eq!(monitor_quota_mib("Mem quota=1073741824 bytes"), Some(1024));
        assert_eq!(monitor_quota_mib("memory used 12 MiB"), None);
        assert_eq!(monitor_quota_mib("memory quota: unlimited"), None);
        let none = TheadPreflight.read_probe("docker: Error response from daemon\n");
        assert_eq!(none.maps, None);
        assert!(none.memory_mib.is_empty());
    }

    #[test]
    fn the_quota_is_bare_mib_and_only_card_nodes_are_visible() {
        let mut injection = Injection::default();
        injection
            .envs
            .insert("HGGC_DEVICE_MEMORY_LIMIT_0".into(), "49152".into());
        injection.mounts.push(Mount {
            container_path: "/usr/local/vppu/hggc_quota.so".into(),
            host_path: "/var/lib/gpustack/operator/lib/thead/hggc_quota.so".into(),
            read_only: true,
        });
        for path in ["/dev/alixpu", "/dev/alixpu_ctl", "/dev/alixpu_ppu3"] {
            injection.devices.push(DeviceNode {
                container_path: path.into(),
                host_path: path.into(),
                permissions: "rw".into(),
            });
        }
        assert_eq!(TheadPreflight.quota_mib(&injection, 0), Some(49152));
        assert_eq!(TheadPreflight.quota_mib(&injection, 1), None);
        assert_eq!(
            TheadPreflight.library_in_container(&injection).as_deref(),
            Some("/usr/local/vppu/hggc_quota.so")
        );
        assert_eq!(
            TheadPreflight.visible(&injection),
            BTreeSet::from(["/dev/alixpu_ppu3".to_string()])
        );
    }
}
