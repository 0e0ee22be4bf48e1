//! Standard 5-field crontab expressions evaluated in UTC at minute
//! granularity: the one matcher behind `bdk validate`, the schedule cadence
//! (`bdk-scheduler` re-exports it) and `cron` reminders.
//!
//! This is a small exact matcher rather than a shim over the `cron` crate,
//! whose grammar differs from crontab in three ways that matter here (seconds
//! first, weekdays numbered from 1 = Sunday, and both day fields ANDed). The
//! `croner` crate (3.0) gets the crontab semantics right but fits worse than
//! these 300 lines: it accepts a larger grammar than the one bdk documents
//! and the seeds use (a seconds field, `L`/`W`/`#`, `@daily`), so `bdk
//! validate` would pass schedules other tools refuse; its parse errors do not
//! say which field is wrong ("Number out of bounds"), where `bdk validate`
//! names it; and an expression that never fires (`0 0 31 2 *`) parses and
//! only fails at the first search. Validating here and evaluating there would
//! be two grammars to keep in step. The
//! grammar: per field `*`, a number, a range `a-b`, a step `*/n` or `a-b/n`,
//! or a comma-separated list of those; months and weekdays also take
//! three-letter English names (any case); weekday 7 is Sunday, like 0.
//!
//! Day semantics follow crontab: a day field is *restricted* when it does not
//! start with `*`; when both day-of-month and day-of-week are restricted a day
//! matches if either does, otherwise the restricted one (if any) decides.
//!
//! An expression that is well formed but names no date that exists (the 31st
//! of February) is refused by [`CronExpr::parse`], so every parsed expression
//! has a next fire; the search for it spans more than the longest gap between
//! two 29ths of February (8 years, across a skipped leap year such as 2100).

use chrono::{DateTime, Datelike, Duration, NaiveDate, Timelike, Utc};

/// Why an expression cannot be scheduled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CronError {
    /// The expression is malformed.
    #[error("invalid cron expression `{expr}`: {reason}")]
    Invalid {
        /// The expression.
        expr: String,
        /// What is wrong, naming the field.
        reason: String,
    },
    /// The expression is well formed but names no date that exists, such as
    /// the 31st of February.
    #[error("cron expression `{0}` never fires: no month it allows has the days it names")]
    Never(String),
}

impl CronError {
    /// What is wrong, without the expression itself (for messages that
    /// already quote it).
    pub fn reason(&self) -> &str {
        match self {
            Self::Invalid { reason, .. } => reason,
            Self::Never(_) => "it matches no calendar date, so it never fires",
        }
    }
}

const MONTHS: &[&str] = &[
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: &[&str] = &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// The longest each month can be (February counts its leap day).
const MONTH_DAYS: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// Days searched before giving up: more than the 8-year gap between two
/// 29ths of February across a skipped leap year (2096 to 2104).
const SEARCH_DAYS: i64 = 366 * 9;

/// A parsed expression; each field is a bit set of allowed values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronExpr {
    source: String,
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    days_restricted: bool,
    weekdays_restricted: bool,
}

