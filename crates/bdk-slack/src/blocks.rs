//! Block Kit payloads for the pack's messages
//! (<https://api.slack.com/reference/block-kit/blocks>), and a check of what
//! Slack refuses with `invalid_blocks`.
//!
//! Every builder returns the `blocks` array of a message and stays within
//! Slack's limits whatever text it is given: text is escaped and cut with
//! `…`, never sent over a limit. [`validate`] states the limits once and the
//! tests hold every builder to them.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use crate::mrkdwn::{SECTION_LIMIT, escape, split};

/// The most blocks in one message.
pub const MAX_BLOCKS: usize = 50;

/// The most characters of a button's `value`.
pub const BUTTON_VALUE_LIMIT: usize = 2_000;

/// The most characters of an `action_id`, and of a `block_id`.
pub const ID_LIMIT: usize = 255;

/// The `block_id` of the approval card's buttons.
pub const APPROVAL_BLOCK_ID: &str = "bdk_approval";

/// The `action_id` of the Approve button.
pub const APPROVE_ACTION_ID: &str = "bdk_approve";

/// The `action_id` of the Deny button.
pub const DENY_ACTION_ID: &str = "bdk_deny";

/// The most characters of a button's label.
const BUTTON_TEXT_LIMIT: usize = 75;
/// The most characters of a section field and of a context element.
const FIELD_LIMIT: usize = 2_000;
/// A header block's text.
const HEADER_LIMIT: usize = 150;
/// A confirm dialog's title, text, and button labels.
const CONFIRM_TITLE_LIMIT: usize = 100;
const CONFIRM_TEXT_LIMIT: usize = 300;
const CONFIRM_BUTTON_LIMIT: usize = 30;
/// A tool name is cut to this in the card, so that it never crowds out the
/// summary (or the confirm dialog's text).
const TOOL_NAME_LIMIT: usize = 100;
/// What ends text that was cut.
const ELLIPSIS: char = '…';

/// The blocks of an approval card: a tool call parked until someone
/// approves or denies it.
///
/// A section names the tool and carries `summary` (plain text, escaped for
/// mrkdwn), a second shows `input_preview` as a code block (left out when
/// empty), and an `actions` block ([`APPROVAL_BLOCK_ID`]) holds Approve
/// ([`APPROVE_ACTION_ID`], `primary`) and Deny ([`DENY_ACTION_ID`],
/// `danger`, behind a confirm dialog). Text over a section's limit is cut
/// with `…`.
///
/// `approve_value` and `deny_value` come back in the interaction payload;
/// pass a short id (a parked call's id). Slack takes at most
/// [`BUTTON_VALUE_LIMIT`] characters: a longer value is cut to fit, so it
/// will match no call and the click does nothing.
pub fn approval_card(
    tool: &str,
    summary: &str,
    input_preview: &str,
    approve_value: &str,
    deny_value: &str,
) -> Value {
    let tool = tool_name(tool);
    let head = format!(
        "*Approval needed*: the agent wants to run `{}`",
        escape(&tool)
    );
    let summary = summary.trim();
    let text = if summary.is_empty() {
        head
    } else {
        let room = SECTION_LIMIT.saturating_sub(head.chars().count() + 1);
        format!("{head}\n{}", escape_within(summary, room))
    };
    let mut blocks = vec![section(&text)];
    let preview = input_preview.trim_end();
    if !preview.trim().is_empty() {
        const FENCES: usize = "```\n\n```".len();
        let body = escape_within(&break_fences(preview), SECTION_LIMIT - FENCES);
        blocks.push(section(&format!("```\n{body}\n```")));
    }
    blocks.push(json!({
        "type": "actions",
        "block_id": APPROVAL_BLOCK_ID,
        "elements": [
            {
                "type": "button",
                "action_id": APPROVE_ACTION_ID,
                "text": plain_text("Approve"),
                "style": "primary",
                "value": clip(approve_value, BUTTON_VALUE_LIMIT),
            },
            {
                "type": "button",
                "action_id": DENY_ACTION_ID,
                "text": plain_text("Deny"),
                "style": "danger",
                "value": clip(deny_value, BUTTON_VALUE_LIMIT),
                "confirm": {
                    "title": plain_text("Deny this call?"),
                    "text": plain_text(&format!(
                        "The agent will not run {tool}; it is told the call was denied."
                    )),
                    "confirm": plain_text("Deny"),
                    "deny": plain_text("Cancel"),
                    "style": "danger",
                },
            },
        ],
    }));
    Value::Array(blocks)
}

