//! A recorded host whose MIG state follows the commands run against it (issue 13, item 9): the
//! dialect-generic replay ([`accel_backend::mig_cli::replay`]) with nvidia-smi's side — the
//! `-L` listing's `MIG …` children and the `-q -x` report's `<mig_devices>` and `<processes>`
//! rendered from the state (also its `-q -x -i N` form, the report cut to GPU N), GPU
//! instance ids from 1, compute profile ids as nvidia-smi numbers them.
//!
//! An instance marked `busy` in the state file has one compute process on each of its compute
//! instances in the `-q -x` report, as nvidia-smi's process listing names them (GPU and compute
//! instance id).

use std::path::Path;
use std::time::Duration;

use accel_backend::mig_cli::replay::{
    self, Dialect, STATUS_INVALID, STATUS_NOT_FOUND, answer, answer_like,
};
use accel_host::{CommandError, CommandOutput, Commands};

pub use accel_backend::mig_cli::replay::{MigState, STATE_FILE, StateCompute, StateInstance};

/// nvidia-smi's side of the replay.
#[derive(Debug, Clone, Copy, Default)]
pub struct NvidiaSmi;

/// `inner`, wrapped in the MIG replay when the recording `dir` has a [`STATE_FILE`].
pub fn wrap(dir: &Path, inner: Box<dyn Commands>) -> Box<dyn Commands> {
    replay::wrap(dir, inner, NvidiaSmi)
}

/// nvidia-smi's compute profile id of a compute instance covering `slices` compute slices.
fn full_compute_profile_id(slices: u32) -> u32 {
    match slices {
        1 => 0,
        2 => 1,
        3 => 2,
        4 => 3,
        7 => 4,
        6 => 5,
        other => other,
    }
}

impl Dialect for NvidiaSmi {
    fn program(&self) -> &'static str {
        "nvidia-smi"
    }

    fn device_word(&self) -> &'static str {
        "GPU"
    }

    fn compute_profile_id(&self, slices: u32) -> u32 {
        full_compute_profile_id(slices)
    }

    fn renders(&self, argv: &[&str]) -> bool {
        matches!(
            argv,
            ["nvidia-smi", "-L"] | ["nvidia-smi", "-q", "-x"] | ["nvidia-smi", "-q", "-x", "-i", _]
        )
    }

    fn render(
        &self,
        argv: &[&str],
        state: &MigState,
        inner: &dyn Commands,
        deadline: Duration,
    ) -> Result<CommandOutput, CommandError> {
        match argv {
            ["nvidia-smi", "-L"] => {
                let out = inner.run(argv, deadline)?;
                Ok(answer_like(&out, list_with(&out.stdout_text(), state)))
            }
            ["nvidia-smi", "-q", "-x", "-i", index] => {
                let Ok(gpu) = index.parse::<u32>() else {
                    return Ok(answer(
                        STATUS_INVALID,
                        format!("Invalid GPU index {index}\n"),
                    ));
                };
                let out = inner.run(&["nvidia-smi", "-q", "-x"], deadline)?;
                match xml_cut(&xml_with(&out.stdout_text(), state), gpu) {
                    Some(one) => Ok(answer_like(&out, one)),
                    None => Ok(answer(
                        STATUS_NOT_FOUND,
                        format!("No GPU with index {gpu} found\n"),
                    )),
                }
            }
            _ => {
                let out = inner.run(argv, deadline)?;
                Ok(answer_like(&out, xml_with(&out.stdout_text(), state)))
            }
        }
    }
}

fn list_with(text: &str, state: &MigState) -> String {
    replay::list_with_children(text, state, "GPU ", &|device, instance, compute| {
        format!(
            "  MIG {:<12} Device {device:>2}: (UUID: {})",
            instance.profile, compute.uuid
        )
    })
}

/// nvidia-smi's index of each `<gpu id="…">` element of a report, by document position: GPUs
/// are numbered in bus order.
fn smi_indexes(text: &str) -> Vec<Option<u32>> {
    let ids: Vec<String> = text
        .split("<gpu id=\"")
        .skip(1)
        .map(|piece| piece.split('"').next().unwrap_or("").to_ascii_lowercase())
        .collect();
    let mut order: Vec<(&String, usize)> = ids.iter().zip(0..).collect();
    order.sort();
    (0..ids.len())
        .map(|doc| {
            order
                .iter()
                .position(|(_, n)| *n == doc)
                .and_then(|p| u32::try_from(p).ok())
        })
        .collect()
}

