//! `SystemCommands`: runs real programs with a deadline and kills what overruns it.
//!
//! The program runs in its own process group, so a shell wrapper and everything it started are
//! killed together; its output is read by two threads while it runs, so a program that prints
//! more than a pipe holds cannot block, and what it printed before the deadline is kept. Input
//! given for its standard input ([`Commands::run_with_input`]) is written by a third thread,
//! which closes the pipe when done, so a program that never reads cannot block the caller
//! either; without input, standard input is `/dev/null`. This module must not interpret the
//! output.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::{CommandError, CommandOutput, Commands};

/// How long the output readers get after the program was killed to hand over the last bytes
/// (a grandchild that left the process group may keep the pipe open for ever).
const DRAIN_GRACE: Duration = Duration::from_millis(200);

/// The longest pause between two looks at whether the program has exited.
const MAX_POLL: Duration = Duration::from_millis(10);

/// Runs programs found on the `PATH` (or at the path given, when the program names one).
#[derive(Debug, Clone, Default)]
pub struct SystemCommands {
    /// The search path; `None` reads the process's `PATH` at each call.
    search_path: Option<OsString>,
}

impl SystemCommands {
    /// A runner that looks programs up on this process's `PATH`.
    pub fn new() -> Self {
        SystemCommands { search_path: None }
    }

    /// A runner that looks programs up on `search_path` (a `PATH`-style, colon-separated list).
    pub fn with_search_path(search_path: impl Into<OsString>) -> Self {
        SystemCommands {
            search_path: Some(search_path.into()),
        }
    }

    /// The executable file `program` names: itself when it contains a `/`, else the first
    /// executable of that name on the search path.
    pub fn find_program(&self, program: &str) -> Option<PathBuf> {
        if program.is_empty() {
            return None;
        }
        if program.contains('/') {
            let path = PathBuf::from(program);
            return is_executable(&path).then_some(path);
        }
        let search_path = match &self.search_path {
            Some(p) => p.clone(),
            None => std::env::var_os("PATH")?,
        };
        std::env::split_paths(&search_path)
            .filter(|dir| !dir.as_os_str().is_empty())
            .map(|dir| dir.join(program))
            .find(|candidate| is_executable(candidate))
    }
}

pub(crate) fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The command line as one string, for messages.
pub(crate) fn argv_text(argv: &[&str]) -> String {
    argv.join(" ")
}

/// Bytes a reader thread has taken from a pipe so far, shared with the waiting thread.
type Captured = Arc<Mutex<Vec<u8>>>;

fn snapshot(buffer: &Captured) -> Vec<u8> {
    buffer.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Copies a pipe into `buffer` as bytes arrive, and says on `done` when the pipe closed.
fn spawn_reader<R: Read + Send + 'static>(
    mut pipe: R,
    buffer: Captured,
    done: mpsc::Sender<()>,
) -> std::io::Result<()> {
    thread::Builder::new()
        .name("command-output".into())
        .spawn(move || {
            let mut chunk = [0u8; 8192];
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => buffer
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            // The receiver may have stopped listening after a timeout; nothing to do then.
            let _ = done.send(());
        })
        .map(|_| ())
}

/// Writes `input` into a program's standard input and closes it; a program that exits or is
/// killed first ends the write with a broken pipe, which is no one's concern.
fn spawn_writer(mut pipe: ChildStdin, input: Vec<u8>) -> std::io::Result<()> {
    thread::Builder::new()
        .name("command-input".into())
        .spawn(move || {
            let _ = pipe.write_all(&input);
            // Dropping the pipe closes it: the program reads end-of-file after the input.
        })
        .map(|_| ())
}

/// Waits until `count` readers said they are done or `until` passed; true when all were.
fn wait_readers(done: &Receiver<()>, count: usize, until: Instant) -> bool {
    for _ in 0..count {
        let left = until.saturating_duration_since(Instant::now());
        match done.recv_timeout(left) {
            Ok(()) => {}
            Err(RecvTimeoutError::Timeout) => return false,
            // Every sender is gone: each reader either sent or died; nothing more will come.
            Err(RecvTimeoutError::Disconnected) => return true,
        }
    }
    true
}

/// Kills the program's whole process group, and the program itself should that fail.
fn kill_group(child: &mut Child) {
    let pgid = i32::try_from(child.id()).ok().map(Pid::from_raw);
    let group_killed = pgid.is_some_and(|pgid| killpg(pgid, Signal::SIGKILL).is_ok());
    if !group_killed {
        // The group is gone or could not be signalled; the child itself still can be.
        let _ = child.kill();
    }
}

struct Running {
    child: Child,
    stdout: Captured,
    stderr: Captured,
    done: Receiver<()>,
}

/// What one program run is: the executable, its arguments, and the variables set for it (on
/// top of this process's environment).
pub(crate) struct Launch<'a> {
    pub program: &'a Path,
    pub args: Vec<&'a std::ffi::OsStr>,
    pub env: Vec<(&'static str, OsString)>,
    /// What is written to its standard input (`None`: `/dev/null`).
    pub input: Option<&'a [u8]>,
}