impl CronExpr {
    /// Parses `minute hour day-of-month month day-of-week`; an expression
    /// that can never fire is refused with [`CronError::Never`].
    pub fn parse(expr: &str) -> Result<Self, CronError> {
        let invalid = |reason: String| CronError::Invalid {
            expr: expr.to_owned(),
            reason,
        };
        let parts: Vec<&str> = expr.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = parts.as_slice() else {
            return Err(invalid(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), found {}",
                parts.len()
            )));
        };
        let field = |name: &str, text: &str, min, max, names| {
            parse_field(text, min, max, names)
                .map_err(|why| invalid(format!("{name} field `{text}`: {why}")))
        };
        let minutes = field("minute", minute, 0, 59, &[])?;
        let hours = field("hour", hour, 0, 23, &[])?;
        let days = field("day-of-month", day, 1, 31, &[])?;
        let months = field("month", month, 1, 12, MONTHS)?;
        let mut weekdays = field("day-of-week", weekday, 0, 7, WEEKDAYS)?;
        // Both 0 and 7 mean Sunday.
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays & !(1 << 7)) | 1;
        }
        let this = Self {
            source: expr.to_owned(),
            minutes,
            hours,
            days,
            months,
            weekdays,
            days_restricted: !day.starts_with('*'),
            weekdays_restricted: !weekday.starts_with('*'),
        };
        if !this.can_fire() {
            return Err(CronError::Never(expr.to_owned()));
        }
        Ok(this)
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether `t`'s minute is one the expression names.
    pub fn matches(&self, t: DateTime<Utc>) -> bool {
        self.day_matches(t.date_naive())
            && self.hours & (1 << t.hour()) != 0
            && self.minutes & (1 << t.minute()) != 0
    }

    /// The first matching minute strictly after `t`, or `None` when there is
    /// none within the search horizon (only for expressions that [`parse`]
    /// would have refused, or past the end of the calendar).
    ///
    /// [`parse`]: CronExpr::parse
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let start = t.with_second(0)?.with_nanosecond(0)? + Duration::minutes(1);
        let first_day = start.date_naive();
        for offset in 0..SEARCH_DAYS {
            let date = first_day.checked_add_signed(Duration::days(offset))?;
            if !self.day_matches(date) {
                continue;
            }
            let (from_hour, from_minute) = if offset == 0 {
                (start.hour(), start.minute())
            } else {
                (0, 0)
            };
            for hour in from_hour..24 {
                if self.hours & (1 << hour) == 0 {
                    continue;
                }
                let first_minute = if hour == from_hour { from_minute } else { 0 };
                if let Some(minute) = (first_minute..60).find(|m| self.minutes & (1 << m) != 0) {
                    return date.and_hms_opt(hour, minute, 0).map(|n| n.and_utc());
                }
            }
        }
        None
    }

    fn day_matches(&self, date: NaiveDate) -> bool {
        if self.months & (1 << date.month()) == 0 {
            return false;
        }
        let by_day = self.days & (1 << date.day()) != 0;
        let by_weekday = self.weekdays & (1 << date.weekday().num_days_from_sunday()) != 0;
        match (self.days_restricted, self.weekdays_restricted) {
            (true, true) => by_day || by_weekday,
            (true, false) => by_day,
            (false, true) => by_weekday,
            (false, false) => true,
        }
    }

    /// Whether some real date matches. Only a restricted day-of-month with an
    /// unrestricted weekday can miss every date: every weekday occurs in
    /// every month.
    fn can_fire(&self) -> bool {
        if self.weekdays_restricted {
            return true;
        }
        (1..=12u32).any(|m| {
            self.months & (1 << m) != 0
                && MONTH_DAYS
                    .get((m - 1) as usize)
                    .is_some_and(|&max| (1..=max).any(|d| self.days & (1 << d) != 0))
        })
    }
}

fn parse_field(text: &str, min: u32, max: u32, names: &[&str]) -> Result<u64, String> {
    let mut set = 0u64;
    for item in text.split(',') {
        if item.is_empty() {
            return Err("empty list element".to_owned());
        }
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step
                    .parse()
                    .map_err(|_| format!("step `{step}` is not a number"))?;
                if step == 0 {
                    return Err("step must be greater than 0".to_owned());
                }
                (range, step)
            }
            None => (item, 1),
        };
        let (lo, hi) = if range == "*" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, min, max, names)?, value(b, min, max, names)?)
        } else {
            if item.contains('/') {
                // Some crons read `a/n` as "from a to the end"; crontab does
                // not, and neither does this parser.
                return Err("a step needs `*` or a range before it (`*/n` or `a-b/n`)".to_owned());
            }
            let v = value(range, min, max, names)?;
            (v, v)
        };
        if lo > hi {
            return Err(format!("range `{range}` runs backwards"));
        }
        let mut v = lo;
        while v <= hi {
            set |= 1 << v;
            v += step;
        }
    }
    Ok(set)
}