/// The report cut to GPU `gpu` (what `nvidia-smi -q -x -i N` prints): the header, that GPU's
/// element, the closing tag. `None` when the report has no such GPU.
fn xml_cut(text: &str, gpu: u32) -> Option<String> {
    const OPEN: &str = "<gpu id=\"";
    const END: &str = "</nvidia_smi_log>";
    let doc = smi_indexes(text).iter().position(|i| *i == Some(gpu))?;
    let header = &text[..text.find(OPEN)?];
    let piece = text.split(OPEN).nth(doc + 1)?;
    let body = piece.split(END).next().unwrap_or(piece).trim_end();
    Some(format!("{header}{OPEN}{body}\n\n{END}\n"))
}

/// `<process_info>` of one compute process on a GPU and compute instance (the order of the v11+
/// report).
fn process_info(gi: u32, ci: u32, pid: u32) -> String {
    format!(
        "\t\t\t<process_info>\n\t\t\t\t<gpu_instance_id>{gi}</gpu_instance_id>\n\t\t\t\t<compute_instance_id>{ci}</compute_instance_id>\n\t\t\t\t<pid>{pid}</pid>\n\t\t\t\t<type>C</type>\n\t\t\t\t<process_name>python3</process_name>\n\t\t\t\t<used_memory>512 MiB</used_memory>\n\t\t\t</process_info>\n"
    )
}

/// The recorded `-q -x` report with each GPU's `<mig_devices>` from the state, and its
/// `<processes>` listing one compute process on each compute instance of a `busy` instance.
/// GPUs are matched to nvidia-smi's index by bus order (`<gpu id="…">`), as nvidia-smi numbers
/// them.
fn xml_with(text: &str, state: &MigState) -> String {
    let text = processes_with(text, state);
    mig_devices_with(&text, state)
}

fn processes_with(text: &str, state: &MigState) -> String {
    const OPEN: &str = "<processes>";
    const CLOSE: &str = "</processes>";
    let indexes = smi_indexes(text);
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut doc = 0usize;
    while let Some(at) = rest.find(OPEN) {
        let Some(end) = rest[at..].find(CLOSE) else {
            break;
        };
        let busy: Vec<(u32, u32)> = indexes
            .get(doc)
            .copied()
            .flatten()
            .map(|gpu| {
                state
                    .on(Some(gpu))
                    .iter()
                    .filter(|i| i.busy)
                    .flat_map(|i| i.compute_instances.iter().map(|c| (i.gpu_instance, c.id)))
                    .collect()
            })
            .unwrap_or_default();
        if busy.is_empty() {
            out.push_str(&rest[..at + end + CLOSE.len()]);
        } else {
            out.push_str(&rest[..at]);
            out.push_str(OPEN);
            out.push('\n');
            for (n, (gi, ci)) in busy.iter().enumerate() {
                let pid = 4000 + 100 * indexes[doc].unwrap_or(0) + u32::try_from(n).unwrap_or(0);
                out.push_str(&process_info(*gi, *ci, pid));
            }
            out.push_str("\t\t");
            out.push_str(CLOSE);
        }
        rest = &rest[at + end + CLOSE.len()..];
        doc += 1;
    }
    out.push_str(rest);
    out
}

