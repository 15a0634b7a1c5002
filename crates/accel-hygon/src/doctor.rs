//! `doctor` for a Hygon node: what the detector and the responder need, each check `ok`, `warn`
//! or `fail` with a one-line reason and what to do. It reads the host through [`Host`] and
//! [`Commands`] and changes nothing.
//!
//! Checks, one function each: `hygon-driver` (the `hycu`/`hydcu` module and KFD nodes of Hygon's
//! vendor), `kfd` and `mkfd` (the control nodes every grant carries; `/dev/mkfd` is absent on
//! older stacks), `hyhal` (`/opt/hyhal`, mounted into every container), `hy-smi` (the CLI
//! answering its JSON query within the deadline, else the `rocm-smi` fork), `mig-mode` (the
//! node's multi-instance mode read from the registry) and `mig-registry` (in MIG mode: a
//! `dev<N>` file for each card, and no empty directory in `ci/`, which a runtime leaves when
//! asked to bind a missing file and which then fails forever), then one row per health source:
//! `health-umc-ecc` (the kernel's `ras/umc_err_count`, spec §7) and `health-check` (`hy-smi
//! --healthcheck`, addendum H5), each saying for how many DCUs it was read, which it could not
//! read, and which DCUs it takes out of service. A DCU out of service warns (the daemon already
//! keeps it out); it fails nothing. `health-kernel-log` says the kernel log is not watched.

use accel_backend::Deadlines;
use accel_backend::detect::Budget;
use accel_backend::doctor::Check;
use accel_core::busid::BusId;
use accel_host::kfd;
use accel_host::{Commands, Host, run_bounded};

use crate::detector::{self, DetectOptions, Sources};
use crate::health;
use crate::hysmi;
use crate::module;
use crate::registry::{self, NodeMode};
use crate::responder::{HYHAL, KFD, MKFD};

/// Runs every check.
pub fn run(host: &dyn Host, commands: &dyn Commands, deadlines: Deadlines) -> Vec<Check> {
    vec![
        driver(host),
        control_node(host, "kfd", KFD, true),
        control_node(host, "mkfd", MKFD, false),
        hyhal(host),
        tool(commands, deadlines),
        mig_mode(host),
        mig_registry(host),
    ]
    .into_iter()
    .chain(health_checks(host, commands, deadlines))
    .collect()
}

/// The health sources' rows, read by one detection pass.
fn health_checks(host: &dyn Host, commands: &dyn Commands, deadlines: Deadlines) -> Vec<Check> {
    let options = DetectOptions {
        deadlines,
        ..DetectOptions::default()
    };
    let sources = detector::read_sources(host, commands, &options);
    let dcus: Vec<BusId> = match detector::join(sources.clone()) {
        Ok(section) => section
            .accelerators
            .iter()
            .filter_map(|a| a.bus_id)
            .collect(),
        Err(_) => Vec::new(),
    };
    if dcus.is_empty() {
        return ["health-umc-ecc", "health-check", "health-kernel-log"]
            .into_iter()
            .map(|name| {
                Check::warn(
                    name,
                    "no DCU detected to read health from",
                    "fix the hygon-driver and hy-smi checks first",
                )
            })
            .collect();
    }
    vec![
        umc_ecc(&sources, &dcus),
        healthcheck(&sources, &dcus),
        health_kernel_log(),
    ]
}

/// `health-kernel-log`: no Hygon kernel-log line is known as a fault, so none is watched.
fn health_kernel_log() -> Check {
    Check::ok(
        "health-kernel-log",
        "not watched: no hycu/hydcu fault line has been captured (spec §7 watches no kernel log or RAS event), so the UMC counter and hy-smi's health check are the DCU's health sources",
    )
}