fn value(text: &str, min: u32, max: u32, names: &[&str]) -> Result<u32, String> {
    let v = match text.parse::<u32>() {
        Ok(v) => v,
        Err(_) => names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(text))
            .and_then(|i| u32::try_from(i).ok())
            .map(|i| i + min)
            .ok_or_else(|| format!("`{text}` is not a number or a known name"))?,
    };
    if v < min || v > max {
        return Err(format!("value {v} is out of range {min}-{max}"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
    }

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn next(expr: &str, t: DateTime<Utc>) -> DateTime<Utc> {
        CronExpr::parse(expr).unwrap().next_after(t).unwrap()
    }

    #[test]
    fn next_is_strictly_after_and_minute_aligned() {
        let t = at(2026, 3, 10, 9, 0);
        assert_eq!(next("* * * * *", t), at(2026, 3, 10, 9, 1));
        assert_eq!(next("0 9 * * *", t), at(2026, 3, 11, 9, 0));
        let mid = t + Duration::seconds(30);
        assert_eq!(next("*/15 * * * *", mid), at(2026, 3, 10, 9, 15));
        assert_eq!(next("30 23 31 12 *", t), at(2026, 12, 31, 23, 30));
    }

    #[test]
    fn weekdays_use_crontab_numbering_and_names() {
        // 2026-03-10 is a Tuesday.
        let t = at(2026, 3, 10, 12, 0);
        assert_eq!(next("0 9 * * 1-5", t), at(2026, 3, 11, 9, 0));
        assert_eq!(next("0 9 * * 0", t), at(2026, 3, 15, 9, 0));
        assert_eq!(next("0 9 * * 7", t), at(2026, 3, 15, 9, 0));
        assert_eq!(next("0 9 * * sun", t), at(2026, 3, 15, 9, 0));
        assert_eq!(next("0 9 * * MON", t), at(2026, 3, 16, 9, 0));
        assert_eq!(next("0 0 1 jan *", t), at(2027, 1, 1, 0, 0));
    }

    #[test]
    fn both_day_fields_restricted_fire_on_either() {
        // The 13th or any Friday: from Tuesday 2026-03-10, Friday the 13th
        // comes first; after it, the next Friday (20th); the 13th of April
        // is a Monday and still fires.
        let e = "0 0 13 * 5";
        assert_eq!(next(e, at(2026, 3, 10, 0, 0)), at(2026, 3, 13, 0, 0));
        assert_eq!(next(e, at(2026, 3, 13, 0, 0)), at(2026, 3, 20, 0, 0));
        assert_eq!(next(e, at(2026, 4, 11, 0, 0)), at(2026, 4, 13, 0, 0));
        // The 1st or a Sunday: Sunday 2026-03-15 before April 1st.
        assert_eq!(
            next("0 0 1 * 0", at(2026, 3, 10, 0, 0)),
            at(2026, 3, 15, 0, 0)
        );
        // A starred weekday leaves the day-of-month alone in charge.
        assert_eq!(
            next("0 0 13 * *", at(2026, 3, 13, 0, 0)),
            at(2026, 4, 13, 0, 0)
        );
        assert_eq!(
            next("0 0 */10 * 1", at(2026, 3, 10, 0, 0)),
            at(2026, 3, 16, 0, 0)
        );
    }

    #[test]
    fn impossible_dates_are_refused() {
        for e in ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4,6,9,11 *"] {
            let err = CronExpr::parse(e);
            assert_eq!(err, Err(CronError::Never(e.to_owned())), "{e}");
            assert!(err.unwrap_err().reason().contains("never fires"), "{e}");
        }
        // The 29th of February exists in leap years only; the search finds
        // the next one, even across a skipped leap year.
        assert_eq!(
            next("0 0 29 2 *", at(2026, 3, 1, 0, 0)),
            at(2028, 2, 29, 0, 0)
        );
        assert_eq!(
            next("0 0 29 2 *", at(2096, 3, 1, 0, 0)),
            at(2104, 2, 29, 0, 0)
        );
        // With a restricted weekday, the OR makes it fire on that weekday of
        // February: Monday 2027-02-01 is the first.
        assert_eq!(
            next("0 0 31 2 1", at(2026, 3, 10, 0, 0)),
            at(2027, 2, 1, 0, 0)
        );
        // A leap day, and a 31st restricted by weekday too (either matches).
        for e in ["0 0 29 2 *", "0 0 31 2 MON", "* * * * *", "0 9 31 * *"] {
            assert!(CronExpr::parse(e).is_ok(), "{e}");
        }
    }

    #[test]
    fn malformed_expressions_name_the_field() {
        for (e, field) in [
            ("* * * *", "expected 5 fields"),
            ("* * * * * *", "found 6"),
            ("", "found 0"),
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
            ("1,,2 * * * *", "empty list element"),
            ("* * * foo *", "not a number or a known name"),
            ("* * * FOO *", "month field `FOO`"),
            ("5/2 * * * *", "a step needs"),
            ("*/x * * * *", "step `x`"),
            ("61 * * * *", "minute field"),
            ("* * *", "found 3"),
        ] {
            let err = CronExpr::parse(e).unwrap_err();
            assert!(err.to_string().contains(field), "{e}: {err}");
            assert!(err.reason().contains(field), "{e}: {err}");
        }
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
            assert!(CronExpr::parse(expr).is_ok(), "{expr}");
        }
    }

    /// The cases the reminder engine's matcher was tested with before the
    /// two matchers became this one.
    #[test]
    fn reminder_cron_cases() {
        let c = CronExpr::parse("30 9 * * 1-5").unwrap();
        // 2026-11-28 is a Saturday: the next weekday 09:30 is Monday.
        assert_eq!(
            c.next_after(t("2026-11-28T10:00:00Z")),
            Some(t("2026-11-30T09:30:00Z"))
        );
        // Strictly after: at the fire minute itself, the next one is tomorrow.
        assert_eq!(
            c.next_after(t("2026-11-30T09:30:00Z")),
            Some(t("2026-12-01T09:30:00Z"))
        );
        assert!(c.matches(t("2026-11-30T09:30:00Z")));
        assert!(!c.matches(t("2026-11-29T09:30:00Z")));
        let every15 = CronExpr::parse("*/15 * * * *").unwrap();
        assert_eq!(
            every15.next_after(t("2026-11-30T23:50:10Z")),
            Some(t("2026-12-01T00:00:00Z"))
        );
        // Both day fields restricted: either matches (the 1st or a Monday).
        let or = CronExpr::parse("0 0 1 * MON").unwrap();
        assert_eq!(
            or.next_after(t("2026-12-01T00:00:00Z")),
            Some(t("2026-12-07T00:00:00Z"))
        );
        assert_eq!(
            or.next_after(t("2026-12-28T00:00:00Z")),
            Some(t("2027-01-01T00:00:00Z"))
        );
        // Sunday as 7, and Feb 29 found years ahead.
        let sun = CronExpr::parse("0 12 * * 7").unwrap();
        assert_eq!(
            sun.next_after(t("2026-11-30T00:00:00Z")),
            Some(t("2026-12-06T12:00:00Z"))
        );
        let leap = CronExpr::parse("0 0 29 2 *").unwrap();
        assert_eq!(
            leap.next_after(t("2026-11-30T00:00:00Z")),
            Some(t("2028-02-29T00:00:00Z"))
        );
        // Across 2100, which is not a leap year.
        assert_eq!(
            leap.next_after(t("2097-01-01T00:00:00Z")),
            Some(t("2104-02-29T00:00:00Z"))
        );
    }
}
