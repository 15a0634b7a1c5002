//! The soc table (spec/ascend.md §1.6): a chip name's soc name, its soc version and the family
//! the version falls in, which decide the visible-devices number, the slicing build and the
//! `.family` label. Pure.

/// The soc names the driver knows, with their versions.
pub const SOC_VERSIONS: &[(&str, u32)] = &[
    ("Ascend910PremiumA", 100),
    ("Ascend910ProA", 101),
    ("Ascend910A", 102),
    ("Ascend910ProB", 103),
    ("Ascend910B", 104),
    ("Ascend310P1", 200),
    ("Ascend310P2", 201),
    ("Ascend310P3", 202),
    ("Ascend310P4", 203),
    ("Ascend310P5", 204),
    ("Ascend310P7", 205),
    ("Ascend910B1", 220),
    ("Ascend910B2", 221),
    ("Ascend910B2C", 222),
    ("Ascend910B3", 223),
    ("Ascend910B4", 224),
    ("Ascend910B4-1", 225),
    ("Ascend310B1", 240),
    ("Ascend310B2", 241),
    ("Ascend310B3", 242),
    ("Ascend310B4", 243),
    ("Ascend910_9391", 250),
    ("Ascend910", 250),
    ("Ascend910_9392", 251),
    ("Ascend910_9381", 252),
    ("Ascend910_9382", 253),
    ("Ascend910_9372", 254),
    ("Ascend910_9362", 255),
    ("Ascend910_9363", 256),
    ("Ascend910_9579", 260),
    ("Ascend910_95", 260),
    ("Ascend950", 260),
];

/// An NPU family (the `.family` label's value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Family {
    F910,
    F310P,
    F910B,
    F310B,
    F910C,
    F950,
}

impl Family {
    /// The family as the labels, the library directory and the spec spell it.
    pub fn name(self) -> &'static str {
        match self {
            Family::F910 => "910",
            Family::F310P => "310P",
            Family::F910B => "910B",
            Family::F310B => "310B",
            Family::F910C => "910C",
            Family::F950 => "950",
        }
    }

    /// The family of a name as [`Family::name`] spells it.
    pub fn from_name(name: &str) -> Option<Family> {
        [
            Family::F910,
            Family::F310P,
            Family::F910B,
            Family::F310B,
            Family::F910C,
            Family::F950,
        ]
        .into_iter()
        .find(|f| f.name().eq_ignore_ascii_case(name))
    }

    /// The family a soc version falls in (`<200` 910, `<220` 310P, `<240` 910B, `<250` 310B,
    /// `<260` 910C, `<270` 950; above: none).
    pub fn of_version(version: u32) -> Option<Family> {
        Some(match version {
            v if v < 200 => Family::F910,
            v if v < 220 => Family::F310P,
            v if v < 240 => Family::F910B,
            v if v < 250 => Family::F310B,
            v if v < 260 => Family::F910C,
            v if v < 270 => Family::F950,
            _ => return None,
        })
    }
}

/// The soc name of a chip name (`910B2` → `Ascend910B2`, `Ascend950PR` → `Ascend950`): the
/// name with `Ascend` in front when the table has it; every `950…` name folds onto `Ascend950`
/// (seed 000); else the patterns of §1.6; else none. A printed `Ascend` prefix (A3's
/// `Ascend910`, the chip map's `Ascend 910A`) is read through.
pub fn soc_name(chip_name: &str) -> Option<&'static str> {
    let trimmed = chip_name.trim();
    let bare = trimmed
        .strip_prefix("Ascend")
        .or_else(|| trimmed.strip_prefix("ascend"))
        .unwrap_or(trimmed)
        .trim_start();
    let candidate = format!("Ascend{bare}");
    if let Some((name, _)) = SOC_VERSIONS.iter().find(|(n, _)| *n == candidate) {
        return Some(name);
    }
    let starts_digits = |prefix: &str| {
        bare.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.as_bytes()[0].is_ascii_digit())
    };
    if bare.starts_with("950") {
        Some("Ascend950")
    } else if bare.starts_with("310P") || bare.starts_with("I2") {
        Some("Ascend310P1")
    } else if bare.contains("310B") {
        Some("Ascend310B1")
    } else if (bare.starts_with("910B") && starts_digits("910B") && bare.len() > 4)
        || (bare.starts_with("A2G") && bare.len() > 3 && bare.as_bytes()[3].is_ascii_digit())
    {
        Some("Ascend910B1")
    } else if bare.starts_with("910") {
        Some("Ascend910A")
    } else {
        None
    }
}

/// The soc version of a soc name.
pub fn soc_version(soc: &str) -> Option<u32> {
    SOC_VERSIONS
        .iter()
        .find(|(n, _)| *n == soc)
        .map(|(_, v)| *v)
}

/// The family of a chip name, through its soc name.
pub fn family(chip_name: &str) -> Option<Family> {
    soc_name(chip_name)
        .and_then(soc_version)
        .and_then(Family::of_version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_the_captures_print() {
        let cases = [
            ("910B1", Some("910B")),
            ("910B2C", Some("910B")),
            ("910B4-1", Some("910B")),
            ("910A", Some("910")),
            ("Ascend 910A", Some("910")),
            ("310P3", Some("310P")),
            ("310", None),
            ("Ascend910", Some("910C")),
            ("Ascend950PR", Some("950")),
            ("950DT", Some("950")),
            ("910B9", Some("910B")),
            ("MiniD", None),
        ];
        for (name, expected) in cases {
            assert_eq!(family(name).map(Family::name), expected, "{name}");
        }
        assert_eq!(soc_name("Ascend950PR"), Some("Ascend950"));
    }
}
