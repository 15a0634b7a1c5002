//! The kubelet's plugin watcher dials a registration socket by its bare path
//! (`grpc.DialContext(ctx, "/var/lib/kubelet/plugins_registry/<driver>-reg.sock", …)`, v1.36's
//! `pluginmanager/operationexecutor`), so grpc-go sends that path as the HTTP/2 `:authority`.
//! A path is no authority (RFC 3986), and the `h2` server under tonic refuses the request:
//! `RST_STREAM` with `PROTOCOL_ERROR`, and the kubelet never learns the driver (seen on the rig:
//! "failed to get plugin info using RPC GetInfo … PROTOCOL_ERROR"; kubernetes#109081 reports it
//! for every non-Go server; the kubelet's DRA and device-plugin clients send `localhost`).
//!
//! [`AuthorityRewrite`] wraps the registration socket's connections: it reads the client's
//! HTTP/2 frames as they arrive and, in every complete HEADERS frame, replaces the value of the
//! `:authority` field with `localhost` (the registration service reads no authority). The header
//! block is walked by HPACK's representations alone (RFC 7541 §6): the field is found by its
//! name (static index 1, or a plain literal `:authority`), and its value, Huffman-coded or not,
//! is skipped by its length and replaced by a plain literal of the same representation, so the
//! server's dynamic table holds `localhost` wherever the client's holds the path, and every later
//! reference to that entry reads `localhost` too. Everything else passes byte for byte; a frame
//! it cannot read (a header block continued in CONTINUATION frames, padding longer than the
//! frame) passes unchanged, and the server judges it as before.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The HTTP/2 client connection preface (RFC 9113 §3.4).
const PREFACE_LEN: usize = 24;
/// A frame header: length (24 bits), type, flags, stream id (RFC 9113 §4.1).
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// `:authority` in HPACK's static table (RFC 7541 Appendix A).
const AUTHORITY_INDEX: u64 = 1;
/// What the rewritten `:authority` says.
const LOCALHOST: &[u8] = b"localhost";
/// How much is read from the socket at a time.
const READ_CHUNK: usize = 8 * 1024;

/// A server-side connection whose client `:authority` fields read `localhost`.
#[derive(Debug)]
pub struct AuthorityRewrite<S> {
    inner: S,
    /// Preface bytes still to pass before the frames begin.
    preface_left: usize,
    /// Bytes read from the client and not yet whole frames.
    pending: Vec<u8>,
    /// Bytes ready for the server, from `ready_at` on.
    ready: Vec<u8>,
    ready_at: usize,
    /// The client closed its side.
    eof: bool,
}

impl<S> AuthorityRewrite<S> {
    pub fn new(inner: S) -> AuthorityRewrite<S> {
        AuthorityRewrite {
            inner,
            preface_left: PREFACE_LEN,
            pending: Vec::new(),
            ready: Vec::new(),
            ready_at: 0,
            eof: false,
        }
    }

    /// Moves what is complete from `pending` to `ready`: preface bytes, then whole frames,
    /// HEADERS frames rewritten. At end of stream the remainder passes as it is.
    fn process(&mut self) {
        if self.ready_at == self.ready.len() {
            self.ready.clear();
            self.ready_at = 0;
        }
        let mut at = 0;
        if self.preface_left > 0 {
            let n = self.preface_left.min(self.pending.len());
            self.ready.extend_from_slice(&self.pending[..n]);
            self.preface_left -= n;
            at = n;
        }
        if self.preface_left == 0 {
            while let Some(frame) = self.pending.get(at..).and_then(whole_frame) {
                let end = at + frame;
                match rewrite_headers_frame(&self.pending[at..end]) {
                    Some(rewritten) => self.ready.extend_from_slice(&rewritten),
                    None => self.ready.extend_from_slice(&self.pending[at..end]),
                }
                at = end;
            }
        }
        if self.eof {
            self.ready.extend_from_slice(&self.pending[at..]);
            at = self.pending.len();
        }
        self.pending.drain(..at);
    }
}

/// The length of the whole frame at the start of `bytes`, if it is all there.
fn whole_frame(bytes: &[u8]) -> Option<usize> {
    let header = bytes.get(..FRAME_HEADER_LEN)?;
    let len = usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
    let total = FRAME_HEADER_LEN + len;
    (bytes.len() >= total).then_some(total)
}

