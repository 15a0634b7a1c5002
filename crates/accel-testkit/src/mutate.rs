//! Mutations of a real capture, for "never panics" tests: a parser must take a capture with
//! bits flipped, bytes the formats care about inserted, bytes and whole lines dropped or
//! repeated, and the end cut off anywhere, and give a value or an error — never a panic.
//!
//! A [`Mutation`] is plain data and [`Mutation::apply`] is deterministic, so a failing case
//! proptest shrinks and prints is replayed exactly; positions are taken modulo the length at
//! the time, so any `usize` is a valid position in any capture.

use proptest::prelude::*;

/// The bytes the captured formats are made of (XML, CSV, box tables, JSON, `key=value`,
/// ANSI escapes), and a few that are in none of them.
pub const FORMAT_BYTES: &[u8] = &[
    b'<', b'>', b'/', b'&', b'"', b',', b' ', b'\t', b'\n', b'\r', b'|', b':', b'{', b'}', b'[',
    b']', 0x1b, 0xff, 0x00, b'-', b'.', b'=', b'+',
];

/// One change to a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// Flips bit `bit` (0–7) of the byte at `at`.
    Flip { at: usize, bit: u8 },
    /// Inserts `byte` before the byte at `at` (or at the end).
    Insert { at: usize, byte: u8 },
    /// Removes the byte at `at`.
    Delete { at: usize },
    /// Removes the line at `at` (with its `\n`).
    DropLine { at: usize },
    /// Repeats the line at `at`.
    RepeatLine { at: usize },
}

/// Edits applied in order, then an optional cut (the capture truncated at `cut`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mutation {
    pub edits: Vec<Edit>,
    pub cut: Option<usize>,
}

impl Mutation {
    /// The mutated copy of `original`.
    pub fn apply(&self, original: &[u8]) -> Vec<u8> {
        mutate(original, &self.edits, self.cut)
    }
}

/// Applies `edits` to a copy of `original`, then truncates it at `cut` (modulo its length + 1).
/// An edit on an empty capture does nothing (an insertion still inserts).
pub fn mutate(original: &[u8], edits: &[Edit], cut: Option<usize>) -> Vec<u8> {
    let mut bytes = original.to_vec();
    for edit in edits {
        apply(&mut bytes, edit);
    }
    if let Some(cut) = cut {
        bytes.truncate(cut % (bytes.len() + 1));
    }
    bytes
}

fn apply(bytes: &mut Vec<u8>, edit: &Edit) {
    if let Edit::Insert { at, byte } = *edit {
        bytes.insert(at % (bytes.len() + 1), byte);
        return;
    }
    if bytes.is_empty() {
        return;
    }
    match *edit {
        Edit::Flip { at, bit } => {
            let i = at % bytes.len();
            bytes[i] ^= 1 << (bit % 8);
        }
        Edit::Delete { at } => {
            bytes.remove(at % bytes.len());
        }
        Edit::DropLine { at } => {
            let (start, end) = line_at(bytes, at);
            bytes.drain(start..end);
        }
        Edit::RepeatLine { at } => {
            let (start, end) = line_at(bytes, at);
            let mut line = bytes[start..end].to_vec();
            if line.last() != Some(&b'\n') {
                line.insert(0, b'\n');
            }
            bytes.splice(end..end, line);
        }
        Edit::Insert { .. } => {}
    }
}

/// The byte range of line `at` (modulo the number of lines), its `\n` included.
fn line_at(bytes: &[u8], at: usize) -> (usize, usize) {
    let mut starts = vec![0];
    starts.extend(
        bytes
            .iter()
            .enumerate()
            .filter(|(i, b)| **b == b'\n' && i + 1 < bytes.len())
            .map(|(i, _)| i + 1),
    );
    let k = at % starts.len();
    let end = starts.get(k + 1).copied().unwrap_or(bytes.len());
    (starts[k], end)
}

/// One edit, inserting [`FORMAT_BYTES`].
pub fn edit() -> impl Strategy<Value = Edit> {
    edit_with(FORMAT_BYTES.to_vec())
}

/// One edit, inserting bytes from `special` (a format's own delimiters).
pub fn edit_with(special: Vec<u8>) -> impl Strategy<Value = Edit> {
    let special = prop::sample::select(special);
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Edit::Flip { at, bit }),
        (any::<usize>(), special).prop_map(|(at, byte)| Edit::Insert { at, byte }),
        any::<usize>().prop_map(|at| Edit::Delete { at }),
        any::<usize>().prop_map(|at| Edit::DropLine { at }),
        any::<usize>().prop_map(|at| Edit::RepeatLine { at }),
    ]
}

/// 1 to 15 edits and an optional cut.
pub fn mutation() -> impl Strategy<Value = Mutation> {
    (
        prop::collection::vec(edit(), 1..16),
        prop::option::of(any::<usize>()),
    )
        .prop_map(|(edits, cut)| Mutation { edits, cut })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &[u8] = b"one\ntwo\nthree\n";

    #[test]
    fn byte_edits_flip_insert_and_delete_where_asked() {
        assert_eq!(
            mutate(b"abc", &[Edit::Flip { at: 1, bit: 0 }], None),
            b"acc"
        );
        assert_eq!(
            mutate(b"abc", &[Edit::Flip { at: 4, bit: 8 }], None),
            b"acc"
        );
        assert_eq!(
            mutate(b"abc", &[Edit::Insert { at: 3, byte: b'|' }], None),
            b"abc|"
        );
        assert_eq!(
            mutate(b"abc", &[Edit::Insert { at: 1, byte: b'|' }], None),
            b"a|bc"
        );
        assert_eq!(mutate(b"abc", &[Edit::Delete { at: 4 }], None), b"ac");
        assert_eq!(
            mutate(b"", &[Edit::Insert { at: 7, byte: b'x' }], None),
            b"x"
        );
        assert_eq!(mutate(b"", &[Edit::Delete { at: 7 }], None), b"");
    }

    #[test]
    fn line_edits_drop_and_repeat_whole_lines() {
        assert_eq!(
            mutate(TEXT, &[Edit::DropLine { at: 1 }], None),
            b"one\nthree\n"
        );
        assert_eq!(
            mutate(TEXT, &[Edit::DropLine { at: 4 }], None),
            b"one\nthree\n"
        );
        assert_eq!(
            mutate(TEXT, &[Edit::DropLine { at: 0 }], None),
            b"two\nthree\n"
        );
        assert_eq!(
            mutate(TEXT, &[Edit::RepeatLine { at: 2 }], None),
            b"one\ntwo\nthree\nthree\n"
        );
        // A last line without its newline is repeated as a line of its own.
        assert_eq!(
            mutate(b"a\nb", &[Edit::RepeatLine { at: 1 }], None),
            b"a\nb\nb"
        );
        assert_eq!(mutate(b"a\nb", &[Edit::DropLine { at: 1 }], None), b"a\n");
    }

    #[test]
    fn the_cut_truncates_after_the_edits() {
        assert_eq!(mutate(TEXT, &[], Some(3)), b"one");
        assert_eq!(mutate(TEXT, &[], Some(TEXT.len())), TEXT);
        assert_eq!(mutate(TEXT, &[], Some(TEXT.len() + 1)), b"");
        let m = Mutation {
            edits: vec![Edit::DropLine { at: 0 }],
            cut: Some(3),
        };
        assert_eq!(m.apply(TEXT), b"two");
    }

    proptest! {
        #[test]
        fn a_mutation_is_deterministic_and_never_panics(
            m in mutation(),
            original in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            prop_assert_eq!(m.apply(&original), m.apply(&original));
        }
    }
}
