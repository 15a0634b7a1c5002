//! The admin socket's server: binds `<data-dir>/admin.sock` (mode 0600, a stale socket
//! replaced, a live one refused), checks each peer's credentials (`SO_PEERCRED`), and answers
//! one JSON line per request line on a thread per connection. A request larger than the limit,
//! or not complete within the timeout, is answered with an error and the connection closed; a
//! malformed one is answered with an error and the connection read on. Handler calls run one
//! at a time. Plain std threads: the daemon's async runtime is not needed for a socket an
//! operator uses a few times a day.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use serde_json::{Value, json};

use super::{AdminError, AdminHandler, Request, check_peer};

/// The largest request line read (a reset of every GPU of a node fits many times over).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// How long a client may take to send one complete request line.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more are answered with an error and closed.
pub const MAX_CONNECTIONS: usize = 16;

/// The server's limits and who may connect.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub max_request_bytes: usize,
    pub request_timeout: Duration,
    pub max_connections: usize,
    /// User ids allowed besides root: the daemon's own effective user.
    pub allowed_uids: Vec<u32>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_request_bytes: MAX_REQUEST_BYTES,
            request_timeout: REQUEST_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            allowed_uids: vec![nix::unistd::geteuid().as_raw()],
        }
    }
}

/// A bound admin socket, not yet serving.
#[derive(Debug)]
pub struct AdminServer {
    listener: UnixListener,
    path: PathBuf,
    options: ServerOptions,
}

impl AdminServer {
    /// Binds `<data_dir>/admin.sock` with the default options.
    pub fn bind(data_dir: &Path) -> Result<Self, AdminError> {
        Self::bind_at(&super::socket_path(data_dir), ServerOptions::default())
    }

