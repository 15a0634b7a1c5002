//! `device-manager monitor [--host-root DIR] [--manufacturer M] [-o table|json] [--watch]
//! [--monitor-period 15s] [--data-dir DIR] [--kubelet-dir DIR]`: each accelerator's live usage,
//! one line per accelerator (utilization, memory used/total, temperature, power, compute
//! processes), read with each manufacturer's sampler (the backend's `UsageSampler`: nvidia-smi's
//! CSV query, seed 002 "Live samples"; amd-smi's `metric --json`). Without `--manufacturer`,
//! every manufacturer whose tool is on the host is sampled; one whose tool is missing is
//! skipped. With `--watch` it samples again every period until interrupted (or `--count`
//! samples); a sample that fails is reported on stderr and the watch goes on. Samples never
//! enter the inventory.
//!
//! Beside the usage, where the daemon's ledger can be read (the journal in the manufacturer's
//! data directory, `--data-dir` or `serve`'s default), each accelerator's holders: family and
//! `namespace/pod/container`, with a slice's budget or a partition's profile
//! ([`crate::holdings`]). The journal is read, never written; the grants name accelerators by
//! index, so the manufacturer is detected once to know each index's UUID, and the kubelet's
//! pod-resources answer (`--kubelet-dir`) names each grant's Pod (without it, the Pod UID).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use std::collections::BTreeMap;
use std::path::Path;

use accel_backend::usage::{AcceleratorUsage, SampleError, UsageSample, UsageSampler};
use accel_backend::{Deadlines, DetectRequest};
use accel_core::Manufacturer;
use accel_core::ledger::{Family, Grant, GrantKey};
use accel_host::pci::PciClassPrefixes;

use super::Format;
use crate::holdings::{self, Card, Holder, Holding};
use crate::node::Node;
use crate::settings::Settings;

/// Arguments of `monitor`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The node's root, or a recorded host folder (one carrying recorded-host.json).
    #[arg(long, env = "HOST_ROOT", default_value = "/")]
    pub host_root: PathBuf,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: Format,
    /// Sample again every --monitor-period until interrupted.
    #[arg(long)]
    pub watch: bool,
    /// How often --watch samples: seconds, or with a unit (`15s`, `2m`).
    #[arg(long, env = "MONITOR_PERIOD", default_value = "15s", value_parser = parse_period)]
    pub monitor_period: Duration,
    /// With --watch: stop after this many samples.
    #[arg(long, requires = "watch", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Seconds each query of the vendor's tool may take.
    #[arg(long, alias = "nvidia-smi-timeout", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub query_timeout: u64,
    /// Sample only this manufacturer's accelerators.
    #[arg(long, env = "MANUFACTURER")]
    pub manufacturer: Option<Manufacturer>,
    /// The daemon's data directory, whose ledger journal says who holds each accelerator
    /// (default: each manufacturer's directory as `serve` keeps it). One manufacturer's: it
    /// needs --manufacturer.
    #[arg(long, env = "DATA_DIR", requires = "manufacturer")]
    pub data_dir: Option<PathBuf>,
    /// The kubelet's directory: its pod-resources socket names the Pod of each holder.
    #[arg(long, env = "KUBELET_DIR", default_value = "/var/lib/kubelet")]
    pub kubelet_dir: PathBuf,
}

/// A period: whole seconds (`15`), or a number with `s`, `m` or `h` (`15s`, `2m`); at least 1 s.
pub fn parse_period(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => {
            return Err(format!(
                "{text:?} is not a period: write seconds such as 15 or 15s, or 2m"
            ));
        }
    };
    let seconds = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .filter(|s| *s >= 1)
        .ok_or_else(|| format!("{text:?} is not a period of at least 1 s (e.g. 15s)"))?;
    Ok(Duration::from_secs(seconds))
}

