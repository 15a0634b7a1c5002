//! The admin socket's client: one request, one answer line, with a deadline. A refusal comes
//! back as the daemon's own one-line error; a daemon that is not running is said so, naming
//! the socket.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::Request;

/// Why a request got no successful answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No socket at the path: no daemon, or another `--data-dir`.
    #[error(
        "the daemon is not running: no admin socket at {0} (start `device-manager serve`, or pass its --data-dir)"
    )]
    NoSocket(PathBuf),
    /// A socket nobody answers on: the daemon stopped.
    #[error("the daemon is not running: nothing answers on {0}")]
    Refused(PathBuf),
    /// The socket is root only.
    #[error("{0}: permission denied (the admin socket is for root only)")]
    PermissionDenied(PathBuf),
    /// The daemon answered with an error: its message, as is.
    #[error("{0}")]
    Daemon(String),
    /// No answer within the deadline.
    #[error("{path}: no answer within {timeout:?}")]
    TimedOut { path: PathBuf, timeout: Duration },
    /// The answer was not the protocol's.
    #[error("{path}: unreadable answer from the daemon: {reason}")]
    BadAnswer { path: PathBuf, reason: String },
    /// Any other failure talking to the socket.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Sends `request` to the socket at `path` and waits up to `timeout` for the answer; the
/// answer's fields on success (`"ok": true`).
pub fn request(path: &Path, request: &Request, timeout: Duration) -> Result<Value, ClientError> {
    let io = |source: std::io::Error| match source.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => ClientError::TimedOut {
            path: path.to_path_buf(),
            timeout,
        },
        _ => ClientError::Io {
            path: path.to_path_buf(),
            source,
        },
    };
    let mut stream = UnixStream::connect(path).map_err(|e| match e.kind() {
        ErrorKind::NotFound => ClientError::NoSocket(path.to_path_buf()),
        ErrorKind::ConnectionRefused => ClientError::Refused(path.to_path_buf()),
        ErrorKind::PermissionDenied => ClientError::PermissionDenied(path.to_path_buf()),
        _ => io(e),
    })?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    let mut line = serde_json::to_string(request).map_err(|e| ClientError::BadAnswer {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(io)?;
    let mut answer = String::new();
    BufReader::new(&stream).read_line(&mut answer).map_err(io)?;
    parse_answer(path, &answer)
}

/// Reads one answer line.
fn parse_answer(path: &Path, answer: &str) -> Result<Value, ClientError> {
    let bad = |reason: String| ClientError::BadAnswer {
        path: path.to_path_buf(),
        reason,
    };
    if answer.trim().is_empty() {
        return Err(bad(
            "the daemon closed the connection without answering".into()
        ));
    }
    let value: Value = serde_json::from_str(answer).map_err(|e| bad(e.to_string()))?;
    match value.get("ok").and_then(Value::as_bool) {
        Some(true) => Ok(value),
        Some(false) => Err(ClientError::Daemon(
            value
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("the daemon refused without saying why")
                .to_string(),
        )),
        None => Err(bad("no \"ok\" field".into())),
    }
}
