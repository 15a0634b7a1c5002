//! The GPU architecture guessed from the model name, as seed 002's collector does when
//! nvidia-smi has not said (`<product_architecture>` is absent before the v11 DTD).
//!
//! The table maps model-name markers to NVIDIA's architecture names; the first match wins, so
//! longer, more specific markers come first. An unknown model has no architecture (never a guess).

/// (marker in the lower-cased model name, architecture). A marker ending in `*` names a series
/// and may be followed by more digits (`rtx 30*` matches "RTX 3060"); any other marker ending in
/// a digit must not be (`l4` does not match "L40S").
const MARKERS: &[(&str, &str)] = &[
    ("gb200", "Blackwell"),
    ("gb300", "Blackwell"),
    ("b200", "Blackwell"),
    ("b300", "Blackwell"),
    ("b100", "Blackwell"),
    ("blackwell", "Blackwell"),
    ("rtx 50*", "Blackwell"),
    ("rtx pro 6000", "Blackwell"),
    ("gh200", "Hopper"),
    ("h100", "Hopper"),
    ("h200", "Hopper"),
    ("h800", "Hopper"),
    ("h20", "Hopper"),
    ("l40", "Ada Lovelace"),
    ("l20", "Ada Lovelace"),
    ("l4", "Ada Lovelace"),
    ("rtx 40*", "Ada Lovelace"),
    (" ada", "Ada Lovelace"),
    ("a100", "Ampere"),
    ("a800", "Ampere"),
    ("a40", "Ampere"),
    ("a30", "Ampere"),
    ("a16", "Ampere"),
    ("a10", "Ampere"),
    ("a2", "Ampere"),
    ("rtx 30*", "Ampere"),
    ("rtx a", "Ampere"),
    ("t4", "Turing"),
    ("rtx 20*", "Turing"),
    ("gtx 16*", "Turing"),
    ("quadro rtx", "Turing"),
    ("titan rtx", "Turing"),
    ("v100", "Volta"),
    ("titan v", "Volta"),
    ("p100", "Pascal"),
    ("p40", "Pascal"),
    ("p4", "Pascal"),
    ("gtx 10*", "Pascal"),
    ("gt 10*", "Pascal"),
    ("quadro p", "Pascal"),
    ("titan x", "Pascal"),
    ("k80", "Kepler"),
    ("k40", "Kepler"),
    ("gt 7*", "Kepler"),
    ("m60", "Maxwell"),
    ("m40", "Maxwell"),
];

/// The architecture a model name implies, or `None` when the name is not recognised.
pub fn architecture_from_model(model: &str) -> Option<String> {
    let lower = format!(" {}", model.to_ascii_lowercase());
    MARKERS
        .iter()
        .find(|(marker, _)| contains_word_prefix(&lower, marker))
        .map(|(_, arch)| (*arch).to_string())
}

/// Whether `marker` occurs in `name` at the start of a word and is followed by a non-letter
/// (so "a2" matches "NVIDIA A2" but not "A200", and "l4" does not match "l40s").
fn contains_word_prefix(name: &str, marker: &str) -> bool {
    let (marker, series) = match marker.strip_suffix('*') {
        Some(stem) => (stem, true),
        None => (marker, false),
    };
    let marker_starts_word = marker.starts_with(' ');
    let mut from = 0;
    while let Some(at) = name[from..].find(marker) {
        let start = from + at;
        let end = start + marker.len();
        let before_ok =
            marker_starts_word || start == 0 || !name.as_bytes()[start - 1].is_ascii_alphanumeric();
        let last_is_digit = marker.as_bytes().last().is_some_and(u8::is_ascii_digit);
        let after_ok =
            series || !last_is_digit || end >= name.len() || !name.as_bytes()[end].is_ascii_digit();
        if before_ok && after_ok {
            return true;
        }
        from = start + 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datacenter_and_consumer_models() {
        let cases = [
            ("NVIDIA H100 80GB HBM3", Some("Hopper")),
            ("NVIDIA H200", Some("Hopper")),
            ("NVIDIA A100-SXM4-40GB", Some("Ampere")),
            ("NVIDIA L4", Some("Ada Lovelace")),
            ("NVIDIA L40S", Some("Ada Lovelace")),
            ("Tesla T4", Some("Turing")),
            ("Tesla K80", Some("Kepler")),
            ("Tesla P100-PCIE-16GB", Some("Pascal")),
            ("NVIDIA GeForce RTX 3060 Laptop GPU", Some("Ampere")),
            ("NVIDIA GeForce RTX 4080 SUPER", Some("Ada Lovelace")),
            ("NVIDIA RTX A5000", Some("Ampere")),
            ("NVIDIA RTX 4000 SFF Ada Generation", Some("Ada Lovelace")),
            ("GeForce GTX 1070", Some("Pascal")),
            ("Graphics Device", None),
            ("NVIDIA A200", None),
        ];
        for (model, want) in cases {
            assert_eq!(architecture_from_model(model).as_deref(), want, "{model}");
        }
    }
}