/// A HEADERS frame with its `:authority` replaced; `None` for any other frame, one with no
/// `:authority`, or one it cannot read.
pub fn rewrite_headers_frame(frame: &[u8]) -> Option<Vec<u8>> {
    let (header, payload) = frame.split_at_checked(FRAME_HEADER_LEN)?;
    let (kind, flags) = (header[3], header[4]);
    if kind != HEADERS || flags & END_HEADERS == 0 {
        return None;
    }
    let (pad_len, rest) = if flags & PADDED != 0 {
        let (&pad, rest) = payload.split_first()?;
        (usize::from(pad), rest)
    } else {
        (0, payload)
    };
    let (priority, rest) = if flags & PRIORITY != 0 {
        rest.split_at_checked(5)?
    } else {
        (&[][..], rest)
    };
    let block_len = rest.len().checked_sub(pad_len)?;
    let (block, padding) = rest.split_at(block_len);
    let block = rewrite_block(block)?;
    let len = usize::from(flags & PADDED != 0) + priority.len() + block.len() + padding.len();
    // A frame may be at most 2^24 - 1 long; ours only changes by an authority's length.
    let len = u32::try_from(len).ok().filter(|l| *l < 1 << 24)?;
    let mut out = Vec::with_capacity(FRAME_HEADER_LEN + len as usize);
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.extend_from_slice(&header[3..]);
    if flags & PADDED != 0 {
        out.push(payload[0]);
    }
    out.extend_from_slice(priority);
    out.extend_from_slice(&block);
    out.extend_from_slice(padding);
    Some(out)
}

/// An HPACK integer with an `n`-bit prefix at `bytes[at..]` (RFC 7541 §5.1): its value and
/// where it ends.
fn integer(bytes: &[u8], at: usize, n: u32) -> Option<(u64, usize)> {
    let max = (1u64 << n) - 1;
    let first = u64::from(*bytes.get(at)?) & max;
    if first < max {
        return Some((first, at + 1));
    }
    let mut value = max;
    let mut shift = 0u32;
    let mut i = at + 1;
    loop {
        let b = *bytes.get(i)?;
        i += 1;
        value = value.checked_add(u64::from(b & 0x7f).checked_shl(shift)?)?;
        if b & 0x80 == 0 {
            return Some((value, i));
        }
        shift += 7;
        if shift > 56 {
            return None;
        }
    }
}

/// A string literal at `bytes[at..]` (RFC 7541 §5.2): whether it is Huffman-coded, its
/// bytes, and where it ends.
fn string(bytes: &[u8], at: usize) -> Option<(bool, &[u8], usize)> {
    let huffman = *bytes.get(at)? & 0x80 != 0;
    let (len, start) = integer(bytes, at, 7)?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    Some((huffman, bytes.get(start..end)?, end))
}

