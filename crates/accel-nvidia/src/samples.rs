//! Live samples: usage read often and cheaply, kept apart from the inventory (seed 002, "Live
//! samples"). Usage never enters the inventory hash, so a busy GPU does not resend its section.
//!
//! One CSV query for exactly a sample's fields plus one for the compute processes. It falls back
//! to the full `-q -x` snapshot when a GPU is in MIG mode (a MIG device's memory is in `-q -x`
//! only), when the driver refuses a field it predates (`memory.reserved` before R510), or when a
//! line has the wrong number of columns. A host without nvidia-smi gets [`SampleError::NoDriver`],
//! not a fallback.

use std::time::Duration;

use accel_backend::usage::{
    AcceleratorUsage, SampleError as UsageError, UsageSample, UsageSampler,
};
use accel_host::{Commands, RunFailure, run_bounded};
use serde::Serialize;

use crate::detector::{NO_NVIDIA_SMI, NVIDIA_SMI, QUERY_XML};
use crate::smi;
use crate::smi::csv::{COMPUTE_APPS_ARGV, FallbackReason, GpuSample, SAMPLE_ARGV};

/// Which path produced a sample.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SampleSource {
    /// The CSV query.
    Csv,
    /// The full snapshot, and why.
    Snapshot { reason: String },
}

/// One GPU's usage at one moment. Absent readings are `None`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuUsage {
    #[serde(flatten)]
    pub reading: GpuSample,
    /// Compute processes only: graphics processes (a compositor, WSL's Xwayland) are no workload.
    pub compute_processes: u32,
}

/// A sample of every GPU and the path it took.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Samples {
    pub source: SampleSource,
    pub gpus: Vec<GpuUsage>,
}

