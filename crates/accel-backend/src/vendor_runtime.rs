//! What the manufacturers whose own container runtime does the injecting share (Iluvatar's
//! ix-container-runtime, Moore Threads' MT container runtime): the grant is one visible-devices
//! variable naming the accelerators, and nothing else — no device node, no mount. Written once
//! here so those backends stay a parser, a detector and a few constants each:
//!
//! - [`visible_devices`] — the variable's answer for a grant, in the seats' order;
//! - [`visible_names`] — the names an injection's variable makes visible, read back;
//! - [`slice_mib`] — a slice's VRAM budget on one accelerator from the ledger's units;
//! - [`numbered_nodes`] — the minors of `/dev/<prefix><N>` nodes (`iluvatar0`, `mtgpu.0`);
//! - [`bus_functions`] — the manufacturer's PCI functions (function 0 of each board);
//! - [`handler_check`] — doctor's check that the vendor runtime is in a Pod's path at all: the
//!   engine's default runtime, or a handler a RuntimeClass can name. Without either the
//!   variable grants nothing, silently (the container starts without an accelerator).
//!
//! Nothing here runs a program or writes to the host.

use std::path::Path;

use accel_core::busid::BusId;
use accel_core::ledger::Seat;
use accel_core::ledger::units::mib_for_units;
use accel_core::manufacturer::PciVendorId;
use accel_host::Host;
use accel_host::pci::{PciClassPrefixes, PciFunction};

use crate::doctor::Check;
use crate::respond::{Injection, ResponderError};

/// The one-variable answer: `variable` = the seats' UUIDs comma-joined, in the seats' order
/// (ascending accelerator index). A seat without a UUID cannot be named to the runtime.
pub fn visible_devices(variable: &str, seats: &[&Seat]) -> Result<Injection, ResponderError> {
    let ids = seat_ids(seats)?;
    let mut injection = Injection::default();
    injection.envs.insert(variable.to_string(), ids.join(","));
    Ok(injection)
}

/// The names an injection's `variable` makes visible (preflight's sidecar row reads a grant
/// back this way); empty when the variable is absent.
pub fn visible_names(variable: &str, injection: &Injection) -> std::collections::BTreeSet<String> {
    injection
        .envs
        .get(variable)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|id| !id.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The seats' UUIDs, in order; the first without one is the refusal.
pub fn seat_ids(seats: &[&Seat]) -> Result<Vec<String>, ResponderError> {
    seats
        .iter()
        .map(|seat| {
            seat.uuid
                .clone()
                .filter(|u| !u.is_empty())
                .ok_or(ResponderError::NoUuid { index: seat.index })
        })
        .collect()
}

/// A slice's VRAM budget on `seat`, in MiB: the ledger's units over the accelerator's VRAM,
/// floored (a memory percentage p is p × 16,000 units, so 50 % of 32768 MiB is 16384).
pub fn slice_mib(seat: &Seat, slice_units: u64) -> Result<u64, ResponderError> {
    let vram = seat
        .memory_mib
        .ok_or(ResponderError::NoVram { index: seat.index })?;
    Ok(mib_for_units(slice_units, vram))
}

/// The minors of the device nodes `/dev/<prefix><N>` on the host, ascending (`prefix` may hold
/// a directory: `dri/card`). A name with anything but digits after the prefix is not one.
pub fn numbered_nodes(host: &dyn Host, prefix: &str) -> Vec<u32> {
    let (dir, stem) = match prefix.rsplit_once('/') {
        Some((dir, stem)) => (format!("dev/{dir}"), stem),
        None => ("dev".to_string(), prefix),
    };
    let mut minors: Vec<u32> = host
        .list(&dir)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|name| {
            let digits = name.strip_prefix(stem)?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse().ok()
        })
        .collect();
    minors.sort_unstable();
    minors.dedup();
    minors
}

/// The PCI functions of the configured vendor ids, function 0 of each board, in bus order; an
/// unreadable bus is none (the tool's answer then stands alone).
pub fn bus_functions(
    host: &dyn Host,
    classes: &PciClassPrefixes,
    ids: &[PciVendorId],
) -> Vec<PciFunction> {
    let Ok(scan) = accel_host::pci::scan_pci(host, classes) else {
        return Vec::new();
    };
    let mut functions: Vec<PciFunction> = scan
        .functions
        .into_iter()
        .filter(|f| f.bus_id.function == 0 && ids.iter().any(|id| id.vendor == f.vendor_id))
        .collect();
    functions.sort_by_key(|f| f.bus_id);
    functions
}

/// The board a bus id names (function 0), for joining a tool's row to the kernel's function.
pub fn board(bus: BusId) -> BusId {
    BusId { function: 0, ..bus }
}

