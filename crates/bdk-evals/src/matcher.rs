//! Value matchers: literals, regular expressions, predicates and partial deep
//! matches over JSON values.
//!
//! One matcher type serves both authoring forms. Rust code builds matchers
//! with the constructors ([`Matcher::literal`], [`Matcher::regex`],
//! [`Matcher::predicate`], ...); eval files write plain TOML values, compiled
//! by [`Matcher::compile`], where a table with a single `$`-key is an
//! operator (`{ "$regex" = "..." }`, `{ "$any" = true }`,
//! `{ "$contains" = "..." }`, `{ "$absent" = true }`) and any other table is
//! a partial deep match (every listed key must match; unlisted keys are
//! ignored, which is how ids and arguments you do not care about are left
//! out).

use std::fmt;
use std::sync::Arc;

use regex::Regex;
use serde_json::Value;

/// A predicate over a JSON value.
pub type Predicate = Arc<dyn Fn(&Value) -> bool + Send + Sync>;

/// Matches one JSON value.
#[derive(Clone)]
pub enum Matcher {
    /// Anything, including a missing field.
    Any,
    /// The field must be missing (or null).
    Absent,
    /// Equal to this value (numbers compare numerically). Objects and arrays
    /// given as literals become [`Matcher::Object`] / [`Matcher::Array`].
    Eq(Value),
    /// A string matching the regex (other values match on their JSON text).
    Regex(Regex),
    /// A string containing the text (other values: their JSON text).
    Contains(String),
    /// Every listed key matches; other keys are ignored.
    Object(Vec<(String, Matcher)>),
    /// Same length, element by element.
    Array(Vec<Matcher>),
    /// A named predicate (Rust only).
    Predicate(String, Predicate),
}

impl fmt::Debug for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Why a matcher was given a value it cannot compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid matcher at {path}: {message}")]
pub struct MatcherError {
    /// Where in the value (`input.city`, `$`).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl Matcher {
    /// A literal: scalars compare by equality, objects match partially and
    /// deeply, arrays element by element.
    pub fn literal(value: impl Into<Value>) -> Matcher {
        Self::from_literal(value.into())
    }

    fn from_literal(value: Value) -> Matcher {
        match value {
            Value::Object(map) => Matcher::Object(
                map.into_iter()
                    .map(|(k, v)| (k, Self::from_literal(v)))
                    .collect(),
            ),
            Value::Array(items) => {
                Matcher::Array(items.into_iter().map(Self::from_literal).collect())
            }
            other => Matcher::Eq(other),
        }
    }

    /// A regular expression. An invalid pattern is an error.
    pub fn regex(pattern: &str) -> Result<Matcher, MatcherError> {
        Regex::new(pattern)
            .map(Matcher::Regex)
            .map_err(|e| MatcherError {
                path: "$".into(),
                message: one_line(&e.to_string()),
            })
    }

    /// Text containing `needle`.
    pub fn contains(needle: impl Into<String>) -> Matcher {
        Matcher::Contains(needle.into())
    }

    /// A named predicate.
    pub fn predicate(
        label: impl Into<String>,
        f: impl Fn(&Value) -> bool + Send + Sync + 'static,
    ) -> Matcher {
        Matcher::Predicate(label.into(), Arc::new(f))
    }

    /// Partial deep match over an object: `fields` must match, the rest is ignored.
    pub fn object<K: Into<String>>(fields: impl IntoIterator<Item = (K, Matcher)>) -> Matcher {
        Matcher::Object(fields.into_iter().map(|(k, m)| (k.into(), m)).collect())
    }

    /// Compiles the file form: a JSON value where single-key `$` tables are
    /// operators and everything else is a literal.
    pub fn compile(value: &Value) -> Result<Matcher, MatcherError> {
        compile_at(value, "$")
    }

    /// Checks `actual` (`None` for a missing field). `Err` says where and why
    /// it did not match.
    pub fn check(&self, actual: Option<&Value>) -> Result<(), String> {
        self.check_at(actual, "")
    }

