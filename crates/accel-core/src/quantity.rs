//! Kubernetes resource quantities ("1", "1000m", "2", "500m", "1e3", "4Ki"), parsed exactly.
//!
//! This module owns the quantity grammar and the one question the request rules ask of a
//! quantity: which whole number is it, if any. It never rounds: "0.5" where a count is required is
//! an error, "1000m" is exactly 1 and "1m" is not. Values too large for a `u64` are an error, never
//! a wrap or a saturation.

/// Digits a significand may carry before the quantity counts as too large (`u128` holds 38).
const MAX_SIGNIFICAND_DIGITS: usize = 38;

/// A parsed quantity: `(-1)^negative × significand × 10^exp10`, exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    significand: u128,
    exp10: i64,
}

/// Why a text is not a quantity, or not the whole number a count needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text does not follow the quantity grammar.
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Malformed,
    /// The value does not fit the range this system counts in.
    #[error("must be a whole number no larger than {}", u64::MAX)]
    TooLarge,
    /// A count was required and the value is below zero.
    #[error("must be greater than or equal to 0")]
    Negative,
    /// A count was required and the value has a fractional part.
    #[error("must be a whole number")]
    Fraction,
}

impl Quantity {
    /// Parse a Kubernetes quantity: an optionally signed decimal number followed by a binary-SI
    /// suffix (Ki … Ei), a decimal-SI suffix (n u m k M G T P E) or a decimal exponent (e3, E-2).
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        let bytes = text.as_bytes();
        let mut pos = 0;
        let mut negative = false;
        if let Some(&sign) = bytes.first()
            && (sign == b'+' || sign == b'-')
        {
            negative = sign == b'-';
            pos = 1;
        }
        let number_start = pos;
        while pos < bytes.len() && (bytes[pos].is_ascii_digit() || bytes[pos] == b'.') {
            pos += 1;
        }
        let number = &text[number_start..pos];
        let suffix = &text[pos..];
        let (int_part, frac_part) = match number.split_once('.') {
            Some((i, f)) => (i, f),
            None => (number, ""),
        };
        if frac_part.contains('.') || (int_part.is_empty() && frac_part.is_empty()) {
            return Err(QuantityError::Malformed);
        }
        let frac_part = frac_part.trim_end_matches('0');
        let digits: String = format!("{int_part}{frac_part}");
        let digits = digits.trim_start_matches('0');
        let mut exp10 = -(frac_part.len() as i64);
        if digits.len() > MAX_SIGNIFICAND_DIGITS {
            return Err(QuantityError::TooLarge);
        }
        let mut significand: u128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| QuantityError::Malformed)?
        };
        match suffix {
            "" => {}
            "n" => exp10 -= 9,
            "u" => exp10 -= 6,
            "m" => exp10 -= 3,
            "k" => exp10 += 3,
            "M" => exp10 += 6,
            "G" => exp10 += 9,
            "T" => exp10 += 12,
            "P" => exp10 += 15,
            "E" => exp10 += 18,
            "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
                let power = match suffix {
                    "Ki" => 1,
                    "Mi" => 2,
                    "Gi" => 3,
                    "Ti" => 4,
                    "Pi" => 5,
                    _ => 6,
                };
                let factor = 1024u128.pow(power);
                significand = significand
                    .checked_mul(factor)
                    .ok_or(QuantityError::TooLarge)?;
            }
            _ => {
                let exponent = suffix
                    .strip_prefix('e')
                    .or_else(|| suffix.strip_prefix('E'))
                    .ok_or(QuantityError::Malformed)?;
                let unsigned = exponent
                    .strip_prefix('+')
                    .or_else(|| exponent.strip_prefix('-'))
                    .unwrap_or(exponent);
                if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(QuantityError::Malformed);
                }
                // An exponent beyond what any count could use only needs its sign kept:
                // 1e100 is too large and 1e-100 is a fraction either way.
                let magnitude: i64 = unsigned.parse().unwrap_or(i64::from(u16::MAX)).min(100_000);
                exp10 += if exponent.starts_with('-') {
                    -magnitude
                } else {
                    magnitude
                };
            }
        }
        Ok(Quantity {
            negative: negative && significand != 0,
            significand,
            exp10,
        })
    }

    /// The whole number this quantity is, for a key whose value counts something.
    pub fn whole(&self) -> Result<u64, QuantityError> {
        if self.negative {
            return Err(QuantityError::Negative);
        }
        if self.significand == 0 {
            return Ok(0);
        }
        let mut significand = self.significand;
        let mut exp10 = self.exp10;
        // Equivalent mutant: `exp10 <= 0` would also move one zero from a significand ending in
        // 0 into an exponent of 0 (n0 × 10^0 = n × 10^1), the same value; no test can tell.
        while exp10 < 0 && significand.is_multiple_of(10) {
            significand /= 10;
            exp10 += 1;
        }
        if exp10 < 0 {
            return Err(QuantityError::Fraction);
        }
        let exp10 = u32::try_from(exp10).map_err(|_| QuantityError::TooLarge)?;
        let scale = 10u128.checked_pow(exp10).ok_or(QuantityError::TooLarge)?;
        let value = significand
            .checked_mul(scale)
            .ok_or(QuantityError::TooLarge)?;
        u64::try_from(value).map_err(|_| QuantityError::TooLarge)
    }
}