/// The vendor runtime's place in the container engine, as doctor reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VendorRuntime<'a> {
    /// The RuntimeClass (and containerd handler) name, `iluvatar`.
    pub runtime_class: Option<&'a str>,
    /// How the vendor runtime's binary starts (`ix-container-runtime`).
    pub binary_prefix: &'a str,
    /// The variable the grants set (`IX_VISIBLE_DEVICES`), for the message.
    pub variable: &'a str,
}

/// The CRI plugin's table in containerd 1.x (configuration version 2) and 2.x (version 3).
const CRI_TABLES: [&str; 2] = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"];

/// What containerd's configuration says of its runtimes: the default handler's name and
/// binary, and every handler's name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Handlers {
    pub default: Option<String>,
    pub default_binary: Option<String>,
    pub names: Vec<String>,
}

/// Reads containerd's `config.toml` text for its runtime handlers (either CRI table);
/// `None` when it is not TOML.
pub fn parse_handlers(text: &str) -> Option<Handlers> {
    let config: toml::Table = text.parse().ok()?;
    let plugins = config.get("plugins").and_then(toml::Value::as_table);
    let mut handlers = Handlers::default();
    for cri in CRI_TABLES {
        let Some(containerd) = plugins
            .and_then(|p| p.get(cri))
            .and_then(toml::Value::as_table)
            .and_then(|c| c.get("containerd"))
            .and_then(toml::Value::as_table)
        else {
            continue;
        };
        if let Some(name) = containerd
            .get("default_runtime_name")
            .and_then(toml::Value::as_str)
        {
            handlers.default = Some(name.to_string());
        }
        if let Some(runtimes) = containerd.get("runtimes").and_then(toml::Value::as_table) {
            for (name, runtime) in runtimes {
                handlers.names.push(name.clone());
                let binary = runtime
                    .get("options")
                    .and_then(toml::Value::as_table)
                    .and_then(|o| o.get("BinaryName"))
                    .and_then(toml::Value::as_str);
                if handlers.default.as_deref() == Some(name.as_str()) {
                    handlers.default_binary = binary.map(str::to_string);
                }
            }
        }
    }
    Some(handlers)
}

