//! The built-in `reminders_*` tools the model gets, and the `reminders.*`
//! host-endpoint operations subprocess tools use: both act on the calling
//! session's reminders only.

use std::sync::Arc;

use async_trait::async_trait;
use bdk_core::extension::{OperationCall, OperationError};
use bdk_core::tool::{Effect, Tool, ToolContext, ToolOutput, ToolSource, ToolSpec};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::records::{ReminderError, SessionLookup, SessionReminders};

/// Decodes a tool's input. The runtime validates input against the schema
/// first, but a tool is also callable directly, so it checks again.
fn parse_input<T: DeserializeOwned>(input: Value) -> Result<T, ToolOutput> {
    serde_json::from_value(input).map_err(|e| ToolOutput::error(format!("invalid input: {e}")))
}

/// `reminders_create`, `reminders_list`, `reminders_cancel`: the calling
/// session's reminders.
pub(crate) fn reminder_tools(lookup: &SessionLookup) -> Vec<Arc<dyn Tool>> {
    let schedule = json!({
        "delay": {"type": "string", "description": "Fire once after this long: a whole number and s, m, h or d (e.g. 10m, 2h)."},
        "every": {"type": "string", "description": "Fire repeatedly with this period (at least 1m)."},
        "cron": {"type": "string", "description": "Fire on this 5-field cron expression, in UTC."},
        "at": {"type": "string", "description": "Fire once at this RFC 3339 time with a zone, in the future."},
        "prompt": {"type": "string", "minLength": 1, "description": "The message you will receive when it fires."},
        "until": {"type": "string", "description": "The condition under which you should cancel a repeating reminder; shown with each fire."},
        "handler": {"type": "string", "minLength": 1, "description": "A server tool called with `args` instead of sending a prompt."},
        "args": {"type": "object", "description": "The handler's input."}
    });
    vec![
        Arc::new(ReminderTool {
            lookup: Arc::clone(lookup),
            op: ReminderOp::Create,
            spec: ToolSpec::server(
                "reminders_create",
                "Schedule a reminder in this conversation. Give exactly one of `delay`, `every`, \
                 `cron` or `at`, and a `prompt` (or a `handler` tool). When it fires, the prompt \
                 arrives as a new message in this conversation.",
                json!({
                    "type": "object",
                    "properties": schedule,
                    "additionalProperties": false
                }),
                Effect::Write,
            ),
        }),
        Arc::new(ReminderTool {
            lookup: Arc::clone(lookup),
            op: ReminderOp::List,
            spec: ToolSpec::server(
                "reminders_list",
                "List the reminders of this conversation with their status, fire count and next fire time.",
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
                Effect::Read,
            ),
        }),
        Arc::new(ReminderTool {
            lookup: Arc::clone(lookup),
            op: ReminderOp::Cancel,
            spec: ToolSpec::server(
                "reminders_cancel",
                "Cancel one of this conversation's armed reminders by id.",
                json!({
                    "type": "object",
                    "properties": {"id": {"type": "string", "minLength": 1, "description": "The reminder id (rem_...)."}},
                    "required": ["id"],
                    "additionalProperties": false
                }),
                Effect::Write,
            ),
        }),
    ]
}

#[derive(Clone, Copy)]
enum ReminderOp {
    Create,
    List,
    Cancel,
}

struct ReminderTool {
    lookup: SessionLookup,
    spec: ToolSpec,
    op: ReminderOp,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelInput {
    id: String,
}

#[async_trait]
impl Tool for ReminderTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn source(&self) -> ToolSource {
        ToolSource::Builtin
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> ToolOutput {
        let Some(reminders) = ctx.session.id.clone().and_then(|id| (self.lookup)(id)) else {
            return ToolOutput::error("reminders need a call bound to a chat session");
        };
        let result = match self.op {
            ReminderOp::Create => match parse_input(input) {
                Ok(req) => reminders.create(req).await.map(|r| json!(r)),
                Err(output) => return output,
            },
            ReminderOp::List => reminders.list().await.map(|all| json!({"reminders": all})),
            ReminderOp::Cancel => match parse_input::<CancelInput>(input) {
                Ok(input) => reminders.cancel(&input.id).await.map(|r| json!(r)),
                Err(output) => return output,
            },
        };
        match result {
            Ok(value) => ToolOutput::ok(value),
            Err(e) => ToolOutput::error(e.to_string()),
        }
    }
}

/// Decodes an operation's arguments.
fn parse<T: DeserializeOwned>(op: &str, args: Value) -> Result<T, OperationError> {
    serde_json::from_value(args)
        .map_err(|e| OperationError::InvalidArgs(format!("invalid args for `{op}`: {e}")))
}

/// Writes are refused in dry-run sessions, the same way write tools are
/// stubbed there.
fn writable(call: &OperationCall<'_>) -> Result<(), OperationError> {
    if call.ctx.dry_run {
        Err(OperationError::DryRun(call.op.to_owned()))
    } else {
        Ok(())
    }
}

/// `reminders.*`: the calling session's reminders, as the built-in
/// `reminders_*` tools see them.
pub(super) async fn operation(
    reminders: Option<Arc<dyn SessionReminders>>,
    call: OperationCall<'_>,
) -> Result<Value, OperationError> {
    let Some(reminders) = reminders else {
        return Err(OperationError::NoSession("reminders".to_owned()));
    };
    let op = call.op;
    let result = match op {
        "reminders.create" => {
            writable(&call)?;
            let req = parse(op, call.args)?;
            reminders.create(req).await.map(|r| json!(r))
        }
        "reminders.cancel" => {
            writable(&call)?;
            let a: CancelInput = parse(op, call.args)?;
            reminders.cancel(&a.id).await.map(|r| json!(r))
        }
        "reminders.list" => {
            let _: Map<String, Value> = parse(op, call.args)?;
            reminders.list().await.map(|all| json!({"reminders": all}))
        }
        other => {
            return Err(OperationError::Unavailable(format!(
                "`{other}` is not a reminders operation"
            )));
        }
    };
    result.map_err(|e| match e {
        ReminderError::Store(e) => OperationError::Storage(e),
        other => OperationError::InvalidArgs(other.to_string()),
    })
}