/// The blocks that replace an approval card once it is decided: one line,
/// `✅ Approved by <@U…>` or `❌ Denied by <@U…>`, the tool and the reason
/// if given, and no buttons.
///
/// `by_user` is a Slack user id (`U123`, written as a mention); anything
/// else is shown as plain text.
pub fn approval_outcome(tool: &str, approved: bool, by_user: &str, reason: Option<&str>) -> Value {
    let (mark, verb) = if approved {
        ("✅", "Approved")
    } else {
        ("❌", "Denied")
    };
    let mut text = format!(
        "{mark} {verb} by {}: `{}`",
        mention(by_user),
        escape(&tool_name(tool))
    );
    if let Some(reason) = reason.map(str::trim).filter(|r| !r.is_empty()) {
        let head = "\n_Reason:_ ";
        let room = SECTION_LIMIT.saturating_sub(text.chars().count() + head.chars().count());
        let reason = reason.split_whitespace().collect::<Vec<_>>().join(" ");
        text.push_str(head);
        text.push_str(&escape_within(&reason, room));
    }
    json!([section(&text)])
}

/// A message's `mrkdwn` as section blocks, one per [`SECTION_LIMIT`] part
/// (cut by [`split`]). Past [`MAX_BLOCKS`] the last section says how much
/// was left out. Empty text gives no blocks (Slack refuses an empty
/// section).
pub fn text_blocks(mrkdwn: &str) -> Value {
    let parts = split(mrkdwn, SECTION_LIMIT);
    if parts.len() <= MAX_BLOCKS {
        return Value::Array(parts.iter().map(|part| section(part)).collect());
    }
    let kept = MAX_BLOCKS - 1;
    let left_out: usize = parts.iter().skip(kept).map(|p| p.chars().count()).sum();
    let mut blocks: Vec<Value> = parts.iter().take(kept).map(|part| section(part)).collect();
    blocks.push(section(&format!(
        "_{ELLIPSIS} {left_out} more characters not shown (Slack shows at most {MAX_BLOCKS} blocks)_"
    )));
    Value::Array(blocks)
}

