//! The kernel log as a stream of records: `/dev/kmsg`, read from its end for the life of the
//! process, behind the [`KernelLog`] trait so that tests (and the daemon's own tests) feed
//! records through a channel instead.
//!
//! The kernel hands out one record per `read(2)`: a header `priority,sequence,timestamp,flags`,
//! a `;`, the message (bytes outside printable ASCII and `\` escaped as `\xNN`, so a multi-line
//! message arrives as one line with `\x0a` inside), a newline, then optional dictionary lines
//! that start with a space (`SUBSYSTEM=pci`). A reader that falls behind the ring buffer gets
//! `EPIPE` once and is moved to the oldest record still held: the records in between are lost,
//! and [`KernelLogEntry::Overrun`] says how many. Kernels before 4.9 could split one message into
//! fragments (flag `c`, then `+`); those pass through as separate records with their flag, since
//! the driver prints each XID line in one call. A regular file in the device's place (a saved
//! log, a test cluster's `--kmsg-path`) holds the same records one per line and is followed as
//! it grows ([`FollowedFile`]). This module reads and splits records, and strips the prefixes
//! that logs put in front of a kernel message ([`strip_prefixes`]: dmesg's timestamps, syslog's
//! date and host, a record's header) once for every vendor; it must not interpret the message
//! itself (accel-nvidia finds the XIDs in it, accel-amd the amdgpu faults).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use crate::host::FsHost;

/// Where the kernel log lives, relative to the host root.
pub const KMSG_PATH: &str = "dev/kmsg";

/// The largest record the kernel writes to a `/dev/kmsg` reader (`CONSOLE_EXT_LOG_MAX`, 8 KiB);
/// a smaller buffer makes `read` fail with `EINVAL`.
pub const RECORD_BUFFER_BYTES: usize = 8192;

/// Errors of the kernel-log reader.
#[derive(Debug, thiserror::Error)]
pub enum KmsgError {
    /// `/dev/kmsg` could not be opened or positioned at its end.
    #[error(
        "{path}: cannot open the kernel log: {source} (the daemon needs read access to /dev/kmsg)"
    )]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A read failed with something other than an overrun or an interrupted call.
    #[error("kernel log: read failed: {0}")]
    Read(#[source] io::Error),
    /// A record's header was not `priority,sequence,timestamp,flags;`.
    #[error("kernel log: malformed record header {0:?}")]
    Malformed(String),
}

/// One kernel log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KmsgRecord {
    /// Syslog priority as the kernel gives it: facility × 8 + level.
    pub priority: u32,
    /// The kernel's sequence number of the record (gaps mean lost records).
    pub sequence: u64,
    /// Microseconds since boot.
    pub timestamp_us: u64,
    /// The kernel's flag: `-` for a whole record, `c`/`+` for fragments on old kernels.
    pub flag: char,
    /// The message, `\xNN` escapes decoded; several lines joined by `\n` for a multi-line
    /// message. Dictionary lines (` KEY=value`) are not part of it.
    pub message: String,
}

impl KmsgRecord {
    /// The syslog level (0 emergency … 7 debug).
    pub fn level(&self) -> u32 {
        self.priority & 7
    }
}

/// What the kernel log stream yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelLogEntry {
    /// The next record.
    Record(KmsgRecord),
    /// The reader fell behind the ring buffer and records were lost; `lost` is how many when
    /// the sequence numbers tell (unknown before the first record is read).
    Overrun { lost: Option<u64> },
}

/// A source of kernel log records, blocking until the next one.
pub trait KernelLog: Send {
    /// The next entry; `Ok(None)` when the stream has ended (a fake whose sender is gone; the
    /// real kernel log never ends).
    fn next_entry(&mut self) -> Result<Option<KernelLogEntry>, KmsgError>;
}

