//! Running a test step while counting its tests.
//!
//! The test runners' own closing lines do not add up to one figure: nextest
//! prints a summary per run, libtest one `test result:` line per test binary,
//! and the doc-test step runs after the tests, often ending on a crate with no
//! doc tests (`0 passed`). So `cargo xtask test` relays each test step's output
//! line by line, unchanged, reads the counts off those summary lines, and ends
//! with one total (`tests: N passed, N failed, N skipped`).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;

/// Tests counted from runner summaries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
}

impl Counts {
    pub fn add(&mut self, other: Counts) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.skipped += other.skipped;
    }

    /// Adds the figures of one output line, if it is a runner summary:
    /// libtest's `test result: ok. 3 passed; 0 failed; 1 ignored; ...` or
    /// nextest's `Summary [ 0.1s] 4 tests run: 3 passed, 1 failed, 0 skipped`
    /// (where tests killed by the timeout count as failed).
    pub fn add_line(&mut self, line: &str) {
        let line = strip_ansi(line);
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("test result:") {
            self.passed += number_before(rest, " passed");
            self.failed += number_before(rest, " failed");
            self.skipped += number_before(rest, " ignored");
        } else if line.starts_with("Summary [")
            && let Some((_, rest)) = line.split_once(" run: ")
        {
            self.passed += number_before(rest, " passed");
            self.failed += number_before(rest, " failed") + number_before(rest, " timed out");
            self.skipped += number_before(rest, " skipped");
        }
    }
}

/// The number written just before `word` in `text`, or 0.
fn number_before(text: &str, word: &str) -> u64 {
    let Some(end) = text.find(word) else {
        return 0;
    };
    let head = &text[..end];
    let start = head
        .rfind(|c: char| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    head[start..].parse().unwrap_or(0)
}

/// `line` without ANSI colour sequences (`ESC [ ... letter`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // Skip the sequence up to and including its final letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Runs `command`, relaying its stdout and stderr to ours line by line as
/// they come, and returns its exit status with the tests its summaries count.
pub fn run_counting(command: &mut Command) -> io::Result<(ExitStatus, Counts)> {
    let (status, counts, _, _) = run_relayed(command, io::stdout(), io::stderr())?;
    Ok((status, counts))
}

/// [`run_counting`] with the sinks as parameters (tests pass buffers), which
/// are handed back when the command has ended.
fn run_relayed<O, E>(
    command: &mut Command,
    out: O,
    err: E,
) -> io::Result<(ExitStatus, Counts, O, E)>
where
    O: Write + Send + 'static,
    E: Write + Send + 'static,
{
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let (Some(child_out), Some(child_err)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(io::Error::other("the child's output pipes are missing"));
    };
    let out_relay = thread::spawn(move || relay(child_out, out));
    let err_relay = thread::spawn(move || relay(child_err, err));
    let status = child.wait()?;
    // A relay thread ends when its pipe does; it never panics, as it ignores
    // write errors, so a failed join can only come from a bug in it.
    let joined = |_| io::Error::other("an output relay thread panicked");
    let (out_counts, out) = out_relay.join().map_err(joined)?;
    let (err_counts, err) = err_relay.join().map_err(joined)?;
    let mut counts = out_counts;
    counts.add(err_counts);
    Ok((status, counts, out, err))
}

fn relay<W: Write>(source: impl Read, mut sink: W) -> (Counts, W) {
    let mut reader = BufReader::new(source);
    let mut counts = Counts::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                // Our own stdout or stderr going away is no reason to stop
                // draining the child's pipe, so write errors are ignored.
                let _ = sink.write_all(&line);
                let _ = sink.flush();
                counts.add_line(&String::from_utf8_lossy(&line));
            }
        }
    }
    (counts, sink)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(lines: &[&str]) -> Counts {
        let mut counts = Counts::default();
        for line in lines {
            counts.add_line(line);
        }
        counts
    }

    #[test]
    fn reads_libtest_and_nextest_summaries() {
        let counts = count(&[
            "running 3 tests",
            "test a ... ok",
            "test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s",
            "test result: FAILED. 10 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out",
            "     Summary [   0.031s] 11 tests run: 9 passed, 2 failed, 4 skipped",
            "     Summary [   0.041s] 9/15 tests run: 8 passed, 1 timed out, 0 skipped",
            "        PASS [   0.003s] xtask tests::passed_test",
        ]);
        assert_eq!(
            counts,
            Counts {
                passed: 30,
                failed: 5,
                skipped: 5
            }
        );
    }

    #[test]
    fn colour_codes_do_not_hide_the_numbers() {
        let counts = count(&[
            "\u{1b}[32;1m     Summary\u{1b}[0m [   0.031s] \u{1b}[1m1\u{1b}[0m test run: \u{1b}[1m1\u{1b}[0m \u{1b}[32;1mpassed\u{1b}[0m, \u{1b}[1m0\u{1b}[0m \u{1b}[33;1mskipped\u{1b}[0m",
        ]);
        assert_eq!(
            counts,
            Counts {
                passed: 1,
                failed: 0,
                skipped: 0
            }
        );
    }

    #[test]
    fn other_lines_count_nothing() {
        let counts = count(&[
            "test result of my own making: 3 passed",
            "Summary of the weather: 5 passed",
            "42 passed",
        ]);
        assert_eq!(counts, Counts::default());
    }

    #[test]
    fn a_relayed_command_keeps_its_output_and_status() {
        let mut command = Command::new("sh");
        command.args([
            "-c",
            "echo 'test result: ok. 2 passed; 0 failed; 0 ignored'; \
             echo '     Summary [ 0.1s] 1 test run: 0 passed, 1 failed, 0 skipped' >&2; exit 3",
        ]);
        let (status, counts, out, err) = run_relayed(&mut command, Vec::new(), Vec::new()).unwrap();
        assert_eq!(status.code(), Some(3));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "test result: ok. 2 passed; 0 failed; 0 ignored\n"
        );
        assert_eq!(
            String::from_utf8(err).unwrap(),
            "     Summary [ 0.1s] 1 test run: 0 passed, 1 failed, 0 skipped\n"
        );
        assert_eq!(
            counts,
            Counts {
                passed: 2,
                failed: 1,
                skipped: 0
            }
        );
    }
}
