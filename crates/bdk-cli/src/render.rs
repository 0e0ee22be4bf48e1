//! The text forms of `bdk run`, `bdk call` and `bdk session` for people at
//! a terminal. Programs get the JSON these are drawn from (`--json`, or
//! any stdout that is not a terminal), unchanged.

use serde_json::Value;

/// What a command's result is, for its text form on a terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Render {
    /// `bdk run`: the reply, then a line about the turn.
    Run,
    /// `bdk call`: the tool's result, then a line about the call.
    Call,
    /// `bdk session`: what the session is and where it stands.
    Session,
}

/// The text form of a result `value` of `kind`. A refusal
/// (`{"ok": false, "error", "message"}`) is the same for every kind.
pub(crate) fn text(kind: Render, value: &Value) -> String {
    if value["ok"] == false
        && let Some(message) = value["message"].as_str()
    {
        let code = value["error"].as_str().unwrap_or("error");
        return format!("✗ {code}: {message}");
    }
    match kind {
        Render::Run => run(value),
        Render::Call => call(value),
        Render::Session => session(value),
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("")
}

/// `name (12 ms)` or `name ✗ (12 ms)` for each tool call.
fn tool_calls(v: &Value) -> Vec<String> {
    v["toolCalls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    let failed = if c["isError"] == true { " ✗" } else { "" };
                    format!(
                        "{}{failed} ({} ms)",
                        str_of(c, "name"),
                        c["durationMs"].as_u64().unwrap_or(0)
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn run(v: &Value) -> String {
    let mut out = String::new();
    let reply = str_of(v, "reply");
    if !reply.is_empty() {
        out.push_str(reply.trim_end());
        out.push_str("\n\n");
    }
    let mut facts = Vec::new();
    let status = str_of(v, "status");
    facts.push(if v["ok"] == true {
        format!("✓ {status}")
    } else {
        format!("✗ {status}")
    });
    let tools = tool_calls(v);
    if !tools.is_empty() {
        facts.push(tools.join(", "));
    }
    let usage = &v["usage"];
    if let (Some(i), Some(o)) = (
        usage["inputTokens"].as_u64(),
        usage["outputTokens"].as_u64(),
    ) {
        facts.push(format!("{i} → {o} tokens"));
    }
    if let Some(id) = v["sessionId"].as_str() {
        facts.push(id.to_owned());
    }
    out.push_str(&facts.join(" · "));
    if let Some(error) = v["error"].as_str().or_else(|| v["message"].as_str())
        && v["ok"] != true
    {
        out.push_str(&format!("\n{error}"));
    }
    if let Some(trace) = v["trace"].as_str() {
        out.push_str(&format!("\ntrace: {trace}"));
    }
    out
}

fn call(v: &Value) -> String {
    let result = match &v["result"] {
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    };
    let mark = if v["isError"] == true { "✗" } else { "✓" };
    format!(
        "{result}\n{mark} {} ({} ms)",
        str_of(v, "toolName"),
        v["durationMs"].as_u64().unwrap_or(0)
    )
}

fn session(v: &Value) -> String {
    let s = &v["session"];
    let mut out = format!(
        "{}  {}  {} session on {}  {} events",
        str_of(s, "id"),
        str_of(v, "status"),
        str_of(s, "mode"),
        str_of(s, "channel"),
        v["events"].as_u64().unwrap_or(0)
    );
    if let Some(title) = s["title"].as_str() {
        out.push_str(&format!("\ntitle: {title}"));
    }
    if let Some(at) = s["createdAt"].as_str() {
        out.push_str(&format!("\ncreated: {at}"));
    }
    if let Some(ws) = v["workspace"].as_str() {
        out.push_str(&format!("\nworkspace: {ws}"));
    }
    let t = &v["trajectory"];
    let tools = tool_calls(t);
    if !tools.is_empty() {
        out.push_str(&format!("\ntools: {}", tools.join(", ")));
    }
    let reply = str_of(t, "reply");
    if !reply.is_empty() {
        out.push_str(&format!("\nlast reply:\n{}", reply.trim_end()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_run_reads_as_its_reply_and_a_line_of_facts() {
        let v = json!({
            "ok": true, "status": "completed", "reply": "It is 12°C.\n",
            "sessionId": "ses_1", "trace": "/t.ndjson",
            "toolCalls": [{"name": "get_weather", "durationMs": 102, "isError": false}],
            "usage": {"inputTokens": 280, "outputTokens": 55}
        });
        assert_eq!(
            text(Render::Run, &v),
            "It is 12°C.\n\n✓ completed · get_weather (102 ms) · 280 → 55 tokens · ses_1\ntrace: /t.ndjson"
        );
        let refused = json!({"ok": false, "error": "unknown_tool", "message": "no tool `x`"});
        assert_eq!(text(Render::Call, &refused), "✗ unknown_tool: no tool `x`");
    }
}
