//! Hygon's preflight knowledge behind accel-backend's [`Preflight`] (spec/hygon.md §8): tier
//! "container probe, no driver read" — the allocator reads no driver (device sets are fixed
//! paths and a slice is its `vdev.conf`), so there is no driver-read row, and **no host
//! cross-check** (no host reader of the DCUs is established).
//!
//! - **The probe** needs `--probe-image` (no default; the image brings `sh` and the usual tools,
//!   not the DTK: the host's is mounted at `/opt/hygondriver`). It runs the DTK's
//!   `BandwidthTest` in the background and watches the card's kfd record
//!   `/sys/devices/virtual/kfd/kfd/vgpu/0x<gpu_id>@<pipe_id>/entry` for a **new**
//!   `Indentifier:` line (the driver's spelling): that record, the driver accounting the probe's
//!   process to the slice, is the `sliced-runtime-loaded` evidence. `gpu_id` is the kfd topology
//!   node whose `location_id` is the slice's PCI address (`bus·256 + device·8 + function`);
//!   `pipe_id` and the quota (`mem`) come from the container's own `vdev0.conf`.
//! - **The quota** the injection sets is read from the `vdev0.conf` the responder rendered into
//!   the directory it mounts; the probe's figure is the one the container's file carries, which
//!   the DTK enforces.
//! - A card of a MIG node is partition-backed: its management rows stop at `declared`, and it
//!   has no sliced rows. Preflight never creates an instance.
//!
//! The vgpu record's shape is in no capture: a line is counted when it starts with
//! `Indentifier:` (or the corrected `Identifier:`), nothing else of the file is read.

use std::collections::BTreeSet;

use accel_backend::preflight::{ContainerCli, Preflight, ProbeReading, Tier};
use accel_backend::respond::Injection;
use accel_core::Manufacturer;
use accel_core::inventory::{Accelerator, Grantable};

use crate::vdev;

/// The line a probe prints before the driver's new record.
pub const VGPU_SEEN: &str = "gpustack-preflight-vgpu:";
/// The line a probe prints when no new record appeared, and why.
pub const VGPU_NONE: &str = "gpustack-preflight-vgpu-none:";
/// The line before the container's own `vdev0.conf` `mem` value.
pub const MEM_SEEN: &str = "gpustack-preflight-mem:";
/// How long the probe watches for the record, in seconds.
pub const WATCH_SECONDS: u32 = 30;

/// Why the group has no driver-read row (spec §8's note).
pub const NOTE: &str = "no driver-read row: the allocator reads no Hygon driver (the device \
     sets are fixed paths and a slice is the vdev.conf it writes), and no host cross-check: no \
     host reader of the DCUs is established";

/// Hygon's preflight row.
#[derive(Debug, Clone, Copy, Default)]
pub struct HygonPreflight;

/// The `mem: <n> MiB` of a `vdev.conf`'s text, in MiB.
pub fn conf_mem_mib(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        if key.trim() != "mem" {
            return None;
        }
        let value = value.trim();
        let digits = value.split_whitespace().next()?;
        let unit = value[digits.len()..].trim().to_ascii_lowercase();
        let n: u64 = digits.parse().ok()?;
        match unit.as_str() {
            "" | "mib" | "mb" | "m" => Some(n),
            "gib" | "gb" | "g" => Some(n * 1024),
            _ => None,
        }
    })
}

fn is_record(line: &str) -> bool {
    line.starts_with("Indentifier:") || line.starts_with("Identifier:")
}