/// Doctor's `runtime-class` check: ok when the engine's default runtime is the vendor's (the
/// variable works for every Pod) or a handler of the RuntimeClass's name is configured (Pods
/// carrying `runtimeClassName` get the runtime); a warning otherwise, or when the engine's
/// configuration cannot be read (`containerd_dir` is a host path under the host root).
pub fn handler_check(host: &dyn Host, containerd_dir: &Path, runtime: &VendorRuntime<'_>) -> Check {
    const NAME: &str = "runtime-class";
    let file = containerd_dir.join("config.toml");
    let file = file.to_string_lossy();
    let file = file.trim_start_matches('/');
    let Some(handlers) = host
        .read_to_string(file)
        .ok()
        .and_then(|t| parse_handlers(&t))
    else {
        return Check::warn(
            NAME,
            format!(
                "/{file} cannot be read, so whether the vendor runtime is in a Pod's path is unknown"
            ),
            format!(
                "make sure {} runs the vendor runtime ({}*): as containerd's default, or as the handler of a RuntimeClass Pods name",
                runtime.variable, runtime.binary_prefix
            ),
        );
    };
    let is_vendor = |name: &str, binary: Option<&str>| {
        let binary_is = binary
            .and_then(|b| Path::new(b).file_name())
            .and_then(|f| f.to_str())
            .is_some_and(|f| f.starts_with(runtime.binary_prefix));
        binary_is || runtime.runtime_class == Some(name)
    };
    let default = handlers.default.as_deref().unwrap_or("runc");
    if is_vendor(default, handlers.default_binary.as_deref()) {
        return Check::ok(
            NAME,
            format!(
                "containerd's default runtime {default:?} is the vendor's: {} works for every Pod",
                runtime.variable
            ),
        );
    }
    match runtime.runtime_class {
        Some(class) if handlers.names.iter().any(|n| n == class) => Check::ok(
            NAME,
            format!(
                "containerd has a {class:?} handler: Pods with runtimeClassName {class} get the vendor runtime (the chart creates the RuntimeClass)"
            ),
        ),
        class => Check::warn(
            NAME,
            format!(
                "containerd's default runtime {default:?} is not the vendor's and no {} handler is configured: {} alone grants nothing (the container starts without an accelerator and no error)",
                class.map_or_else(|| "RuntimeClass".to_string(), |c| format!("{c:?}")),
                runtime.variable
            ),
            format!(
                "install the vendor's container toolkit and register its runtime ({}*) with containerd as the handler {}",
                runtime.binary_prefix,
                class.unwrap_or("the RuntimeClass names")
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_core::inventory::Grantable;
    use std::collections::BTreeMap;

    fn seat(index: u32, uuid: Option<&str>, memory_mib: Option<u64>) -> Seat {
        Seat {
            index,
            uuid: uuid.map(String::from),
            numa_node: None,
            peers: BTreeMap::new(),
            memory_mib,
            grantable: Grantable::Whole,
            healthy: true,
            slice_capacity: 16,
            partitions: Vec::new(),
        }
    }

    #[test]
    fn the_grant_is_one_variable_in_seat_order() {
        let (a, b) = (seat(0, Some("u0"), None), seat(3, Some("u3"), None));
        let injection = visible_devices("X_VISIBLE_DEVICES", &[&b, &a]).unwrap();
        assert_eq!(injection.envs.len(), 1);
        assert_eq!(injection.envs["X_VISIBLE_DEVICES"], "u3,u0");
        assert!(injection.mounts.is_empty() && injection.devices.is_empty());
        let none = seat(5, None, None);
        assert_eq!(
            visible_devices("X", &[&a, &none]),
            Err(ResponderError::NoUuid { index: 5 })
        );
    }

    #[test]
    fn a_slice_budget_is_floored_from_units() {
        assert_eq!(slice_mib(&seat(0, None, Some(32_768)), 800_000), Ok(16_384));
        assert_eq!(slice_mib(&seat(0, None, Some(49_152)), 400_000), Ok(12_288));
        assert_eq!(
            slice_mib(&seat(2, None, None), 1),
            Err(ResponderError::NoVram { index: 2 })
        );
    }

    #[test]
    fn numbered_nodes_are_the_digits_after_the_prefix() {
        let tmp = tempfile::tempdir().unwrap();
        for name in [
            "iluvatar0",
            "iluvatar12",
            "iluvatar1",
            "itrctl",
            "iluvatarx",
            "mtgpu.3",
        ] {
            std::fs::create_dir_all(tmp.path().join("dev")).unwrap();
            std::fs::write(tmp.path().join("dev").join(name), b"").unwrap();
        }
        let host = accel_host::FsHost::new(tmp.path());
        assert_eq!(numbered_nodes(&host, "iluvatar"), vec![0, 1, 12]);
        assert_eq!(numbered_nodes(&host, "mtgpu."), vec![3]);
        assert!(numbered_nodes(&host, "dri/card").is_empty());
    }

    #[test]
    fn handlers_are_read_from_either_cri_table() {
        let v2 = r#"
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.iluvatar.options]
BinaryName = "/usr/bin/ix-container-runtime"
"#;
        let h = parse_handlers(v2).unwrap();
        assert_eq!(h.default.as_deref(), Some("runc"));
        assert_eq!(h.names, ["iluvatar", "runc"]);
        let v3 = r#"
version = 3
[plugins."io.containerd.cri.v1.runtime".containerd]
default_runtime_name = "mt"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.mt.options]
BinaryName = "/usr/bin/mthreads-container-runtime"
"#;
        let h = parse_handlers(v3).unwrap();
        assert_eq!(
            h.default_binary.as_deref(),
            Some("/usr/bin/mthreads-container-runtime")
        );
        assert!(parse_handlers("not [toml").is_none());
    }

    #[test]
    fn doctor_warns_when_the_variable_would_grant_nothing() {
        use crate::doctor::Status;
        let tmp = tempfile::tempdir().unwrap();
        let host = accel_host::FsHost::new(tmp.path());
        let runtime = VendorRuntime {
            runtime_class: Some("iluvatar"),
            binary_prefix: "ix-container-runtime",
            variable: "IX_VISIBLE_DEVICES",
        };
        let dir = Path::new("/etc/containerd");
        assert_eq!(handler_check(&host, dir, &runtime).status, Status::Warn);
        let write = |text: &str| {
            std::fs::create_dir_all(tmp.path().join("etc/containerd")).unwrap();
            std::fs::write(tmp.path().join("etc/containerd/config.toml"), text).unwrap();
        };
        write("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n");
        let check = handler_check(&host, dir, &runtime);
        assert_eq!(check.status, Status::Warn);
        assert!(
            check
                .reason
                .contains("IX_VISIBLE_DEVICES alone grants nothing"),
            "{check:?}"
        );
        write(
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.iluvatar]\n",
        );
        assert_eq!(handler_check(&host, dir, &runtime).status, Status::Ok);
        write(
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\ndefault_runtime_name = \"ix\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.ix.options]\nBinaryName = \"/usr/local/bin/ix-container-runtime\"\n",
        );
        let check = handler_check(&host, dir, &runtime);
        assert_eq!(check.status, Status::Ok);
        assert!(check.reason.contains("default runtime \"ix\""), "{check:?}");
    }
}
