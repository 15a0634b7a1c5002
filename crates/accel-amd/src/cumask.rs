//! The compute-unit window a sliced AMD container gets (`HSA_CU_MASK`), by closed-form
//! arithmetic over the accelerator's topology (spec/amd.md §4.5): quantised to the card's
//! allocation atom (a shader engine's pair of CUs on RDNA, an XCC on CDNA), refused below the
//! card's smallest slice, aligned **down** above it, and placed at the first free start.

/// The topology a window is derived from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CuTopology {
    /// `gfx942`, `gfx1101` …
    pub gfx: String,
    pub compute_units: u32,
    pub shader_engines: u32,
    pub xccs: u32,
}

/// Which arithmetic a gfx target takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// gfx9 (GCN and CDNA, gfx90a included): XCC atoms.
    Cdna,
    /// gfx10–12: work-group processors (two CUs) in shader-engine atoms.
    Rdna,
}

/// A window: its length in CUs and the quantum its start is a multiple of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub length: u32,
    pub quantum: u32,
    /// The smallest percentage this card can serve.
    pub min_percent: u32,
    /// Whether the request was aligned down to the atom (the delivered percentage is less).
    pub aligned_down: bool,
}

/// The arithmetic family of a gfx target.
pub fn arch(gfx: &str) -> Option<Arch> {
    let rest = gfx.strip_prefix("gfx")?;
    if rest.starts_with('9') {
        Some(Arch::Cdna)
    } else if rest.starts_with("10") || rest.starts_with("11") || rest.starts_with("12") {
        Some(Arch::Rdna)
    } else {
        None
    }
}

/// `ceil(a / b)` for b > 0.
fn div_ceil(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

/// The window for `percent` of the card, or why there is none (the text after "cannot derive
/// a CU mask for <card>: ").
pub fn window(topology: &CuTopology, percent: u32) -> Result<Window, String> {
    let cu = topology.compute_units;
    let Some(arch) = arch(&topology.gfx) else {
        return Err(format!(
            "gfx target {:?} is neither CDNA/GCN (gfx9) nor RDNA (gfx10–gfx12)",
            topology.gfx
        ));
    };
    if cu == 0 {
        return Err("the card reports no compute units".into());
    }
    if percent == 0 || percent > 100 {
        return Err(format!("{percent}% is not a percentage of a card"));
    }
    let (quantum, units, atom) = match arch {
        Arch::Cdna => {
            let xcc = topology.xccs;
            if xcc == 0 {
                return Err("the card reports no XCC".into());
            }
            (xcc, cu, xcc)
        }
        Arch::Rdna => {
            let se = topology.shader_engines;
            if se == 0 {
                return Err("the card reports no shader engine".into());
            }
            if !cu.is_multiple_of(2) {
                return Err(format!(
                    "{cu} compute units is not a whole number of work-group processors"
                ));
            }
            if se > cu / 2 {
                return Err(format!(
                    "{se} shader engines exceed {} work-group processors",
                    cu / 2
                ));
            }
            (2 * se, cu / 2, se)
        }
    };
    if !cu.is_multiple_of(quantum) {
        return Err(format!(
            "{cu} compute units is not a whole number of {quantum}-cu allocation atoms"
        ));
    }
    let min_percent =
        u32::try_from(div_ceil(100 * u64::from(atom) - 50, u64::from(units))).unwrap_or(u32::MAX);
    // roundHalfUp(units * pct / 100), then down to whole atoms.
    let n = (u64::from(units) * u64::from(percent) + 50) / 100;
    let n = n / u64::from(atom) * u64::from(atom);
    if n == 0 {
        return Err(format!(
            "{percent}% of {cu} compute units is less than one {quantum}-cu allocation atom; its smallest slice is {min_percent}%"
        ));
    }
    let n = u32::try_from(n).unwrap_or(u32::MAX);
    let length = match arch {
        Arch::Cdna => n.min(cu),
        Arch::Rdna => 2 * n.min(units),
    };
    let delivered = u64::from(length) * 100 / u64::from(cu);
    Ok(Window {
        length,
        quantum,
        min_percent,
        aligned_down: delivered < u64::from(percent),
    })
}

/// The start of a window of `length` CUs on a card of `cu` CUs: the first multiple of
/// `quantum` whose window overlaps none of `occupied` (inclusive `(lo, hi)` ranges); when none
/// is free, the least-overlapping start, lowest on a tie.
pub fn place(cu: u32, length: u32, quantum: u32, occupied: &[(u32, u32)]) -> u32 {
    let length = length.min(cu).max(1);
    let quantum = quantum.max(1);
    let mut best: Option<(u64, u32)> = None;
    let mut start = 0u32;
    while start.saturating_add(length) <= cu {
        let hi = start + length - 1;
        let overlap: u64 = occupied
            .iter()
            .map(|&(lo2, hi2)| {
                let a = start.max(lo2);
                let b = hi.min(hi2);
                if a <= b { u64::from(b - a + 1) } else { 0 }
            })
            .sum();
        if overlap == 0 {
            return start;
        }
        if best.is_none_or(|(o, _)| overlap < o) {
            best = Some((overlap, start));
        }
        match start.checked_add(quantum) {
            Some(next) => start = next,
            None => break,
        }
    }
    best.map_or(0, |(_, s)| s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rdna() -> CuTopology {
        CuTopology {
            gfx: "gfx1101".into(),
            compute_units: 60,
            shader_engines: 3,
            xccs: 1,
        }
    }

    fn mi300x() -> CuTopology {
        CuTopology {
            gfx: "gfx942".into(),
            compute_units: 304,
            shader_engines: 32,
            xccs: 8,
        }
    }

    #[test]
    fn the_spec_worked_examples() {
        let w = window(&rdna(), 25).unwrap();
        assert_eq!((w.length, w.quantum, w.min_percent), (12, 6, 9));
        assert!(w.aligned_down);
        assert_eq!(place(60, 12, 6, &[]), 0);
        assert_eq!(place(60, 12, 6, &[(0, 11)]), 12);
        assert_eq!(window(&rdna(), 50).unwrap().length, 30);
        let refused = window(&rdna(), 5).unwrap_err();
        assert!(refused.ends_with("its smallest slice is 9%"), "{refused}");
        let w = window(&mi300x(), 25).unwrap();
        assert_eq!((w.length, w.min_percent), (72, 3));
        assert_eq!(window(&mi300x(), 100).unwrap().length, 304);
        assert_eq!(window(&rdna(), 100).unwrap().length, 60);
        assert!(!window(&rdna(), 100).unwrap().aligned_down);
    }

    #[test]
    fn a_full_card_takes_the_least_overlap() {
        assert_eq!(place(60, 30, 6, &[(0, 59)]), 0);
        assert_eq!(place(60, 30, 6, &[(0, 11)]), 12);
        assert_eq!(place(60, 60, 6, &[(0, 11)]), 0);
    }

    #[test]
    fn bad_topologies_are_refused() {
        let mut t = rdna();
        t.compute_units = 61;
        assert!(window(&t, 50).is_err());
        t.gfx = "gfx803".into();
        assert!(window(&t, 50).is_err());
        let mut c = mi300x();
        c.xccs = 0;
        assert!(window(&c, 50).is_err());
    }
}
