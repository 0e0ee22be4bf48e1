//! The report entries of the benchmark programs behind `cargo xtask bench`
//! (`bdk-core`'s runtime benchmarks, `bdk-cli`'s HTTP benchmarks and
//! `bdk-store`'s PostgreSQL benchmarks). Each program prints one JSON object:
//!
//! ```json
//! {"machine": {"cores": 2, "cpu": "...", "os": "linux", "arch": "x86_64"},
//!  "profile": "release", "quick": false,
//!  "benchmarks": [{"name": "store.append.batch1", "unit": "events/s",
//!                  "samples": 200000, "measured": {"value": 250000},
//!                  "target": {"value": {"min": 100000.0}}, "meetsTarget": true}]}
//! ```
//!
//! A [`Bench`] is one entry of `benchmarks` and [`machine`] the `machine`
//! object; xtask merges the programs' reports, so the names here are a
//! format. Only the benchmark programs use this crate, as a dev-dependency.
//!
//! `measured` holds `value` (a throughput, a size or a count) or `p50`/`p99`
//! (a latency), plus context figures some entries add. `target` bounds some
//! of those keys with `min` (inclusive) or `max` (exclusive: "under 1 ms"),
//! except on the count keys of [`COUNT_KEYS`], whose `max` is inclusive so
//! that `{"max": 0}` reads "none". An empty target has no bound to miss.

use std::time::Duration;

use serde_json::{Value, json};

/// Keys of `measured` that are counts of failures: their `max` bound is
/// inclusive, so `{"max": 0}` reads "none".
pub const COUNT_KEYS: &[&str] = &["lost"];

/// One report entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Bench {
    pub name: String,
    pub unit: &'static str,
    pub samples: usize,
    pub measured: Value,
    pub target: Value,
}

impl Bench {
    /// An entry with `measured` and `target` as given.
    pub fn new(
        name: impl Into<String>,
        unit: &'static str,
        samples: usize,
        measured: Value,
        target: Value,
    ) -> Self {
        Bench {
            name: name.into(),
            unit,
            samples,
            measured,
            target,
        }
    }

    /// A throughput (`value`, rounded to a whole number) bounded by `target`.
    pub fn throughput(
        name: impl Into<String>,
        unit: &'static str,
        samples: usize,
        value: f64,
        target: Value,
    ) -> Self {
        Bench::new(
            name,
            unit,
            samples,
            json!({ "value": value.round() }),
            target,
        )
    }

    /// A latency distribution in milliseconds (`p50` and `p99`), bounded by
    /// `target`. Sorts `latencies`.
    pub fn latency_ms(name: impl Into<String>, latencies: &mut [Duration], target: Value) -> Self {
        latencies.sort_unstable();
        Bench::new(
            name,
            "ms",
            latencies.len(),
            json!({
                "p50": millis(percentile(latencies, 50)),
                "p99": millis(percentile(latencies, 99)),
            }),
            target,
        )
    }

    /// True when every bound of `target` holds for `measured`; an empty
    /// target has no bound to miss, a target that is not an object or a
    /// bounded key missing from `measured` misses.
    pub fn meets_target(&self) -> bool {
        let Some(bounds) = self.target.as_object() else {
            return false;
        };
        bounds.iter().all(|(key, bound)| {
            let Some(value) = self.measured.get(key).and_then(Value::as_f64) else {
                return false;
            };
            let inclusive_max = COUNT_KEYS.contains(&key.as_str());
            let min_ok = bound
                .get("min")
                .and_then(Value::as_f64)
                .is_none_or(|min| value >= min);
            let max_ok = bound
                .get("max")
                .and_then(Value::as_f64)
                .is_none_or(|max| value < max || (inclusive_max && value <= max));
            min_ok && max_ok
        })
    }

    /// The progress line the programs print on stderr.
    pub fn summary(&self) -> String {
        format!(
            "bench: {} = {} {} (target {}){}",
            self.name,
            self.measured,
            self.unit,
            self.target,
            if self.meets_target() { "" } else { "  MISSED" }
        )
    }