/// Raw record reads: one record per call, as `/dev/kmsg` answers `read(2)`. The seam between
/// [`KmsgReader`] and the device node, so tests can script reads, overruns included.
pub trait RecordSource: Send {
    /// Reads one record into `buf`, returning its length (0 at end of stream).
    fn read_record(&mut self, buf: &mut [u8]) -> io::Result<usize>;
}

impl RecordSource for File {
    fn read_record(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read(buf)
    }
}

/// The kernel log read from a [`RecordSource`]: `/dev/kmsg` in production.
pub struct KmsgReader<S> {
    source: S,
    buffer: Vec<u8>,
    last_sequence: Option<u64>,
    overrun: bool,
    pending: VecDeque<KernelLogEntry>,
}

/// How long a followed file is left alone after its end is reached before it is read again.
pub const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// Records kept in a regular file, one per line in `/dev/kmsg`'s own format (a log saved with
/// `cat /dev/kmsg`, a test cluster's stand-in for the device, a replayed incident): read line by
/// line and followed as the file grows, as `tail -f` does. The device hands out one record per
/// read and blocks at its end; a file hands out whatever bytes it holds and reports its end, so it
/// is split into lines here and its end is waited out ([`FOLLOW_POLL`]) rather than taken for the
/// end of the log. Dictionary lines (starting with a space) are skipped: the messages carry the
/// XIDs. A file cut shorter than the position read so far (rotated, truncated) is read again from
/// its start.
pub struct FollowedFile {
    file: io::BufReader<File>,
    line: Vec<u8>,
    position: u64,
}

impl FollowedFile {
    fn rewind_if_truncated(&mut self) -> io::Result<()> {
        let length = self.file.get_ref().metadata()?.len();
        if length < self.position {
            self.file.seek(SeekFrom::Start(0))?;
            self.position = 0;
            self.line.clear();
        }
        Ok(())
    }
}

impl RecordSource for FollowedFile {
    fn read_record(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::io::BufRead;
        loop {
            let read = self.file.read_until(b'\n', &mut self.line)?;
            self.position += read as u64;
            if self.line.last() != Some(&b'\n') {
                // The end of what is written so far (maybe mid-line): wait for more.
                std::thread::sleep(FOLLOW_POLL);
                self.rewind_if_truncated()?;
                continue;
            }
            let line = std::mem::take(&mut self.line);
            if line.starts_with(b" ") || line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let n = line.len().min(buf.len());
            buf[..n].copy_from_slice(&line[..n]);
            return Ok(n);
        }
    }
}

/// The source [`KmsgReader::open`] picks for a path: the kernel's device, or a regular file
/// followed as it grows.
pub enum KmsgSource {
    /// `/dev/kmsg` (or any character device answering one record per read).
    Device(File),
    /// A regular file of records, one per line.
    Followed(FollowedFile),
}

impl RecordSource for KmsgSource {
    fn read_record(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            KmsgSource::Device(file) => file.read(buf),
            KmsgSource::Followed(file) => file.read_record(buf),
        }
    }
}

impl KmsgReader<KmsgSource> {
    /// Opens the kernel log at `path` and moves to its end, so only records written from now on
    /// are read (faults seen before are in `faults.json`). A regular file there is followed as
    /// it grows ([`FollowedFile`]), never taken to have ended.
    pub fn open(path: &Path) -> Result<Self, KmsgError> {
        let open_error = |source| KmsgError::Open {
            path: path.to_path_buf(),
            source,
        };
        let mut file = File::open(path).map_err(open_error)?;
        let end = file.seek(SeekFrom::End(0)).map_err(open_error)?;
        let regular = file.metadata().map_err(open_error)?.is_file();
        let source = if regular {
            KmsgSource::Followed(FollowedFile {
                file: io::BufReader::new(file),
                line: Vec::new(),
                position: end,
            })
        } else {
            KmsgSource::Device(file)
        };
        Ok(KmsgReader::new(source))
    }