/// Why no sample could be taken.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    /// No nvidia-smi on the host (`ErrNoDriver`).
    #[error("{NO_NVIDIA_SMI}")]
    NoDriver,
    /// A query could not run to its end, or exited non-zero for a reason that is not a
    /// fallback (worded by `accel_host::run_bounded`).
    #[error("{0}")]
    Run(#[source] RunFailure),
    /// The fallback snapshot was not a report.
    #[error(transparent)]
    Xml(#[from] smi::xml::XmlError),
}

/// Takes one sample of every GPU, each query bounded by `deadline`.
pub fn sample(commands: &dyn Commands, deadline: Duration) -> Result<Samples, SampleError> {
    if !commands.is_installed(NVIDIA_SMI) {
        return Err(SampleError::NoDriver);
    }
    let output = run(commands, SAMPLE_ARGV, deadline)?;
    let parsed = smi::csv::parse_samples(&output.stdout_text(), &output.stderr_text());
    let rows = match parsed {
        Ok(rows) if output.success() => rows,
        Ok(_) => return Err(SampleError::Run(RunFailure::exited(SAMPLE_ARGV, output))),
        Err(reason) => return from_snapshot(commands, deadline, &reason),
    };
    let apps = run(commands, COMPUTE_APPS_ARGV, deadline)?;
    if !apps.success() {
        return Err(SampleError::Run(RunFailure::exited(
            COMPUTE_APPS_ARGV,
            apps,
        )));
    }
    let counts = smi::csv::parse_compute_app_counts(&apps.stdout_text());
    let gpus = rows
        .into_iter()
        .map(|reading| GpuUsage {
            compute_processes: counts.get(&reading.uuid).copied().unwrap_or(0),
            reading,
        })
        .collect();
    Ok(Samples {
        source: SampleSource::Csv,
        gpus,
    })
}

fn from_snapshot(
    commands: &dyn Commands,
    deadline: Duration,
    reason: &FallbackReason,
) -> Result<Samples, SampleError> {
    let output = run(commands, QUERY_XML, deadline)?;
    if !output.success() {
        return Err(SampleError::Run(RunFailure::exited(QUERY_XML, output)));
    }
    let report = smi::xml::parse(&output.stdout)?;
    let gpus = report
        .gpus
        .iter()
        .filter_map(|gpu| {
            Some(GpuUsage {
                reading: GpuSample {
                    uuid: gpu.uuid.clone()?,
                    memory_total_mib: gpu.memory.total_mib,
                    memory_used_mib: gpu.memory.used_mib,
                    memory_reserved_mib: gpu.memory.reserved_mib,
                    memory_free_mib: gpu.memory.free_mib,
                    utilization_gpu_percent: gpu.usage.utilization_gpu_percent,
                    utilization_memory_percent: gpu.usage.utilization_memory_percent,
                    temperature_c: gpu.usage.temperature_c,
                    power_draw_w: gpu.usage.power_draw_w,
                    power_limit_w: gpu.usage.power_limit_w,
                    clock_sm_mhz: gpu.usage.clock_sm_mhz,
                    clock_mem_mhz: gpu.usage.clock_mem_mhz,
                    pstate: gpu.usage.pstate.clone(),
                },
                compute_processes: gpu.compute_process_count() as u32,
            })
        })
        .collect();
    Ok(Samples {
        source: SampleSource::Snapshot {
            reason: reason.to_string(),
        },
        gpus,
    })
}

fn run(
    commands: &dyn Commands,
    argv: &[&str],
    deadline: Duration,
) -> Result<accel_host::CommandOutput, SampleError> {
    // A non-zero answer is read: its stderr says whether to fall back to the snapshot.
    match run_bounded(commands, argv, deadline) {
        Ok(output) | Err(RunFailure::Exited { output, .. }) => Ok(output),
        Err(RunFailure::NotInstalled { .. }) if argv == SAMPLE_ARGV => Err(SampleError::NoDriver),
        Err(e) => Err(SampleError::Run(e)),
    }
}

/// NVIDIA's live usage behind the seam ([`sample`], as the manufacturer-neutral sample).
#[derive(Debug, Clone, Copy, Default)]
pub struct SmiSampler;

impl UsageSampler for SmiSampler {
    fn sample(
        &self,
        commands: &dyn Commands,
        deadline: Duration,
    ) -> Result<UsageSample, UsageError> {
        let taken = sample(commands, deadline).map_err(|e| match e {
            SampleError::NoDriver => UsageError::NoTool(e.to_string()),
            other => UsageError::Failed(other.to_string()),
        })?;
        Ok(taken.into_usage())
    }
}

impl Samples {
    /// This sample in the shape every manufacturer fills: the common readings by their
    /// neutral names, the rest of nvidia-smi's (memory reserved and free, memory utilisation,
    /// clocks, performance state) kept by theirs.
    pub fn into_usage(self) -> UsageSample {
        let source = serde_json::to_value(&self.source).unwrap_or(serde_json::Value::Null);
        let accelerators = self.gpus.into_iter().map(GpuUsage::into_usage).collect();
        UsageSample {
            manufacturer: accel_core::Manufacturer::Nvidia,
            source,
            accelerators,
        }
    }
}

impl GpuUsage {
    fn into_usage(self) -> AcceleratorUsage {
        let r = self.reading;
        let mut extra = std::collections::BTreeMap::new();
        let mut keep = |name: &str, value: Option<serde_json::Value>| {
            if let Some(value) = value {
                extra.insert(name.to_string(), value);
            }
        };
        keep("memoryReservedMib", r.memory_reserved_mib.map(Into::into));
        keep("memoryFreeMib", r.memory_free_mib.map(Into::into));
        keep(
            "utilizationMemoryPercent",
            r.utilization_memory_percent.map(Into::into),
        );
        keep("clockSmMhz", r.clock_sm_mhz.map(Into::into));
        keep("clockMemMhz", r.clock_mem_mhz.map(Into::into));
        keep("pstate", r.pstate.map(Into::into));
        AcceleratorUsage {
            uuid: r.uuid,
            index: None,
            utilization_percent: r.utilization_gpu_percent,
            memory_used_mib: r.memory_used_mib,
            memory_total_mib: r.memory_total_mib,
            temperature_c: r.temperature_c,
            power_draw_w: r.power_draw_w,
            power_limit_w: r.power_limit_w,
            compute_processes: Some(self.compute_processes),
            extra,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_host::RecordedCommands;
    use std::path::{Path, PathBuf};

    fn hosts() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/hosts")
    }

    fn recorded(dir: &Path) -> RecordedCommands {
        RecordedCommands::load(dir).unwrap()
    }

    fn write(dir: &Path, name: &str, argv: &[&str], stdout: &str, stderr: &str, status: i32) {
        let cmd = dir.join("commands").join(name);
        std::fs::create_dir_all(&cmd).unwrap();
        std::fs::write(cmd.join("argv"), argv.join("\n") + "\n").unwrap();
        std::fs::write(cmd.join("stdout"), stdout).unwrap();
        std::fs::write(cmd.join("stderr"), stderr).unwrap();
        std::fs::write(cmd.join("status"), status.to_string()).unwrap();
    }

    const SECOND: Duration = Duration::from_secs(5);

    #[test]
    fn csv_path_on_the_eight_gpu_host() {
        let samples = sample(&recorded(&hosts().join("hgx-h100-8gpu")), SECOND).unwrap();
        assert_eq!(samples.source, SampleSource::Csv);
        assert_eq!(samples.gpus.len(), 8);
        assert_eq!(samples.gpus[0].reading.memory_total_mib, Some(81559));
    }

    #[test]
    fn the_neutral_sample_keeps_every_reading_under_its_name() {
        let samples = SmiSampler
            .sample(&recorded(&hosts().join("hgx-h100-8gpu")), SECOND)
            .unwrap();
        assert_eq!(samples.manufacturer, accel_core::Manufacturer::Nvidia);
        assert_eq!(samples.source, serde_json::json!("csv"));
        assert_eq!(samples.accelerators.len(), 8);
        let gpu = &samples.accelerators[0];
        assert_eq!(gpu.memory_total_mib, Some(81559));
        assert_eq!(gpu.compute_processes, Some(0));
        assert!(gpu.utilization_percent.is_some());
        assert!(gpu.extra.contains_key("pstate"), "{:?}", gpu.extra);
        let none = SmiSampler.sample(&recorded(&hosts().join("no-driver")), SECOND);
        assert!(matches!(none, Err(UsageError::NoTool(_))), "{none:?}");
    }

    #[test]
    fn mig_mode_falls_back_to_the_snapshot() {
        let samples = sample(&recorded(&hosts().join("h100-mig")), SECOND).unwrap();
        match &samples.source {
            SampleSource::Snapshot { reason } => assert!(reason.contains("MIG"), "{reason}"),
            other => panic!("expected the snapshot, got {other:?}"),
        }
        assert_eq!(samples.gpus.len(), 1);
    }

    #[test]
    fn refused_field_and_column_count_fall_back() {
        let xml =
            std::fs::read_to_string(hosts().join("dual-rtx-a5000/commands/q-x/stdout")).unwrap();
        for (stdout, stderr, status, want) in [
            (
                "",
                "Field \"memory.reserved\" is not a valid field to query.\n",
                2,
                "memory.reserved",
            ),
            ("GPU-a, 1, 2\n", "", 0, "fields"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            write(dir.path(), "sample", SAMPLE_ARGV, stdout, stderr, status);
            write(dir.path(), "q-x", QUERY_XML, &xml, "", 0);
            let samples = sample(&recorded(dir.path()), SECOND).unwrap();
            let SampleSource::Snapshot { reason } = &samples.source else {
                panic!("expected the snapshot");
            };
            assert!(reason.contains(want), "{reason}");
            assert_eq!(samples.gpus.len(), 2);
            assert_eq!(
                samples
                    .gpus
                    .iter()
                    .map(|g| g.compute_processes)
                    .sum::<u32>(),
                2
            );
        }
    }

    #[test]
    fn compute_apps_count_per_gpu() {
        let dir = tempfile::tempdir().unwrap();
        let line = "GPU-a, 81559, 10, 0, 81000, 5, 1, 30, 70.5, 700.00, 1980, 2619, P0, Disabled\n";
        write(dir.path(), "sample", SAMPLE_ARGV, line, "", 0);
        write(
            dir.path(),
            "apps",
            COMPUTE_APPS_ARGV,
            "GPU-a\nGPU-a\n",
            "",
            0,
        );
        let samples = sample(&recorded(dir.path()), SECOND).unwrap();
        assert_eq!(samples.gpus[0].compute_processes, 2);
        assert_eq!(samples.gpus[0].reading.power_draw_w, Some(70.5));
    }

    #[test]
    fn no_nvidia_smi_is_no_driver() {
        let err = sample(&RecordedCommands::empty(), SECOND).unwrap_err();
        assert!(matches!(err, SampleError::NoDriver));
        assert_eq!(err.to_string(), NO_NVIDIA_SMI);
    }
}