/// `health-umc-ecc`: the kernel's UMC error counter, per detected DCU (spec §7).
fn umc_ecc(sources: &Sources, dcus: &[BusId]) -> Check {
    const NAME: &str = "health-umc-ecc";
    let read: Vec<(BusId, detector::UmcErrors)> = dcus
        .iter()
        .filter_map(|bus| sources.ras.get(bus).map(|c| (*bus, *c)))
        .collect();
    let out: Vec<String> = read
        .iter()
        .filter_map(|(bus, c)| {
            let ue = c.uncorrectable.filter(|n| *n > 0)?;
            Some(format!("DCU {} ({ue} uncorrectable)", bus.sysfs()))
        })
        .collect();
    let reason = format!(
        "{} read for {} of {} DCU(s)",
        detector::UMC_ERR_COUNT,
        read.len(),
        dcus.len()
    );
    if !out.is_empty() {
        return Check::warn(
            NAME,
            format!("{reason}; out of service: {}", out.join(", ")),
            "drain the node, reset those DCUs (reload the driver) or reboot; replace a card whose errors recur",
        );
    }
    if read.len() < dcus.len() {
        return Check::warn(
            NAME,
            format!(
                "{reason}: the driver exposes no UMC counter for the others, so their uncorrectable memory errors are not seen"
            ),
            "a hycu/hydcu build with RAS support exposes <device>/ras/umc_err_count; until then only hy-smi --healthcheck watches those cards",
        );
    }
    Check::ok(NAME, format!("{reason}: no uncorrectable error"))
}

/// `health-check`: `hy-smi --healthcheck`, joined to each detected DCU by bus id (addendum H5).
fn healthcheck(sources: &Sources, dcus: &[BusId]) -> Check {
    const NAME: &str = "health-check";
    let lines = match &sources.healthcheck {
        None => {
            return Check::warn(
                NAME,
                "hy-smi is not installed: no health check is read",
                "install hyhal (hy-smi) on the host; the UMC counter alone watches the cards",
            );
        }
        Some(Err(why)) => {
            return Check::warn(
                NAME,
                format!("not read: {why}"),
                "run `hy-smi --healthcheck` on the host; a DCU whose health check is not read keeps its last reading",
            );
        }
        Some(Ok(text)) => match health::parse_healthcheck(text) {
            Ok(lines) => lines,
            Err(e) => {
                return Check::warn(
                    NAME,
                    format!("not read: {e}"),
                    "run `hy-smi --healthcheck` on the host; a DCU whose health check is not read keeps its last reading",
                );
            }
        },
    };
    let (mut read, mut out, mut missing) = (0, Vec::new(), Vec::new());
    for bus in dcus {
        match health::line_for(&lines, *bus) {
            Some(line) if line.healthy() => read += 1,
            Some(line) => {
                read += 1;
                out.push(format!("DCU {} \"{}\"", bus.sysfs(), line.status));
            }
            None => missing.push(bus.sysfs()),
        }
    }
    let mut reason = format!(
        "hy-smi --healthcheck read for {read} of {} DCU(s)",
        dcus.len()
    );
    let mut actions = Vec::new();
    if !out.is_empty() {
        reason.push_str(&format!("; out of service: {}", out.join(", ")));
        actions.push(
            "drain the node and check those cards with `hy-smi --healthcheck` and `hy-smi --showrasinfo`; each returns to service once hy-smi reports it Healthy",
        );
    }
    if !missing.is_empty() {
        reason.push_str(&format!("; no line for {}", missing.join(", ")));
        actions.push("a DCU the health check names no line for keeps its last reading");
    }
    if actions.is_empty() {
        Check::ok(NAME, format!("{reason}: every DCU Healthy"))
    } else {
        Check::warn(NAME, reason, actions.join("; "))
    }
}

fn hygon_nodes(host: &dyn Host) -> usize {
    kfd::read_topology(host, kfd::TOPOLOGY_DIR)
        .ok()
        .flatten()
        .map(|nodes| {
            nodes
                .iter()
                .filter(|n| n.is_gpu() && n.vendor_id() == Some(0x1d94))
                .count()
        })
        .unwrap_or(0)
}

fn driver(host: &dyn Host) -> Check {
    let nodes = hygon_nodes(host);
    match module::loaded(host) {
        Some(name) if nodes > 0 => Check::ok(
            "hygon-driver",
            format!(
                "{name} is loaded (version {}); KFD shows {nodes} DCU node(s)",
                module::read_version(host).unwrap_or_else(|| "not reported".into())
            ),
        ),
        Some(name) => Check::fail(
            "hygon-driver",
            format!(
                "{name} is loaded but {} shows no Hygon DCU node",
                kfd::TOPOLOGY_DIR
            ),
            "check the DCU driver and firmware (dmesg), then reload the module",
        ),
        None => Check::fail(
            "hygon-driver",
            "neither the hycu nor the hydcu module is loaded",
            "install the Hygon DCU driver (DTK) on the host",
        ),
    }
}

