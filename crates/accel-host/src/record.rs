//! The writer of the recorded-host format (DESIGN.md, "A recorded host"): what a node shows
//! under `/` goes to `DIR/root/…`, each program run to `DIR/commands/NAME/…`, so that
//! `FsHost::new(DIR/root)` and `RecordedCommands::load(DIR)` answer as the node did.
//!
//! sysfs is a graph, not a tree: a device links to its driver, the driver back to its devices,
//! every device to its bus. Links are therefore copied as links and never followed below the
//! top of a copied tree, depth is bounded, and only small text attributes are copied (never
//! `config`, `rom`, `resource*` or the write-only triggers, which are binary, huge, or act when
//! touched). What cannot be read is skipped with a note; only failing to write the recording is
//! an error. Which paths and programs make up a node's recording is the caller's business.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use crate::commands::recorded::{COMMANDS_DIR, SIGNAL_STATUS};
use crate::commands::{CommandError, CommandOutput, Commands, TIMED_OUT_MARKER};
use crate::host::{EntryKind, FsHost, Host, HostError};
use crate::recording::{MARK_FILE, Mark};

/// The folder of a recording that holds the node's files.
pub const ROOT_DIR: &str = "root";

/// The largest file [`Recorder::copy_tree`] copies: sysfs and procfs attributes are a few bytes,
/// and anything larger in such a tree is a blob nobody reads.
pub const TREE_FILE_LIMIT: usize = 64 * 1024;

/// The largest file [`Recorder::copy_file`] copies (a CDI spec of many GPUs is well below).
pub const FILE_LIMIT: usize = 16 * 1024 * 1024;

/// How deep below its top a copied tree goes (a PCI function behind three switch levels, and its
/// `drm/card0/…` folders, stay well within).
pub const MAX_TREE_DEPTH: usize = 12;

/// sysfs attributes never copied: binary or huge (`config`, `rom`, `vpd`, `resource*`), or
/// triggers that act on the device or driver (`remove`, `reset`, `rescan`, `bind`, …).
pub const SKIPPED_ATTRIBUTES: [&str; 10] = [
    "config",
    "rom",
    "vpd",
    "remove",
    "reset",
    "rescan",
    "bind",
    "unbind",
    "new_id",
    "remove_id",
];

fn is_skipped_attribute(name: &str) -> bool {
    SKIPPED_ATTRIBUTES.contains(&name) || name.starts_with("resource")
}

/// A recording that could not be written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The destination already holds something; a recording is never mixed with another.
    #[error("{path}: already exists and is not empty (record into a new folder)")]
    NotEmpty { path: PathBuf },
    /// A file or folder of the recording could not be written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A host path tried to leave the recording's root.
    #[error("{path}: path escapes the recorded root")]
    Escapes { path: String },
    /// A command name that cannot be a folder name, or is already recorded.
    #[error("command name {name:?}: {reason}")]
    BadName { name: String, reason: &'static str },
    /// An argv the `argv` file cannot hold (empty, or an argument with a newline).
    #[error(
        "{argv:?}: cannot be recorded (an argv needs a program, and no argument may hold a newline)"
    )]
    Unrepresentable { argv: Vec<String> },
}

/// How a recorded program run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandRecord {
    /// It ran to its end; `status` is `None` when a signal ended it.
    Answered { status: Option<i32> },
    /// It gave no answer within the deadline: recorded with its partial output and the
    /// `timed-out` marker, so replay hangs as the node did.
    TimedOut,
    /// It is not installed: nothing is written, which replays as not installed.
    NotInstalled,
    /// It could not be started; nothing is written.
    Failed { message: String },
}

