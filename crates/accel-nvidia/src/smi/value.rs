//! Turning nvidia-smi's printed values into typed ones: placeholders to `None`, units stripped.
//!
//! nvidia-smi spells "no value" many ways (`N/A`, `Not Found`, `[Not Supported]`,
//! `Requested functionality has been deprecated`, …) and prints units inside values
//! (`81920 MiB`, `66.92 W`, `-5 C`, `33.4 %`). This module owns that second, pure step of
//! "parse, then convert"; it must not know which field a value came from.

/// Spellings nvidia-smi uses for a value it does not have (HAZARDS.md items 2 and 12).
const MISSING: &[&str] = &[
    "n/a",
    "n/a %",
    "not found",
    "not supported",
    "not available",
    "unknown",
    "unknown error",
    "insufficient permissions",
    "function not found",
    "requested functionality has been deprecated",
    "gpu access blocked by the operating system",
    "none",
    "",
];

/// The trimmed text when it is a value, `None` when it is one of nvidia-smi's placeholders.
///
/// A value in square brackets is always a placeholder in CSV output (`[N/A]`,
/// `[Function Not Found]`), whatever the words inside.
pub fn present(raw: &str) -> Option<&str> {
    let text = raw.trim();
    if text.starts_with('[') && text.ends_with(']') {
        return None;
    }
    let lower = text.to_ascii_lowercase();
    if MISSING.contains(&lower.as_str()) {
        return None;
    }
    Some(text)
}

/// A number with an optional unit: `81920 MiB` → (81920.0, "MiB"), `-5 C` → (-5.0, "C"),
/// `16x` → (16.0, "x"), `42` → (42.0, ""). Anything else (placeholders, words) → `None`.
pub fn quantity(raw: &str) -> Option<(f64, &str)> {
    let text = present(raw)?;
    let bytes = text.as_bytes();
    let mut end = 0;
    if matches!(bytes.first(), Some(b'-' | b'+')) {
        end = 1;
    }
    let digits_start = end;
    let mut seen_dot = false;
    while let Some(&b) = bytes.get(end) {
        if b.is_ascii_digit() {
            end += 1;
        } else if b == b'.' && !seen_dot {
            seen_dot = true;
            end += 1;
        } else {
            break;
        }
    }
    let number = text.get(..end)?;
    if !number[digits_start..].bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let unit = text.get(end..)?.trim();
    // A unit is a short word (`MiB`, `W`, `%`, `KB/s`); a second number means this was not a
    // single quantity (`12 34`).
    if unit.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    value.is_finite().then_some((value, unit))
}

/// A quantity as a float, whatever its unit.
pub fn float(raw: &str) -> Option<f64> {
    quantity(raw).map(|(v, _)| v)
}

/// A non-negative whole number (`42`, `42 %`, `1410 MHz`); fractions and negatives are `None`.
pub fn whole(raw: &str) -> Option<u64> {
    let (v, _) = quantity(raw)?;
    (v >= 0.0 && v.fract() == 0.0 && v <= u64::MAX as f64).then_some(v as u64)
}

/// A whole number that fits in u32.
pub fn whole_u32(raw: &str) -> Option<u32> {
    whole(raw).and_then(|v| u32::try_from(v).ok())
}

/// A memory size in MiB: `81559 MiB`, `81559` (CSV `nounits`), `80 GiB`, `1024 KiB`.
pub fn mebibytes(raw: &str) -> Option<u64> {
    let (v, unit) = quantity(raw)?;
    if v < 0.0 {
        return None;
    }
    let mib = match unit {
        "" | "MiB" | "MB" => v,
        "GiB" | "GB" => v * 1024.0,
        "KiB" | "KB" => v / 1024.0,
        _ => return None,
    };
    (mib <= u64::MAX as f64).then_some(mib.round() as u64)
}

/// `Enabled`/`Disabled`, `Yes`/`No`, `On`/`Off` → a flag; anything else → `None`.
pub fn flag(raw: &str) -> Option<bool> {
    match present(raw)?.to_ascii_lowercase().as_str() {
        "enabled" | "yes" | "on" | "true" | "active" => Some(true),
        "disabled" | "no" | "off" | "false" | "not active" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_absent() {
        for s in [
            "N/A",
            " N/A ",
            "N/A %",
            "Not Found",
            "[N/A]",
            "[Requested functionality has been deprecated]",
            "[Function Not Found]",
            "[Not Supported]",
            "Requested functionality has been deprecated",
            "None",
            "",
            "\n\t\t",
        ] {
            assert_eq!(present(s), None, "{s:?}");
            assert_eq!(float(s), None, "{s:?}");
        }
        assert_eq!(present(" Tesla T4 "), Some("Tesla T4"));
    }

    #[test]
    fn units_signs_and_decimals() {
        assert_eq!(quantity("81920 MiB"), Some((81920.0, "MiB")));
        assert_eq!(quantity(" 40 % "), Some((40.0, "%")));
        assert_eq!(quantity("66.92 W"), Some((66.92, "W")));
        assert_eq!(quantity("-5 C"), Some((-5.0, "C")));
        assert_eq!(quantity("33.4 %"), Some((33.4, "%")));
        assert_eq!(quantity("16x"), Some((16.0, "x")));
        assert_eq!(quantity("0 KB/s"), Some((0.0, "KB/s")));
        assert_eq!(quantity("P0"), None);
        assert_eq!(quantity("-"), None);
        assert_eq!(quantity("1.2.3"), None);
        assert_eq!(whole("1410 MHz"), Some(1410));
        assert_eq!(whole("-5 C"), None);
        assert_eq!(whole("33.4 %"), None);
        assert_eq!(mebibytes("81559 MiB"), Some(81559));
        assert_eq!(mebibytes("81559"), Some(81559));
        assert_eq!(mebibytes("2 GiB"), Some(2048));
        assert_eq!(mebibytes("66.92 W"), None);
    }

    #[test]
    fn flags() {
        assert_eq!(flag("Enabled"), Some(true));
        assert_eq!(flag("No"), Some(false));
        assert_eq!(flag("N/A"), None);
        assert_eq!(flag("WDDM"), None);
    }
}
