//! Reading a session's NDJSON event stream.
//!
//! The stream route sends one [`Envelope`] per line and, when a session is
//! quiet, a bare newline as a keep-alive. [`EnvelopeReader`] takes the body
//! in whatever chunks the connection delivers, skips keep-alives, and keeps
//! the index to resume from: after a dropped connection, ask again with
//! `startIndex` = [`EnvelopeReader::next_index`] and feed the new body to
//! the same reader, which drops any event it already gave out.

use bdk_events::Envelope;

/// A line that is not an event.
#[derive(Debug)]
pub struct BadLine {
    /// Why the line does not read as an envelope.
    pub error: serde_json::Error,
    /// The line, lossily decoded, cut to 200 characters.
    pub line: String,
}

impl std::fmt::Display for BadLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a line is not an event ({}): {}", self.error, self.line)
    }
}

impl std::error::Error for BadLine {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Splits an NDJSON body into envelopes, chunk by chunk.
///
/// ```
/// use bdk_api::stream::EnvelopeReader;
///
/// let mut reader = EnvelopeReader::new(0);
/// reader.push(b"\n{\"type\":\"session.waiting\",\"index\":0,\"sessionId\":\"ses_1\",");
/// assert!(reader.next_event().is_none()); // half a line so far
/// reader.push(b"\"at\":\"2026-01-01T00:00:00Z\",\"data\":{}}\n");
/// let event = reader.next_event().unwrap().unwrap();
/// assert_eq!(event.index, 0);
/// assert_eq!(reader.next_index(), 1);
/// ```
#[derive(Debug)]
pub struct EnvelopeReader {
    buf: Vec<u8>,
    /// Where the unscanned part of `buf` starts.
    scanned: usize,
    next_index: u64,
}

impl EnvelopeReader {
    /// A reader of a stream asked for from `start_index`.
    pub fn new(start_index: u64) -> Self {
        EnvelopeReader {
            buf: Vec::new(),
            scanned: 0,
            next_index: start_index,
        }
    }

    /// The index of the first event not yet given out: the `startIndex` to
    /// ask for after a dropped connection.
    pub fn next_index(&self) -> u64 {
        self.next_index
    }

    /// Appends a chunk of the body.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// Forgets a partial line: call it when a connection dropped, before
    /// feeding the body of the next one.
    pub fn reset_line(&mut self) {
        self.buf.clear();
        self.scanned = 0;
    }

    /// The next whole event, skipping keep-alives and events before
    /// [`next_index`](Self::next_index); `None` until more of the body
    /// arrives. A line that is not an envelope is an error; the reader
    /// goes on after it.
    pub fn next_event(&mut self) -> Option<Result<Envelope, BadLine>> {
        loop {
            let nl = self.buf[self.scanned..].iter().position(|b| *b == b'\n')?;
            let end = self.scanned + nl;
            let line = &self.buf[self.scanned..end];
            self.scanned = end + 1;
            let parsed = if line.iter().all(u8::is_ascii_whitespace) {
                None
            } else {
                Some(
                    serde_json::from_slice::<Envelope>(line).map_err(|error| BadLine {
                        error,
                        line: String::from_utf8_lossy(line).chars().take(200).collect(),
                    }),
                )
            };
            self.compact();
            match parsed {
                None => continue,
                Some(Ok(env)) if env.index < self.next_index => continue,
                Some(Ok(env)) => {
                    self.next_index = env.index + 1;
                    return Some(Ok(env));
                }
                Some(Err(e)) => return Some(Err(e)),
            }
        }
    }

    /// Drops consumed bytes once they are most of the buffer, so a long
    /// stream does not grow it.
    fn compact(&mut self) {
        if self.scanned > 4096 && self.scanned * 2 > self.buf.len() {
            self.buf.drain(..self.scanned);
            self.scanned = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(index: u64) -> String {
        format!(
            "{{\"type\":\"turn.started\",\"index\":{index},\"sessionId\":\"ses_1\",\"turnId\":\"turn_1\",\"at\":\"2026-01-01T00:00:00Z\",\"data\":{{}}}}\n"
        )
    }

    #[test]
    fn events_split_anywhere_come_out_whole_and_in_order() {
        let body: String = (0..50).map(line).collect::<Vec<_>>().join("\n");
        for size in [1, 7, 64, body.len()] {
            let mut reader = EnvelopeReader::new(0);
            let mut seen = Vec::new();
            for chunk in body.as_bytes().chunks(size) {
                reader.push(chunk);
                while let Some(e) = reader.next_event() {
                    seen.push(e.unwrap().index);
                }
            }
            assert_eq!(seen, (0..50).collect::<Vec<_>>(), "chunks of {size}");
        }
    }

    #[test]
    fn a_resumed_body_that_repeats_events_gives_each_once() {
        let mut reader = EnvelopeReader::new(0);
        reader.push(format!("{}{}{}", line(0), line(1), &line(2)[..10]).as_bytes());
        assert_eq!(reader.next_event().unwrap().unwrap().index, 0);
        assert_eq!(reader.next_event().unwrap().unwrap().index, 1);
        assert!(reader.next_event().is_none());
        // The connection drops; the next one starts from 2, but a server
        // may also start earlier.
        reader.reset_line();
        reader.push(format!("{}{}", line(1), line(2)).as_bytes());
        assert_eq!(reader.next_event().unwrap().unwrap().index, 2);
        assert!(reader.next_event().is_none());
        assert_eq!(reader.next_index(), 3);
    }

    #[test]
    fn a_bad_line_is_an_error_and_the_reader_goes_on() {
        let mut reader = EnvelopeReader::new(0);
        reader.push(format!("{{\"nope\":1}}\n{}", line(0)).as_bytes());
        let bad = reader.next_event().unwrap().unwrap_err();
        assert!(bad.line.contains("nope"));
        assert_eq!(reader.next_event().unwrap().unwrap().index, 0);
    }
}