pub fn run(args: Args, settings: &Settings) -> anyhow::Result<ExitCode> {
    let node = Node::open_with(&args.host_root, settings.tool_places())?;
    let deadline = Duration::from_secs(args.query_timeout);
    let samplers = samplers(args.manufacturer)?;
    let mut ledgers = Ledgers {
        explicit: args.data_dir.clone(),
        root: settings.daemon_dir(),
        pod_resources: args.kubelet_dir.join("pod-resources/kubelet.sock"),
        cards: BTreeMap::new(),
        said: Vec::new(),
    };
    let mut taken = 0u64;
    loop {
        match sample_all(&samplers, node.commands.as_ref(), deadline) {
            Ok(samples) => {
                let now = SystemTime::now();
                let names = ledgers.kubelet_names();
                for sample in &samples {
                    let held = ledgers.holdings(sample.manufacturer, &node, deadline, &names);
                    print!("{}", render(sample, held.as_deref(), args.output, now));
                }
            }
            Err(e) if !args.watch => {
                eprintln!("device-manager: monitor: {e}");
                return Ok(ExitCode::from(1));
            }
            Err(e) => eprintln!(
                "device-manager: monitor: {e}; sampling again in {:?}",
                args.monitor_period
            ),
        }
        taken += 1;
        if !args.watch || args.count.is_some_and(|n| taken >= n) {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(args.monitor_period);
    }
}

type Samplers = Vec<(Manufacturer, std::sync::Arc<dyn UsageSampler>)>;

/// The samplers to ask: the named manufacturer's (refused in one line when it has none), or
/// every backend's that has one.
fn samplers(manufacturer: Option<Manufacturer>) -> anyhow::Result<Samplers> {
    match manufacturer {
        Some(m) => {
            let backend = crate::backends::backend(m)?;
            let sampler = backend.sampler.ok_or_else(|| {
                anyhow::anyhow!("monitor: {m} has no live usage sampler in this build")
            })?;
            Ok(vec![(m, sampler)])
        }
        None => Ok(crate::backends::all()
            .into_iter()
            .filter_map(|b| Some((b.manufacturer, b.sampler?)))
            .collect()),
    }
}

/// One sample of every manufacturer whose tool answers. A manufacturer whose tool is not on
/// the host is skipped; the error is the first failure when nothing was sampled.
pub fn sample_all(
    samplers: &Samplers,
    commands: &dyn accel_host::Commands,
    deadline: Duration,
) -> Result<Vec<UsageSample>, SampleError> {
    let mut samples = Vec::new();
    let mut failures = Vec::new();
    for (_, sampler) in samplers {
        match sampler.sample(commands, deadline) {
            Ok(sample) => samples.push(sample),
            Err(e) => failures.push(e),
        }
    }
    if !samples.is_empty() {
        for failure in failures
            .iter()
            .filter(|f| matches!(f, SampleError::Failed(_)))
        {
            eprintln!("device-manager: monitor: {failure}");
        }
        return Ok(samples);
    }
    // Nothing sampled: a tool that ran and failed says more than one that is missing.
    let failed = failures
        .iter()
        .position(|f| matches!(f, SampleError::Failed(_)))
        .unwrap_or(0);
    Err(if failures.is_empty() {
        SampleError::NoTool("no manufacturer of this build has a live usage sampler".into())
    } else {
        failures.swap_remove(failed)
    })
}

/// Where the daemons' ledgers are, and what reading them needs: each manufacturer's cards by
/// index (detected once), and what was already said on stderr (once each).
struct Ledgers {
    /// `--data-dir`: the one manufacturer's directory.
    explicit: Option<PathBuf>,
    /// The daemons' root, under which each manufacturer's default directory is.
    root: PathBuf,
    pod_resources: PathBuf,
    cards: BTreeMap<Manufacturer, BTreeMap<u32, Card>>,
    said: Vec<String>,
}

/// How a grant's container is named: by the kubelet's answer, when it gave one.
type Names = Option<Box<dyn Fn(&GrantKey, &Grant) -> Option<Holder>>>;

impl Ledgers {
    /// Says `line` on stderr, once per run.
    fn say(&mut self, line: String) {
        if !self.said.contains(&line) {
            eprintln!("device-manager: monitor: {line}");
            self.said.push(line);
        }
    }

    /// The holdings in `manufacturer`'s ledger; `None` when it has no ledger to read (no
    /// journal where its daemon keeps one, or one that does not read: said once).
    fn holdings(
        &mut self,
        manufacturer: Manufacturer,
        node: &Node,
        deadline: Duration,
        names: &Names,
    ) -> Option<Vec<Holding>> {
        let dir = match &self.explicit {
            Some(dir) => dir.clone(),
            None => crate::datadir::state_dir(&self.root, manufacturer),
        };
        let grants = match read_journal(&dir) {
            Ok(Some(grants)) => grants,
            Ok(None) if self.explicit.is_none() => return None,
            Ok(None) => {
                self.say(format!(
                    "{}: no ledger journal; holders are not shown",
                    dir.display()
                ));
                return None;
            }
            Err(why) => {
                self.say(format!("{why}; holders are not shown"));
                return None;
            }
        };
        if !grants.is_empty() && !self.cards.contains_key(&manufacturer) {
            let cards = detect_cards(node, manufacturer, deadline);
            if cards.is_empty() {
                self.say(format!(
                    "{manufacturer}: detection named no accelerator, so the ledger's grants cannot be placed"
                ));
            }
            self.cards.insert(manufacturer, cards);
        }
        if !grants.is_empty() && names.is_none() {
            let socket = self.pod_resources.display().to_string();
            self.say(format!(
                "the kubelet's pod-resources ({socket}) did not answer: holders are named by Pod UID"
            ));
        }
        let cards = self.cards.get(&manufacturer).cloned().unwrap_or_default();
        let name = |key: &GrantKey, grant: &Grant| names.as_ref().and_then(|n| n(key, grant));
        Some(holdings::holdings(manufacturer, &grants, &cards, name))
    }

    /// The kubelet's pod-resources answer as a way to name grants, or `None` when it did not
    /// answer within a second.
    fn kubelet_names(&self) -> Names {
        let socket = self.pod_resources.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        let answer = runtime.block_on(async move {
            let channel = accel_plugin::socket::connect(socket).await.ok()?;
            let mut client = accel_plugin::api::podresources::pod_resources_lister_client::PodResourcesListerClient::new(channel);
            let call = client.list(accel_plugin::api::podresources::ListPodResourcesRequest {});
            match tokio::time::timeout(Duration::from_secs(1), call).await {
                Ok(Ok(answer)) => Some(answer.into_inner()),
                _ => None,
            }
        })?;
        Some(Box::new(holdings::name_by_kubelet(&answer)))
    }
}

/// The grants of the journal in `dir`: `Ok(None)` when there is none, `Err` (one line naming
/// the file) when it cannot be read. Read only; a torn last line is what the daemon drops too.
fn read_journal(dir: &Path) -> Result<Option<BTreeMap<GrantKey, Grant>>, String> {
    let path = dir.join(accel_plugin::journal::FILE_NAME);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(format!(
                "{}: cannot read the ledger journal: {e}",
                path.display()
            ));
        }
    };
    accel_plugin::journal::replay_bytes(&bytes)
        .map(|(grants, _)| Some(grants))
        .map_err(|e| format!("{}: the ledger journal does not read ({e})", path.display()))
}

