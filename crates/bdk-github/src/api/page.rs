//! Pagination: the `Link` header GitHub sends with list endpoints, and the
//! items of one page.

use serde_json::Value;

use super::ApiError;

/// The URL of the `rel` link in a `Link` header value
/// (`<https://...&page=2>; rel="next", <...>; rel="last"`).
pub(crate) fn link(header: &str, rel: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        let names = params.split(';').find_map(|param| {
            let (key, value) = param.split_once('=')?;
            (key.trim() == "rel").then(|| value.trim().trim_matches('"'))
        })?;
        // `rel` may hold several space-separated relation types.
        names
            .split_ascii_whitespace()
            .any(|name| name == rel)
            .then(|| target.to_owned())
    })
}

/// The items of one page: the body itself when it is an array, or the one
/// array inside the object wrappers some list endpoints use
/// (`{"total_count": 3, "items": [...]}`, `{"workflow_runs": [...]}`).
pub(crate) fn items(body: Value) -> Result<Vec<Value>, ApiError> {
    match body {
        Value::Array(items) => Ok(items),
        Value::Object(fields) => {
            let mut arrays = fields.into_iter().filter_map(|(_, value)| match value {
                Value::Array(items) => Some(items),
                _ => None,
            });
            match (arrays.next(), arrays.next()) {
                (Some(items), None) => Ok(items),
                _ => Err(ApiError::Decode(
                    "a list page is an object without exactly one array in it".into(),
                )),
            }
        }
        other => Err(ApiError::Decode(format!(
            "a list page is {}, not an array",
            kind(&other)
        ))),
    }
}

/// Adds `per_page=100` (the largest page GitHub serves) unless the caller
/// chose a page size.
pub(crate) fn with_per_page(path: &str) -> String {
    let query = path.split_once('?').map(|(_, query)| query).unwrap_or("");
    if query.split('&').any(|pair| pair.starts_with("per_page=")) {
        return path.to_owned();
    }
    let separator = if path.contains('?') { '&' } else { '?' };
    format!("{path}{separator}per_page=100")
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn link_finds_the_relation() {
        let header = r#"<https://api.github.com/repositories/1/pulls/2/files?per_page=2&page=2>; rel="next", <https://api.github.com/repositories/1/pulls/2/files?per_page=2&page=5>; rel="last""#;
        assert_eq!(
            link(header, "next").as_deref(),
            Some("https://api.github.com/repositories/1/pulls/2/files?per_page=2&page=2")
        );
        assert!(link(header, "last").unwrap().ends_with("page=5"));
        assert_eq!(link(header, "prev"), None);
        assert_eq!(link("garbage", "next"), None);
        assert_eq!(
            link(r#"<a>; rel="prev next""#, "next").as_deref(),
            Some("a")
        );
    }

    #[test]
    fn items_unwrap_arrays_and_wrapped_lists() {
        assert_eq!(items(json!([1, 2])).unwrap(), vec![json!(1), json!(2)]);
        assert_eq!(
            items(json!({"total_count": 1, "incomplete_results": false, "items": [3]})).unwrap(),
            vec![json!(3)]
        );
        assert!(matches!(
            items(json!({"a": [1], "b": [2]})),
            Err(ApiError::Decode(_))
        ));
        assert!(matches!(items(json!("diff")), Err(ApiError::Decode(_))));
    }

    #[test]
    fn per_page_is_added_once() {
        assert_eq!(with_per_page("/a"), "/a?per_page=100");
        assert_eq!(with_per_page("/a?x=1"), "/a?x=1&per_page=100");
        assert_eq!(with_per_page("/a?per_page=5"), "/a?per_page=5");
    }
}