    /// The entry as it appears in the report's `benchmarks` array.
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "unit": self.unit,
            "samples": self.samples,
            "measured": self.measured,
            "target": self.target,
            "meetsTarget": self.meets_target(),
        })
    }
}

/// Nearest-rank percentile `p` (0 to 100) of sorted samples; zero when there
/// are none.
pub fn percentile(sorted: &[Duration], p: usize) -> Duration {
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    match sorted.get(rank.min(sorted.len()).saturating_sub(1)) {
        Some(d) => *d,
        None => Duration::ZERO,
    }
}

/// Milliseconds with microsecond resolution.
pub fn millis(d: Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}

/// Microseconds with nanosecond resolution.
pub fn micros(d: Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000_000.0).round() / 1000.0
}

/// The resident memory of this process, from `/proc/self/statm` (Linux);
/// `None` where it cannot be read.
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

/// The groups a benchmark program was asked to run: the value of every
/// `--only GROUP` in `args` (repeatable), each checked against `groups`, the
/// groups the program has. Empty means all of them. An unknown group is an
/// error naming the known ones.
pub fn only_groups<'a>(args: &'a [String], groups: &[&str]) -> Result<Vec<&'a str>, String> {
    let only: Vec<&str> = args
        .windows(2)
        .filter(|w| w[0] == "--only")
        .map(|w| w[1].as_str())
        .collect();
    match only.iter().find(|o| !groups.contains(o)) {
        Some(unknown) => Err(format!(
            "no benchmark group `{unknown}` (groups: {})",
            groups.join(", ")
        )),
        None => Ok(only),
    }
}

/// The usage of a benchmark program, when `args` ask for it (`--help` or
/// `-h`): the program prints it and exits rather than run, since a full run
/// takes minutes. `options` are the program's own, one per line, after
/// `--quick`; `groups` are what `--only` takes (none: no `--only`).
pub fn help(args: &[String], options: &str, groups: &[&str]) -> Option<String> {
    if !args.iter().skip(1).any(|a| a == "--help" || a == "-h") {
        return None;
    }
    let mut text = String::from(
        "Prints one JSON report on stdout, progress on stderr.\n\noptions:\n  --quick          small sample counts: a smoke run, figures not meaningful\n",
    );
    if !groups.is_empty() {
        text.push_str("  --only GROUP     run only GROUP (repeatable)\n");
    }
    text.push_str(options);
    if !groups.is_empty() {
        text.push_str(&format!("\ngroups: {}\n", groups.join(", ")));
    }
    Some(text)
}

