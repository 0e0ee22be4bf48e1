//! The agent's skills as MCP prompts: `prompts/list` names each skill with
//! its description and declared arguments, `prompts/get` answers one user
//! message holding the skill's body with the arguments filled in, then one
//! per attached file (an image as image content, anything else as an
//! embedded resource under `bdk://skills/<skill>/<path>`), and completion
//! offers an argument's declared `values`.
//!
//! The placeholder syntax is `{{name}}` (spaces inside the braces are
//! allowed). Only declared arguments are replaced, in one pass, so a value
//! that contains braces is inserted as it is and any other `{{…}}` in the
//! body stays as written.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bdk_core::project::Skill;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use rmcp::ErrorData;
use rmcp::model::{
    CompletionInfo, ContentBlock, GetPromptResult, JsonObject, Prompt, PromptArgument,
    PromptMessage, Role,
};
use serde_json::Value;

use super::completion;
use super::content;

/// What the URI of an attachment keeps unencoded in each path segment:
/// RFC 3986's unreserved characters.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A placeholder longer than this (between the braces) is not one: an
/// argument name is at most 64 bytes, plus some spaces.
const MAX_PLACEHOLDER: usize = 80;

/// How much of a name from outside an error message repeats.
const ECHO_CHARS: usize = 80;

/// The largest filled-in prompt served: a value repeated by many
/// placeholders must not turn one request into a huge answer.
pub(crate) const MAX_PROMPT_BYTES: usize = 4 * 1024 * 1024;

/// Every skill as a prompt.
pub(crate) fn list(skills: &[Skill]) -> Vec<Prompt> {
    skills.iter().map(prompt).collect()
}

fn prompt(skill: &Skill) -> Prompt {
    let arguments = (!skill.arguments.is_empty()).then(|| {
        skill
            .arguments
            .iter()
            .map(|arg| {
                let mut out = PromptArgument::new(arg.name.clone()).with_required(arg.required);
                if let Some(description) = &arg.description {
                    out = out.with_description(description.clone());
                }
                out
            })
            .collect()
    });
    Prompt::new(
        skill.name.clone(),
        Some(skill.description.clone()),
        arguments,
    )
}

/// `prompts/get`: the skill's body, arguments substituted, as one user
/// message. An unknown prompt, an undeclared or non-string argument and a
/// missing required one are invalid-params errors.
pub(crate) fn get(
    skills: &[Skill],
    name: &str,
    arguments: Option<&JsonObject>,
) -> Result<GetPromptResult, ErrorData> {
    let skill = find(skills, name)?;
    let mut given: BTreeMap<&str, &str> = BTreeMap::new();
    for (key, value) in arguments.into_iter().flatten() {
        if !skill.arguments.iter().any(|a| &a.name == key) {
            return Err(ErrorData::invalid_params(
                format!(
                    "prompt `{}` has no argument `{}` ({})",
                    skill.name,
                    echo(key),
                    takes(skill)
                ),
                None,
            ));
        }
        let Value::String(value) = value else {
            return Err(ErrorData::invalid_params(
                format!(
                    "argument `{key}` of prompt `{}` must be a string",
                    skill.name
                ),
                None,
            ));
        };
        given.insert(key.as_str(), value.as_str());
    }
    let missing: Vec<&str> = skill
        .arguments
        .iter()
        .filter(|a| {
            a.required
                && given
                    .get(a.name.as_str())
                    .is_none_or(|v| v.trim().is_empty())
        })
        .map(|a| a.name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(ErrorData::invalid_params(
            format!(
                "prompt `{}` needs the argument{} `{}`",
                skill.name,
                if missing.len() == 1 { "" } else { "s" },
                missing.join("`, `")
            ),
            None,
        ));
    }
    // Optional arguments left out become empty text.
    let values: BTreeMap<&str, &str> = skill
        .arguments
        .iter()
        .map(|a| {
            let name = a.name.as_str();
            (name, given.get(name).copied().unwrap_or(""))
        })
        .collect();
    let text = substitute(&skill.body, &values, MAX_PROMPT_BYTES).ok_or_else(|| {
        ErrorData::invalid_params(
            format!(
                "prompt `{}` filled in with these values is larger than {} MiB",
                skill.name,
                MAX_PROMPT_BYTES / (1024 * 1024)
            ),
            None,
        )
    })?;
    let mut messages = vec![PromptMessage::new_text(Role::User, text)];
    messages.extend(attachments(skill));
    Ok(GetPromptResult::new(messages).with_description(skill.description.clone()))
}