/// The manufacturer's accelerators by index, detected on the node (what the ledger's indexes
/// are); none when its detector does not answer.
fn detect_cards(
    node: &Node,
    manufacturer: Manufacturer,
    deadline: Duration,
) -> BTreeMap<u32, Card> {
    let Ok(backend) = crate::backends::backend(manufacturer) else {
        return BTreeMap::new();
    };
    let prefixes = PciClassPrefixes::default();
    let request = DetectRequest {
        host: node.host.as_ref(),
        commands: node.commands.as_ref(),
        deadlines: Deadlines {
            per_query: deadline,
            snapshot: deadline * 2,
        },
        state_dir: None,
        pci_classes: &prefixes,
        vendor_ids: &node.table.get(manufacturer).pci_vendor_ids,
        pci_gate: false,
    };
    match backend.detector.detect(&request) {
        Ok(Ok(section)) => holdings::cards_of_inventory(&section.accelerators),
        _ => BTreeMap::new(),
    }
}

/// The holdings on one sampled accelerator.
fn held_on<'a>(row: &AcceleratorUsage, held: &'a [Holding]) -> Vec<&'a Holding> {
    held.iter()
        .filter(|h| h.uuid.as_deref() == Some(row.uuid.as_str()))
        .collect()
}

/// One sample as the chosen format prints it; `held`: the ledger's holdings, when it was read.
pub fn render(
    sample: &UsageSample,
    held: Option<&[Holding]>,
    format: Format,
    time: SystemTime,
) -> String {
    match format {
        Format::Json => {
            let gpus: Vec<serde_json::Value> = sample
                .accelerators
                .iter()
                .map(|row| {
                    let mut gpu = serde_json::to_value(row).unwrap_or_default();
                    if let (Some(held), Some(object)) = (held, gpu.as_object_mut()) {
                        let holders = held_on(row, held).into_iter().map(holder_json).collect();
                        object.insert("holders".into(), serde_json::Value::Array(holders));
                    }
                    gpu
                })
                .collect();
            let value = serde_json::json!({
                "time": crate::publish::rfc3339(time),
                "manufacturer": sample.manufacturer,
                "source": sample.source,
                "gpus": gpus,
            });
            format!("{value}\n")
        }
        Format::Table => table(sample, held),
    }
}