/// What the numbers were measured on: the report's `machine` object.
pub fn machine() -> Value {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    // Linux names the processor in /proc/cpuinfo; elsewhere it stays unknown.
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_owned())
        });
    json!({
        "cores": cores,
        "cpu": cpu,
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn entry(measured: Value, target: Value) -> Bench {
        Bench::new("t", "ms", 1, measured, target)
    }

    #[test]
    fn only_groups_are_every_only_flag_and_must_exist() {
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let groups = ["a", "b", "c"];
        let all = args(&["bench", "--bench", "--quick"]);
        assert_eq!(only_groups(&all, &groups), Ok(vec![]));
        let two = args(&["bench", "--only", "c", "--quick", "--only", "a"]);
        assert_eq!(only_groups(&two, &groups), Ok(vec!["c", "a"]));
        let unknown = args(&["bench", "--only", "b", "--only", "zz"]);
        assert_eq!(
            only_groups(&unknown, &groups),
            Err("no benchmark group `zz` (groups: a, b, c)".to_owned())
        );
    }

    #[test]
    fn help_is_asked_for_by_flag_and_lists_the_groups() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            help(&args(&["bench", "--bench", "--quick"]), "", &["a"]),
            None
        );
        // The program's own name is not a flag.
        assert_eq!(help(&args(&["-h"]), "", &["a"]), None);
        let text = help(
            &args(&["bench", "--help"]),
            "  --server PATH    x\n",
            &["a", "b"],
        )
        .unwrap();
        assert!(text.contains("--only GROUP"), "{text}");
        assert!(text.contains("--server PATH"), "{text}");
        assert!(text.ends_with("groups: a, b\n"), "{text}");
        let plain = help(&args(&["bench", "-h"]), "", &[]).unwrap();
        assert!(
            !plain.contains("--only") && !plain.contains("groups"),
            "{plain}"
        );
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let sorted: Vec<Duration> = (1..=100).map(ms).collect();
        assert_eq!(percentile(&sorted, 50), ms(50));
        assert_eq!(percentile(&sorted, 99), ms(99));
        assert_eq!(percentile(&sorted, 100), ms(100));
        assert_eq!(percentile(&sorted, 0), ms(1));
        let few = [ms(10), ms(20), ms(30)];
        assert_eq!(percentile(&few, 50), ms(20));
        assert_eq!(percentile(&few, 99), ms(30));
        assert_eq!(percentile(&[ms(7)], 50), ms(7));
    }

    #[test]
    fn percentile_of_no_samples_is_zero() {
        assert_eq!(percentile(&[], 50), Duration::ZERO);
    }

    #[test]
    fn latency_sorts_and_reports_milliseconds() {
        let mut latencies = vec![ms(3), Duration::from_micros(1500), ms(1)];
        let bench = Bench::latency_ms("l", &mut latencies, json!({}));
        assert_eq!(latencies, [ms(1), Duration::from_micros(1500), ms(3)]);
        assert_eq!(bench.measured, json!({ "p50": 1.5, "p99": 3.0 }));
        assert_eq!(bench.samples, 3);
        assert_eq!(bench.unit, "ms");
    }

    #[test]
    fn min_bound_is_inclusive() {
        let target = json!({ "value": { "min": 100.0 } });
        assert!(entry(json!({ "value": 100.0 }), target.clone()).meets_target());
        assert!(entry(json!({ "value": 101 }), target.clone()).meets_target());
        assert!(!entry(json!({ "value": 99.9 }), target).meets_target());
    }

    #[test]
    fn max_bound_is_exclusive() {
        let target = json!({ "p50": { "max": 1.0 } });
        assert!(entry(json!({ "p50": 0.999 }), target.clone()).meets_target());
        assert!(!entry(json!({ "p50": 1.0 }), target.clone()).meets_target());
        assert!(!entry(json!({ "p50": 1.5 }), target).meets_target());
    }

    #[test]
    fn max_bound_on_a_count_key_is_inclusive() {
        let target = json!({ "lost": { "max": 0 } });
        assert!(entry(json!({ "value": 10, "lost": 0 }), target.clone()).meets_target());
        assert!(!entry(json!({ "value": 9, "lost": 1 }), target).meets_target());
    }

    #[test]
    fn an_empty_target_is_met_and_a_missing_key_is_not() {
        assert!(entry(json!({ "value": 1.0 }), json!({})).meets_target());
        assert!(!entry(json!({ "p50": 1.0 }), json!({ "value": { "min": 0 } })).meets_target());
        assert!(!entry(json!({ "value": 1.0 }), Value::Null).meets_target());
    }

    #[test]
    fn every_bound_must_hold() {
        let target = json!({ "p50": { "max": 1.0 }, "p99": { "max": 5.0 } });
        assert!(entry(json!({ "p50": 0.5, "p99": 4.0 }), target.clone()).meets_target());
        assert!(!entry(json!({ "p50": 0.5, "p99": 6.0 }), target).meets_target());
    }

    #[test]
    fn the_report_entry_keeps_its_names() {
        let bench = Bench::throughput(
            "store.append.batch1",
            "events/s",
            200,
            1234.4,
            json!({ "value": { "min": 100.0 } }),
        );
        assert_eq!(
            bench.to_json(),
            json!({
                "name": "store.append.batch1",
                "unit": "events/s",
                "samples": 200,
                "measured": { "value": 1234.0 },
                "target": { "value": { "min": 100.0 } },
                "meetsTarget": true,
            })
        );
        assert_eq!(
            bench.summary(),
            "bench: store.append.batch1 = {\"value\":1234.0} events/s (target {\"value\":{\"min\":100.0}})"
        );
    }
}
