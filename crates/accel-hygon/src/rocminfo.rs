//! `rocminfo`, the HSA runtime's view of its agents (HAZARDS.md item 6): the stand-in for the HSA
//! reads of spec §1.3 (product name, gfx target, compute units), since no HSA library is loaded.
//! Hygon's build colours a first line (`hygon module is loaded`), calls its agents `Device Type:
//! DCU`, pads lines with blanks, and may show a redacted marketing name. Agents are the blocks
//! after `Agent <n>` lines; only an agent's own fields (indented two blanks) are read, not its
//! pools' or ISAs' (their `Name:` is another thing). The detector uses a DCU agent's marketing
//! name only outside MIG mode (spec §1.3 step 7: HSA then sees one partition).

use accel_backend::text;

/// The argv the detector runs.
pub const ARGV: &[&str] = &["rocminfo"];

/// Why a text is not `rocminfo`'s output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rocminfo: no HSA agent in the output (first line {first:?})")]
pub struct RocminfoError {
    pub first: String,
}

/// One HSA agent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HsaAgent {
    /// `Name:` — the gfx target of a GPU/DCU agent (`gfx928`), the CPU's model otherwise.
    pub name: Option<String>,
    pub marketing_name: Option<String>,
    pub vendor_name: Option<String>,
    /// `Device Type:` (`CPU`, `GPU`, `DCU`).
    pub device_type: Option<String>,
    /// `Chip ID:` (the PCI device id).
    pub chip_id: Option<u32>,
    /// `BDFID:` (bus << 8 | device << 3 | function).
    pub bdf_id: Option<u32>,
    pub compute_units: Option<u32>,
    pub node: Option<u32>,
}

impl HsaAgent {
    /// A GPU or DCU agent.
    pub fn is_accelerator(&self) -> bool {
        self.device_type
            .as_deref()
            .is_some_and(|t| t.eq_ignore_ascii_case("GPU") || t.eq_ignore_ascii_case("DCU"))
    }
}

/// `25104(0x6210)` → 25104; `12` → 12.
fn leading_number(raw: &str) -> Option<u32> {
    let digits: String = raw
        .trim()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Reads the agents.
pub fn parse(raw: &str) -> Result<Vec<HsaAgent>, RocminfoError> {
    let cleaned = text::clean(raw);
    let mut agents: Vec<HsaAgent> = Vec::new();
    let mut current: Option<HsaAgent> = None;
    for line in cleaned.lines() {
        let trimmed = line.trim();
        if trimmed
            .strip_prefix("Agent ")
            .is_some_and(|n| n.trim().parse::<u32>().is_ok())
        {
            agents.extend(current.take());
            current = Some(HsaAgent::default());
            continue;
        }
        let Some(agent) = current.as_mut() else {
            continue;
        };
        let indent = line.len() - line.trim_start().len();
        if indent != 2 {
            continue;
        }
        let Some((key, value)) = trimmed.split_once(':') else {
            continue;
        };
        let value = text::present(value).map(str::to_string);
        match key.trim() {
            "Name" => agent.name = value,
            "Marketing Name" => agent.marketing_name = value,
            "Vendor Name" => agent.vendor_name = value,
            "Device Type" => agent.device_type = value,
            "Chip ID" => agent.chip_id = value.as_deref().and_then(leading_number),
            "BDFID" => agent.bdf_id = value.as_deref().and_then(leading_number),
            "Compute Unit" => agent.compute_units = value.as_deref().and_then(leading_number),
            "Node" => agent.node = value.as_deref().and_then(leading_number),
            _ => {}
        }
    }
    agents.extend(current);
    if agents.is_empty() {
        return Err(RocminfoError {
            first: cleaned
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("")
                .chars()
                .take(80)
                .collect(),
        });
    }
    Ok(agents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_agents_own_fields_are_read() {
        let out = "\u{1b}[37mhygon module is loaded\u{1b}[0m\n*******\nAgent 2\n*******\n  \
                   Name:                    gfx936   \n  Marketing Name:          BW150\n  \
                   Device Type:             DCU\n  BDFID:                   3840\n  \
                   Compute Unit:            80\n  ISA Info:\n    ISA 1\n      Name:  amdgcn\n";
        let agents = parse(out).unwrap();
        assert_eq!(agents.len(), 1);
        let a = &agents[0];
        assert!(a.is_accelerator());
        assert_eq!(a.name.as_deref(), Some("gfx936"));
        assert_eq!(a.marketing_name.as_deref(), Some("BW150"));
        assert_eq!((a.bdf_id, a.compute_units), (Some(3840), Some(80)));
        assert!(parse("ROCk module is NOT loaded").is_err());
    }
}