    /// True when `actual` matches.
    pub fn matches(&self, actual: &Value) -> bool {
        self.check(Some(actual)).is_ok()
    }

    fn check_at(&self, actual: Option<&Value>, path: &str) -> Result<(), String> {
        let at = |msg: String| {
            if path.is_empty() {
                msg
            } else {
                format!("at {path}: {msg}")
            }
        };
        let actual_nonnull = actual.filter(|v| !v.is_null());
        match self {
            Matcher::Any => Ok(()),
            Matcher::Absent => match actual_nonnull {
                None => Ok(()),
                Some(v) => Err(at(format!("expected no value, found {}", short(v)))),
            },
            Matcher::Eq(expected) => match actual {
                Some(v) if values_equal(expected, v) => Ok(()),
                Some(v) => Err(at(format!(
                    "expected {}, found {}",
                    short(expected),
                    short(v)
                ))),
                None => Err(at(format!("expected {}, found nothing", short(expected)))),
            },
            Matcher::Regex(re) => match actual_nonnull {
                Some(v) if re.is_match(&text_of(v)) => Ok(()),
                Some(v) => Err(at(format!("{} does not match /{}/", short(v), re.as_str()))),
                None => Err(at(format!(
                    "expected a match for /{}/, found nothing",
                    re.as_str()
                ))),
            },
            Matcher::Contains(needle) => match actual_nonnull {
                Some(v) if text_of(v).contains(needle.as_str()) => Ok(()),
                Some(v) => Err(at(format!("{} does not contain {needle:?}", short(v)))),
                None => Err(at(format!(
                    "expected text containing {needle:?}, found nothing"
                ))),
            },
            Matcher::Object(fields) => {
                let Some(Value::Object(map)) = actual else {
                    return Err(at(format!(
                        "expected an object, found {}",
                        actual.map_or_else(|| "nothing".to_owned(), short)
                    )));
                };
                for (key, m) in fields {
                    let child = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    m.check_at(map.get(key), &child)?;
                }
                Ok(())
            }
            Matcher::Array(items) => {
                let Some(Value::Array(values)) = actual else {
                    return Err(at(format!(
                        "expected an array, found {}",
                        actual.map_or_else(|| "nothing".to_owned(), short)
                    )));
                };
                if values.len() != items.len() {
                    return Err(at(format!(
                        "expected {} item(s), found {}",
                        items.len(),
                        values.len()
                    )));
                }
                for (i, (m, v)) in items.iter().zip(values).enumerate() {
                    m.check_at(Some(v), &format!("{path}[{i}]"))?;
                }
                Ok(())
            }
            Matcher::Predicate(label, f) => match actual {
                Some(v) if f(v) => Ok(()),
                Some(v) => Err(at(format!("{} rejected by {label}", short(v)))),
                None => Err(at(format!("nothing to give to {label}"))),
            },
        }
    }

    /// A short human description, used in failure messages.
    pub fn describe(&self) -> String {
        match self {
            Matcher::Any => "anything".into(),
            Matcher::Absent => "absent".into(),
            Matcher::Eq(v) => short(v),
            Matcher::Regex(re) => format!("/{}/", re.as_str()),
            Matcher::Contains(s) => format!("containing {s:?}"),
            Matcher::Object(fields) => {
                let inner: Vec<String> = fields
                    .iter()
                    .map(|(k, m)| format!("{k}: {}", m.describe()))
                    .collect();
                format!("{{{}, ..}}", inner.join(", "))
            }
            Matcher::Array(items) => {
                let inner: Vec<String> = items.iter().map(Matcher::describe).collect();
                format!("[{}]", inner.join(", "))
            }
            Matcher::Predicate(label, _) => format!("<{label}>"),
        }
    }
}