/// Checks `blocks` against the limits Slack enforces with `invalid_blocks`:
/// an array of at most [`MAX_BLOCKS`] objects, each with a string `type`,
/// unique `block_id`s of at most [`ID_LIMIT`] characters, text objects of
/// the right kind within their limits (section text 3,000, fields 2,000,
/// button labels 75, confirm dialogs 100/300/30), buttons with a `value`
/// of at most [`BUTTON_VALUE_LIMIT`] and an `action_id` of at most
/// [`ID_LIMIT`], unique in their block. Block types it does not know get
/// only the common checks. The error names the first problem and where.
pub fn validate(blocks: &Value) -> Result<(), String> {
    let blocks = blocks.as_array().ok_or("blocks: not an array")?;
    if blocks.len() > MAX_BLOCKS {
        return Err(format!(
            "blocks: {} blocks, more than {MAX_BLOCKS}",
            blocks.len()
        ));
    }
    let mut block_ids = HashSet::new();
    for (i, block) in blocks.iter().enumerate() {
        let at = format!("blocks[{i}]");
        let block = block
            .as_object()
            .ok_or_else(|| format!("{at}: not an object"))?;
        let kind = block
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{at}: no string `type`"))?;
        if let Some(id) = block.get("block_id") {
            let id = id_string(id, &format!("{at}.block_id"))?;
            if !block_ids.insert(id) {
                return Err(format!("{at}.block_id: {id:?} used twice"));
            }
        }
        match kind {
            "section" => validate_section(block, &at)?,
            "actions" => validate_elements(block, &at, 25)?,
            "context" => validate_context(block, &at)?,
            "header" => {
                let text = block
                    .get("text")
                    .ok_or_else(|| format!("{at}: header without text"))?;
                text_object(text, &format!("{at}.text"), HEADER_LIMIT, true)?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn validate_section(block: &Map<String, Value>, at: &str) -> Result<(), String> {
    let text = block.get("text");
    let fields = block.get("fields");
    if text.is_none() && fields.is_none() {
        return Err(format!("{at}: section without text or fields"));
    }
    if let Some(text) = text {
        text_object(text, &format!("{at}.text"), SECTION_LIMIT, false)?;
    }
    if let Some(fields) = fields {
        let fields = fields
            .as_array()
            .ok_or_else(|| format!("{at}.fields: not an array"))?;
        if fields.is_empty() || fields.len() > 10 {
            return Err(format!("{at}.fields: {} fields, not 1 to 10", fields.len()));
        }
        for (i, field) in fields.iter().enumerate() {
            text_object(field, &format!("{at}.fields[{i}]"), FIELD_LIMIT, false)?;
        }
    }
    if let Some(accessory) = block.get("accessory") {
        element(accessory, &format!("{at}.accessory"))?;
    }
    Ok(())
}

fn validate_context(block: &Map<String, Value>, at: &str) -> Result<(), String> {
    let elements = elements(block, at, 10)?;
    for (i, item) in elements.iter().enumerate() {
        let at = format!("{at}.elements[{i}]");
        match item.get("type").and_then(Value::as_str) {
            Some("image") => {}
            _ => text_object(item, &at, FIELD_LIMIT, false)?,
        }
    }
    Ok(())
}

fn validate_elements(block: &Map<String, Value>, at: &str, max: usize) -> Result<(), String> {
    let mut action_ids = HashSet::new();
    for (i, item) in elements(block, at, max)?.iter().enumerate() {
        let at = format!("{at}.elements[{i}]");
        if let Some(id) = element(item, &at)?
            && !action_ids.insert(id)
        {
            return Err(format!("{at}.action_id: {id:?} used twice in the block"));
        }
    }
    Ok(())
}

/// A block's `elements`: an array of 1 to `max` items.
fn elements<'a>(
    block: &'a Map<String, Value>,
    at: &str,
    max: usize,
) -> Result<&'a Vec<Value>, String> {
    let elements = block
        .get("elements")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{at}.elements: missing or not an array"))?;
    if elements.is_empty() || elements.len() > max {
        return Err(format!(
            "{at}.elements: {} elements, not 1 to {max}",
            elements.len()
        ));
    }
    Ok(elements)
}

/// An interactive element; its `action_id`, if any.
fn element<'a>(element: &'a Value, at: &str) -> Result<Option<&'a str>, String> {
    let object = element
        .as_object()
        .ok_or_else(|| format!("{at}: not an object"))?;
    let kind = object
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{at}: no string `type`"))?;
    let action_id = match object.get("action_id") {
        Some(id) => Some(id_string(id, &format!("{at}.action_id"))?),
        None => None,
    };
    if kind == "button" {
        let text = object
            .get("text")
            .ok_or_else(|| format!("{at}: button without text"))?;
        text_object(text, &format!("{at}.text"), BUTTON_TEXT_LIMIT, true)?;
        if let Some(value) = object.get("value") {
            let value = value
                .as_str()
                .ok_or_else(|| format!("{at}.value: not a string"))?;
            if value.chars().count() > BUTTON_VALUE_LIMIT {
                return Err(format!(
                    "{at}.value: longer than {BUTTON_VALUE_LIMIT} characters"
                ));
            }
        }
        if let Some(style) = object.get("style")
            && !matches!(style.as_str(), Some("primary" | "danger"))
        {
            return Err(format!("{at}.style: not \"primary\" or \"danger\""));
        }
        if let Some(confirm) = object.get("confirm") {
            confirm_object(confirm, &format!("{at}.confirm"))?;
        }
    }
    Ok(action_id)
}

fn confirm_object(confirm: &Value, at: &str) -> Result<(), String> {
    for (field, limit) in [
        ("title", CONFIRM_TITLE_LIMIT),
        ("text", CONFIRM_TEXT_LIMIT),
        ("confirm", CONFIRM_BUTTON_LIMIT),
        ("deny", CONFIRM_BUTTON_LIMIT),
    ] {
        let text = confirm
            .get(field)
            .ok_or_else(|| format!("{at}: no `{field}`"))?;
        text_object(text, &format!("{at}.{field}"), limit, field != "text")?;
    }
    if let Some(style) = confirm.get("style")
        && !matches!(style.as_str(), Some("primary" | "danger"))
    {
        return Err(format!("{at}.style: not \"primary\" or \"danger\""));
    }
    Ok(())
}

