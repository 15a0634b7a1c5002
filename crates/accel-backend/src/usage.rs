//! Live usage behind the seam: what a manufacturer's sampler reads often and cheaply (seed 002,
//! "Live samples"), in one shape every manufacturer can fill. `monitor` prints it and the
//! daemon's `device_manager_gpu_*` gauges export it; it never enters the inventory (usage is no
//! fact of what the node has, and a busy accelerator must not resend its section).
//!
//! Every reading is optional: a tool that does not give one, or gives a placeholder, leaves it
//! `None`, never 0. This module holds the shape and the trait; the samplers (nvidia-smi's CSV
//! query, amd-smi's `metric --json`) live in their manufacturer's crate.

use std::time::Duration;

use accel_core::Manufacturer;
use accel_host::Commands;
use serde::Serialize;

/// One accelerator's usage at one moment. Absent readings are `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AcceleratorUsage {
    /// The accelerator's identity as the inventory names it (its `uuid`).
    pub uuid: String,
    /// The tool's index of the accelerator, where it prints one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// Compute engine utilisation over the tool's last sample period, in percent.
    pub utilization_percent: Option<f64>,
    pub memory_used_mib: Option<u64>,
    pub memory_total_mib: Option<u64>,
    /// The accelerator's temperature (the tool's main sensor), in °C.
    pub temperature_c: Option<f64>,
    /// The power drawn now, in watts.
    pub power_draw_w: Option<f64>,
    /// The power limit in force, in watts.
    pub power_limit_w: Option<f64>,
    /// Compute processes on the accelerator, where the tool lists them.
    pub compute_processes: Option<u32>,
    /// Readings only this manufacturer's tool gives (NVIDIA: memory reserved and free, memory
    /// utilisation, clocks, performance state), by their own names; kept so `monitor -o json`
    /// loses nothing the tool said.
    #[serde(flatten)]
    pub extra: std::collections::BTreeMap<String, serde_json::Value>,
}

/// A sample of every accelerator, and which path of the tool produced it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageSample {
    pub manufacturer: Manufacturer,
    /// The path taken (`csv`, `{"snapshot": {"reason": …}}`, `amd-smi metric`), as JSON.
    pub source: serde_json::Value,
    pub accelerators: Vec<AcceleratorUsage>,
}

/// Why no sample could be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SampleError {
    /// The manufacturer's tool is not on the host (its driver, or its tools, are missing).
    #[error("{0}")]
    NoTool(String),
    /// The tool ran and could not give a sample (it failed, hung or printed something else).
    #[error("{0}")]
    Failed(String),
}

/// One bounded call of a sampler's tool: its standard output, or why there is none. A tool not
/// on the host is [`SampleError::NoTool`] with `missing` (what that means on this
/// manufacturer's node); any other failure is [`SampleError::Failed`] (its text names the
/// command).
pub fn run_tool(
    commands: &dyn Commands,
    argv: &[&str],
    deadline: Duration,
    missing: &str,
) -> Result<String, SampleError> {
    let program = argv.first().copied().unwrap_or_default();
    match accel_host::run_bounded(commands, argv, deadline) {
        Ok(output) => Ok(output.stdout_text()),
        Err(accel_host::RunFailure::NotInstalled { .. }) => Err(SampleError::NoTool(format!(
            "{program}: not found ({missing})"
        ))),
        Err(e) => Err(SampleError::Failed(e.to_string())),
    }
}

/// A tool's argv and the reader of what it prints.
pub type Reader<'a, R> = (&'a [&'a str], fn(&str) -> R);

/// The two calls of a sampler whose tool prints usage in one table and names the rows in
/// another call (ixsmi's CSV query, mthreads-gmi's `-q`, mx-smi's `-L`, `cnmon info`): the
/// table, whose failure is the sample's, then the names, whose failure leaves the rows unnamed
/// (`N::default()`), never the sample lost.
pub fn table_and_names<T, E: std::fmt::Display, N: Default>(
    commands: &dyn Commands,
    deadline: Duration,
    missing: &str,
    table: Reader<'_, Result<T, E>>,
    names: Reader<'_, Option<N>>,
) -> Result<(T, N), SampleError> {
    let text = run_tool(commands, table.0, deadline, missing)?;
    let rows = (table.1)(&text).map_err(|e| SampleError::Failed(e.to_string()))?;
    let named = run_tool(commands, names.0, deadline, missing)
        .ok()
        .and_then(|text| (names.1)(&text))
        .unwrap_or_default();
    Ok((rows, named))
}

/// One manufacturer's live usage sampler.
pub trait UsageSampler: Send + Sync + std::fmt::Debug {
    /// Takes one sample of every accelerator, each tool call bounded by `deadline`.
    fn sample(
        &self,
        commands: &dyn Commands,
        deadline: Duration,
    ) -> Result<UsageSample, SampleError>;
}