/// The header block with every `:authority` value replaced by `localhost`; `None` when it has
/// none or cannot be read.
pub fn rewrite_block(block: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(block.len());
    let mut changed = false;
    let mut at = 0;
    while at < block.len() {
        let b = block[at];
        let start = at;
        if b & 0x80 != 0 {
            // Indexed field (§6.1).
            at = integer(block, at, 7)?.1;
            out.extend_from_slice(&block[start..at]);
            continue;
        }
        if b & 0xe0 == 0x20 {
            // Dynamic table size update (§6.3).
            at = integer(block, at, 5)?.1;
            out.extend_from_slice(&block[start..at]);
            continue;
        }
        // A literal (§6.2): with incremental indexing (6-bit prefix), or without / never
        // indexed (4-bit prefix).
        let prefix = if b & 0xc0 == 0x40 { 6 } else { 4 };
        let (name_index, after_index) = integer(block, at, prefix)?;
        let (is_authority, name_end) = if name_index == 0 {
            let (huffman, name, end) = string(block, after_index)?;
            (!huffman && name == b":authority", end)
        } else {
            (name_index == AUTHORITY_INDEX, after_index)
        };
        let (_, _, value_end) = string(block, name_end)?;
        if is_authority {
            out.extend_from_slice(&block[start..name_end]);
            out.push(LOCALHOST.len() as u8);
            out.extend_from_slice(LOCALHOST);
            changed = true;
        } else {
            out.extend_from_slice(&block[start..value_end]);
        }
        at = value_end;
    }
    changed.then_some(out)
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityRewrite<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.ready_at < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.ready_at);
                buf.put_slice(&this.ready[this.ready_at..this.ready_at + n]);
                this.ready_at += n;
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; READ_CHUNK];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    if read.filled().is_empty() {
                        this.eof = true;
                    } else {
                        this.pending.extend_from_slice(read.filled());
                    }
                    this.process();
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityRewrite<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected
    for AuthorityRewrite<S>
{
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header block as grpc-go writes one: `:method POST` (static 3), `:scheme http` (static
    /// 6), `:path` with incremental indexing and a plain value, `:authority` (static name 1,
    /// incremental indexing) with `value`, then `te: trailers` as a new-name literal.
    fn block(authority: &[u8], huffman: bool) -> Vec<u8> {
        let mut b = vec![0x83, 0x86, 0x44, 0x05];
        b.extend_from_slice(b"/x/Gt");
        b.push(0x41);
        b.push(authority.len() as u8 | if huffman { 0x80 } else { 0 });
        b.extend_from_slice(authority);
        b.extend_from_slice(&[0x40, 0x02]);
        b.extend_from_slice(b"te");
        b.push(0x08);
        b.extend_from_slice(b"trailers");
        b
    }

    fn frame(flags: u8, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = len.to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[HEADERS, flags, 0, 0, 0, 1]);
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn the_authority_is_replaced_whatever_its_coding_and_nothing_else_moves() {
        let path = b"/var/lib/kubelet/plugins_registry/nvidia.gpustack.ai-reg.sock";
        for huffman in [false, true] {
            let out = rewrite_block(&block(path, huffman)).unwrap();
            assert_eq!(out, block(b"localhost", false), "huffman {huffman}");
        }
        // Without and never indexed (4-bit prefix), and a plain literal name.
        let mut never = vec![0x11, 0x03];
        never.extend_from_slice(b"a/b");
        assert_eq!(rewrite_block(&never).unwrap(), b"\x11\x09localhost");
        let mut named = vec![0x00, 0x0a];
        named.extend_from_slice(b":authority");
        named.extend_from_slice(b"\x03a/b");
        let mut want = named[..12].to_vec();
        want.extend_from_slice(b"\x09localhost");
        assert_eq!(rewrite_block(&named).unwrap(), want);
    }

    #[test]
    fn a_block_without_an_authority_or_that_cannot_be_read_is_left_alone() {
        assert_eq!(rewrite_block(&[0x83, 0x86]), None);
        // A value longer than the block.
        assert_eq!(rewrite_block(&[0x41, 0x20, b'a']), None);
        // An integer that never ends.
        assert_eq!(rewrite_block(&[0xff, 0xff, 0xff]), None);
        // A size update then an indexed field.
        assert_eq!(rewrite_block(&[0x3f, 0xe1, 0x1f, 0x82]), None);
    }

    #[test]
    fn frames_keep_their_padding_and_priority_and_get_their_new_length() {
        let path = b"/var/run/x-reg.sock";
        let plain = frame(END_HEADERS, &block(path, false));
        let out = rewrite_headers_frame(&plain).unwrap();
        assert_eq!(out, frame(END_HEADERS, &block(b"localhost", false)));
        let mut padded = vec![3, 0, 0, 0, 0, 16];
        padded.extend_from_slice(&block(path, true));
        padded.extend_from_slice(&[0, 0, 0]);
        let out = rewrite_headers_frame(&frame(END_HEADERS | PADDED | PRIORITY, &padded)).unwrap();
        let mut want = vec![3, 0, 0, 0, 0, 16];
        want.extend_from_slice(&block(b"localhost", false));
        want.extend_from_slice(&[0, 0, 0]);
        assert_eq!(out, frame(END_HEADERS | PADDED | PRIORITY, &want));
        // Continued in CONTINUATION frames, padding past the end, another type: untouched.
        assert_eq!(rewrite_headers_frame(&frame(0, &block(path, false))), None);
        assert_eq!(
            rewrite_headers_frame(&frame(END_HEADERS | PADDED, &[200, 0x83])),
            None
        );
        let mut data = frame(END_HEADERS, &block(path, false));
        data[3] = 0x0;
        assert_eq!(rewrite_headers_frame(&data), None);
    }

    #[tokio::test]
    async fn a_connection_passes_its_preface_and_frames_in_any_split() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        let settings = [0u8, 0, 0, 4, 0, 0, 0, 0, 0];
        let headers = frame(END_HEADERS, &block(b"/a/b-reg.sock", true));
        let mut sent = preface.to_vec();
        sent.extend_from_slice(&settings);
        sent.extend_from_slice(&headers);
        let mut want = preface.to_vec();
        want.extend_from_slice(&settings);
        want.extend_from_slice(&frame(END_HEADERS, &block(b"localhost", false)));
        for split in [1, 7, 25, 40, sent.len()] {
            let (mut client, server) = tokio::io::duplex(64);
            let bytes = sent.clone();
            let writer = tokio::spawn(async move {
                for piece in bytes.chunks(split) {
                    client.write_all(piece).await.unwrap();
                }
                client.shutdown().await.unwrap();
            });
            let mut got = Vec::new();
            AuthorityRewrite::new(server)
                .read_to_end(&mut got)
                .await
                .unwrap();
            writer.await.unwrap();
            assert_eq!(got, want, "split {split}");
        }
    }
}
