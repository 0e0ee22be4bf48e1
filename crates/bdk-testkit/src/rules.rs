//! Scripted-model rules the suites share, and the native tools they call.
//!
//! The rules are `agent/scripted.toml` text (see `bdk-models`' `scripted`
//! provider); put one in a folder with [`crate::AgentFolder::rules`].

use std::sync::Arc;

use bdk_core::tool::native::native_tool;
use bdk_core::tool::{Effect, Tool, ToolContext};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// `What's the weather in <City>?` calls [`lookup_tool`] with the city and
/// answers `It is <temp> degrees in <city>.` from its result, streamed in
/// 4-character chunks; any other message gets `fallback: <message>`.
pub const WEATHER: &str = r#"
[[rules]]
user_regex = "(?i)weather in (?P<city>[A-Za-z]+)"
reasoning = "I should look it up."
tool_calls = [{ name = "lookup", input = { city = "{{ captures.city }}" } }]

[[rules]]
tool_result = "lookup"
reply = "It is {{ result.temp }} degrees in {{ result.city }}."
chunk_chars = 4

[[rules]]
reply = "fallback: {{ user }}"
"#;

/// Every message gets `echo: <message>`.
pub const ECHO: &str = r#"
[[rules]]
reply = "echo: {{ user }}"
"#;

#[derive(Deserialize, JsonSchema)]
struct City {
    city: String,
}

/// `lookup` (a read): `{city}` -> `{city, temp: 21}`.
pub fn lookup_tool() -> Arc<dyn Tool> {
    Arc::new(
        native_tool(
            "lookup",
            "Looks up the weather of a city.",
            |c: City, _ctx: ToolContext| async move { Ok(json!({"city": c.city, "temp": 21})) },
        )
        .effect(Effect::Read),
    )
}