/// A text object: `plain_text` (or `mrkdwn` unless `plain_only`) with a
/// non-empty `text` of at most `limit` characters.
fn text_object(text: &Value, at: &str, limit: usize, plain_only: bool) -> Result<(), String> {
    let object = text
        .as_object()
        .ok_or_else(|| format!("{at}: not a text object"))?;
    let kind = object.get("type").and_then(Value::as_str);
    match kind {
        Some("plain_text") => {}
        Some("mrkdwn") if !plain_only => {}
        _ => {
            return Err(format!(
                "{at}.type: {kind:?} is not a text object type here"
            ));
        }
    }
    let body = object
        .get("text")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{at}.text: missing or not a string"))?;
    if body.is_empty() {
        return Err(format!("{at}.text: empty"));
    }
    if body.chars().count() > limit {
        return Err(format!("{at}.text: longer than {limit} characters"));
    }
    if object.contains_key("emoji") && kind != Some("plain_text") {
        return Err(format!("{at}.emoji: only plain_text takes it"));
    }
    if object.contains_key("verbatim") && kind != Some("mrkdwn") {
        return Err(format!("{at}.verbatim: only mrkdwn takes it"));
    }
    Ok(())
}

/// A `block_id` or `action_id`: a non-empty string of at most [`ID_LIMIT`]
/// characters.
fn id_string<'a>(id: &'a Value, at: &str) -> Result<&'a str, String> {
    let id = id.as_str().ok_or_else(|| format!("{at}: not a string"))?;
    if id.is_empty() || id.chars().count() > ID_LIMIT {
        return Err(format!("{at}: not 1 to {ID_LIMIT} characters"));
    }
    Ok(id)
}

fn section(mrkdwn: &str) -> Value {
    json!({ "type": "section", "text": { "type": "mrkdwn", "text": mrkdwn } })
}

fn plain_text(text: &str) -> Value {
    json!({ "type": "plain_text", "text": text, "emoji": true })
}

/// A tool name for one line of a card: whitespace collapsed, backticks
/// (which would end the code span) replaced, at most [`TOOL_NAME_LIMIT`]
/// characters, never empty.
fn tool_name(tool: &str) -> String {
    let name = tool
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('`', "'");
    let name = clip_with_ellipsis(&name, TOOL_NAME_LIMIT);
    if name.is_empty() {
        "?".to_owned()
    } else {
        name
    }
}

/// `<@U123>` for a Slack user id, else the name escaped.
fn mention(user: &str) -> String {
    let user = user.trim();
    let id = user
        .strip_prefix("<@")
        .and_then(|u| u.strip_suffix('>'))
        .unwrap_or(user);
    let is_id = (2..=32).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    if is_id {
        format!("<@{id}>")
    } else if user.is_empty() {
        "someone".to_owned()
    } else {
        escape(&clip_with_ellipsis(user, TOOL_NAME_LIMIT))
    }
}

/// `text` escaped, cut (with `…`) so the result is at most `limit`
/// characters; an entity is never split.
fn escape_within(text: &str, limit: usize) -> String {
    let escaped = escape(text);
    if escaped.chars().count() <= limit {
        return escaped;
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let piece = escape(c.encode_utf8(&mut [0; 4]));
        let len = piece.chars().count();
        if used + len + 1 > limit {
            break;
        }
        out.push_str(&piece);
        used += len;
    }
    if limit > 0 {
        out.push(ELLIPSIS);
    }
    out
}

/// The first `limit` characters of `text`.
fn clip(text: &str, limit: usize) -> String {
    text.chars().take(limit).collect()
}

/// `text`, or its first characters and `…` when longer than `limit`.
fn clip_with_ellipsis(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_owned();
    }
    let mut out = clip(text, limit.saturating_sub(1));
    out.push(ELLIPSIS);
    out
}

