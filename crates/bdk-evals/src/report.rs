//! Reporters: JSON, JUnit XML and the plain-text summary table.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::runner::{CaseResult, CaseStatus, IterationStatus, RunResult};
use crate::spec::{CaseSpec, ReporterKind, ReporterSpec};

/// `s` cut to `max` characters, with an ellipsis when cut.
pub fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let cut: String = s.chars().take(max.saturating_sub(3)).collect();
        format!("{cut}...")
    }
}

/// The run as pretty JSON.
pub fn json(result: &RunResult) -> String {
    serde_json::to_string_pretty(result).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 forbids most control characters even when escaped.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

fn secs(ms: u64) -> String {
    format!("{:.3}", ms as f64 / 1000.0)
}

/// Every failure line of a case, iteration by iteration.
pub fn failure_lines(case: &CaseResult) -> Vec<String> {
    let mut lines = Vec::new();
    for it in &case.iterations {
        if it.status == IterationStatus::Passed {
            continue;
        }
        let prefix = if case.iteration_count > 1 {
            format!("iteration {}: ", it.iteration)
        } else {
            String::new()
        };
        for f in &it.failures {
            lines.push(format!("{prefix}{}", f.line()));
        }
        if let Some(s) = &it.stopped
            && (it.failures.is_empty() || it.status != IterationStatus::Failed)
        {
            lines.push(format!("{prefix}stopped: {s}"));
        }
    }
    lines
}

/// The run as JUnit XML: one `<testcase>` per case, a `<failure>` listing
/// every violated assertion (with its event), `<skipped>` when cancelled.
pub fn junit(result: &RunResult) -> String {
    let mut x = String::new();
    let failures = result.summary.failed;
    let skipped = result.summary.cancelled;
    let _ = writeln!(x, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
    let _ = writeln!(
        x,
        "<testsuites name=\"bdk evals\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"{}\">",
        result.summary.total,
        secs(result.duration_ms)
    );
    let _ = writeln!(
        x,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"{}\" timestamp=\"{}\">",
        xml_escape(&result.run_id),
        result.summary.total,
        secs(result.duration_ms),
        result.started_at.to_rfc3339()
    );
    for case in &result.cases {
        let class = if case.file.is_empty() {
            "evals".to_owned()
        } else {
            case.file.clone()
        };
        let _ = write!(
            x,
            "    <testcase classname=\"{}\" name=\"{}\" time=\"{}\"",
            xml_escape(&class),
            xml_escape(&case.id),
            secs(case.duration_ms)
        );
        match case.status {
            CaseStatus::Passed => {
                let _ = writeln!(x, "/>");
            }
            CaseStatus::Failed => {
                let lines = failure_lines(case);
                let message = format!(
                    "pass rate {:.2} below {:.2}; {} failure(s)",
                    case.pass_rate,
                    case.min_pass_rate,
                    lines.len()
                );
                let _ = writeln!(x, ">");
                let _ = writeln!(
                    x,
                    "      <failure message=\"{}\" type=\"assertion\">{}</failure>",
                    xml_escape(&message),
                    xml_escape(&lines.join("\n"))
                );
                let _ = writeln!(x, "    </testcase>");
            }
            _ => {
                let _ = writeln!(x, ">");
                let _ = writeln!(x, "      <skipped message=\"cancelled\"/>");
                let _ = writeln!(x, "    </testcase>");
            }
        }
    }
    let _ = writeln!(x, "  </testsuite>");
    let _ = writeln!(x, "</testsuites>");
    x
}

/// The summary table printed at the end of `bdk evals`, with every failure
/// under its case.
pub fn summary_table(result: &RunResult) -> String {
    let mut out = String::new();
    let width = result
        .cases
        .iter()
        .map(|c| c.id.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        out,
        "{:<width$}  {:<9}  {:>5}  {:>9}",
        "case", "status", "pass", "time"
    );
    for c in &result.cases {
        let status = match c.status {
            CaseStatus::Passed => "passed",
            CaseStatus::Failed => "FAILED",
            CaseStatus::Cancelled => "cancelled",
            CaseStatus::Pending => "pending",
            CaseStatus::Running => "running",
        };
        let passed = c
            .iterations
            .iter()
            .filter(|i| i.status == IterationStatus::Passed)
            .count();
        let _ = writeln!(
            out,
            "{:<width$}  {:<9}  {:>5}  {:>8}s",
            c.id,
            status,
            format!("{passed}/{}", c.iteration_count),
            secs(c.duration_ms)
        );
        if c.status != CaseStatus::Passed {
            for line in failure_lines(c) {
                let _ = writeln!(out, "    - {line}");
            }
        }
    }
    let s = &result.summary;
    let _ = writeln!(
        out,
        "\n{} case(s): {} passed, {} failed, {} cancelled ({}s)",
        s.total,
        s.passed,
        s.failed,
        s.cancelled,
        secs(result.duration_ms)
    );
    if let Some(e) = &result.error {
        let _ = writeln!(out, "run error: {e}");
    }
    out
}

/// Writes the file reporters: config reporters get every case, a reporter
/// named only by files or cases gets just those cases. Returns the paths
/// written.
pub fn write_reports(
    root: &Path,
    config_reporters: &[ReporterSpec],
    cases: &[CaseSpec],
    result: &RunResult,
) -> std::io::Result<Vec<PathBuf>> {
    let mut plan: BTreeMap<ReporterSpec, Option<Vec<String>>> = BTreeMap::new();
    for r in config_reporters {
        plan.insert(r.clone(), None);
    }
    for c in cases {
        for r in &c.reporters {
            match plan.entry(r.clone()) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(Some(vec![c.id.clone()]));
                }
                std::collections::btree_map::Entry::Occupied(mut o) => {
                    if let Some(ids) = o.get_mut() {
                        ids.push(c.id.clone());
                    }
                }
            }
        }
    }
    let mut written = Vec::new();
    for (spec, only) in plan {
        let mut subset = result.clone();
        if let Some(ids) = only {
            subset.cases.retain(|c| ids.contains(&c.id));
            let count = |s: CaseStatus| subset.cases.iter().filter(|c| c.status == s).count();
            subset.summary.total = subset.cases.len();
            subset.summary.passed = count(CaseStatus::Passed);
            subset.summary.failed = count(CaseStatus::Failed);
            subset.summary.cancelled =
                subset.summary.total - subset.summary.passed - subset.summary.failed;
        }
        let text = match spec.kind {
            ReporterKind::Json => json(&subset),
            ReporterKind::Junit => junit(&subset),
        };
        let path = root.join(&spec.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, text)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_escaping_covers_markup_and_control_characters() {
        assert_eq!(xml_escape("a<b>&\"'\u{1}"), "a&lt;b&gt;&amp;&quot;&apos;?");
        assert_eq!(clip("abcdef", 5), "ab...");
    }
}
