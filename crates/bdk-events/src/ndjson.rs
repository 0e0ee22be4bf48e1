//! NDJSON: one envelope per line, `\n`-terminated.
//!
//! Writers emit each line with its newline in a single write, so a crash can
//! only leave a *torn tail*: a last line without its newline, a last line that
//! is not valid JSON, or trailing zero bytes some filesystems leave after a
//! power cut. [`scan`] detects such a tail and reports where the valid prefix
//! ends, so the owner can cut the file there. A bad line *before* the last one
//! is not a crash artefact: it is reported as corruption and never skipped,
//! because skipping it would silently re-index every event after it.

use std::io::Write;

use crate::event::Envelope;

/// An NDJSON problem that is not a torn tail.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NdjsonError {
    /// A complete line in the middle of the input does not parse.
    #[error("line {line} is not a valid event: {message}")]
    Corrupt {
        /// 1-based line number.
        line: usize,
        /// The parser's complaint.
        message: String,
    },
    /// Writing failed.
    #[error("failed to write event: {0}")]
    Io(#[from] std::io::Error),
    /// An event could not be encoded.
    #[error("failed to encode event: {0}")]
    Encode(#[from] serde_json::Error),
}

/// What [`scan`] found.
#[derive(Debug, Default)]
pub struct Scan {
    /// The events of the valid prefix, in file order.
    pub events: Vec<Envelope>,
    /// Length in bytes of the valid prefix: everything after it is torn.
    pub valid_len: u64,
    /// Bytes after the valid prefix, if any were found.
    pub torn_bytes: u64,
}

impl Scan {
    /// True when the input ended in a torn tail.
    pub fn is_torn(&self) -> bool {
        self.torn_bytes > 0
    }
}

/// Parses a whole NDJSON buffer, tolerating (and measuring) a torn tail.
///
/// Blank lines are ignored. The last line, if it lacks its newline or fails to
/// parse, is the torn tail. Any earlier line that fails to parse is
/// [`NdjsonError::Corrupt`].
pub fn scan(bytes: &[u8]) -> Result<Scan, NdjsonError> {
    let mut out = Scan::default();
    // Trailing zero bytes are a crash artefact, never data.
    let content_end = bytes.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
    let mut pos = 0usize;
    let mut line_no = 0usize;
    while pos < content_end {
        line_no += 1;
        let rest = &bytes[pos..content_end];
        let (line, next, complete) = match rest.iter().position(|&b| b == b'\n') {
            Some(nl) => (&rest[..nl], pos + nl + 1, true),
            None => (rest, content_end, false),
        };
        let is_last = next >= content_end;
        let trimmed = trim_ascii(line);
        if trimmed.is_empty() {
            if complete {
                pos = next;
                out.valid_len = pos as u64;
                continue;
            }
            break;
        }
        match serde_json::from_slice::<Envelope>(trimmed) {
            Ok(env) if complete => {
                out.events.push(env);
                pos = next;
                out.valid_len = pos as u64;
            }
            // A parseable line without its newline is still torn: its writer
            // never finished, so it was never acknowledged.
            Ok(_) => break,
            Err(_) if is_last => break,
            Err(e) => {
                return Err(NdjsonError::Corrupt {
                    line: line_no,
                    message: e.to_string(),
                });
            }
        }
    }
    out.torn_bytes = bytes.len() as u64 - out.valid_len;
    Ok(out)
}

fn trim_ascii(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if first.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    while let [rest @ .., last] = s {
        if last.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    s
}

/// Appends `env` as one line (with its newline) to `buf`.
pub fn encode_into(env: &Envelope, buf: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    serde_json::to_writer(&mut *buf, env)?;
    buf.push(b'\n');
    Ok(())
}

/// Writes envelopes as NDJSON, one `write_all` per line.
pub struct NdjsonWriter<W: Write> {
    inner: W,
    buf: Vec<u8>,
}

impl<W: Write> NdjsonWriter<W> {
    /// Wraps a writer.
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            buf: Vec::with_capacity(512),
        }
    }

    /// Writes one envelope and its newline.
    pub fn write(&mut self, env: &Envelope) -> Result<(), NdjsonError> {
        self.buf.clear();
        encode_into(env, &mut self.buf)?;
        self.inner.write_all(&self.buf)?;
        Ok(())
    }

    /// Flushes the inner writer.
    pub fn flush(&mut self) -> Result<(), NdjsonError> {
        self.inner.flush()?;
        Ok(())
    }

    /// Returns the inner writer.
    pub fn into_inner(self) -> W {
        self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, SessionWaiting};
    use crate::ids::SessionId;

    fn lines(n: u64) -> Vec<u8> {
        let mut w = NdjsonWriter::new(Vec::new());
        for index in 0..n {
            w.write(&Envelope {
                index,
                session_id: SessionId::from_string("ses_x"),
                turn_id: None,
                at: chrono::Utc::now(),
                event: Event::SessionWaiting(SessionWaiting {}),
            })
            .unwrap();
        }
        w.into_inner()
    }

    #[test]
    fn clean_file_has_no_torn_tail() {
        let bytes = lines(3);
        let s = scan(&bytes).unwrap();
        assert_eq!(s.events.len(), 3);
        assert_eq!(s.valid_len, bytes.len() as u64);
        assert!(!s.is_torn());
    }

    #[test]
    fn every_cut_point_yields_a_valid_prefix() {
        // Truncate the file at every byte: the scan must never fail, never
        // invent an event, and keep exactly the complete lines.
        let bytes = lines(3);
        let ends: Vec<usize> = bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .map(|(i, _)| i + 1)
            .collect();
        for cut in 0..=bytes.len() {
            let s = scan(&bytes[..cut]).unwrap();
            let complete = ends.iter().filter(|&&e| e <= cut).count();
            assert_eq!(s.events.len(), complete, "cut at {cut}");
            assert_eq!(
                s.valid_len as usize,
                ends.get(complete.wrapping_sub(1)).copied().unwrap_or(0)
            );
            for (i, e) in s.events.iter().enumerate() {
                assert_eq!(e.index, i as u64);
            }
        }
    }

    #[test]
    fn zero_fill_and_garbage_tail_are_torn() {
        let mut bytes = lines(2);
        let good = bytes.len() as u64;
        bytes.extend_from_slice(&[0u8; 64]);
        let s = scan(&bytes).unwrap();
        assert_eq!((s.events.len(), s.valid_len, s.torn_bytes), (2, good, 64));

        let mut bytes = lines(2);
        bytes.extend_from_slice(b"{\"type\":\"sess\n");
        let s = scan(&bytes).unwrap();
        assert_eq!((s.events.len(), s.valid_len), (2, good));
    }

    #[test]
    fn corruption_in_the_middle_is_an_error() {
        let mut bytes = b"not json\n".to_vec();
        bytes.extend(lines(1));
        match scan(&bytes) {
            Err(NdjsonError::Corrupt { line: 1, .. }) => {}
            other => panic!("expected corruption at line 1, got {other:?}"),
        }
    }
}