/// Parse `text` as a count: a whole, non-negative quantity.
pub fn parse_count(text: &str) -> Result<u64, QuantityError> {
    Quantity::parse(text)?.whole()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn counts_are_exact() {
        assert_eq!(parse_count("1"), Ok(1));
        assert_eq!(parse_count("1000m"), Ok(1));
        assert_eq!(parse_count("2"), Ok(2));
        assert_eq!(parse_count("+2"), Ok(2));
        assert_eq!(parse_count("1e3"), Ok(1000));
        assert_eq!(parse_count("1E3"), Ok(1000));
        assert_eq!(parse_count("1.5e1"), Ok(15));
        assert_eq!(parse_count("4Ki"), Ok(4096));
        assert_eq!(parse_count("2k"), Ok(2000));
        assert_eq!(parse_count("1E"), Ok(1_000_000_000_000_000_000));
        assert_eq!(parse_count("0"), Ok(0));
        assert_eq!(parse_count("-0"), Ok(0));
        assert_eq!(parse_count("0.0"), Ok(0));
        assert_eq!(parse_count("1.000"), Ok(1));
        assert_eq!(parse_count("007"), Ok(7));
    }

    #[test]
    fn non_counts_are_refused_never_rounded() {
        assert_eq!(parse_count("500m"), Err(QuantityError::Fraction));
        assert_eq!(parse_count("1m"), Err(QuantityError::Fraction));
        assert_eq!(parse_count("0.5"), Err(QuantityError::Fraction));
        assert_eq!(parse_count("1e-100"), Err(QuantityError::Fraction));
        assert_eq!(parse_count("-1"), Err(QuantityError::Negative));
        assert_eq!(parse_count("1e100"), Err(QuantityError::TooLarge));
        assert_eq!(parse_count("1e99999999999"), Err(QuantityError::TooLarge));
        assert_eq!(
            parse_count("18446744073709551616"),
            Err(QuantityError::TooLarge)
        );
        assert_eq!(parse_count("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_count("16Ei"), Err(QuantityError::TooLarge));
        assert_eq!(
            parse_count("1234567890123456789012345678901234567890"),
            Err(QuantityError::TooLarge)
        );
    }

    #[test]
    fn malformed_texts_are_refused() {
        for text in [
            "", "abc", "1x", "1.2.3", ".", "-", "1e", "1e+", "1 ", " 1", "1Ki2", "0x10",
        ] {
            assert_eq!(parse_count(text), Err(QuantityError::Malformed), "{text:?}");
        }
    }

    // The API server writes every quantity in canonical form: the largest suffix that keeps the
    // number whole, so 8,000,000 units come back as `8M` and 80 GiB of bytes as `80Gi`. Each
    // suffix below is one the server may hand us for real node capacity and real requests.

    #[test]
    fn a_quantity_in_nano_is_a_billionth_of_a_unit() {
        assert_eq!(parse_count("1000000000n"), Ok(1));
        assert_eq!(parse_count("3000000000n"), Ok(3));
        assert_eq!(parse_count("1n"), Err(QuantityError::Fraction));
        assert_eq!(parse_count("500000000n"), Err(QuantityError::Fraction));
    }

    #[test]
    fn a_quantity_in_micro_is_a_millionth_of_a_unit() {
        assert_eq!(parse_count("1000000u"), Ok(1));
        assert_eq!(parse_count("7000000u"), Ok(7));
        assert_eq!(parse_count("1u"), Err(QuantityError::Fraction));
        assert_eq!(parse_count("999999u"), Err(QuantityError::Fraction));
    }

    #[test]
    fn a_quantity_in_milli_is_a_thousandth_of_a_unit() {
        assert_eq!(parse_count("2000m"), Ok(2));
        assert_eq!(parse_count("1500m"), Err(QuantityError::Fraction));
    }

    #[test]
    fn a_quantity_in_kilo_is_a_thousand_units() {
        assert_eq!(parse_count("1k"), Ok(1_000));
        assert_eq!(parse_count("1.5k"), Ok(1_500));
    }

    #[test]
    fn a_quantity_in_mega_is_a_million_units() {
        assert_eq!(parse_count("8M"), Ok(8_000_000));
        assert_eq!(parse_count("1.6M"), Ok(1_600_000));
    }

    #[test]
    fn a_quantity_in_giga_is_a_billion_units() {
        assert_eq!(parse_count("3G"), Ok(3_000_000_000));
        assert_eq!(parse_count("0.5G"), Ok(500_000_000));
    }

    #[test]
    fn a_quantity_in_tera_is_a_trillion_units() {
        assert_eq!(parse_count("2T"), Ok(2_000_000_000_000));
    }

    #[test]
    fn a_quantity_in_peta_is_a_quadrillion_units() {
        assert_eq!(parse_count("5P"), Ok(5_000_000_000_000_000));
    }

    #[test]
    fn a_quantity_in_exa_is_a_quintillion_units() {
        assert_eq!(parse_count("1E"), Ok(1_000_000_000_000_000_000));
        assert_eq!(parse_count("19E"), Err(QuantityError::TooLarge));
    }

    #[test]
    fn binary_suffixes_are_powers_of_1024() {
        assert_eq!(parse_count("4Ki"), Ok(4 << 10));
        assert_eq!(parse_count("512Mi"), Ok(512 << 20));
        assert_eq!(parse_count("80Gi"), Ok(80 << 30));
        assert_eq!(parse_count("2Ti"), Ok(2 << 40));
        assert_eq!(parse_count("3Pi"), Ok(3 << 50));
        assert_eq!(parse_count("15Ei"), Ok(15 << 60));
        assert_eq!(
            parse_count("0.5Gi"),
            Ok(512 << 20),
            "a fraction of a binary unit"
        );
    }

    #[test]
    fn a_suffix_is_case_sensitive() {
        // `m` is milli and `M` mega; `K`, `g`, `mi` are no suffix at all.
        assert_ne!(parse_count("1000m"), parse_count("1000M"));
        for text in ["1K", "1g", "1mi", "1ki", "1KI"] {
            assert_eq!(parse_count(text), Err(QuantityError::Malformed), "{text:?}");
        }
    }

    #[test]
    fn a_significand_of_38_digits_is_read_exactly() {
        // u128 holds every 38-digit significand; only a 39th digit is too large to read.
        let one_then_37_zeros = format!("1{}", "0".repeat(37));
        assert_eq!(parse_count(&format!("{one_then_37_zeros}e-37")), Ok(1));
        assert_eq!(
            parse_count(&format!("{one_then_37_zeros}0e-38")),
            Err(QuantityError::TooLarge)
        );
    }

    proptest! {
        #[test]
        fn never_panics(text in "\\PC{0,40}") {
            let _ = parse_count(&text);
        }

        #[test]
        fn whole_numbers_round_trip(n in any::<u64>()) {
            prop_assert_eq!(parse_count(&n.to_string()), Ok(n));
            prop_assert_eq!(parse_count(&format!("{n}000m")), Ok(n));
        }

        #[test]
        fn grammar_shaped_never_panics(s in "[+-]?[0-9]{0,45}(\\.[0-9]{0,45})?([eE][+-]?[0-9]{0,25}|Ki|Ei|m|n|E)?") {
            let _ = parse_count(&s);
        }
    }
}