impl Running {
    fn start(launch: &Launch<'_>) -> std::io::Result<Running> {
        let mut command = Command::new(launch.program);
        command
            .args(&launch.args)
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .stdin(if launch.input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so the deadline kills what it started too.
            .process_group(0);
        let mut child = command.spawn()?;
        let stdout: Captured = Arc::default();
        let stderr: Captured = Arc::default();
        let (tx, done) = mpsc::channel();
        let pipes: (Option<ChildStdout>, Option<ChildStderr>) =
            (child.stdout.take(), child.stderr.take());
        let stdin = child.stdin.take();
        let started = (|| {
            if let (Some(pipe), Some(input)) = (stdin, launch.input) {
                spawn_writer(pipe, input.to_vec())?;
            }
            if let Some(pipe) = pipes.0 {
                spawn_reader(pipe, stdout.clone(), tx.clone())?;
            }
            if let Some(pipe) = pipes.1 {
                spawn_reader(pipe, stderr.clone(), tx.clone())?;
            }
            Ok(())
        })();
        if let Err(e) = started {
            kill_group(&mut child);
            let _ = child.wait();
            return Err(e);
        }
        Ok(Running {
            child,
            stdout,
            stderr,
            done,
        })
    }

    /// Waits for the program to exit, until `until`; `None` when it has not.
    fn wait_exit(&mut self, until: Instant) -> std::io::Result<Option<ExitStatus>> {
        let mut pause = Duration::from_millis(1);
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(Some(status));
            }
            let now = Instant::now();
            if now >= until {
                return Ok(None);
            }
            thread::sleep(pause.min(until - now));
            pause = (pause * 2).min(MAX_POLL);
        }
    }

    fn output(&self, status: Option<ExitStatus>) -> CommandOutput {
        CommandOutput {
            status: status.and_then(|s| s.code()),
            stdout: snapshot(&self.stdout),
            stderr: snapshot(&self.stderr),
        }
    }

    /// Kills the group, reaps the program, and gives the readers a moment to hand over the last
    /// bytes. Returns the exit status if it was known before.
    fn stop(&mut self, status: Option<ExitStatus>) -> Option<ExitStatus> {
        kill_group(&mut self.child);
        let status = match status {
            Some(s) => Some(s),
            // Killed by us: the status says "signal", so it is not a reading worth keeping.
            None => self.child.wait().ok().filter(|s| s.code().is_some()),
        };
        wait_readers(&self.done, 2, Instant::now() + DRAIN_GRACE);
        status
    }
}

impl SystemCommands {
    fn launch(
        &self,
        argv: &[&str],
        input: Option<&[u8]>,
        deadline: Duration,
    ) -> Result<CommandOutput, CommandError> {
        let Some(program) = argv.first() else {
            return Err(CommandError::Empty);
        };
        let Some(path) = self.find_program(program) else {
            return Err(CommandError::NotInstalled {
                program: program.to_string(),
            });
        };
        let launch = Launch {
            program: &path,
            args: argv[1..].iter().map(std::ffi::OsStr::new).collect(),
            env: Vec::new(),
            input,
        };
        run_launch(&launch, argv, deadline)
    }
}

impl Commands for SystemCommands {
    fn run(&self, argv: &[&str], deadline: Duration) -> Result<CommandOutput, CommandError> {
        self.launch(argv, None, deadline)
    }

    fn run_with_input(
        &self,
        argv: &[&str],
        input: &[u8],
        deadline: Duration,
    ) -> Result<CommandOutput, CommandError> {
        self.launch(argv, Some(input), deadline)
    }

    fn is_installed(&self, program: &str) -> bool {
        self.find_program(program).is_some()
    }
}

