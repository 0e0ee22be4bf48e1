//! Validation of standard 5-field cron expressions (UTC, minute granularity).
//!
//! Discovery needs to know whether an expression is well formed and, if
//! not, which field is wrong, and whether it can fire at all (that second
//! check borrows the reminder engine's matcher); computing fire times for
//! real belongs to the scheduler.
//! The accepted grammar is the classic crontab one: per field `*`, a number,
//! a range `a-b`, a step `*/n` or `a-b/n`, or a comma-separated list of those;
//! months and weekdays also take three-letter English names.

/// One field of the expression: its name, bounds and optional names.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MONTHS: &[&str] = &[
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: &[&str] = &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

const FIELDS: [Field; 5] = [
    Field {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
    },
    Field {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
    },
    Field {
        name: "day-of-month",
        min: 1,
        max: 31,
        names: &[],
    },
    Field {
        name: "month",
        min: 1,
        max: 12,
        names: MONTHS,
    },
    Field {
        name: "day-of-week",
        min: 0,
        max: 7,
        names: WEEKDAYS,
    },
];

/// Checks a 5-field cron expression (`minute hour day-of-month month
/// day-of-week`). The error says which field is wrong and why.
pub fn validate_cron(expr: &str) -> Result<(), String> {
    let parts: Vec<&str> = expr.split_whitespace().collect();
    if parts.len() != FIELDS.len() {
        return Err(format!(
            "expected 5 fields (minute hour day-of-month month day-of-week), found {}",
            parts.len()
        ));
    }
    for (field, part) in FIELDS.iter().zip(parts) {
        check_field(field, part).map_err(|why| format!("{} field `{part}`: {why}", field.name))?;
    }
    Ok(())
}

/// Checks that a well-formed expression fires at least once, such as
/// rejecting `0 0 31 2 *` (February never has a 31st). It asks the exact
/// matcher of [`crate::reminders::CronSpec`] for the first fire after a
/// fixed instant: its search spans four years, which always includes a
/// leap day, so an expression that finds nothing there matches no date at
/// all. The instant is fixed so the answer never depends on the clock.
///
/// This is separate from [`validate_cron`] because `CronSpec::parse` calls
/// that function first; the syntax check must stay free of the matcher.
pub fn next_fire_exists(expr: &str) -> Result<(), String> {
    let spec = crate::reminders::CronSpec::parse(expr).map_err(|e| e.to_string())?;
    let anchor =
        chrono::DateTime::<chrono::Utc>::UNIX_EPOCH + chrono::TimeDelta::days(DAYS_TO_2024);
    match spec.next_after(anchor) {
        Some(_) => Ok(()),
        None => Err("it matches no calendar date, so it never fires".to_owned()),
    }
}

/// Days from 1970-01-01 to 2024-01-01, a leap year, where the search of
/// [`next_fire_exists`] starts.
const DAYS_TO_2024: i64 = 19_723;

fn check_field(field: &Field, text: &str) -> Result<(), String> {
    for item in text.split(',') {
        if item.is_empty() {
            return Err("empty list element".to_owned());
        }
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => (range, Some(step)),
            None => (item, None),
        };
        if let Some(step) = step {
            let n: u32 = step
                .parse()
                .map_err(|_| format!("step `{step}` is not a number"))?;
            if n == 0 {
                return Err("step must be greater than 0".to_owned());
            }
        }
        if range == "*" {
            continue;
        }
        match range.split_once('-') {
            Some((a, b)) => {
                let a = value(field, a)?;
                let b = value(field, b)?;
                if a > b {
                    return Err(format!("range {a}-{b} runs backwards"));
                }
            }
            None => {
                if step.is_some() {
                    return Err(
                        "a step needs `*` or a range before it (`*/n` or `a-b/n`)".to_owned()
                    );
                }
                value(field, range)?;
            }
        }
    }
    Ok(())
}

fn value(field: &Field, text: &str) -> Result<u32, String> {
    let upper = text.to_ascii_uppercase();
    if let Some(i) = field.names.iter().position(|n| *n == upper) {
        // Month names count from 1, weekday names from 0 (Sunday).
        let base = if field.min == 1 { 1 } else { 0 };
        return u32::try_from(i)
            .map(|i| i + base)
            .map_err(|e| e.to_string());
    }
    let n: u32 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))?;
    if n < field.min || n > field.max {
        return Err(format!(
            "value {n} is out of range {}-{}",
            field.min, field.max
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::{DAYS_TO_2024, next_fire_exists, validate_cron};

    #[test]
    fn the_search_anchor_is_the_start_of_2024() {
        let anchor =
            chrono::DateTime::<chrono::Utc>::UNIX_EPOCH + chrono::TimeDelta::days(DAYS_TO_2024);
        assert_eq!(anchor.to_rfc3339(), "2024-01-01T00:00:00+00:00");
    }

    #[test]
    fn expressions_that_never_fire_are_rejected() {
        for expr in ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4,6,9,11 *"] {
            assert_eq!(validate_cron(expr), Ok(()), "{expr} is well formed");
            let err = next_fire_exists(expr).unwrap_err();
            assert!(err.contains("never fires"), "{expr}: {err}");
        }
        // A leap day, and a 31st restricted by weekday too (either matches).
        for expr in ["0 0 29 2 *", "0 0 31 2 MON", "* * * * *", "0 9 31 * *"] {
            assert_eq!(next_fire_exists(expr), Ok(()), "{expr}");
        }
        assert!(next_fire_exists("61 * * * *").is_err());
    }

    #[test]
    fn accepts_standard_expressions() {
        for expr in [
            "* * * * *",
            "0 9 * * 1-5",
            "*/30 * * * *",
            "0-30/5 0,12 1 JAN-jun sun",
            "59 23 31 12 7",
            "0 0 1 * MON,wed,FRI",
            "  5  4  *  *  0 ",
        ] {
            assert_eq!(validate_cron(expr), Ok(()), "{expr}");
        }
    }

    #[test]
    fn names_the_offending_field() {
        let cases = [
            ("* * * *", "expected 5 fields"),
            ("* * * * * *", "found 6"),
            (
                "60 * * * *",
                "minute field `60`: value 60 is out of range 0-59",
            ),
            ("* 24 * * *", "hour field"),
            ("* * 0 * *", "day-of-month field `0`"),
            ("* * * 13 *", "month field"),
            ("* * * * 8", "day-of-week field `8`"),
            ("*/0 * * * *", "step must be greater than 0"),
            ("5-1 * * * *", "runs backwards"),
            ("* * * FOO *", "month field `FOO`"),
            ("1,,2 * * * *", "empty list element"),
            ("5/2 * * * *", "a step needs"),
            ("*/x * * * *", "step `x`"),
            ("", "found 0"),
        ];
        for (expr, want) in cases {
            let err = validate_cron(expr).unwrap_err();
            assert!(err.contains(want), "{expr}: {err}");
        }
    }
}