    /// Binds `path`: a socket nobody answers on is replaced, one a daemon answers on is
    /// refused, anything else in the way is refused. The socket is made 0600; the peer check
    /// holds even in the instant before that.
    pub fn bind_at(path: &Path, options: ServerOptions) -> Result<Self, AdminError> {
        let io = |source| AdminError::Io {
            path: path.to_path_buf(),
            source,
        };
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_socket() => {
                if UnixStream::connect(path).is_ok() {
                    return Err(AdminError::InUse(path.to_path_buf()));
                }
                std::fs::remove_file(path).map_err(io)?;
            }
            Ok(_) => return Err(AdminError::NotASocket(path.to_path_buf())),
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        let listener = UnixListener::bind(path).map_err(io)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
        Ok(AdminServer {
            listener,
            path: path.to_path_buf(),
            options,
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves on a thread of its own until [`RunningServer::shutdown`].
    pub fn spawn<H: AdminHandler>(self, handler: Arc<H>) -> std::io::Result<RunningServer> {
        let stop = Arc::new(AtomicBool::new(false));
        let path = self.path.clone();
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("admin-socket".into())
            .spawn(move || self.run(handler, &flag))?;
        Ok(RunningServer { stop, path, thread })
    }

    /// Serves on this thread until `stop` is set (and a connection wakes the accept).
    pub fn run<H: AdminHandler>(self, handler: Arc<H>, stop: &AtomicBool) {
        let shared = Arc::new(Shared {
            handler,
            options: self.options,
            active: AtomicUsize::new(0),
            one_at_a_time: Mutex::new(()),
        });
        for stream in self.listener.incoming() {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let stream = match stream {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::warn!("admin socket: accept: {e}");
                    continue;
                }
            };
            let shared = Arc::clone(&shared);
            if shared.active.fetch_add(1, Ordering::SeqCst) >= shared.options.max_connections {
                shared.active.fetch_sub(1, Ordering::SeqCst);
                let mut stream = stream;
                let _ = reply(
                    &mut stream,
                    &failure("too many admin connections at once; try again"),
                );
                continue;
            }
            let spawned = std::thread::Builder::new()
                .name("admin-conn".into())
                .spawn(move || {
                    serve_connection(stream, &shared);
                    shared.active.fetch_sub(1, Ordering::SeqCst);
                });
            if let Err(e) = spawned {
                tracing::error!("admin socket: cannot start a connection thread: {e}");
            }
        }
    }
}

/// A server serving on its own thread.
#[derive(Debug)]
pub struct RunningServer {
    stop: Arc<AtomicBool>,
    path: PathBuf,
    thread: JoinHandle<()>,
}

impl RunningServer {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops accepting, waits for the accept loop, and removes the socket. Connections in
    /// flight finish on their own threads.
    pub fn shutdown(self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = UnixStream::connect(&self.path);
        let _ = self.thread.join();
        let _ = std::fs::remove_file(&self.path);
    }
}

struct Shared<H> {
    handler: Arc<H>,
    options: ServerOptions,
    active: AtomicUsize,
    one_at_a_time: Mutex<()>,
}

/// Why reading a request line stopped.
enum Read1 {
    Line(Vec<u8>),
    /// The peer closed the connection between requests.
    Closed,
    /// Nothing arrived within the timeout between requests.
    Idle,
    /// Part of a request arrived, but not all of it in time.
    TimedOut,
    Oversize,
    Failed(std::io::Error),
}

fn serve_connection<H: AdminHandler>(mut stream: UnixStream, shared: &Shared<H>) {
    let uid = match getsockopt(&stream, PeerCredentials) {
        Ok(credentials) => credentials.uid(),
        Err(e) => {
            let error = AdminError::PeerCredentials(e);
            tracing::warn!("admin socket: {error}");
            let _ = reply(&mut stream, &failure(&error.to_string()));
            return;
        }
    };
    if let Err(e) = check_peer(uid, &shared.options.allowed_uids) {
        tracing::warn!("admin socket: {e}");
        let _ = reply(&mut stream, &failure(&e.to_string()));
        linger(&mut stream, &shared.options);
        return;
    }
    let _ = stream.set_write_timeout(Some(shared.options.request_timeout));
    let mut pending = Vec::new();
    loop {
        let line = match read_line(&mut stream, &mut pending, &shared.options) {
            Read1::Line(line) => line,
            Read1::Closed | Read1::Idle => return,
            Read1::TimedOut => {
                let _ = reply(
                    &mut stream,
                    &failure(&format!(
                        "request not complete within {}s",
                        shared.options.request_timeout.as_secs_f64()
                    )),
                );
                return;
            }
            Read1::Oversize => {
                let _ = reply(
                    &mut stream,
                    &failure(&format!(
                        "request larger than {} bytes",
                        shared.options.max_request_bytes
                    )),
                );
                return;
            }
            Read1::Failed(e) => {
                tracing::debug!("admin socket: read: {e}");
                return;
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let answer = match serde_json::from_slice::<Request>(&line) {
            Ok(request) => handle(shared, &request),
            Err(e) => failure(&format!(
                "bad request: {e} (expected {{\"op\":\"refresh\"}} or {{\"op\":\"reset\",\"gpus\":[\"GPU-…\"]}})"
            )),
        };
        if reply(&mut stream, &answer).is_err() {
            return;
        }
    }
}

/// After a refusal sent before reading: stops writing and reads (and drops) what the peer
/// still sends, up to the request limit and timeout, so its write does not fail before it has
/// read the refusal.
fn linger(stream: &mut UnixStream, options: &ServerOptions) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(options.request_timeout.min(Duration::from_secs(1))));
    let mut left = options.max_request_bytes;
    let mut chunk = [0u8; 4096];
    while left > 0 {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

fn handle<H: AdminHandler>(shared: &Shared<H>, request: &Request) -> Value {
    // A poisoned lock only means an earlier handler panicked; the next call may still run.
    let _turn = shared
        .one_at_a_time
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match request {
        Request::Refresh => match shared.handler.refresh() {
            Ok(refreshed) => success("refresh", &refreshed),
            Err(e) => failure(&e),
        },
        Request::Reset { gpus } => match shared.handler.reset(gpus) {
            Ok(report) => success("reset", &report),
            Err(e) => failure(&e.to_string()),
        },
    }
}

fn success(op: &str, payload: &impl serde::Serialize) -> Value {
    let mut answer = json!({"ok": true, "op": op});
    if let (Some(answer), Ok(Value::Object(fields))) =
        (answer.as_object_mut(), serde_json::to_value(payload))
    {
        answer.extend(fields);
    }
    answer
}

fn failure(error: &str) -> Value {
    json!({"ok": false, "error": error})
}

fn reply(stream: &mut UnixStream, answer: &Value) -> std::io::Result<()> {
    let mut line = answer.to_string();
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    stream.flush()
}

/// Reads one line (without its newline) within the timeout and the size limit; bytes after
/// it stay in `pending` for the next request.
fn read_line(stream: &mut UnixStream, pending: &mut Vec<u8>, options: &ServerOptions) -> Read1 {
    let deadline = Instant::now() + options.request_timeout;
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = pending.iter().position(|b| *b == b'\n') {
            if end > options.max_request_bytes {
                return Read1::Oversize;
            }
            let mut line: Vec<u8> = pending.drain(..=end).collect();
            line.pop();
            return Read1::Line(line);
        }
        if pending.len() > options.max_request_bytes {
            return Read1::Oversize;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return if pending.is_empty() {
                Read1::Idle
            } else {
                Read1::TimedOut
            };
        }
        if let Err(e) = stream.set_read_timeout(Some(left)) {
            return Read1::Failed(e);
        }
        match stream.read(&mut chunk) {
            Ok(0) if pending.is_empty() => return Read1::Closed,
            // The last request may come without its newline.
            Ok(0) => return Read1::Line(std::mem::take(pending)),
            Ok(n) => pending.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return if pending.is_empty() {
                    Read1::Idle
                } else {
                    Read1::TimedOut
                };
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Read1::Failed(e),
        }
    }
}