/// One holding as `monitor -o json` lists it under its accelerator.
fn holder_json(h: &Holding) -> serde_json::Value {
    let holder = h.holder.as_ref();
    serde_json::json!({
        "namespace": holder.map(|n| n.namespace.clone()),
        "pod": holder.map(|n| n.pod.clone()),
        "container": holder.map(|n| n.container.clone()).or_else(|| h.container.clone()),
        "podUid": (!h.pod_uid.is_empty()).then(|| h.pod_uid.clone()),
        "family": h.family,
        "resource": h.resource,
        "memoryMiB": h.memory_mib,
        "coresPercentage": h.cores_percentage,
        "profile": h.profile,
    })
}

/// The FAMILY and HOLDER cells of an accelerator: its holders' family, and each holder with a
/// slice's budget or a partition's profile; `-` when nobody holds it.
fn holder_cells(held: &[&Holding]) -> [String; 2] {
    if held.is_empty() {
        return ["-".into(), "-".into()];
    }
    let mut families: Vec<Family> = held.iter().map(|h| h.family).collect();
    families.dedup();
    let family: Vec<&str> = families.iter().map(|f| f.name()).collect();
    let who: Vec<String> = held
        .iter()
        .map(|h| {
            let budget: Vec<String> = [
                h.profile.clone(),
                h.memory_mib
                    .filter(|_| h.profile.is_none())
                    .map(|m| format!("{m} MiB")),
                h.cores_percentage.map(|c| format!("{c} % cores")),
            ]
            .into_iter()
            .flatten()
            .collect();
            if budget.is_empty() {
                h.who()
            } else {
                format!("{} ({})", h.who(), budget.join(", "))
            }
        })
        .collect();
    [family.join(","), who.join("; ")]
}

/// One line per accelerator, in the tool's order; a reading the tool did not give is `-`. With
/// the ledger read, each line ends with its holders' family and the holders.
pub fn table(sample: &UsageSample, held: Option<&[Holding]>) -> String {
    let mut header = vec!["UUID", "UTIL", "MEMORY", "TEMP", "POWER", "PROCS"];
    if held.is_some() {
        header.extend(["FAMILY", "HOLDER"]);
    }
    let rows: Vec<Vec<String>> = sample
        .accelerators
        .iter()
        .map(|r| {
            let memory = match (r.memory_used_mib, r.memory_total_mib) {
                (None, None) => "-".to_string(),
                (used, total) => format!("{} / {} MiB", number(used), number(total)),
            };
            let power = match (r.power_draw_w, r.power_limit_w) {
                (None, None) => "-".to_string(),
                (Some(draw), Some(limit)) => format!("{draw:.0} / {limit:.0} W"),
                (Some(draw), None) => format!("{draw:.0} W"),
                (None, Some(limit)) => format!("- / {limit:.0} W"),
            };
            let mut cells = vec![
                r.uuid.clone(),
                r.utilization_percent
                    .map_or_else(|| "-".to_string(), |u| format!("{u:.0} %")),
                memory,
                r.temperature_c
                    .map_or_else(|| "-".to_string(), |t| format!("{t:.0} C")),
                power,
                r.compute_processes
                    .map_or_else(|| "-".to_string(), |p| p.to_string()),
            ];
            if let Some(held) = held {
                cells.extend(holder_cells(&held_on(r, held)));
            }
            cells
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[&str]| {
        let text: Vec<String> = cells
            .iter()
            .zip(widths.iter())
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", text.join("  ").trim_end());
    };
    line(&mut out, &header);
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&mut out, &cells);
    }
    out
}

fn number(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_read_seconds_or_a_unit_and_refuse_nonsense_naming_it() {
        assert_eq!(parse_period("15"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_period("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_period("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_period("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["0", "0s", "", "fast", "15ms", "-3"] {
            let e = parse_period(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }
}
