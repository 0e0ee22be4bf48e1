//! The doctor's findings and how they are printed: one line per check
//! (`ok`, `problem` or `skipped`, its name and what was found) with the fix
//! under each problem, or one JSON document. A leaf: it names no other
//! module of `slack`.

use serde::Serialize;

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Status {
    /// Nothing to fix.
    Ok,
    /// Something to fix; the check carries the fix.
    Problem,
    /// Not checked, because an earlier check failed or something is
    /// missing (the detail says what).
    Skipped,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Problem => "problem",
            Status::Skipped => "skipped",
        }
    }
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(super) struct Check {
    /// `token`, `auth`, `scopes`, `signing_secret` or `request_url`.
    pub(super) name: &'static str,
    /// How it came out.
    pub(super) status: Status,
    /// What was found, in one line.
    pub(super) detail: String,
    /// What to do about a problem; `None` otherwise.
    pub(super) fix: Option<String>,
}

impl Check {
    /// A check that passed.
    pub(super) fn ok(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    /// A problem and its fix.
    pub(super) fn problem(
        name: &'static str,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check {
            name,
            status: Status::Problem,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    /// A check that was not made, and why.
    pub(super) fn skipped(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Skipped,
            detail: detail.into(),
            fix: None,
        }
    }
}

/// The doctor's answer: whether nothing is wrong, and every finding.
#[derive(Debug, Serialize)]
pub(super) struct Report {
    /// True when no check found a problem.
    pub(super) ok: bool,
    /// The findings, in the order they were made.
    pub(super) checks: Vec<Check>,
}

impl Report {
    /// The report of `checks`.
    pub(super) fn new(checks: Vec<Check>) -> Report {
        Report {
            ok: checks.iter().all(|c| c.status != Status::Problem),
            checks,
        }
    }

    /// The report as text: a line per check, the fix indented under each
    /// problem, and a summary line.
    pub(super) fn text(&self) -> String {
        let mut out = String::new();
        for c in &self.checks {
            out.push_str(&format!(
                "{:<8} {}: {}\n",
                c.status.label(),
                c.name,
                c.detail
            ));
            if let Some(fix) = &c.fix {
                out.push_str(&format!("         fix: {fix}\n"));
            }
        }
        let problems = self
            .checks
            .iter()
            .filter(|c| c.status == Status::Problem)
            .count();
        out.push_str(&match problems {
            0 => "no problem found\n".to_owned(),
            1 => "1 problem\n".to_owned(),
            n => format!("{n} problems\n"),
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_makes_the_report_not_ok_and_prints_its_fix() {
        let report = Report::new(vec![
            Check::ok("token", "set"),
            Check::problem("scopes", "missing scope `im:history`", "add it"),
            Check::skipped("request_url", "pass --url to check it"),
        ]);
        assert!(!report.ok);
        assert_eq!(
            report.text(),
            "ok       token: set\n\
             problem  scopes: missing scope `im:history`\n\
             \x20        fix: add it\n\
             skipped  request_url: pass --url to check it\n\
             1 problem\n"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["checks"][1]["status"], "problem");
        assert_eq!(json["checks"][0]["fix"], serde_json::Value::Null);
        assert!(Report::new(vec![Check::skipped("auth", "no token")]).ok);
    }
}
