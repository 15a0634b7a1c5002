//! What `device-manager record` captures for a manufacturer: the host files and trees its
//! detector, doctor and responder read, the device nodes they look for, and every command they
//! run, so a recorded host replays them all (DESIGN.md, "A recorded host"). The binary adds
//! what every host needs (the boot id, the PCI functions, the CDI specs) and writes the folder;
//! a backend only lists.

/// One manufacturer's part of a recording. Paths are relative to the host root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordPlan {
    /// Files copied one by one (an absent one is noted, not an error).
    pub files: Vec<&'static str>,
    /// Trees copied whole, links kept as links.
    pub trees: Vec<&'static str>,
    /// Device nodes recorded as empty marker files when present.
    pub device_nodes: Vec<&'static str>,
    /// Prefixes of numbered device nodes under `dev/` (`nvidia` → `dev/nvidia0`, `dev/nvidia1`;
    /// `dri/card` → `dev/dri/card0`), each recorded as a marker file.
    pub numbered_devices: Vec<&'static str>,
    /// Every command line the backend runs to detect, sample and diagnose, program first.
    pub commands: Vec<&'static [&'static str]>,
}

impl RecordPlan {
    /// The programs the plan's commands run, each once, in order.
    pub fn programs(&self) -> Vec<&'static str> {
        let mut programs: Vec<&'static str> = Vec::new();
        for argv in &self.commands {
            if let Some(program) = argv.first()
                && !programs.contains(program)
            {
                programs.push(program);
            }
        }
        programs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_listed_once_in_order() {
        let plan = RecordPlan {
            commands: vec![
                &["amd-smi", "static", "--json"],
                &["rocm-smi", "--json"],
                &["amd-smi", "metric", "--json"],
            ],
            ..RecordPlan::default()
        };
        assert_eq!(plan.programs(), vec!["amd-smi", "rocm-smi"]);
    }
}