/// One user message per attached file, in the order the skill lists them:
/// images (`image/*`) as image content, other files as embedded resources,
/// text or base64 by their media type. Discovery checked that each names
/// one of the skill's files and that together they fit a prompt.
fn attachments(skill: &Skill) -> Vec<PromptMessage> {
    skill
        .attachments
        .iter()
        .filter_map(|rel| {
            let bytes = skill.files.get(rel)?;
            let mime = content::guess_mime(rel, bytes);
            let block = if content::essence(&mime).starts_with("image/") {
                ContentBlock::image(STANDARD.encode(bytes), mime)
            } else {
                let uri = attachment_uri(&skill.name, rel);
                ContentBlock::resource(content::contents(&uri, &mime, bytes.clone()))
            };
            Some(PromptMessage::new(Role::User, block))
        })
        .collect()
}

/// `bdk://skills/<skill>/<path>`, each segment of the path percent-encoded.
pub(crate) fn attachment_uri(skill: &str, rel: &str) -> String {
    let path: Vec<String> = rel
        .split('/')
        .map(|seg| utf8_percent_encode(seg, SEGMENT).to_string())
        .collect();
    format!("bdk://skills/{skill}/{}", path.join("/"))
}

/// Completion of a prompt argument: its declared `values` that start with
/// `prefix`, ignoring case.
pub(crate) fn complete(
    skills: &[Skill],
    name: &str,
    argument: &str,
    prefix: &str,
) -> Result<CompletionInfo, ErrorData> {
    let skill = find(skills, name)?;
    let Some(declared) = skill.arguments.iter().find(|a| a.name == argument) else {
        return Err(ErrorData::invalid_params(
            format!(
                "prompt `{}` has no argument `{}` ({})",
                skill.name,
                echo(argument),
                takes(skill)
            ),
            None,
        ));
    };
    Ok(completion::info(
        declared
            .values
            .iter()
            .filter(|v| completion::matches(v, prefix))
            .cloned(),
    ))
}

fn find<'a>(skills: &'a [Skill], name: &str) -> Result<&'a Skill, ErrorData> {
    skills.iter().find(|s| s.name == name).ok_or_else(|| {
        ErrorData::invalid_params(
            format!(
                "unknown prompt `{}`; prompts/list names the agent's skills",
                echo(name)
            ),
            None,
        )
    })
}

/// "it takes a, b" or "it takes no arguments", for error messages.
fn takes(skill: &Skill) -> String {
    if skill.arguments.is_empty() {
        return "it takes no arguments".to_owned();
    }
    let names: Vec<&str> = skill.arguments.iter().map(|a| a.name.as_str()).collect();
    format!("it takes {}", names.join(", "))
}

/// A name from outside, shortened for a message.
fn echo(raw: &str) -> String {
    let mut out: String = raw.chars().take(ECHO_CHARS).collect();
    if out.len() < raw.len() {
        out.push('…');
    }
    out
}

