//! What makes a folder a recorded host: an explicit mark, never the folder's shape.
//!
//! A recorded host (DESIGN.md, "A recorded host") holds `root/` and `commands/`. Its shape alone
//! cannot tell it from a live root: every Linux `/` holds `/root`, so a `--host-root /` (or the
//! DaemonSet's `/host`) read as a recording looks for `/root/proc/driver/nvidia` and runs no
//! program at all. A recording therefore carries [`MARK_FILE`] at its top, written by
//! [`crate::Recorder`] and present in every recorded host the project ships; a folder without it
//! is a live host, read with the real programs. This module only decides which one a folder is;
//! it reads nothing else of the host.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::commands::recorded::COMMANDS_DIR;
use crate::record::ROOT_DIR;

/// The file at the top of a recorded host that marks it as one (JSON, [`Mark`]).
pub const MARK_FILE: &str = "recorded-host.json";

/// The recorded-host format this build reads and writes.
pub const FORMAT: u32 = 1;

/// The content of [`MARK_FILE`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mark {
    /// The recorded-host format (DESIGN.md's layout is format 1).
    pub format: u32,
    /// What wrote the recording (`device-manager 0.1.0`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_by: Option<String>,
    /// The host root it was recorded from (`/`, `/host`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_root: Option<String>,
}

impl Mark {
    /// A mark of the current format.
    pub fn new(recorded_by: Option<String>, host_root: Option<String>) -> Mark {
        Mark {
            format: FORMAT,
            recorded_by,
            host_root,
        }
    }

    /// The mark as the file holds it (pretty JSON, one trailing newline).
    pub fn to_json(&self) -> String {
        // Serialising this plain struct cannot fail; an empty object is never written.
        let mut text = serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".to_string());
        text.push('\n');
        text
    }
}

/// A folder whose mark could not be taken as one.
#[derive(Debug, thiserror::Error)]
pub enum MarkError {
    /// The mark exists but could not be read.
    #[error("{path}: {source}")]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The mark is not the JSON this build writes.
    #[error("{path}: not a recorded-host mark ({reason})")]
    Malformed { path: PathBuf, reason: String },
    /// The mark names a format this build cannot replay.
    #[error(
        "{path}: recorded-host format {format}, this build reads format {FORMAT} (record the host again with this build)"
    )]
    UnknownFormat { path: PathBuf, format: u32 },
}

/// What a `--host-root` folder is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRoot {
    /// A live root (`/`, or the host mounted at `/host`): its files are the node's, its programs
    /// are run for real.
    Live { root: PathBuf },
    /// A recording: the node's files under `dir/root`, its programs replayed from
    /// `dir/commands`.
    Recorded { dir: PathBuf, mark: Mark },
}

impl HostRoot {
    /// Decides what `dir` is: a recording exactly when it carries [`MARK_FILE`].
    pub fn classify(dir: &Path) -> Result<HostRoot, MarkError> {
        match read_mark(dir)? {
            Some(mark) => Ok(HostRoot::Recorded {
                dir: dir.to_path_buf(),
                mark,
            }),
            None => Ok(HostRoot::Live {
                root: dir.to_path_buf(),
            }),
        }
    }

    /// The folder the node's files are read under: the root itself, or `dir/root`.
    pub fn files(&self) -> PathBuf {
        match self {
            HostRoot::Live { root } => root.clone(),
            HostRoot::Recorded { dir, .. } => dir.join(ROOT_DIR),
        }
    }

    /// For a live root that looks like a recording without its mark (a `commands/` folder of
    /// recorded programs beside `root/`), the line an operator should read: it is read live.
    /// A real root never holds `commands/`, so this never fires on a node.
    pub fn unmarked_recording_note(&self) -> Option<String> {
        let HostRoot::Live { root } = self else {
            return None;
        };
        let looks_recorded = root.join(COMMANDS_DIR).is_dir() && root.join(ROOT_DIR).is_dir();
        looks_recorded.then(|| {
            format!(
                "{}: holds root/ and commands/ but no {MARK_FILE}, so it is read as a live host; \
                 a recording made by `device-manager record` carries the mark (add it to replay \
                 an older recording: {{\"format\": {FORMAT}}})",
                root.display()
            )
        })
    }
}

/// Reads `dir`'s mark: `None` when it has none.
pub fn read_mark(dir: &Path) -> Result<Option<Mark>, MarkError> {
    let path = dir.join(MARK_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(MarkError::Unreadable { path, source }),
    };
    let mark: Mark = serde_json::from_str(&text).map_err(|e| MarkError::Malformed {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    if mark.format != FORMAT {
        return Err(MarkError::UnknownFormat {
            path,
            format: mark.format,
        });
    }
    Ok(Some(mark))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live_looking_root() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["root", "proc/driver/nvidia", "sys", "commands"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        dir
    }

    #[test]
    fn a_folder_without_the_mark_is_live_whatever_it_holds() {
        let dir = live_looking_root();
        let root = HostRoot::classify(dir.path()).unwrap();
        assert_eq!(
            root,
            HostRoot::Live {
                root: dir.path().to_path_buf()
            }
        );
        assert_eq!(root.files(), dir.path());
        let note = root
            .unmarked_recording_note()
            .expect("root/ + commands/ is noted");
        assert!(note.contains(MARK_FILE), "{note}");
    }

    #[test]
    fn a_real_root_is_live_and_not_noted() {
        let root = HostRoot::classify(Path::new("/")).unwrap();
        assert_eq!(root.files(), Path::new("/"));
        assert!(matches!(root, HostRoot::Live { .. }));
        assert_eq!(root.unmarked_recording_note(), None);
    }

    #[test]
    fn the_mark_makes_a_recording_read_under_root() {
        let dir = live_looking_root();
        let mark = Mark::new(Some("device-manager 0.1.0".into()), Some("/".into()));
        std::fs::write(dir.path().join(MARK_FILE), mark.to_json()).unwrap();
        let root = HostRoot::classify(dir.path()).unwrap();
        assert_eq!(root.files(), dir.path().join("root"));
        assert_eq!(
            root,
            HostRoot::Recorded {
                dir: dir.path().to_path_buf(),
                mark
            }
        );
        assert_eq!(root.unmarked_recording_note(), None);
    }

    #[test]
    fn a_minimal_mark_is_enough() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(MARK_FILE), "{\"format\": 1}\n").unwrap();
        assert!(matches!(
            HostRoot::classify(dir.path()).unwrap(),
            HostRoot::Recorded { .. }
        ));
    }

    #[test]
    fn a_bad_mark_is_one_clear_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MARK_FILE);
        for (text, says) in [
            ("not json", "not a recorded-host mark"),
            ("{\"format\": 2}", "format 2, this build reads format 1"),
            ("{\"format\": 1, \"extra\": true}", "unknown field"),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = HostRoot::classify(dir.path()).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
            assert!(e.contains(&path.display().to_string()), "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }
}
