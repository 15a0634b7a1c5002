//! The PPU device nodes (spec/thead.md §3) and the proof that a card's node addresses it: the
//! two shared control nodes `/dev/alixpu` and `/dev/alixpu_ctl`, one `/dev/alixpu_ppu<ordinal>`
//! per card (the ordinal is the detection's compact index), and for partitions the capability
//! nodes `/dev/alixpu-caps/alixpu-cap<minor>`. Every node must be a character device; a card's
//! must carry the kernel minor recorded at detection. The two numbers are only compared, never
//! computed from each other (on the measured host `/dev/alixpu` holds minor 0, so a card's minor
//! is its ordinal + 1, and the vendor's `/dev/alixpu_ppu[minor]` would name the next card).
//! Errors are the described system's words.

use accel_host::{Host, HostError};

/// The shared control node every grant carries, first.
pub const CONTROL: &str = "/dev/alixpu";
/// The second shared control node.
pub const CONTROL_CTL: &str = "/dev/alixpu_ctl";
/// The per-card nodes' prefix (`/dev/alixpu_ppu<ordinal>`).
pub const CARD_PREFIX: &str = "/dev/alixpu_ppu";

/// The node of the card at `ordinal`.
pub fn card_node(ordinal: u32) -> String {
    format!("{CARD_PREFIX}{ordinal}")
}

/// How many per-card nodes (`/dev/alixpu_ppu<N>`) the kernel shows: the cards the driver
/// holds (0 when `/dev` cannot be listed).
pub fn count_cards(host: &dyn Host) -> usize {
    let name = CARD_PREFIX.trim_start_matches("/dev/");
    host.list("/dev")
        .map(|entries| {
            entries
                .iter()
                .filter(|e| {
                    e.strip_prefix(name)
                        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                })
                .count()
        })
        .unwrap_or(0)
}

/// Why a node does not prove what it must.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    /// The node could not be stat'ed (missing, unreadable).
    #[error("device node {path:?}: {reason}")]
    Stat { path: String, reason: String },
    #[error("{path:?} is not a character device")]
    NotCharacter { path: String },
    #[error(
        "card {card}: no recorded minor number to prove its device node addresses it: fail closed"
    )]
    NoRecordedMinor { card: String },
    #[error("card {card}: device node {path:?} carries minor {found}, want {want}: fail closed")]
    WrongMinor {
        card: String,
        path: String,
        found: u32,
        want: u32,
    },
    #[error("card {card}: absent from the device record: fail closed")]
    Absent { card: String },
}

/// The kernel minor of the character device at `path` on `host`.
pub fn minor(host: &dyn Host, path: &str) -> Result<u32, NodeError> {
    match host.char_device(path) {
        Ok(Some(number)) => Ok(number.minor),
        Ok(None) => Err(NodeError::NotCharacter { path: path.into() }),
        Err(HostError::NotFound { .. }) => Err(NodeError::Stat {
            path: path.into(),
            reason: "no such file or directory".into(),
        }),
        Err(e) => Err(NodeError::Stat {
            path: path.into(),
            reason: e.to_string(),
        }),
    }
}

/// A required node: a character device, whatever its number.
pub fn require(host: &dyn Host, path: &str) -> Result<(), NodeError> {
    minor(host, path).map(|_| ())
}

/// Proves the node of `card` (its UUID, for messages) at `ordinal` carries `recorded`, the minor
/// the detection recorded; answers the node's path.
pub fn prove_card(
    host: &dyn Host,
    card: &str,
    ordinal: u32,
    recorded: Option<u32>,
) -> Result<String, NodeError> {
    let want = recorded.ok_or_else(|| NodeError::NoRecordedMinor { card: card.into() })?;
    let path = card_node(ordinal);
    let found = minor(host, &path)?;
    if found != want {
        return Err(NodeError::WrongMinor {
            card: card.into(),
            path,
            found,
            want,
        });
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_host::FsHost;

    #[test]
    fn a_card_node_is_proven_by_its_minor() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("dev")).unwrap();
        std::fs::write(dir.path().join("dev/alixpu_ppu14"), "c 509:15\n").unwrap();
        std::fs::write(dir.path().join("dev/alixpu_ppu3"), "").unwrap();
        let host = FsHost::new(dir.path());
        assert_eq!(
            prove_card(&host, "GPU-a", 14, Some(15)).unwrap(),
            "/dev/alixpu_ppu14"
        );
        assert_eq!(
            prove_card(&host, "GPU-a", 14, Some(14))
                .unwrap_err()
                .to_string(),
            "card GPU-a: device node \"/dev/alixpu_ppu14\" carries minor 15, want 14: fail closed"
        );
        assert_eq!(
            prove_card(&host, "GPU-a", 14, None)
                .unwrap_err()
                .to_string(),
            "card GPU-a: no recorded minor number to prove its device node addresses it: fail closed"
        );
        assert_eq!(
            prove_card(&host, "GPU-b", 3, Some(4))
                .unwrap_err()
                .to_string(),
            "\"/dev/alixpu_ppu3\" is not a character device"
        );
        assert_eq!(
            require(&host, CONTROL).unwrap_err().to_string(),
            "device node \"/dev/alixpu\": no such file or directory"
        );
    }
}