fn compile_at(value: &Value, path: &str) -> Result<Matcher, MatcherError> {
    match value {
        Value::Object(map) => {
            if map.len() == 1
                && let Some((key, arg)) = map.iter().next()
                && key.starts_with('$')
            {
                let err = |message: String| MatcherError {
                    path: path.to_owned(),
                    message,
                };
                return match key.as_str() {
                    "$any" => Ok(Matcher::Any),
                    "$absent" => Ok(Matcher::Absent),
                    "$regex" => {
                        let Some(p) = arg.as_str() else {
                            return Err(err("$regex takes a string pattern".into()));
                        };
                        Regex::new(p).map(Matcher::Regex).map_err(|e| {
                            err(format!("invalid $regex: {}", one_line(&e.to_string())))
                        })
                    }
                    "$contains" => match arg.as_str() {
                        Some(s) => Ok(Matcher::Contains(s.to_owned())),
                        None => Err(err("$contains takes a string".into())),
                    },
                    "$eq" => Ok(Matcher::Eq(arg.clone())),
                    other => Err(err(format!(
                        "unknown operator `{other}`; use $regex, $contains, $any, $absent or $eq"
                    ))),
                };
            }
            let mut fields = Vec::with_capacity(map.len());
            for (k, v) in map {
                fields.push((k.clone(), compile_at(v, &format!("{path}.{k}"))?));
            }
            Ok(Matcher::Object(fields))
        }
        Value::Array(items) => Ok(Matcher::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| compile_at(v, &format!("{path}[{i}]")))
                .collect::<Result<_, _>>()?,
        )),
        other => Ok(Matcher::Eq(other.clone())),
    }
}

fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => x == y,
        },
        _ => a == b,
    }
}

/// The text a regex or `contains` sees: strings as they are, anything else
/// as compact JSON.
pub(crate) fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A value, shortened for a message.
pub(crate) fn short(v: &Value) -> String {
    clip(&v.to_string(), 120)
}

/// `s` cut to `max` characters, with an ellipsis when cut.
pub fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let cut: String = s.chars().take(max.saturating_sub(3)).collect();
        format!("{cut}...")
    }
}

pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_match_partially_and_deeply() {
        let m = Matcher::literal(json!({"city": "Paris", "opts": {"unit": "celsius"}}));
        assert!(
            m.matches(&json!({"city": "Paris", "extra": 1, "opts": {"unit": "celsius", "x": 2}}))
        );
        let err = m
            .check(Some(
                &json!({"city": "Paris", "opts": {"unit": "fahrenheit"}}),
            ))
            .unwrap_err();
        assert!(err.contains("opts.unit"), "{err}");
        assert!(!m.matches(&json!({"opts": {"unit": "celsius"}})));
    }

    #[test]
    fn operators_compile_from_file_values() {
        let m =
            Matcher::compile(&json!({"city": {"$regex": "^Par"}, "id": {"$any": true}})).unwrap();
        assert!(m.matches(&json!({"city": "Paris"})));
        assert!(!m.matches(&json!({"city": "Lyon"})));
        let bad = Matcher::compile(&json!({"city": {"$regex": "("}})).unwrap_err();
        assert_eq!(bad.path, "$.city");
        assert!(Matcher::compile(&json!({"$nope": 1})).is_err());
        let absent = Matcher::compile(&json!({"unit": {"$absent": true}})).unwrap();
        assert!(absent.matches(&json!({"city": "Paris"})));
        assert!(!absent.matches(&json!({"unit": "celsius"})));
    }

    #[test]
    fn numbers_compare_numerically_and_arrays_by_length() {
        assert!(Matcher::literal(json!(1.0)).matches(&json!(1)));
        assert!(!Matcher::literal(json!([1, 2])).matches(&json!([1, 2, 3])));
        assert!(Matcher::contains("°C").matches(&json!("It is 18°C")));
        let p = Matcher::predicate("positive", |v| v.as_f64().is_some_and(|n| n > 0.0));
        assert!(p.matches(&json!(3)));
        assert!(p.check(Some(&json!(-1))).unwrap_err().contains("positive"));
    }
}