/// Runs `launch` within `deadline`, killing its process group when it overruns; `argv` is the
/// command line the caller asked for, which every message names (a tool run inside the host
/// root is still `npu-smi info`, not the `chroot` line that started it).
pub(crate) fn run_launch(
    launch: &Launch<'_>,
    argv: &[&str],
    deadline: Duration,
) -> Result<CommandOutput, CommandError> {
    let program = argv.first().copied().unwrap_or_default();
    let started_at = Instant::now();
    let until = started_at.checked_add(deadline);
    let io_error = |source| CommandError::Io {
        argv: argv_text(argv),
        source,
    };
    let mut running = match Running::start(launch) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CommandError::NotInstalled {
                program: program.to_string(),
            });
        }
        Err(e) => return Err(io_error(e)),
    };
    // A deadline too far to represent is no deadline at all.
    let until = until.unwrap_or_else(|| started_at + Duration::from_secs(u32::MAX.into()));
    let exited = match running.wait_exit(until) {
        Ok(exited) => exited,
        Err(e) => {
            running.stop(None);
            return Err(io_error(e));
        }
    };
    // Exited in time: its output is complete once both pipes closed, which a grandchild
    // still holding them can delay past the deadline.
    if let Some(status) = exited
        && wait_readers(&running.done, 2, until)
    {
        return Ok(running.output(Some(status)));
    }
    let status = running.stop(exited);
    Err(CommandError::TimedOut {
        argv: argv_text(argv),
        deadline,
        partial: running.output(status),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(20);

    #[test]
    fn captures_output_and_exit_status() {
        let commands = SystemCommands::new();
        let out = commands
            .run(&["sh", "-c", "echo out; echo err >&2; exit 3"], LONG)
            .unwrap();
        assert_eq!(out.status, Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
        assert!(!out.success());
        let ok = commands.run(&["true"], LONG).unwrap();
        assert!(ok.success());
    }

    #[test]
    fn kills_what_overruns_and_keeps_partial_output() {
        let started = Instant::now();
        let err = SystemCommands::new()
            .run(
                &["sh", "-c", "echo hi; sleep 30"],
                Duration::from_millis(200),
            )
            .unwrap_err();
        let took = started.elapsed();
        match err {
            CommandError::TimedOut {
                deadline, partial, ..
            } => {
                assert_eq!(deadline, Duration::from_millis(200));
                assert_eq!(partial.stdout_text(), "hi\n");
                assert_eq!(partial.status, None, "killed: no exit status");
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert!(took >= Duration::from_millis(200), "cut early: {took:?}");
        assert!(took < Duration::from_secs(3), "not cut in time: {took:?}");
    }

    #[test]
    fn a_grandchild_holding_the_pipe_cannot_hold_the_caller() {
        // The shell exits at once, but the background sleep keeps stdout open.
        let started = Instant::now();
        let err = SystemCommands::new()
            .run(
                &["sh", "-c", "sleep 30 & echo started"],
                Duration::from_millis(300),
            )
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(3));
        match err {
            CommandError::TimedOut { partial, .. } => {
                assert_eq!(partial.stdout_text(), "started\n");
                assert_eq!(partial.status, Some(0), "the program itself had exited");
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
    }

    #[test]
    fn a_chatty_program_does_not_deadlock_on_full_pipes() {
        // 1 MiB on each pipe, far beyond a pipe's 64 KiB buffer.
        let script = "head -c 1048576 /dev/zero; head -c 1048576 /dev/zero >&2";
        let out = SystemCommands::new()
            .run(&["sh", "-c", script], LONG)
            .unwrap();
        assert_eq!(out.stdout.len(), 1 << 20);
        assert_eq!(out.stderr.len(), 1 << 20);
    }

    #[test]
    fn input_is_fed_to_standard_input_and_then_closed() {
        let commands = SystemCommands::new();
        // Two answers read line by line, then end-of-file (the loop ends only at EOF).
        let script = "read a; read b; echo \"got $a and $b\"; while read x; do echo more; done";
        let out = commands
            .run_with_input(&["sh", "-c", script], b"50\n4096\n", LONG)
            .unwrap();
        assert_eq!(out.stdout_text(), "got 50 and 4096\n");
        // Without input, standard input is empty.
        let out = commands.run(&["sh", "-c", "cat; echo end"], LONG).unwrap();
        assert_eq!(out.stdout_text(), "end\n");
    }

    #[test]
    fn a_program_that_never_reads_its_input_still_meets_its_deadline() {
        let started = Instant::now();
        // More than a pipe holds, to a program that never reads it.
        let input = vec![b'x'; 1 << 20];
        let err = SystemCommands::new()
            .run_with_input(&["sleep", "30"], &input, Duration::from_millis(200))
            .unwrap_err();
        assert!(matches!(err, CommandError::TimedOut { .. }), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
        // One that exits without reading is answered at once.
        let out = SystemCommands::new()
            .run_with_input(&["true"], &input, LONG)
            .unwrap();
        assert!(out.success());
    }

    #[test]
    fn a_missing_program_is_not_installed() {
        let commands = SystemCommands::new();
        assert!(commands.is_installed("sh"));
        assert!(!commands.is_installed("no-such-program-here"));
        assert!(matches!(
            commands.run(&["no-such-program-here", "-q"], LONG),
            Err(CommandError::NotInstalled { program }) if program == "no-such-program-here"
        ));
        assert!(matches!(
            commands.run(&["/no/such/dir/prog"], LONG),
            Err(CommandError::NotInstalled { .. })
        ));
        assert!(matches!(commands.run(&[], LONG), Err(CommandError::Empty)));
    }

    #[test]
    fn looks_programs_up_on_the_given_search_path() {
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("nvidia-smi");
        std::fs::write(&tool, "#!/bin/sh\necho fake \"$@\"\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.path().join("not-executable"), "").unwrap();
        let commands = SystemCommands::with_search_path(dir.path());
        assert!(commands.is_installed("nvidia-smi"));
        assert!(!commands.is_installed("not-executable"));
        assert!(
            !commands.is_installed("sh"),
            "only the given path is searched"
        );
        let out = commands.run(&["nvidia-smi", "-L"], LONG).unwrap();
        assert_eq!(out.stdout_text(), "fake -L\n");
    }
}