fn control_node(host: &dyn Host, name: &str, path: &str, required: bool) -> Check {
    if host.exists(path) {
        Check::ok(name, format!("{path} is present"))
    } else if required {
        Check::fail(
            name,
            format!("{path} is missing: no container can reach a DCU"),
            "load the DCU driver; the device node comes with it",
        )
    } else {
        Check::warn(
            name,
            format!("{path} is missing (older stacks have none); containers get /dev/kfd only"),
            "nothing to do unless the vendor's management tools are needed in containers",
        )
    }
}

fn hyhal(host: &dyn Host) -> Check {
    if host.exists(HYHAL) {
        Check::ok(
            "hyhal",
            format!("{HYHAL} is present and mounted into every container"),
        )
    } else {
        Check::warn(
            "hyhal",
            format!("{HYHAL} is missing: containers get no host user space from it"),
            "install hyhal with the DCU driver",
        )
    }
}

fn tool(commands: &dyn Commands, deadlines: Deadlines) -> Check {
    let budget = Budget::start(deadlines);
    let mut failures = Vec::new();
    for argv in hysmi::JSON_QUERIES {
        if !commands.is_installed(argv[0]) {
            continue;
        }
        let Ok(deadline) = budget.next() else { break };
        match run_bounded(commands, argv, deadline)
            .map_err(|e| e.to_string())
            .and_then(|out| {
                hysmi::parse_json(argv[0], &out.stdout_text()).map_err(|e| e.to_string())
            }) {
            Ok(doc) if argv[0] == "hy-smi" => {
                return Check::ok("hy-smi", format!("hy-smi lists {} DCU(s)", doc.cards.len()));
            }
            Ok(doc) => {
                return Check::warn(
                    "hy-smi",
                    format!(
                        "only the rocm-smi fork answers ({} DCU(s))",
                        doc.cards.len()
                    ),
                    "a newer DTK ships hy-smi; the rocm-smi fork gives the same facts",
                );
            }
            Err(e) => failures.push(e),
        }
    }
    if failures.is_empty() {
        Check::warn(
            "hy-smi",
            "neither hy-smi nor rocm-smi is installed: names and VRAM come from the kernel only",
            "install hyhal (hy-smi) on the host",
        )
    } else {
        Check::fail(
            "hy-smi",
            failures.join("; "),
            "check the DCU driver: the tool cannot reach it",
        )
    }
}

fn mig_mode(host: &dyn Host) -> Check {
    match registry::read_mode(host) {
        NodeMode::Off => Check::ok(
            "mig-mode",
            "the node is not in multi-instance mode: whole cards and slices are served",
        ),
        NodeMode::On { cards } => Check::ok(
            "mig-mode",
            format!(
                "the node is in multi-instance mode ({} card(s) in {}): partitions only",
                cards.len(),
                registry::DIR
            ),
        ),
        NodeMode::Unknown(reason) => Check::fail(
            "mig-mode",
            format!("the multi-instance mode cannot be read: {reason}"),
            "mount /etc/dmi_mig_config into the daemon read-write",
        ),
    }
}

fn mig_registry(host: &dyn Host) -> Check {
    let NodeMode::On { cards } = registry::read_mode(host) else {
        return Check::ok(
            "mig-registry",
            "no registry to check outside multi-instance mode",
        );
    };
    let nodes = hygon_nodes(host);
    if nodes > 0 && cards.len() < nodes {
        return Check::warn(
            "mig-registry",
            format!(
                "{} lists {} card(s) but KFD shows {nodes} DCU(s)",
                registry::DIR,
                cards.len()
            ),
            "a card without a dev<N> file cannot be partitioned; reboot to let the driver rewrite the registry",
        );
    }
    let empty: Vec<String> = host
        .list(registry::CI_DIR)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| {
            host.list(&format!("{}/{n}", registry::CI_DIR))
                .is_ok_and(|inner| inner.is_empty())
        })
        .collect();
    if empty.is_empty() {
        Check::ok(
            "mig-registry",
            format!("{} names {} card(s)", registry::DIR, cards.len()),
        )
    } else {
        Check::warn(
            "mig-registry",
            format!(
                "empty directories in {}: {} (a runtime made them binding a missing file)",
                registry::CI_DIR,
                empty.join(", ")
            ),
            "remove them: the reclaim pass sweeps them too",
        )
    }
}