impl Preflight for HygonPreflight {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Hygon
    }

    fn tier(&self) -> Tier {
        Tier::ProbeWithoutDriverRead
    }

    fn note(&self) -> Option<String> {
        Some(NOTE.to_string())
    }

    fn partition_backed(&self, accelerator: &Accelerator) -> bool {
        accelerator.grantable == Grantable::PartitionsOnly
    }

    /// The devices are the injection's own nodes (`--device`); `ctr` has no `--device`, so its
    /// steps are printed instead.
    fn device_flags(&self, cli: ContainerCli) -> Option<Vec<String>> {
        match cli {
            ContainerCli::Docker | ContainerCli::Nerdctl => Some(Vec::new()),
            ContainerCli::Ctr => None,
        }
    }

    fn probe_image_needs(&self) -> &'static str {
        "any image with sh, cat, grep, awk, sleep and kill: the DTK is the host's, mounted at /opt/hygondriver"
    }

    /// A quarter: a card's four synthetic slices (the sidecar's owner, the quota probe, two
    /// tenants) fit its compute units side by side, as spec §5's ledger requires.
    fn probe_cores_percentage(&self) -> Option<u32> {
        Some(25)
    }

    fn probe_script(&self) -> String {
        let conf = format!("{}/{}", vdev::CONTAINER_DIR, vdev::file_name(0));
        // The address's parts in hex (`0000:0f:00.0`): location_id = bus*256 + device*8 + fn.
        format!(
            "conf={conf}; \
             bus=$(awk -F': *' '$1==\"PciBusId\"{{print $2}}' $conf); \
             pipe=$(awk -F': *' '$1==\"pipe_id\"{{print $2}}' $conf); \
             rest=${{bus#*:}}; b=${{rest%%:*}}; rest=${{rest#*:}}; d=${{rest%%.*}}; f=${{rest#*.}}; \
             loc=$((0x$b * 256 + 0x$d * 8 + f)); gpu=; \
             for n in /sys/class/kfd/kfd/topology/nodes/*; do \
               grep -q \"^location_id $loc\\$\" $n/properties 2>/dev/null && gpu=$(cat $n/gpu_id); \
             done; \
             echo {MEM_SEEN} $(awk -F': *' '$1==\"mem\"{{print $2}}' $conf); \
             if [ -z \"$gpu\" ] || [ -z \"$pipe\" ]; then \
               echo {VGPU_NONE} no kfd node at location_id $loc or no pipe_id in $conf; exit 0; \
             fi; \
             entry=/sys/devices/virtual/kfd/kfd/vgpu/0x$(printf %x $gpu)@$pipe/entry; \
             before=$(grep -cE '^(Indentifier|Identifier):' $entry 2>/dev/null); before=${{before:-0}}; \
             LD_LIBRARY_PATH=/opt/hygondriver/hip/lib:/opt/hygondriver/lib:/opt/hyhal/lib \
               /opt/hygondriver/bin/BandwidthTest >/dev/null 2>&1 & work=$!; \
             i=0; seen=; \
             while [ $i -lt {WATCH_SECONDS} ]; do \
               now=$(grep -cE '^(Indentifier|Identifier):' $entry 2>/dev/null); \
               if [ \"${{now:-0}}\" -gt \"$before\" ]; then \
                 seen=$(grep -E '^(Indentifier|Identifier):' $entry | tail -1); break; \
               fi; \
               sleep 1; i=$((i + 1)); \
             done; \
             kill $work 2>/dev/null; \
             if [ -n \"$seen\" ]; then echo {VGPU_SEEN} $entry $seen; \
             else echo {VGPU_NONE} no new record in $entry within {WATCH_SECONDS} s; fi"
        )
    }

    fn read_probe(&self, stdout: &str) -> ProbeReading {
        let mut reading = ProbeReading::default();
        for line in stdout.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix(VGPU_SEEN) {
                let rest = rest.trim();
                // `<entry path> <record>`: the record must be one.
                let record = rest.split_once(' ').map(|(_, r)| r.trim()).unwrap_or("");
                reading.runtime = Some(if is_record(record) {
                    Ok(format!(
                        "the driver recorded the probe's process on the slice ({rest})"
                    ))
                } else {
                    Err(format!("the probe's record is not one: {rest}"))
                });
            } else if let Some(why) = line.strip_prefix(VGPU_NONE) {
                reading.runtime = Some(Err(format!(
                    "the driver recorded no process on the slice: {}",
                    why.trim()
                )));
            } else if let Some(mem) = line.strip_prefix(MEM_SEEN)
                && let Some(mib) = conf_mem_mib(&format!("mem: {}", mem.trim()))
            {
                reading.memory_mib.push(mib);
            }
        }
        if reading.runtime.is_none() {
            reading.runtime = Some(Err(
                "the probe printed neither a driver record nor why it saw none".to_string(),
            ));
        }
        reading
    }

    /// The `mem` of the `vdev<position>.conf` the responder rendered into the directory the
    /// slice mounts at `/etc/vdev/docker`.
    fn quota_mib(&self, injection: &Injection, position: usize) -> Option<u64> {
        let mount = injection
            .mounts
            .iter()
            .find(|m| m.container_path == vdev::CONTAINER_DIR)?;
        let position = u32::try_from(position).ok()?;
        let path = std::path::Path::new(&mount.host_path).join(vdev::file_name(position));
        conf_mem_mib(&std::fs::read_to_string(path).ok()?)
    }

    fn slice_runtime(&self, injection: &Injection) -> Option<String> {
        injection
            .mounts
            .iter()
            .find(|m| m.container_path == vdev::CONTAINER_DIR)
            .map(|_| {
                format!(
                    "mounts the slice's vdev.conf at {} for the host's DTK",
                    vdev::CONTAINER_DIR
                )
            })
    }

    /// No preload library: the slice is the file the DTK reads.
    fn library_in_container(&self, _injection: &Injection) -> Option<String> {
        None
    }

    /// The cards' DRM nodes (`/dev/dri/card<N>`); the control nodes name no card.
    fn visible(&self, injection: &Injection) -> BTreeSet<String> {
        injection
            .devices
            .iter()
            .filter(|d| {
                d.container_path
                    .strip_prefix("/dev/dri/card")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
            .map(|d| d.container_path.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vdev_confs_mem_reads_in_mib() {
        assert_eq!(
            conf_mem_mib("PciBusId: 0000:09:00.0\nmem: 32760 MiB\n"),
            Some(32760)
        );
        assert_eq!(conf_mem_mib("mem: 2 GiB"), Some(2048));
        assert_eq!(conf_mem_mib("mem: lots"), None);
        assert_eq!(conf_mem_mib("memory: 5 MiB"), None);
    }

    #[test]
    fn a_probe_reads_the_drivers_record_and_the_containers_quota() {
        let p = HygonPreflight;
        let seen = p.read_probe(
            "gpustack-preflight-mem: 32760 MiB\n\
             gpustack-preflight-vgpu: /sys/devices/virtual/kfd/kfd/vgpu/0x2b6d@0/entry Indentifier: 4711\n",
        );
        assert_eq!(seen.memory_mib, vec![32760]);
        assert!(matches!(&seen.runtime, Some(Ok(r)) if r.contains("Indentifier: 4711")));
        let none = p.read_probe(
            "gpustack-preflight-mem: 32760 MiB\ngpustack-preflight-vgpu-none: no new record in x within 30 s\n",
        );
        assert!(matches!(&none.runtime, Some(Err(r)) if r.contains("no new record")));
        let forged = p.read_probe("gpustack-preflight-vgpu: /x something else\n");
        assert!(matches!(&forged.runtime, Some(Err(_))));
        assert!(
            matches!(p.read_probe("").runtime, Some(Err(_))),
            "silence is no evidence"
        );
    }
}