fn mig_devices_with(text: &str, state: &MigState) -> String {
    const OPEN: &str = "<mig_devices>";
    const CLOSE: &str = "</mig_devices>";
    let indexes = smi_indexes(text);
    let smi_index = |doc: usize| indexes.get(doc).copied().flatten();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut doc = 0usize;
    while let Some(at) = rest.find(OPEN) {
        let Some(end) = rest[at..].find(CLOSE) else {
            break;
        };
        out.push_str(&rest[..at]);
        out.push_str(OPEN);
        let devices: Vec<(u32, u32)> = smi_index(doc)
            .map(|gpu| {
                state
                    .on(Some(gpu))
                    .iter()
                    .flat_map(|i| i.compute_instances.iter().map(|c| (i.gpu_instance, c.id)))
                    .collect()
            })
            .unwrap_or_default();
        if devices.is_empty() {
            out.push_str("\n\t\t\tNone\n\t\t");
        } else {
            out.push('\n');
            for (k, (gi, ci)) in devices.iter().enumerate() {
                out.push_str(&format!(
                    "\t\t\t<mig_device>\n\t\t\t\t<index>{k}</index>\n\t\t\t\t<gpu_instance_id>{gi}</gpu_instance_id>\n\t\t\t\t<compute_instance_id>{ci}</compute_instance_id>\n\t\t\t</mig_device>\n"
                ));
            }
            out.push_str("\t\t");
        }
        out.push_str(CLOSE);
        rest = &rest[at + end + CLOSE.len()..];
        doc += 1;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smi;
    use accel_host::RecordedCommands;

    const LONG: Duration = Duration::from_secs(20);

    fn host() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let src =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/hosts/hgx-h100-8gpu-mig");
        copy(&src, dir.path());
        dir
    }

    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            let target = to.join(entry.file_name());
            if kind.is_dir() {
                copy(&entry.path(), &target);
            } else if kind.is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(entry.path()).unwrap(), target)
                    .unwrap();
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }

    fn replay(dir: &Path) -> Box<dyn Commands> {
        wrap(dir, Box::new(RecordedCommands::load(dir).unwrap()))
    }

    fn run(c: &dyn Commands, argv: &[&str]) -> CommandOutput {
        c.run(argv, LONG).unwrap()
    }

    #[test]
    fn instances_follow_the_commands_and_gi_ids_are_reused() {
        let dir = host();
        let c = replay(dir.path());
        let lgi = run(&*c, &["nvidia-smi", "mig", "-i", "0", "-lgi"]);
        assert_eq!(lgi.status, Some(6));
        assert_eq!(
            smi::mig::parse_gpu_instances(&lgi.stdout_text()),
            Ok(vec![])
        );

        let made = run(&*c, &["nvidia-smi", "mig", "-i", "0", "-cgi", "9:4", "-C"]);
        assert!(made.success(), "{}", made.stdout_text());
        assert!(made.stdout_text().starts_with(
            "Successfully created GPU instance ID  1 on GPU  0 using profile MIG 3g.40gb (ID  9)"
        ));
        let overlapping = run(&*c, &["nvidia-smi", "mig", "-i", "0", "-cgi", "14:4", "-C"]);
        assert_eq!(
            overlapping.status,
            Some(255),
            "a 2g at 4 overlaps the 3g at 4"
        );
        assert!(overlapping.stdout_text().contains("Insufficient Resources"));
        let second = run(&*c, &["nvidia-smi", "mig", "-i", "0", "-cgi", "19:0", "-C"]);
        assert!(second.success());

        let gis = smi::mig::parse_gpu_instances(
            &run(&*c, &["nvidia-smi", "mig", "-i", "0", "-lgi"]).stdout_text(),
        )
        .unwrap();
        let got: Vec<(String, u32, u32, u32)> = gis
            .iter()
            .map(|g| {
                let p = g.placement.unwrap();
                (g.name.clone(), g.instance_id, p.start, p.size)
            })
            .collect();
        assert_eq!(
            got,
            [
                ("3g.40gb".to_string(), 1, 4, 4),
                ("1g.10gb".to_string(), 2, 0, 1)
            ]
        );
        let cis = smi::mig::parse_compute_instances(
            &run(&*c, &["nvidia-smi", "mig", "-lci"]).stdout_text(),
        )
        .unwrap();
        assert_eq!(cis.len(), 2);
        assert_eq!((cis[0].gpu_instance_id, cis[0].instance_id), (1, 0));

        // -L and the XML name them; another GPU shows none.
        let list = smi::list::parse(&run(&*c, &["nvidia-smi", "-L"]).stdout_text()).unwrap();
        assert_eq!(list.len(), 8);
        assert_eq!(list[0].mig_devices.len(), 2);
        assert_eq!(list[0].mig_devices[0].profile, "3g.40gb");
        assert!(list[1].mig_devices.is_empty());
        let report = smi::xml::parse(&run(&*c, &["nvidia-smi", "-q", "-x"]).stdout).unwrap();
        assert_eq!(report.gpus[0].mig_devices.len(), 2);
        assert_eq!(report.gpus[0].mig_devices[1].gpu_instance_id, Some(2));
        assert!(report.gpus[7].mig_devices.is_empty());

        // A busy instance refuses its CI's destroy; a GI with a CI refuses its destroy.
        let mut state = MigState::load(&dir.path().join(STATE_FILE)).unwrap();
        let old_uuid = state.instances[0].compute_instances[0].uuid.clone();
        state.instances[0].busy = true;
        state.save(&dir.path().join(STATE_FILE)).unwrap();
        // Its process shows in the report, on its GPU and compute instance, and in GPU 0's cut.
        let report = smi::xml::parse(&run(&*c, &["nvidia-smi", "-q", "-x"]).stdout).unwrap();
        let on = |g: usize| -> Vec<(Option<u32>, Option<u32>, bool)> {
            report.gpus[g]
                .processes
                .iter()
                .map(|p| (p.gpu_instance_id, p.compute_instance_id, p.is_compute()))
                .collect()
        };
        assert_eq!(on(0), [(Some(1), Some(0), true)]);
        assert!(on(1).is_empty());
        let cut =
            smi::xml::parse(&run(&*c, &["nvidia-smi", "-q", "-x", "-i", "0"]).stdout).unwrap();
        assert_eq!(cut.gpus.len(), 1);
        assert_eq!(cut.gpus[0].uuid, report.gpus[0].uuid);
        assert_eq!(cut.gpus[0].processes.len(), 1);
        assert_eq!(cut.gpus[0].mig_devices.len(), 2);
        let seventh =
            smi::xml::parse(&run(&*c, &["nvidia-smi", "-q", "-x", "-i", "7"]).stdout).unwrap();
        assert_eq!(seventh.gpus[0].uuid, report.gpus[7].uuid);
        assert!(seventh.gpus[0].processes.is_empty());
        assert_eq!(
            run(&*c, &["nvidia-smi", "-q", "-x", "-i", "8"]).status,
            Some(6)
        );
        let busy = run(
            &*c,
            &[
                "nvidia-smi",
                "mig",
                "-i",
                "0",
                "-gi",
                "1",
                "-ci",
                "0",
                "-dci",
            ],
        );
        assert_eq!(busy.status, Some(255));
        assert!(busy.stdout_text().contains("In use by another client"));
        let with_ci = run(&*c, &["nvidia-smi", "mig", "-i", "0", "-gi", "1", "-dgi"]);
        assert!(with_ci.stdout_text().contains("In use by another client"));
        state.instances[0].busy = false;
        state.save(&dir.path().join(STATE_FILE)).unwrap();
        assert!(
            run(
                &*c,
                &[
                    "nvidia-smi",
                    "mig",
                    "-i",
                    "0",
                    "-gi",
                    "1",
                    "-ci",
                    "0",
                    "-dci"
                ]
            )
            .success()
        );
        assert!(run(&*c, &["nvidia-smi", "mig", "-i", "0", "-gi", "1", "-dgi"]).success());

        // GI id 1 is free again and taken by the next create, with another MIG UUID.
        let again = run(&*c, &["nvidia-smi", "mig", "-i", "0", "-cgi", "9:4", "-C"]);
        assert!(
            again.stdout_text().contains("GPU instance ID  1 "),
            "{}",
            again.stdout_text()
        );
        let state = MigState::load(&dir.path().join(STATE_FILE)).unwrap();
        let reborn = state.on(Some(0))[0];
        assert_eq!(reborn.gpu_instance, 1);
        assert_ne!(reborn.compute_instances[0].uuid, old_uuid);
    }

    #[test]
    fn per_gpu_listings_are_the_recording_cut_to_that_gpu() {
        let dir = host();
        let c = replay(dir.path());
        let lgip = smi::mig::parse_profiles(
            &run(&*c, &["nvidia-smi", "mig", "-i", "3", "-lgip"]).stdout_text(),
        )
        .unwrap();
        assert_eq!(lgip.len(), 7);
        assert!(lgip.iter().all(|p| p.gpu == 3));
        let lgipp = smi::mig::parse_placements(
            &run(&*c, &["nvidia-smi", "mig", "-i", "3", "-lgipp"]).stdout_text(),
        )
        .unwrap();
        assert_eq!(lgipp.len(), 7);
        assert!(lgipp.iter().all(|p| p.gpu == 3));
    }

    #[test]
    fn a_corrupt_state_file_is_an_error_naming_it() {
        let dir = host();
        std::fs::write(dir.path().join(STATE_FILE), "{not json").unwrap();
        let c = replay(dir.path());
        let err = c
            .run(&["nvidia-smi", "mig", "-i", "0", "-lgi"], LONG)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(STATE_FILE) && err.contains("not a MIG state file"),
            "{err}"
        );
    }
}