    /// Opens `dev/kmsg` under a host root (the node itself when the root is `/`).
    pub fn open_host(host: &FsHost) -> Result<Self, KmsgError> {
        let path = host.resolve(KMSG_PATH).map_err(|e| KmsgError::Open {
            path: PathBuf::from(KMSG_PATH),
            source: io::Error::new(io::ErrorKind::InvalidInput, e.to_string()),
        })?;
        Self::open(&path)
    }
}

impl<S: RecordSource> KmsgReader<S> {
    /// A reader over any record source, positioned wherever the source is.
    pub fn new(source: S) -> Self {
        KmsgReader {
            source,
            buffer: vec![0; RECORD_BUFFER_BYTES],
            last_sequence: None,
            overrun: false,
            pending: VecDeque::new(),
        }
    }

    fn accept(&mut self, record: KmsgRecord) {
        // An overrun is reported by EPIPE; a gap in the sequence numbers without one (a source
        // that skipped records) is reported the same way.
        let gap = self
            .last_sequence
            .and_then(|last| record.sequence.checked_sub(last.saturating_add(1)))
            .filter(|gap| *gap > 0);
        if self.overrun || gap.is_some() {
            let lost = if self.last_sequence.is_some() {
                Some(gap.unwrap_or(0))
            } else {
                None
            };
            tracing::warn!(
                lost = ?lost,
                "kernel log overrun: records were lost before sequence {}",
                record.sequence
            );
            self.pending.push_back(KernelLogEntry::Overrun { lost });
            self.overrun = false;
        }
        self.last_sequence = Some(record.sequence);
        self.pending.push_back(KernelLogEntry::Record(record));
    }
}