/// `text` with every run of three backticks broken by a zero-width space,
/// so a preview cannot close its code block early.
fn break_fences(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            if run == 2 {
                out.push('\u{200B}');
                run = 0;
            }
            run += 1;
        } else {
            run = 0;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn texts(blocks: &Value) -> Vec<&str> {
        blocks
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|b| b.pointer("/text/text").and_then(Value::as_str))
            .collect()
    }

    #[test]
    fn approval_card_has_the_summary_the_preview_and_two_buttons() {
        let card = approval_card(
            "shell",
            "Delete the build cache & rebuild",
            "{\"cmd\": \"rm -rf target/ && cargo build\"}",
            "approve:call_1",
            "deny:call_1",
        );
        validate(&card).unwrap();
        assert_eq!(
            texts(&card),
            [
                "*Approval needed*: the agent wants to run `shell`\nDelete the build cache &amp; rebuild",
                "```\n{\"cmd\": \"rm -rf target/ &amp;&amp; cargo build\"}\n```",
            ]
        );
        let actions = &card[2];
        assert_eq!(actions["type"], "actions");
        assert_eq!(actions["block_id"], APPROVAL_BLOCK_ID);
        let approve = &actions["elements"][0];
        assert_eq!(approve["action_id"], APPROVE_ACTION_ID);
        assert_eq!(approve["style"], "primary");
        assert_eq!(approve["value"], "approve:call_1");
        assert_eq!(
            approve["text"],
            json!({"type": "plain_text", "text": "Approve", "emoji": true})
        );
        let deny = &actions["elements"][1];
        assert_eq!(deny["action_id"], DENY_ACTION_ID);
        assert_eq!(deny["style"], "danger");
        assert_eq!(deny["value"], "deny:call_1");
        assert_eq!(deny["confirm"]["title"]["text"], "Deny this call?");
        assert_eq!(deny["confirm"]["confirm"]["text"], "Deny");
        assert_eq!(deny["confirm"]["deny"]["text"], "Cancel");
    }

    #[test]
    fn approval_card_without_summary_or_preview() {
        let card = approval_card("read_file", "  ", "\n", "a", "d");
        validate(&card).unwrap();
        assert_eq!(
            texts(&card),
            ["*Approval needed*: the agent wants to run `read_file`"]
        );
        assert_eq!(card.as_array().unwrap().len(), 2);
    }

    #[test]
    fn approval_card_stays_within_limits_for_huge_and_hostile_input() {
        let huge = "<&>`*".repeat(20_000);
        let value = "v".repeat(BUTTON_VALUE_LIMIT + 500);
        let card = approval_card(&huge, &huge, &huge, &value, &value);
        validate(&card).unwrap();
        let shown = texts(&card);
        assert!(shown[0].ends_with(ELLIPSIS));
        assert!(shown[1].starts_with("```\n") && shown[1].ends_with("…\n```"));
        assert_eq!(
            shown[1].matches("```").count(),
            2,
            "the preview's backticks cannot close the block"
        );
        assert_eq!(
            card[2]["elements"][0]["value"]
                .as_str()
                .unwrap()
                .chars()
                .count(),
            BUTTON_VALUE_LIMIT
        );
        let at_limit = "v".repeat(BUTTON_VALUE_LIMIT);
        let card = approval_card("", "", "", &at_limit, &at_limit);
        validate(&card).unwrap();
        assert_eq!(card[1]["elements"][1]["value"], at_limit.as_str());
        assert_eq!(
            texts(&card),
            ["*Approval needed*: the agent wants to run `?`"]
        );
    }

    #[test]
    fn approval_outcome_names_who_decided() {
        let check = |blocks: Value, expected: &str| {
            validate(&blocks).unwrap();
            assert_eq!(texts(&blocks), [expected]);
            assert!(
                blocks
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|b| b["type"] != "actions")
            );
        };
        check(
            approval_outcome("shell", true, "U123", None),
            "✅ Approved by <@U123>: `shell`",
        );
        check(
            approval_outcome("shell", false, "<@W9>", Some("too risky\n& slow")),
            "❌ Denied by <@W9>: `shell`\n_Reason:_ too risky &amp; slow",
        );
        check(
            approval_outcome("x", false, "ann <b>", Some("  ")),
            "❌ Denied by ann &lt;b&gt;: `x`",
        );
        check(
            approval_outcome("x`y", true, "", None),
            "✅ Approved by someone: `x'y`",
        );
        let huge = "<".repeat(10_000);
        let blocks = approval_outcome(&huge, false, &huge, Some(&huge));
        validate(&blocks).unwrap();
        assert!(texts(&blocks)[0].ends_with(ELLIPSIS));
    }

    #[test]
    fn text_blocks_one_section_per_part() {
        assert_eq!(text_blocks(""), json!([]));
        let blocks = text_blocks("*hello* <@U1>");
        validate(&blocks).unwrap();
        assert_eq!(
            blocks,
            json!([{"type": "section", "text": {"type": "mrkdwn", "text": "*hello* <@U1>"}}])
        );
        let long = "word ".repeat(2_000);
        let blocks = text_blocks(&long);
        validate(&blocks).unwrap();
        assert_eq!(blocks.as_array().unwrap().len(), 4);
    }

    #[test]
    fn text_blocks_stops_at_fifty_blocks() {
        let huge = "word ".repeat(100_000);
        let blocks = text_blocks(&huge);
        validate(&blocks).unwrap();
        let blocks = blocks.as_array().unwrap();
        assert_eq!(blocks.len(), MAX_BLOCKS);
        let last = blocks[MAX_BLOCKS - 1]["text"]["text"].as_str().unwrap();
        assert!(last.contains("more characters not shown"), "{last}");
    }

    #[test]
    fn text_blocks_of_converted_markdown_validate() {
        let markdown = "# Title\n\n```\n".to_owned()
            + &"let x = a < b && c;\n".repeat(1_000)
            + "```\n\n"
            + &"- item\n".repeat(500);
        let blocks = text_blocks(&crate::mrkdwn::to_mrkdwn(&markdown));
        validate(&blocks).unwrap();
        for text in texts(&blocks) {
            assert_eq!(text.matches("```").count() % 2, 0);
        }
    }

    #[test]
    fn validate_refuses_what_slack_refuses() {
        let section =
            |text: &str| json!({"type": "section", "text": {"type": "mrkdwn", "text": text}});
        let button = |extra: Value| {
            let mut button = json!({"type": "button", "text": {"type": "plain_text", "text": "Go"}, "action_id": "go"});
            for (k, v) in extra.as_object().unwrap() {
                button[k] = v.clone();
            }
            json!([{"type": "actions", "elements": [button]}])
        };
        let cases = [
            (json!({}), "not an array"),
            (Value::Array(vec![section("x"); 51]), "more than 50"),
            (json!([1]), "not an object"),
            (json!([{"text": "x"}]), "no string `type`"),
            (json!([section(&"x".repeat(3_001))]), "longer than 3000"),
            (json!([section("")]), "empty"),
            (json!([{"type": "section"}]), "without text or fields"),
            (
                json!([{"type": "section", "text": {"type": "markdown", "text": "x"}}]),
                "not a text object type",
            ),
            (
                json!([{"type": "divider", "block_id": "b".repeat(256)}]),
                "block_id",
            ),
            (
                json!([{"type": "divider", "block_id": "b"}, {"type": "divider", "block_id": "b"}]),
                "used twice",
            ),
            (json!([{"type": "actions", "elements": []}]), "not 1 to 25"),
            (
                button(json!({"value": "v".repeat(2_001)})),
                "longer than 2000",
            ),
            (button(json!({"action_id": "a".repeat(256)})), "action_id"),
            (button(json!({"style": "green"})), "style"),
            (
                button(json!({"text": {"type": "mrkdwn", "text": "Go"}})),
                "text.type",
            ),
            (
                button(json!({"text": {"type": "plain_text", "text": "G".repeat(76)}})),
                "longer than 75",
            ),
            (
                button(json!({"confirm": {"title": {"type": "plain_text", "text": "t"}}})),
                "no `text`",
            ),
            (
                json!([{"type": "actions", "elements": [
                    {"type": "button", "text": {"type": "plain_text", "text": "a"}, "action_id": "x"},
                    {"type": "button", "text": {"type": "plain_text", "text": "b"}, "action_id": "x"},
                ]}]),
                "used twice",
            ),
            (
                json!([{"type": "section", "text": {"type": "mrkdwn", "text": "x", "emoji": true}}]),
                "emoji",
            ),
            (
                json!([{"type": "header", "text": {"type": "mrkdwn", "text": "x"}}]),
                "type",
            ),
            (
                json!([{"type": "context", "elements": [{"type": "mrkdwn", "text": ""}]}]),
                "empty",
            ),
        ];
        for (blocks, expected) in cases {
            let error = validate(&blocks).unwrap_err();
            assert!(
                error.contains(expected),
                "{blocks}: {error:?} does not mention {expected:?}"
            );
        }
        validate(&json!([])).unwrap();
        validate(&json!([section(&"x".repeat(3_000)), {"type": "divider"}, {"type": "image", "image_url": "u"}]))
            .unwrap();
    }

    #[test]
    fn escape_within_never_splits_an_entity() {
        assert_eq!(escape_within("a&b", 10), "a&amp;b");
        assert_eq!(escape_within("a&b", 6), "a…");
        assert_eq!(escape_within("a&bc", 7), "a&amp;…");
        assert_eq!(escape_within("abc", 0), "");
    }

    #[test]
    fn break_fences_leaves_no_three_backticks() {
        for n in 0..10 {
            let text = "`".repeat(n);
            assert!(!break_fences(&text).contains("```"));
            assert_eq!(break_fences(&text).replace('\u{200B}', ""), text);
        }
    }
}
