//! `device-manager monitor [--host-root DIR] [--manufacturer M] [-o table|json] [--watch]
//! [--monitor-period 15s]`: each accelerator's live usage, one line per accelerator
//! (utilization, memory used/total, temperature, power, compute processes), read with each
//! manufacturer's sampler (the backend's `UsageSampler`: nvidia-smi's CSV query, seed 002 "Live
//! samples"; amd-smi's `metric --json`). Without `--manufacturer`, every manufacturer whose
//! tool is on the host is sampled; one whose tool is missing is skipped. With `--watch` it
//! samples again every period until interrupted (or `--count` samples); a sample that fails is
//! reported on stderr and the watch goes on. Samples never enter the inventory.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use accel_backend::usage::{SampleError, UsageSample, UsageSampler};
use accel_core::Manufacturer;

use super::Format;
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
    let mut taken = 0u64;
    loop {
        match sample_all(&samplers, node.commands.as_ref(), deadline) {
            Ok(samples) => {
                let now = SystemTime::now();
                for sample in &samples {
                    print!("{}", render(sample, args.output, now));
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

/// One sample as the chosen format prints it.
pub fn render(sample: &UsageSample, format: Format, time: SystemTime) -> String {
    match format {
        Format::Json => {
            let value = serde_json::json!({
                "time": crate::publish::rfc3339(time),
                "manufacturer": sample.manufacturer,
                "source": sample.source,
                "gpus": sample.accelerators,
            });
            format!("{value}\n")
        }
        Format::Table => table(sample),
    }
}

/// One line per accelerator, in the tool's order; a reading the tool did not give is `-`.
pub fn table(sample: &UsageSample) -> String {
    let header = ["UUID", "UTIL", "MEMORY", "TEMP", "POWER", "PROCS"];
    let rows: Vec<[String; 6]> = sample
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
            [
                r.uuid.clone(),
                r.utilization_percent
                    .map_or_else(|| "-".to_string(), |u| format!("{u:.0} %")),
                memory,
                r.temperature_c
                    .map_or_else(|| "-".to_string(), |t| format!("{t:.0} C")),
                power,
                r.compute_processes
                    .map_or_else(|| "-".to_string(), |p| p.to_string()),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
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