impl<S: RecordSource> KernelLog for KmsgReader<S> {
    fn next_entry(&mut self) -> Result<Option<KernelLogEntry>, KmsgError> {
        loop {
            if let Some(entry) = self.pending.pop_front() {
                return Ok(Some(entry));
            }
            match self.source.read_record(&mut self.buffer) {
                Ok(0) => return Ok(None),
                Ok(n) => {
                    let bytes = &self.buffer[..n.min(self.buffer.len())];
                    match parse_record(bytes) {
                        Ok(record) => self.accept(record),
                        // One unreadable record is skipped, not the end of the watch.
                        Err(e) => tracing::warn!("{e}"),
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {
                    // The kernel has moved us to the oldest record it still holds.
                    self.overrun = true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(KmsgError::Read(e)),
            }
        }
    }
}

/// Parses one `/dev/kmsg` record: `priority,sequence,timestamp,flags[,…];message\n[ KEY=value\n…]`.
pub fn parse_record(bytes: &[u8]) -> Result<KmsgRecord, KmsgError> {
    let malformed = || {
        let shown = &bytes[..bytes.len().min(64)];
        KmsgError::Malformed(String::from_utf8_lossy(shown).into_owned())
    };
    let semicolon = bytes
        .iter()
        .position(|b| *b == b';')
        .ok_or_else(malformed)?;
    let header = std::str::from_utf8(&bytes[..semicolon]).map_err(|_| malformed())?;
    let mut fields = header.split(',');
    let mut number = || -> Result<u64, KmsgError> {
        fields
            .next()
            .and_then(|f| f.trim().parse::<u64>().ok())
            .ok_or_else(malformed)
    };
    let priority = u32::try_from(number()?).map_err(|_| malformed())?;
    let sequence = number()?;
    let timestamp_us = number()?;
    let flag = fields.next().and_then(|f| f.chars().next()).unwrap_or('-');
    // The message runs to the first newline; the lines after it are the dictionary (each
    // starts with a space) and are not part of the message.
    let rest = &bytes[semicolon + 1..];
    let end = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
    Ok(KmsgRecord {
        priority,
        sequence,
        timestamp_us,
        flag,
        message: unescape(&rest[..end]),
    })
}

/// Decodes the kernel's `\xNN` escapes (a multi-line message's `\x0a` becomes a newline);
/// invalid UTF-8 is replaced, never an error.
fn unescape(text: &[u8]) -> String {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'\\' && text.get(i + 1) == Some(&b'x') {
            let hex = text
                .get(i + 2..i + 4)
                .and_then(|h| std::str::from_utf8(h).ok());
            if let Some(byte) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(text[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Removes the log prefixes in front of a kernel message, in any combination: a `/dev/kmsg`
/// record header `4,1843,1843308145,-;` (a saved `cat /dev/kmsg`), `<4>`, `kern  :warn  : `
/// (`dmesg --decode`), `[ 1843.308145]` (dmesg), `[Sun Feb 23 16:24:18 2025]` (`dmesg -T`),
/// `2024-11-15T12:02:03,470068+00:00` (`dmesg --time-format iso`), `Nov 29 11:28:11 host
/// kernel:` (syslog, journalctl), `kernel:`. What is left is the driver's own text
/// (`NVRM: Xid …`, `amdgpu 0000:28:00.0: …`); a line without a prefix is returned as it is.
pub fn strip_prefixes(line: &str) -> &str {
    let mut rest = line.trim_start();
    // Each pass removes one prefix; a line carries at most a handful.
    for _ in 0..8 {
        let next = strip_one(rest).trim_start();
        if next.len() == rest.len() {
            break;
        }
        rest = next;
    }
    rest
}

fn strip_one(line: &str) -> &str {
    if let Some(after) = strip_record_header(line) {
        return after;
    }
    if let Some(after) = strip_priority(line) {
        return after;
    }
    if let Some(inner) = line.strip_prefix('[')
        && let Some(close) = inner.find(']')
        && close <= 40
        && !inner[..close].contains('[')
    {
        return &inner[close + 1..];
    }
    if let Some(after) = strip_decode(line) {
        return after;
    }
    if let Some(after) = line.strip_prefix("kernel:") {
        return after;
    }
    let mut words = line.splitn(2, char::is_whitespace);
    let first = words.next().unwrap_or("");
    let after_first = words.next().unwrap_or("").trim_start();
    if is_iso_timestamp(first) {
        return after_first;
    }
    if let Some(after) = strip_syslog_date(line) {
        return after;
    }
    // `host kernel:` (syslog and journalctl put the host name before the tag).
    if !first.is_empty()
        && !first.ends_with(':')
        && let Some(after) = after_first.strip_prefix("kernel:")
    {
        return after;
    }
    line
}

/// `4,1843,1843308145,-;` (or `…,-,caller=T1;`): a `/dev/kmsg` record's header, three numbers
/// and a flag before the first `;`.
fn strip_record_header(line: &str) -> Option<&str> {
    let (header, rest) = line.split_once(';')?;
    let mut fields = header.split(',');
    let numbers = fields
        .by_ref()
        .take(3)
        .filter(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
        .count();
    let flag = fields.next()?;
    (numbers == 3 && matches!(flag, "-" | "c" | "+")).then_some(rest)
}

/// `<4>`: the syslog priority.
fn strip_priority(line: &str) -> Option<&str> {
    let inner = line.strip_prefix('<')?;
    let close = inner.find('>')?;
    (close > 0 && close <= 3 && inner[..close].bytes().all(|b| b.is_ascii_digit()))
        .then(|| &inner[close + 1..])
}

/// `kern  :warn  : ` from `dmesg --decode`: facility, colon, level, colon.
fn strip_decode(line: &str) -> Option<&str> {
    let word = |s: &str| -> Option<usize> {
        let n = s.bytes().take_while(u8::is_ascii_lowercase).count();
        (n > 0).then_some(n)
    };
    let n = word(line)?;
    let rest = line[n..].trim_start_matches(' ').strip_prefix(':')?;
    let m = word(rest)?;
    let rest = rest[m..].trim_start_matches(' ').strip_prefix(':')?;
    Some(rest)
}

/// `2024-11-15T12:02:03,470068+00:00` and its variants: a date, `T`, a time.
fn is_iso_timestamp(word: &str) -> bool {
    let bytes = word.as_bytes();
    bytes.len() >= 16
        && bytes[..4].iter().all(u8::is_ascii_digit)
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes[10] == b'T'
        && bytes[13] == b':'
}

/// `Nov 29 11:28:11 `: the syslog/journalctl short date.
fn strip_syslog_date(line: &str) -> Option<&str> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = line.get(..3)?;
    if !MONTHS.contains(&month) {
        return None;
    }
    let mut words = line[3..].split_whitespace();
    let day = words.next()?;
    let time = words.next()?;
    let day_ok = !day.is_empty() && day.len() <= 2 && day.bytes().all(|b| b.is_ascii_digit());
    let time_ok = time.len() >= 8 && time.as_bytes()[2] == b':' && time.as_bytes()[5] == b':';
    if !(day_ok && time_ok) {
        return None;
    }
    let at = line.find(time)? + time.len();
    Some(&line[at..])
}

/// A kernel log fed through a channel: what tests (and the daemon's tests) use instead of
/// `/dev/kmsg`. The stream ends when every sender is dropped.
pub struct ChannelKernelLog {
    receiver: mpsc::Receiver<KernelLogEntry>,
}

impl ChannelKernelLog {
    /// A fake kernel log and the sender that feeds it.
    pub fn new() -> (mpsc::Sender<KernelLogEntry>, ChannelKernelLog) {
        let (sender, receiver) = mpsc::channel();
        (sender, ChannelKernelLog { receiver })
    }
}

impl KernelLog for ChannelKernelLog {
    fn next_entry(&mut self) -> Result<Option<KernelLogEntry>, KmsgError> {
        Ok(self.receiver.recv().ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_record_with_its_dictionary() {
        let bytes = b"4,1843,1843308145,-;NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus\n SUBSYSTEM=pci\n DEVICE=+pci:0000:18:00.0\n";
        let record = parse_record(bytes).unwrap();
        assert_eq!(record.priority, 4);
        assert_eq!(record.level(), 4);
        assert_eq!(record.sequence, 1843);
        assert_eq!(record.timestamp_us, 1_843_308_145);
        assert_eq!(record.flag, '-');
        assert_eq!(
            record.message,
            "NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus"
        );
    }

    #[test]
    fn decodes_a_multi_line_message_and_escapes() {
        let bytes = b"3,77,5,-,caller=T1;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: (PCI ID: 10de:26b5) installed in this system has\\x0aNVRM: fallen off the bus and is not responding to commands.\\x0a\n";
        let record = parse_record(bytes).unwrap();
        assert_eq!(
            record.message.lines().collect::<Vec<_>>(),
            vec![
                "NVRM: The NVIDIA GPU 0000:b3:00.0",
                "NVRM: (PCI ID: 10de:26b5) installed in this system has",
                "NVRM: fallen off the bus and is not responding to commands.",
            ]
        );
        assert_eq!(
            parse_record(b"6,1,2,-;a\\x5cb \\xzz \\x").unwrap().message,
            "a\\b \\xzz \\x"
        );
        // A record without a trailing newline and with a fragment flag.
        let fragment = parse_record(b"6,9,10,c;part").unwrap();
        assert_eq!((fragment.flag, fragment.message.as_str()), ('c', "part"));
    }

    #[test]
    fn rejects_malformed_headers_with_the_text() {
        for bytes in [
            &b"no header"[..],
            b"4,x,1,-;m",
            b"4,1;m",
            b";m",
            b"\xff,1,1,-;m",
        ] {
            let e = parse_record(bytes).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("kernel log: malformed record header")
            );
        }
    }

    /// Scripted reads: each item is one `read(2)` answer.
    struct Script(VecDeque<io::Result<Vec<u8>>>);

    impl RecordSource for Script {
        fn read_record(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.0.pop_front() {
                None => Ok(0),
                Some(Err(e)) => Err(e),
                Some(Ok(bytes)) => {
                    buf[..bytes.len()].copy_from_slice(&bytes);
                    Ok(bytes.len())
                }
            }
        }
    }

    fn record(sequence: u64, text: &str) -> io::Result<Vec<u8>> {
        Ok(format!("4,{sequence},{},-;{text}\n", sequence * 10).into_bytes())
    }

    fn messages(reader: &mut dyn KernelLog) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(entry) = reader.next_entry().unwrap() {
            out.push(match entry {
                KernelLogEntry::Record(r) => format!("{}:{}", r.sequence, r.message),
                KernelLogEntry::Overrun { lost } => format!("overrun {lost:?}"),
            });
        }
        out
    }

    #[test]
    fn survives_an_overrun_and_counts_the_lost_records() {
        let script = Script(VecDeque::from([
            record(10, "a"),
            record(11, "b"),
            Err(io::Error::from_raw_os_error(libc::EPIPE)),
            record(40, "c"),
            Err(io::Error::from(io::ErrorKind::Interrupted)),
            Ok(b"garbage".to_vec()),
            record(41, "d"),
        ]));
        let mut reader = KmsgReader::new(script);
        assert_eq!(
            messages(&mut reader),
            vec!["10:a", "11:b", "overrun Some(28)", "40:c", "41:d"]
        );
    }

    #[test]
    fn an_overrun_before_any_record_has_an_unknown_loss() {
        let script = Script(VecDeque::from([
            Err(io::Error::from_raw_os_error(libc::EPIPE)),
            record(5, "x"),
        ]));
        let mut reader = KmsgReader::new(script);
        assert_eq!(messages(&mut reader), vec!["overrun None", "5:x"]);
    }

    #[test]
    fn other_read_errors_end_the_stream_with_an_error() {
        let script = Script(VecDeque::from([Err(io::Error::from_raw_os_error(
            libc::EIO,
        ))]));
        let mut reader = KmsgReader::new(script);
        let e = reader.next_entry().unwrap_err();
        assert!(e.to_string().starts_with("kernel log: read failed"), "{e}");
    }

    #[test]
    fn the_channel_fake_yields_what_it_is_fed() {
        let (sender, mut log) = ChannelKernelLog::new();
        sender
            .send(KernelLogEntry::Overrun { lost: Some(2) })
            .unwrap();
        drop(sender);
        assert_eq!(
            log.next_entry().unwrap(),
            Some(KernelLogEntry::Overrun { lost: Some(2) })
        );
        assert_eq!(log.next_entry().unwrap(), None);
    }

    #[test]
    fn opening_a_missing_log_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let e = KmsgReader::open_host(&FsHost::new(dir.path()))
            .err()
            .unwrap();
        assert!(e.to_string().contains("dev/kmsg"), "{e}");
    }

    fn message(entry: Option<KernelLogEntry>) -> String {
        match entry {
            Some(KernelLogEntry::Record(record)) => record.message,
            other => panic!("expected a record, got {other:?}"),
        }
    }

    #[test]
    fn a_regular_file_is_read_from_its_end_and_followed_as_it_grows() {
        // A plain file stands in for the device (a test cluster's --kmsg-path): what was there
        // is skipped, and its end is the end of what is written so far, not of the log.
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("dev")).unwrap();
        let path = dir.path().join("dev/kmsg");
        std::fs::write(&path, "4,1,1,-;old\n").unwrap();
        let mut reader = KmsgReader::open_host(&FsHost::new(dir.path())).unwrap();
        let writer = {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
                // Written after the reader has met the end at least once.
                std::thread::sleep(FOLLOW_POLL * 2);
                // Two records in one write, a dictionary line, then a record in two halves.
                file.write_all(b"3,2,10,-;first\n SUBSYSTEM=pci\n3,3,11,-;second\n3,4,1")
                    .unwrap();
                file.flush().unwrap();
                std::thread::sleep(FOLLOW_POLL * 2);
                file.write_all(b"2,-;third\n").unwrap();
            })
        };
        assert_eq!(message(reader.next_entry().unwrap()), "first");
        assert_eq!(message(reader.next_entry().unwrap()), "second");
        assert_eq!(message(reader.next_entry().unwrap()), "third");
        writer.join().unwrap();
    }

    #[test]
    fn a_followed_file_cut_short_is_read_again_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kmsg");
        std::fs::write(
            &path,
            "4,1,1,-;an old record, longer than what replaces it\n",
        )
        .unwrap();
        let mut reader = KmsgReader::open(&path).unwrap();
        let writer = {
            let path = path.clone();
            std::thread::spawn(move || {
                std::thread::sleep(FOLLOW_POLL * 2);
                std::fs::write(path, "3,1,5,-;after the rotation\n").unwrap();
            })
        };
        assert_eq!(message(reader.next_entry().unwrap()), "after the rotation");
        writer.join().unwrap();
    }

    #[test]
    #[ignore = "needs a readable /dev/kmsg (root, or dmesg_restrict=0)"]
    fn reads_the_real_kernel_log() {
        // Read-only: the oldest records still held, from the start rather than the end (the
        // end would block until the kernel writes something).
        let file = File::open("/dev/kmsg").unwrap();
        let mut reader = KmsgReader::new(file);
        let mut last = None;
        for _ in 0..5 {
            match reader.next_entry().unwrap() {
                Some(KernelLogEntry::Record(record)) => {
                    assert!(last.is_none_or(|l| record.sequence > l), "{record:?}");
                    assert!(!record.message.contains('\u{0}'));
                    last = Some(record.sequence);
                }
                Some(KernelLogEntry::Overrun { .. }) => {}
                None => panic!("the kernel log ended"),
            }
        }
        assert!(last.is_some());
        // And seeking to the end works on the device node.
        KmsgReader::open(Path::new("/dev/kmsg")).unwrap();
    }

    #[test]
    fn strips_every_log_prefix_once() {
        let body = "NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.";
        for prefix in [
            "",
            "[ 1843.308145] ",
            "[Sun Feb 23 16:24:18 2025] ",
            "2024-11-15T12:02:03,470068+00:00 ",
            "kern  :warn  : 2025-01-21T03:16:32,156031+00:00 ",
            "<4>[ 1126.6] ",
            "Nov 29 11:28:11 zeus kernel: ",
            "Nov  9 11:28:11 zeus kernel: [ 12.5] ",
            "kernel: ",
            "2024-11-15T12:02:03+0000 zeus kernel: ",
            "4,1843,1843308145,-;",
            "3,77,5,-,caller=T1;",
            "6,9,10,c;[   10.1] ",
            "  <6>Nov 29 11:28:11 zeus kernel: [  312.522692] ",
        ] {
            assert_eq!(
                strip_prefixes(&format!("{prefix}{body}")),
                body,
                "{prefix:?}"
            );
        }
        // The driver's own text stays, brackets and semicolons inside it included.
        for line in [
            "amdgpu 0000:28:00.0: ring gfx_0.0.0 timeout",
            "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout",
            "a;b",
            "1,2;x",
            "1,2,3,x;y",
            "",
        ] {
            assert_eq!(strip_prefixes(line), line);
        }
    }

    proptest::proptest! {
        #[test]
        fn stripping_never_panics_and_only_shortens(line in "\\PC{0,120}") {
            let stripped = strip_prefixes(&line);
            proptest::prop_assert!(line.ends_with(stripped));
        }

        #[test]
        fn never_panics_on_arbitrary_records(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let _ = parse_record(&bytes);
        }

        #[test]
        fn never_panics_on_mutated_records(
            message in "[ -~]{0,80}",
            cut in 0usize..120,
            noise in proptest::num::u8::ANY,
        ) {
            let mut bytes = format!("4,12,34,-;{message}\\x0a\\x5c\n K=v\n").into_bytes();
            if !bytes.is_empty() {
                let at = cut % bytes.len();
                bytes[at] = noise;
                bytes.truncate(cut.max(at + 1));
            }
            let _ = parse_record(&bytes);
        }
    }
}