/// Writes a recorded host into a folder.
#[derive(Debug)]
pub struct Recorder {
    dir: PathBuf,
    /// Where host paths land: `DIR/root`, with the same `..` refusal as a host.
    root: FsHost,
    /// Host directories already copied, so a tree reached twice is copied once.
    copied_dirs: HashSet<String>,
    notes: Vec<String>,
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), RecordError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| RecordError::Io {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    std::fs::write(path, bytes).map_err(|source| RecordError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The host path `target` names, written in a link at host path `link` (both relative to the
/// root), worked out from the text alone; `None` when it climbs above the root.
fn resolve_link(link: &str, target: &Path) -> Option<String> {
    let mut parts: Vec<String> = if target.is_absolute() {
        Vec::new()
    } else {
        link.split('/')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect()
    };
    if !target.is_absolute() {
        parts.pop();
    }
    for component in target.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Some(parts.join("/"))
}

/// A link target that stays inside the recording: an absolute target (`/run/cdi/x.json`) is
/// rewritten relative to the link (`../../run/cdi/x.json`), since the replayed root is not `/`.
fn recorded_link_target(link: &str, target: &Path) -> PathBuf {
    if !target.is_absolute() {
        return target.to_path_buf();
    }
    let depth = link.split('/').filter(|p| !p.is_empty()).count();
    let mut relative = PathBuf::new();
    for _ in 1..depth {
        relative.push("..");
    }
    for component in target.components() {
        if let Component::Normal(part) = component {
            relative.push(part);
        }
    }
    relative
}

fn normalise(path: &str) -> String {
    path.split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect::<Vec<_>>()
        .join("/")
}

impl Recorder {
    /// A recorder writing into `dir`, which must be absent or empty; creates `DIR/root`,
    /// `DIR/commands` and the mark that makes the folder a recording ([`MARK_FILE`], carrying
    /// `mark`), first, so even a recording cut short is never read as a live root.
    pub fn new(dir: impl Into<PathBuf>, mark: &Mark) -> Result<Self, RecordError> {
        let dir = dir.into();
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| RecordError::Io { path, source }
        };
        match std::fs::read_dir(&dir) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(RecordError::NotEmpty { path: dir });
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&dir)(e)),
        }
        for sub in [ROOT_DIR, COMMANDS_DIR] {
            let path = dir.join(sub);
            std::fs::create_dir_all(&path).map_err(io(&path))?;
        }
        write_file(&dir.join(MARK_FILE), mark.to_json().as_bytes())?;
        Ok(Recorder {
            root: FsHost::new(dir.join(ROOT_DIR)),
            dir,
            copied_dirs: HashSet::new(),
            notes: Vec::new(),
        })
    }

    /// The recording's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What was skipped and why, one line each (`sys/…/power/wakeup: …`).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    fn note(&mut self, note: String) {
        tracing::debug!("record: {note}");
        self.notes.push(note);
    }

    fn dest(&self, host_path: &str) -> Result<PathBuf, RecordError> {
        self.root
            .resolve(host_path)
            .map_err(|_| RecordError::Escapes {
                path: host_path.to_string(),
            })
    }

    /// Copies the host's tree at `path`: folders, small text files, and links as links. The
    /// links directly in `path` also bring what they point at (so `sys/bus/pci/devices` brings
    /// each function's folder under `sys/devices/…`); links deeper down are never followed.
    /// An absent `path` is a note, not an error.
    pub fn copy_tree(&mut self, host: &dyn Host, path: &str) -> Result<(), RecordError> {
        let path = normalise(path);
        match host.entry_kind(&path) {
            Ok(EntryKind::Dir) => self.copy_dir(host, &path, 0, true),
            Ok(EntryKind::Link) => self.copy_link(host, &path, true),
            Ok(EntryKind::File { len }) => self.copy_small_file(host, &path, len, TREE_FILE_LIMIT),
            Ok(EntryKind::Other) => {
                self.note(format!("{path}: not a file or folder, skipped"));
                Ok(())
            }
            Err(e) => {
                self.note(e.to_string());
                Ok(())
            }
        }
    }

    fn copy_dir(
        &mut self,
        host: &dyn Host,
        path: &str,
        depth: usize,
        follow_links: bool,
    ) -> Result<(), RecordError> {
        if depth > MAX_TREE_DEPTH {
            self.note(format!(
                "{path}: deeper than {MAX_TREE_DEPTH} levels, skipped"
            ));
            return Ok(());
        }
        if !self.copied_dirs.insert(path.to_string()) {
            return Ok(());
        }
        let dest = self.dest(path)?;
        std::fs::create_dir_all(&dest).map_err(|source| RecordError::Io { path: dest, source })?;
        let names = match host.list(path) {
            Ok(names) => names,
            Err(e) => {
                self.note(e.to_string());
                return Ok(());
            }
        };
        for name in names {
            let child = format!("{path}/{name}");
            match host.entry_kind(&child) {
                Ok(EntryKind::Link) => self.copy_link(host, &child, follow_links)?,
                Ok(EntryKind::Dir) => self.copy_dir(host, &child, depth + 1, false)?,
                Ok(EntryKind::File { .. }) if is_skipped_attribute(&name) => {}
                Ok(EntryKind::File { len }) => {
                    self.copy_small_file(host, &child, len, TREE_FILE_LIMIT)?
                }
                Ok(EntryKind::Other) => self.note(format!("{child}: not a regular file, skipped")),
                Err(e) => self.note(e.to_string()),
            }
        }
        Ok(())
    }

    /// Copies a link as a link; with `follow`, also what it points at (one step, no further).
    fn copy_link(&mut self, host: &dyn Host, path: &str, follow: bool) -> Result<(), RecordError> {
        let target = match host.read_link(path) {
            Ok(target) => target,
            Err(e) => {
                self.note(e.to_string());
                return Ok(());
            }
        };
        let dest = self.dest(path)?;
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|source| RecordError::Io {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        // A link recorded earlier (a tree reached twice) is replaced, not an error.
        let _ = std::fs::remove_file(&dest);
        std::os::unix::fs::symlink(recorded_link_target(path, &target), &dest)
            .map_err(|source| RecordError::Io { path: dest, source })?;
        if !follow {
            return Ok(());
        }
        let Some(resolved) = resolve_link(path, &target) else {
            self.note(format!(
                "{path}: link to {} leaves the root, not followed",
                target.display()
            ));
            return Ok(());
        };
        match host.entry_kind(&resolved) {
            Ok(EntryKind::Dir) => self.copy_dir(host, &resolved, 0, false),
            Ok(EntryKind::File { len }) => {
                self.copy_small_file(host, &resolved, len, TREE_FILE_LIMIT)
            }
            Ok(EntryKind::Link) => self.copy_link(host, &resolved, false),
            Ok(EntryKind::Other) => Ok(()),
            Err(e) => {
                self.note(format!("{path}: {e}"));
                Ok(())
            }
        }
    }

    fn copy_small_file(
        &mut self,
        host: &dyn Host,
        path: &str,
        len: u64,
        limit: usize,
    ) -> Result<(), RecordError> {
        if len > limit as u64 {
            self.note(format!("{path}: {len} bytes, over {limit}, skipped"));
            return Ok(());
        }
        let bytes = match host.read(path) {
            Ok(bytes) => bytes,
            Err(e) => {
                self.note(e.to_string());
                return Ok(());
            }
        };
        if bytes.len() > limit {
            self.note(format!(
                "{path}: {} bytes, over {limit}, skipped",
                bytes.len()
            ));
            return Ok(());
        }
        if bytes.contains(&0) {
            self.note(format!("{path}: binary, skipped"));
            return Ok(());
        }
        write_file(&self.dest(path)?, &bytes)
    }

    /// Copies one file's content (a link is followed: the content is what is recorded), up to
    /// [`FILE_LIMIT`] bytes. Returns whether it was copied; absent or unreadable is a note.
    pub fn copy_file(&mut self, host: &dyn Host, path: &str) -> Result<bool, RecordError> {
        let path = normalise(path);
        let bytes = match host.read(&path) {
            Ok(bytes) => bytes,
            Err(e) => {
                self.note(e.to_string());
                return Ok(false);
            }
        };
        if bytes.len() > FILE_LIMIT {
            self.note(format!(
                "{path}: {} bytes, over {FILE_LIMIT}, skipped",
                bytes.len()
            ));
            return Ok(false);
        }
        write_file(&self.dest(&path)?, &bytes)?;
        Ok(true)
    }

    /// Writes an empty marker file at `path` (a `/dev` node: replay only asks whether it exists).
    pub fn touch_marker(&mut self, path: &str) -> Result<(), RecordError> {
        write_file(&self.dest(&normalise(path))?, b"")
    }

    /// Copies a `/dev` node as a marker when the host has it; returns whether it had.
    pub fn mark_if_present(&mut self, host: &dyn Host, path: &str) -> Result<bool, RecordError> {
        let path = normalise(path);
        match host.entry_kind(&path) {
            Ok(_) => {
                // A character device's number goes into its marker (`c MAJOR:MINOR`), so a
                // replay can prove a node addresses the device it should (T-Head's minors).
                match host.char_device(&path) {
                    Ok(Some(number)) => {
                        write_file(&self.dest(&path)?, format!("c {number}\n").as_bytes())?
                    }
                    _ => self.touch_marker(&path)?,
                }
                Ok(true)
            }
            Err(HostError::NotFound { .. }) => Ok(false),
            Err(e) => {
                self.note(e.to_string());
                Ok(false)
            }
        }
    }

    /// Runs `argv` with `deadline` and records it as `commands/NAME/`.
    pub fn record_command(
        &mut self,
        commands: &dyn Commands,
        name: &str,
        argv: &[&str],
        deadline: Duration,
    ) -> Result<CommandRecord, RecordError> {
        let bad_name = |reason| RecordError::BadName {
            name: name.to_string(),
            reason,
        };
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
            return Err(bad_name("not a folder name"));
        }
        let folder = self.dir.join(COMMANDS_DIR).join(name);
        if folder.exists() {
            return Err(bad_name("already recorded"));
        }
        if argv.first().is_none_or(|p| p.is_empty()) || argv.iter().any(|a| a.contains('\n')) {
            return Err(RecordError::Unrepresentable {
                argv: argv.iter().map(|a| a.to_string()).collect(),
            });
        }
        let (output, record) = match commands.run(argv, deadline) {
            Ok(output) => {
                let record = CommandRecord::Answered {
                    status: output.status,
                };
                (output, record)
            }
            Err(CommandError::TimedOut { partial, .. }) => (partial, CommandRecord::TimedOut),
            Err(CommandError::NotInstalled { program }) => {
                self.note(format!("{program}: not installed, not recorded"));
                return Ok(CommandRecord::NotInstalled);
            }
            Err(e) => {
                let message = e.to_string();
                self.note(format!("{message}, not recorded"));
                return Ok(CommandRecord::Failed { message });
            }
        };
        self.write_command(&folder, argv, &output, &record, deadline)?;
        Ok(record)
    }

    fn write_command(
        &self,
        folder: &Path,
        argv: &[&str],
        output: &CommandOutput,
        record: &CommandRecord,
        deadline: Duration,
    ) -> Result<(), RecordError> {
        let mut argv_text = String::new();
        for arg in argv {
            argv_text.push_str(arg);
            argv_text.push('\n');
        }
        write_file(&folder.join("argv"), argv_text.as_bytes())?;
        write_file(&folder.join("stdout"), &output.stdout)?;
        if !output.stderr.is_empty() {
            write_file(&folder.join("stderr"), &output.stderr)?;
        }
        match record {
            CommandRecord::TimedOut => write_file(
                &folder.join(TIMED_OUT_MARKER),
                format!("no answer within {} ms, killed\n", deadline.as_millis()).as_bytes(),
            ),
            _ => {
                let status = match output.status {
                    Some(code) => code.to_string(),
                    None => SIGNAL_STATUS.to_string(),
                };
                write_file(&folder.join("status"), format!("{status}\n").as_bytes())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::os::unix::fs::symlink;
    use std::sync::Mutex;
    use std::time::Instant;

    use super::*;
    use crate::commands::RecordedCommands;
    use crate::pci::{PciClassPrefixes, scan_pci};

    /// A recording fake: answers from a table and remembers what it was asked.
    #[derive(Default)]
    struct FakeCommands {
        answers: BTreeMap<Vec<String>, Result<CommandOutput, &'static str>>,
        asked: Mutex<Vec<(Vec<String>, Duration)>>,
    }

    impl FakeCommands {
        fn answer(&mut self, argv: &[&str], answer: Result<CommandOutput, &'static str>) {
            self.answers
                .insert(argv.iter().map(|a| a.to_string()).collect(), answer);
        }
    }

    impl Commands for FakeCommands {
        fn run(&self, argv: &[&str], deadline: Duration) -> Result<CommandOutput, CommandError> {
            let key: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
            self.asked.lock().unwrap().push((key.clone(), deadline));
            match self.answers.get(&key) {
                None => Err(CommandError::NotInstalled {
                    program: argv[0].to_string(),
                }),
                Some(Ok(output)) => Ok(output.clone()),
                Some(Err("hang")) => Err(CommandError::TimedOut {
                    argv: key.join(" "),
                    deadline,
                    partial: CommandOutput {
                        status: None,
                        stdout: b"<?xml version".to_vec(),
                        stderr: Vec::new(),
                    },
                }),
                Some(Err(_)) => Err(CommandError::Io {
                    argv: key.join(" "),
                    source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
                }),
            }
        }

        fn is_installed(&self, program: &str) -> bool {
            self.answers.keys().any(|argv| argv[0] == program)
        }
    }

    fn write(root: &Path, path: &str, bytes: &[u8]) {
        let full = root.join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, bytes).unwrap();
    }

    fn link(root: &Path, path: &str, target: &str) {
        let full = root.join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        symlink(target, full).unwrap();
    }

    /// A node with a GPU behind a PCIe bridge, sysfs' cycles (driver ↔ devices, subsystem),
    /// binary attributes, procfs and a device node marker.
    fn sample_node() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let bridge = "sys/devices/pci0000:00/0000:00:01.0";
        let gpu = "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0";
        write(root, &format!("{bridge}/class"), b"0x060400\n");
        write(root, &format!("{bridge}/vendor"), b"0x8086\n");
        write(root, &format!("{bridge}/device"), b"0x347a\n");
        write(root, &format!("{gpu}/class"), b"0x030200\n");
        write(root, &format!("{gpu}/vendor"), b"0x10de\n");
        write(root, &format!("{gpu}/device"), b"0x2330\n");
        write(root, &format!("{gpu}/numa_node"), b"1\n");
        write(root, &format!("{gpu}/power/control"), b"on\n");
        write(root, &format!("{gpu}/config"), &[0x10, 0xde, 0, 0]);
        write(root, &format!("{gpu}/resource0"), b"bar");
        write(root, &format!("{gpu}/firmware_blob"), &[1, 0, 2]);
        write(
            root,
            &format!("{gpu}/big"),
            &vec![b'x'; TREE_FILE_LIMIT + 1],
        );
        link(
            root,
            &format!("{gpu}/driver"),
            "../../../../bus/pci/drivers/nvidia",
        );
        link(root, &format!("{gpu}/subsystem"), "../../../../bus/pci");
        link(root, &format!("{bridge}/subsystem"), "../../../bus/pci");
        link(
            root,
            "sys/bus/pci/drivers/nvidia/0000:01:00.0",
            "../../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0",
        );
        write(root, "sys/bus/pci/drivers/nvidia/unbind", b"");
        link(
            root,
            "sys/bus/pci/devices/0000:00:01.0",
            "../../../devices/pci0000:00/0000:00:01.0",
        );
        link(
            root,
            "sys/bus/pci/devices/0000:01:00.0",
            "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0",
        );
        write(
            root,
            "proc/driver/nvidia/version",
            b"NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.133.20\n",
        );
        write(
            root,
            "proc/driver/nvidia/gpus/0000:01:00.0/information",
            b"Model: \t\t NVIDIA H100 80GB HBM3\n",
        );
        write(root, "dev/nvidia0", b"");
        write(root, "dev/nvidiactl", b"");
        dir
    }

    fn fake_nvidia_smi() -> FakeCommands {
        let mut fake = FakeCommands::default();
        fake.answer(
            &["nvidia-smi", "-L"],
            Ok(CommandOutput {
                status: Some(0),
                stdout: b"GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n".to_vec(),
                stderr: Vec::new(),
            }),
        );
        fake.answer(
            &["nvidia-smi", "topo", "-m"],
            Ok(CommandOutput {
                status: Some(3),
                stdout: Vec::new(),
                stderr: b"topo not supported\n".to_vec(),
            }),
        );
        fake.answer(&["nvidia-smi", "-q", "-x"], Err("hang"));
        fake.answer(&["nvidia-smi", "mig", "-lgi"], Err("io"));
        fake
    }

    fn test_mark() -> Mark {
        Mark::new(Some("record tests".into()), Some("/".into()))
    }

    #[test]
    fn a_recording_is_marked_from_its_first_moment() {
        let out = tempfile::tempdir().unwrap();
        let dir = out.path().join("recorded");
        let _recorder = Recorder::new(&dir, &test_mark()).unwrap();
        // Nothing recorded yet, and the folder is already a recording, never a live root.
        match crate::recording::HostRoot::classify(&dir).unwrap() {
            crate::recording::HostRoot::Recorded { mark, .. } => assert_eq!(mark, test_mark()),
            live => panic!("a fresh recording must carry its mark, got {live:?}"),
        }
    }

    #[test]
    fn a_recording_replays_as_the_node_answered() {
        let node = sample_node();
        let host = FsHost::new(node.path());
        let fake = fake_nvidia_smi();
        let out = tempfile::tempdir().unwrap();
        let dir = out.path().join("recorded");
        let mut recorder = Recorder::new(&dir, &test_mark()).unwrap();

        recorder.copy_tree(&host, "/sys/bus/pci/devices").unwrap();
        recorder.copy_tree(&host, "proc/driver/nvidia").unwrap();
        assert!(
            recorder
                .copy_file(&host, "proc/driver/nvidia/version")
                .unwrap()
        );
        assert!(
            !recorder
                .copy_file(&host, "proc/driver/nvidia/absent")
                .unwrap()
        );
        recorder.touch_marker("dev/nvidiactl").unwrap();
        assert!(recorder.mark_if_present(&host, "dev/nvidia0").unwrap());
        assert!(!recorder.mark_if_present(&host, "dev/dxg").unwrap());

        let deadline = Duration::from_secs(30);
        let record = |r: &mut Recorder, name, argv: &[&str]| {
            r.record_command(&fake, name, argv, deadline).unwrap()
        };
        assert_eq!(
            record(&mut recorder, "list", &["nvidia-smi", "-L"]),
            CommandRecord::Answered { status: Some(0) }
        );
        assert_eq!(
            record(&mut recorder, "topo", &["nvidia-smi", "topo", "-m"]),
            CommandRecord::Answered { status: Some(3) }
        );
        assert_eq!(
            record(&mut recorder, "smi-xml", &["nvidia-smi", "-q", "-x"]),
            CommandRecord::TimedOut
        );
        assert!(matches!(
            record(&mut recorder, "mig-lgi", &["nvidia-smi", "mig", "-lgi"]),
            CommandRecord::Failed { .. }
        ));
        assert_eq!(
            record(&mut recorder, "rocm", &["rocm-smi"]),
            CommandRecord::NotInstalled
        );
        assert_eq!(fake.asked.lock().unwrap().len(), 5);
        assert!(
            fake.asked
                .lock()
                .unwrap()
                .iter()
                .all(|(_, d)| *d == deadline)
        );

        // The files: the same answers from the recording as from the node.
        let replayed = FsHost::new(dir.join(ROOT_DIR));
        let prefixes = PciClassPrefixes::from_env_value("0,1,2,3,4,5,6,7,8,9,a,b,c,d,e,f").unwrap();
        let live_scan = scan_pci(&host, &prefixes).unwrap();
        assert_eq!(live_scan.functions.len(), 2);
        assert_eq!(scan_pci(&replayed, &prefixes).unwrap(), live_scan);
        for path in [
            "proc/driver/nvidia/version",
            "proc/driver/nvidia/gpus/0000:01:00.0/information",
            "sys/bus/pci/devices/0000:01:00.0/power/control",
        ] {
            assert_eq!(
                replayed.read(path).unwrap(),
                host.read(path).unwrap(),
                "{path}"
            );
        }
        assert!(replayed.exists("dev/nvidia0"));
        assert!(replayed.exists("dev/nvidiactl"));
        assert!(!replayed.exists("dev/dxg"));
        assert_eq!(
            replayed
                .read_link("sys/bus/pci/devices/0000:01:00.0/subsystem")
                .unwrap(),
            PathBuf::from("../../../../bus/pci"),
            "links deeper down are copied as links"
        );
        // Binary, huge and trigger attributes, and the driver's folder (reached only through
        // links deeper down), are not copied.
        let gpu = "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0";
        for absent in ["config", "resource0", "firmware_blob", "big"] {
            assert!(!replayed.exists(&format!("{gpu}/{absent}")), "{absent}");
        }
        assert!(!replayed.exists("sys/bus/pci/drivers/nvidia"));
        let notes = recorder.notes().join("\n");
        assert!(notes.contains("firmware_blob: binary, skipped"), "{notes}");
        assert!(
            notes.contains("big: 65537 bytes, over 65536, skipped"),
            "{notes}"
        );
        assert!(notes.contains("rocm-smi: not installed"), "{notes}");

        // The programs: the same answers from the recording as from the fake.
        let commands = RecordedCommands::load(&dir).unwrap();
        for argv in [&["nvidia-smi", "-L"][..], &["nvidia-smi", "topo", "-m"]] {
            assert_eq!(
                commands.run(argv, deadline).unwrap(),
                fake.run(argv, deadline).unwrap()
            );
        }
        assert!(commands.is_installed("nvidia-smi"));
        assert!(!commands.is_installed("rocm-smi"));
        assert!(matches!(
            commands.run(&["nvidia-smi", "mig", "-lgi"], deadline),
            Err(CommandError::NotInstalled { .. })
        ));
        let started = Instant::now();
        match commands.run(&["nvidia-smi", "-q", "-x"], Duration::from_millis(50)) {
            Err(CommandError::TimedOut { partial, .. }) => {
                assert_eq!(partial.stdout_text(), "<?xml version");
                assert!(started.elapsed() >= Duration::from_millis(50));
            }
            other => panic!("expected the recorded hang, got {other:?}"),
        }
    }

    #[test]
    fn a_recording_is_never_mixed_with_another() {
        let out = tempfile::tempdir().unwrap();
        std::fs::write(out.path().join("old"), "x").unwrap();
        assert!(matches!(
            Recorder::new(out.path(), &test_mark()),
            Err(RecordError::NotEmpty { .. })
        ));
        let empty = tempfile::tempdir().unwrap();
        let mut recorder = Recorder::new(empty.path(), &test_mark()).unwrap();
        let fake = fake_nvidia_smi();
        let second = Duration::from_secs(1);
        recorder
            .record_command(&fake, "list", &["nvidia-smi", "-L"], second)
            .unwrap();
        for (name, argv) in [
            ("list", &["nvidia-smi", "-L"][..]),
            ("../x", &["nvidia-smi", "-L"]),
            ("", &["nvidia-smi", "-L"]),
        ] {
            assert!(
                matches!(
                    recorder.record_command(&fake, name, argv, second),
                    Err(RecordError::BadName { .. })
                ),
                "{name}"
            );
        }
        assert!(matches!(
            recorder.record_command(&fake, "nl", &["nvidia-smi", "a\nb"], second),
            Err(RecordError::Unrepresentable { .. })
        ));
        assert!(matches!(
            recorder.touch_marker("../escape"),
            Err(RecordError::Escapes { .. })
        ));
    }

    #[test]
    fn absolute_links_stay_inside_the_recording() {
        let node = tempfile::tempdir().unwrap();
        write(node.path(), "run/cdi/nvidia.yaml", b"cdiVersion: 0.5.0\n");
        link(node.path(), "etc/cdi/nvidia.yaml", "/run/cdi/nvidia.yaml");
        // A link out of the root is kept as a link but not followed.
        link(node.path(), "etc/cdi/outside", "../../../../outside");
        let out = tempfile::tempdir().unwrap();
        let mut recorder = Recorder::new(out.path(), &test_mark()).unwrap();
        let host = FsHost::new(node.path());
        recorder.copy_tree(&host, "etc/cdi").unwrap();
        let replayed = FsHost::new(out.path().join(ROOT_DIR));
        assert_eq!(
            replayed.read_link("etc/cdi/nvidia.yaml").unwrap(),
            PathBuf::from("../../run/cdi/nvidia.yaml")
        );
        assert_eq!(
            replayed.read_to_string("etc/cdi/nvidia.yaml").unwrap(),
            "cdiVersion: 0.5.0\n"
        );
        assert!(
            recorder
                .notes()
                .iter()
                .any(|n| n.contains("leaves the root")),
            "{:?}",
            recorder.notes()
        );
    }

    #[test]
    fn an_absent_tree_is_a_note() {
        let node = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let mut recorder = Recorder::new(out.path(), &test_mark()).unwrap();
        recorder
            .copy_tree(&FsHost::new(node.path()), "proc/driver/nvidia")
            .unwrap();
        assert_eq!(recorder.notes().len(), 1);
        assert!(recorder.notes()[0].contains("not found"));
    }

    #[test]
    fn link_targets_resolve_from_the_text() {
        assert_eq!(
            resolve_link(
                "sys/bus/pci/devices/0000:18:00.0",
                Path::new("../../../devices/pci0000:00/0000:18:00.0")
            )
            .as_deref(),
            Some("sys/devices/pci0000:00/0000:18:00.0")
        );
        assert_eq!(
            resolve_link("etc/x", Path::new("/run/y")).as_deref(),
            Some("run/y")
        );
        assert_eq!(resolve_link("etc/x", Path::new("../../y")), None);
        assert_eq!(
            recorded_link_target("etc/cdi/x", Path::new("/run/cdi/x")),
            PathBuf::from("../../run/cdi/x")
        );
    }

    /// The machine's own sysfs: the copy ends (no cycle followed), and the recording scans the
    /// same as the machine.
    #[test]
    fn records_this_machines_pci_bus() {
        let live = FsHost::new(crate::host::DEFAULT_ROOT);
        let out = tempfile::tempdir().unwrap();
        let mut recorder = Recorder::new(out.path(), &test_mark()).unwrap();
        let started = Instant::now();
        recorder.copy_tree(&live, "sys/bus/pci/devices").unwrap();
        assert!(started.elapsed() < Duration::from_secs(60));
        let every_class =
            PciClassPrefixes::from_env_value("0,1,2,3,4,5,6,7,8,9,a,b,c,d,e,f").unwrap();
        let replayed = FsHost::new(out.path().join(ROOT_DIR));
        assert_eq!(
            scan_pci(&replayed, &every_class).unwrap().functions,
            scan_pci(&live, &every_class).unwrap().functions
        );
    }
}