/// Replaces each `{{name}}` (or `{{ name }}`) whose name is a key of
/// `values`; everything else is copied as written. `None` once the text
/// would grow past `limit` bytes.
pub(crate) fn substitute(
    body: &str,
    values: &BTreeMap<&str, &str>,
    limit: usize,
) -> Option<String> {
    let mut out = String::with_capacity(body.len().min(limit));
    let mut rest = body;
    while let Some(open) = rest.find("{{") {
        if out.len() > limit {
            return None;
        }
        let after = &rest[open + 2..];
        let close = after
            .as_bytes()
            .windows(2)
            .take(MAX_PLACEHOLDER)
            .position(|w| w == b"}}");
        // `close` is the byte index of an ASCII `}`, so a char boundary.
        let replaced = close.and_then(|close| {
            values
                .get(after[..close].trim())
                .map(|value| (value, close))
        });
        match replaced {
            Some((value, close)) => {
                out.push_str(&rest[..open]);
                out.push_str(value);
                rest = &after[close + 2..];
            }
            None => {
                out.push_str(&rest[..open + 2]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    (out.len() <= limit).then_some(out)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use bdk_core::project::{SkillArgument, SkillForm};
    use serde_json::json;

    use super::*;

    fn skill(body: &str, arguments: Vec<SkillArgument>) -> Skill {
        Skill {
            name: "review".to_owned(),
            description: "Use when a pull request needs a review.".to_owned(),
            body: body.to_owned(),
            form: SkillForm::Flat,
            path: PathBuf::from("skills/review.md"),
            files: BTreeMap::new(),
            arguments,
            attachments: Vec::new(),
        }
    }

    fn arg(name: &str, required: bool, values: &[&str]) -> SkillArgument {
        SkillArgument {
            name: name.to_owned(),
            description: Some(format!("The {name}.")),
            required,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        }
    }

    fn review() -> Skill {
        skill(
            "Review PR {{pr}} with a {{ depth }} pass. Keep {{other}} and {{ pr }}.",
            vec![
                arg("pr", true, &[]),
                arg("depth", false, &["quick", "Thorough"]),
            ],
        )
    }

    fn args(value: serde_json::Value) -> JsonObject {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    fn text(result: &GetPromptResult) -> String {
        let wire = serde_json::to_value(result).unwrap();
        assert_eq!(wire["messages"].as_array().unwrap().len(), 1, "{wire}");
        assert_eq!(wire["messages"][0]["role"], "user", "{wire}");
        wire["messages"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn substitutes_declared_placeholders_only() {
        let values = BTreeMap::from([("pr", "42"), ("depth", "")]);
        let cases = [
            ("{{pr}}", "42"),
            ("{{ pr }}", "42"),
            ("a{{pr}}b{{pr}}c", "a42b42c"),
            ("{{depth}}!", "!"),
            ("{{other}} {{pr}}", "{{other}} 42"),
            ("{{pr", "{{pr"),
            ("{{{pr}}}", "{{{pr}}}"),
            ("}}{{", "}}{{"),
            ("{{\npr\n}}", "42"),
            ("é{{pr}}ü", "é42ü"),
            ("", ""),
        ];
        for (body, want) in cases {
            assert_eq!(
                substitute(body, &values, 1000).as_deref(),
                Some(want),
                "{body:?}"
            );
        }
        // One pass: a value is never expanded again.
        let tricky = BTreeMap::from([("a", "{{b}}"), ("b", "B")]);
        assert_eq!(
            substitute("{{a}} {{b}}", &tricky, 1000).as_deref(),
            Some("{{b}} B")
        );
        // A brace run with no close nearby is copied, not scanned forever.
        let long = format!("{{{{{}", "x".repeat(10_000));
        assert_eq!(substitute(&long, &values, 100_000), Some(long));
        // A value repeated by many placeholders stops at the limit.
        let big = "v".repeat(1000);
        let many = BTreeMap::from([("pr", big.as_str())]);
        assert_eq!(substitute(&"{{pr}}".repeat(100), &many, 10_000), None);
        assert!(substitute(&"{{pr}}".repeat(10), &many, 10_000).is_some());
    }

    #[test]
    fn get_fills_in_arguments_and_leaves_optional_ones_empty() {
        let skills = [review()];
        let result = get(
            &skills,
            "review",
            Some(&args(json!({"pr": "42", "depth": "quick"}))),
        )
        .unwrap();
        assert_eq!(
            text(&result),
            "Review PR 42 with a quick pass. Keep {{other}} and 42."
        );
        assert_eq!(
            result.description.as_deref(),
            Some("Use when a pull request needs a review.")
        );
        let result = get(&skills, "review", Some(&args(json!({"pr": "7"})))).unwrap();
        assert_eq!(
            text(&result),
            "Review PR 7 with a  pass. Keep {{other}} and 7."
        );
    }

    #[test]
    fn get_refuses_bad_requests_as_invalid_params() {
        let skills = [review(), {
            let mut plain = skill("Plain {{x}}.", vec![]);
            plain.name = "plain".to_owned();
            plain
        }];
        let cases = [
            ("review", None, "needs the argument `pr`"),
            (
                "review",
                Some(json!({"pr": "  "})),
                "needs the argument `pr`",
            ),
            (
                "review",
                Some(json!({"depth": "quick"})),
                "needs the argument `pr`",
            ),
            (
                "review",
                Some(json!({"pr": 42})),
                "argument `pr` of prompt `review` must be a string",
            ),
            (
                "review",
                Some(json!({"pr": "1", "nope": "x"})),
                "has no argument `nope` (it takes pr, depth)",
            ),
            ("plain", Some(json!({"x": "1"})), "it takes no arguments"),
            ("missing", None, "unknown prompt `missing`"),
        ];
        for (name, arguments, message) in cases {
            let arguments = arguments.map(args);
            let err = get(&skills, name, arguments.as_ref()).unwrap_err();
            assert_eq!(err.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{name}");
            assert!(err.message.contains(message), "{name}: {}", err.message);
        }
        // A skill without arguments is served as written.
        let plain = get(&skills, "plain", None).unwrap();
        assert_eq!(text(&plain), "Plain {{x}}.");
        let huge = "n".repeat(10_000);
        let err = get(&skills, &huge, None).unwrap_err();
        assert!(err.message.len() < 200, "{}", err.message);
    }

    #[test]
    fn prompts_list_their_arguments() {
        let prompts = list(&[review()]);
        let wire = serde_json::to_value(&prompts).unwrap();
        assert_eq!(wire[0]["name"], "review");
        assert_eq!(
            wire[0]["description"],
            "Use when a pull request needs a review."
        );
        assert_eq!(
            wire[0]["arguments"],
            json!([
                {"name": "pr", "description": "The pr.", "required": true},
                {"name": "depth", "description": "The depth.", "required": false}
            ])
        );
        let plain = serde_json::to_value(list(&[skill("x", vec![])])).unwrap();
        assert!(plain[0].get("arguments").is_none(), "{plain}");
    }

    #[test]
    fn attachments_follow_the_text_as_images_and_embedded_resources() {
        let mut s = skill("Look at {{what}}.", vec![arg("what", false, &[])]);
        s.form = SkillForm::Packaged;
        s.files = BTreeMap::from([
            ("diagram.png".to_owned(), vec![0x89, b'P', b'N', b'G']),
            ("notes/step one.md".to_owned(), b"1. Look\n".to_vec()),
            ("data.bin".to_owned(), vec![0xff, 0x00]),
            ("unlisted.txt".to_owned(), b"not attached".to_vec()),
        ]);
        s.attachments = vec![
            "notes/step one.md".to_owned(),
            "diagram.png".to_owned(),
            "data.bin".to_owned(),
        ];
        let result = get(&[s], "review", Some(&args(json!({"what": "it"})))).unwrap();
        let wire = serde_json::to_value(&result).unwrap();
        assert_eq!(
            wire["messages"],
            json!([
                {"role": "user", "content": {"type": "text", "text": "Look at it."}},
                {"role": "user", "content": {"type": "resource", "resource": {
                    "uri": "bdk://skills/review/notes/step%20one.md",
                    "mimeType": "text/markdown",
                    "text": "1. Look\n"}}},
                {"role": "user", "content": {"type": "image", "data": "iVBORw==",
                                             "mimeType": "image/png"}},
                {"role": "user", "content": {"type": "resource", "resource": {
                    "uri": "bdk://skills/review/data.bin",
                    "mimeType": "application/octet-stream",
                    "blob": "/wA="}}},
            ])
        );
        assert_eq!(
            attachment_uri("s", "a/b c/%2e.md"),
            "bdk://skills/s/a/b%20c/%252e.md"
        );
    }

    #[test]
    fn completion_offers_declared_values_by_prefix() {
        let skills = [review()];
        assert_eq!(
            complete(&skills, "review", "depth", "th").unwrap().values,
            ["Thorough"]
        );
        assert_eq!(
            complete(&skills, "review", "depth", "").unwrap().values,
            ["quick", "Thorough"]
        );
        assert!(
            complete(&skills, "review", "pr", "")
                .unwrap()
                .values
                .is_empty()
        );
        let err = complete(&skills, "review", "nope", "").unwrap_err();
        assert!(
            err.message.contains("has no argument `nope`"),
            "{}",
            err.message
        );
        let err = complete(&skills, "nope", "pr", "").unwrap_err();
        assert!(err.message.contains("unknown prompt"), "{}", err.message);
    }
}
