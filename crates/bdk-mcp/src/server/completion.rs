//! The shape of every `completion/complete` answer: at most 100 values, the
//! number of matches and whether there were more.

use rmcp::model::CompletionInfo;

/// The first matches (at most [`CompletionInfo::MAX_VALUES`]), with the
/// total count of `matches`.
pub(crate) fn info(matches: impl IntoIterator<Item = String>) -> CompletionInfo {
    let mut values = Vec::new();
    let mut total = 0usize;
    for value in matches {
        if values.len() < CompletionInfo::MAX_VALUES {
            values.push(value);
        }
        total += 1;
    }
    let has_more = total > values.len();
    // The values are capped above, so the constructor cannot refuse them.
    CompletionInfo::with_pagination(values, u32::try_from(total).ok(), has_more).unwrap_or_default()
}

/// True when `value` starts with `prefix`, ignoring ASCII case.
pub(crate) fn matches(value: &str, prefix: &str) -> bool {
    value
        .get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_the_values_and_counts_every_match() {
        let all = info((0..150).map(|i| i.to_string()));
        assert_eq!(all.values.len(), 100);
        assert_eq!(all.total, Some(150));
        assert_eq!(all.has_more, Some(true));
        let few = info(["a".to_owned()]);
        assert_eq!(few.values, ["a"]);
        assert_eq!(few.total, Some(1));
        assert_eq!(few.has_more, Some(false));
    }

    #[test]
    fn prefixes_ignore_case_and_respect_char_boundaries() {
        assert!(matches("Thorough", "th"));
        assert!(matches("anything", ""));
        assert!(!matches("quick", "th"));
        assert!(!matches("é", "\u{e9}x"));
        // A prefix that ends inside a multi-byte character matches nothing
        // rather than panicking.
        assert!(!matches("éa", "x"));
    }
}
