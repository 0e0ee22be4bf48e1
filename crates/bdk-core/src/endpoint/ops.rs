//! The operations a program asks the host endpoint for, once its line is
//! read and its token resolved to a binding: the built-in `kv.*`,
//! `files.*`, `artifacts.*`, `session.*`, `mcp.*` and `report.*`
//! operations, and the ones extensions declare.

use std::sync::Arc;

use bdk_events::SessionId;
use bdk_store::{Store, StoreError};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::shared::{Binding, MAX_REPORT_BYTES, Shared};
use crate::extension::{HostExtension, OperationCall, OperationError};
use crate::tool::report::LOG_LEVELS;
use crate::tool::services::{SendArgs, SessionArgs, ToolCallArgs};
use crate::tool::{NewArtifact, ServiceError, ToolNote};

/// Why an operation failed; each kind is one error code on the wire.
#[derive(Debug, thiserror::Error)]
pub(super) enum OpError {
    #[error("{0}")]
    InvalidArgs(String),
    #[error("unknown op `{0}`; known ops: {1}")]
    UnknownOp(String, String),
    #[error("{0}")]
    Unavailable(&'static str),
    #[error("`{0}` needs a call bound to a session; this call has none")]
    NoSession(&'static str),
    #[error("`{0}` changes state and this call runs in a dry-run session")]
    DryRun(&'static str),
    #[error("{0}")]
    NotText(String),
    #[error(
        "kv namespace `{0}` belongs to the server, which keeps its own state there; tools and handlers may not read or change it, so use a namespace of your own"
    )]
    ReservedNamespace(String),
    #[error("host storage failed; the host log has the details")]
    Internal,
    /// An extension's refusal: its code and message.
    #[error("{1}")]
    Extension(&'static str, String),
    /// A host service's refusal: its code and message.
    #[error("{0}")]
    Service(ServiceError),
}

impl OpError {
    pub(super) fn code(&self) -> &'static str {
        match self {
            OpError::InvalidArgs(_) | OpError::NotText(_) => "invalid_args",
            OpError::UnknownOp(..) => "unknown_op",
            OpError::Unavailable(_) => "unavailable",
            OpError::NoSession(_) => "no_session",
            OpError::DryRun(_) => "dry_run",
            OpError::ReservedNamespace(_) => "reserved_namespace",
            OpError::Internal => "internal",
            OpError::Extension(code, _) => code,
            OpError::Service(e) => e.code,
        }
    }
}

/// The operations every endpoint answers; extensions add theirs.
const BUILTIN_OPS: &[&str] = &[
    "kv.get",
    "kv.put",
    "kv.delete",
    "kv.list",
    "files.get",
    "files.put",
    "files.delete",
    "files.list",
    "artifacts.tag",
    "session.info",
    "send",
    "session.get",
    "session.wait",
    "tools.call",
    "mcp.names",
    "mcp.list_tools",
    "mcp.call_tool",
    "report.progress",
    "report.log",
];

/// Every operation `shared` answers, for the `unknown_op` message.
fn known_ops(shared: &Shared) -> String {
    let extension_ops = shared.extensions.iter().flat_map(|e| e.operations().iter());
    BUILTIN_OPS
        .iter()
        .chain(extension_ops)
        .copied()
        .collect::<Vec<_>>()
        .join(", ")
}

/// An operation an extension declared, answered by it.
async fn extension_op(
    extension: &dyn HostExtension,
    binding: &Binding,
    op: &str,
    args: Value,
) -> Result<Value, OpError> {
    let call = OperationCall {
        op,
        args,
        ctx: &binding.ctx,
    };
    extension.operation(call).await.map_err(|e| {
        let code = match &e {
            OperationError::InvalidArgs(_) => "invalid_args",
            OperationError::NoSession(_) => "no_session",
            OperationError::DryRun(_) => "dry_run",
            OperationError::Unavailable(_) => "unavailable",
            OperationError::SessionNotFound(_) => "session_not_found",
            OperationError::Forbidden(_) => "forbidden",
            OperationError::Storage(_) => "internal",
        };
        match e {
            OperationError::Storage(e) => store_error(op, e),
            other => OpError::Extension(code, other.to_string()),
        }
    })
}

fn store_error(op: &str, e: StoreError) -> OpError {
    match e {
        StoreError::Invalid { .. } => OpError::InvalidArgs(e.to_string()),
        other => {
            tracing::warn!(op, error = %other, "host endpoint storage failed");
            OpError::Internal
        }
    }
}

fn parse<T: DeserializeOwned>(op: &str, args: Value) -> Result<T, OpError> {
    serde_json::from_value(args)
        .map_err(|e| OpError::InvalidArgs(format!("invalid args for `{op}`: {e}")))
}

/// A report over [`MAX_REPORT_BYTES`] is refused.
fn report_size(bytes: usize) -> Result<(), OpError> {
    if bytes > MAX_REPORT_BYTES {
        Err(OpError::InvalidArgs(format!(
            "a report holds at most {MAX_REPORT_BYTES} bytes, this one {bytes}; log large data to a file or an artifact"
        )))
    } else {
        Ok(())
    }
}

/// The server's own namespaces are refused to every `kv.*` operation, reads
/// included: a tool that could write them could squat a conversation key or
/// forge a dedupe record, and one that could read or list them would learn
/// other conversations' keys and delivery ids.
fn unreserved(shared: &Shared, namespace: &str) -> Result<(), OpError> {
    if shared.reserved.contains(namespace) {
        Err(OpError::ReservedNamespace(namespace.to_owned()))
    } else {
        Ok(())
    }
}

/// Writes are refused in dry-run sessions, the same way write tools are
/// stubbed there.
fn writable(binding: &Binding, op: &'static str) -> Result<(), OpError> {
    if binding.ctx.dry_run {
        Err(OpError::DryRun(op))
    } else {
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KvKey {
    namespace: String,
    key: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KvPut {
    namespace: String,
    key: String,
    value: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReportProgress {
    progress: f64,
    #[serde(default)]
    total: Option<f64>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReportLog {
    level: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    data: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KvList {
    namespace: String,
    #[serde(default)]
    prefix: String,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Encoding {
    Text,
    Base64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileGet {
    path: String,
    encoding: Option<Encoding>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePath {
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FilePut {
    path: String,
    content: Option<String>,
    content_base64: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Prefix {
    #[serde(default)]
    prefix: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Tag {
    kind: String,
    name: Option<String>,
    path: Option<String>,
    content: Option<String>,
    content_base64: Option<String>,
    content_type: Option<String>,
    metadata: Option<Value>,
}

/// The bytes of a `content` / `contentBase64` pair, and whether they came as text.
fn content_bytes(
    content: Option<String>,
    content_base64: Option<String>,
) -> Result<(Vec<u8>, bool), OpError> {
    match (content, content_base64) {
        (Some(text), None) => Ok((text.into_bytes(), true)),
        (None, Some(encoded)) => base64_decode(&encoded)
            .map(|bytes| (bytes, false))
            .map_err(|e| OpError::InvalidArgs(format!("contentBase64 is not valid base64: {e}"))),
        _ => Err(OpError::InvalidArgs(
            "give exactly one of content (text) or contentBase64".to_owned(),
        )),
    }
}

pub(super) async fn run_op(
    shared: &Shared,
    binding: &Binding,
    op: &str,
    args: Value,
) -> Result<Value, OpError> {
    let store = &shared.store;
    match op {
        "kv.get" => {
            let a: KvKey = parse(op, args)?;
            unreserved(shared, &a.namespace)?;
            let value = store
                .kv_get(&a.namespace, &a.key)
                .await
                .map_err(|e| store_error(op, e))?;
            Ok(json!({"found": value.is_some(), "value": value}))
        }
        "kv.put" => {
            writable(binding, "kv.put")?;
            let a: KvPut = parse(op, args)?;
            unreserved(shared, &a.namespace)?;
            store
                .kv_put(&a.namespace, &a.key, a.value)
                .await
                .map_err(|e| store_error(op, e))?;
            Ok(json!({}))
        }
        "kv.delete" => {
            writable(binding, "kv.delete")?;
            let a: KvKey = parse(op, args)?;
            unreserved(shared, &a.namespace)?;
            let deleted = store
                .kv_delete(&a.namespace, &a.key)
                .await
                .map_err(|e| store_error(op, e))?;
            Ok(json!({"deleted": deleted}))
        }
        "kv.list" => {
            let a: KvList = parse(op, args)?;
            unreserved(shared, &a.namespace)?;
            let keys = store
                .kv_list(&a.namespace, &a.prefix)
                .await
                .map_err(|e| store_error(op, e))?;
            Ok(json!({"keys": keys}))
        }
        "files.get" => file_get(store, parse(op, args)?).await,
        "files.put" => {
            writable(binding, "files.put")?;
            let a: FilePut = parse(op, args)?;
            let (bytes, _) = content_bytes(a.content, a.content_base64)?;
            let size = bytes.len();
            store
                .file_put(&a.path, bytes)
                .await
                .map_err(|e| store_error(op, e))?;
            Ok(json!({"size": size}))
        }
        "files.delete" => {
            writable(binding, "files.delete")?;
            let a: FilePath = parse(op, args)?;
            let deleted = store
                .file_delete(&a.path)
                .await
                .map_err(|e| store_error(op, e))?;
            Ok(json!({"deleted": deleted}))
        }
        "files.list" => {
            let a: Prefix = parse(op, args)?;
            let paths = store
                .file_list(&a.prefix)
                .await
                .map_err(|e| store_error(op, e))?;
            Ok(json!({"paths": paths}))
        }
        "artifacts.tag" => tag_artifact(binding, args).await,
        "session.info" => {
            let session = &binding.ctx.session;
            Ok(json!({
                "id": session.id.as_ref().map(|id| id.as_str()),
                "channel": session.channel,
                "mode": session.mode,
                "principal": session.principal,
                "callId": binding.ctx.call_id,
                "dryRun": binding.ctx.dry_run,
            }))
        }
        "send" | "session.get" | "session.wait" | "tools.call" => {
            session_op(binding, op, args).await
        }
        "mcp.names" | "mcp.list_tools" | "mcp.call_tool" => mcp_op(binding, op, args).await,
        "report.progress" => {
            let a: ReportProgress = parse(op, args)?;
            report_size(a.message.as_ref().map_or(0, String::len))?;
            if !a.progress.is_finite() || a.total.is_some_and(|t| !t.is_finite()) {
                return Err(OpError::InvalidArgs(
                    "progress and total must be finite numbers".to_owned(),
                ));
            }
            binding.ctx.report(ToolNote::Progress {
                progress: a.progress,
                total: a.total,
                message: a.message,
            });
            Ok(json!({}))
        }
        "report.log" => {
            let a: ReportLog = parse(op, args)?;
            if !LOG_LEVELS.contains(&a.level.as_str()) {
                return Err(OpError::InvalidArgs(format!(
                    "unknown level `{}` (levels: {})",
                    a.level,
                    LOG_LEVELS.join(", ")
                )));
            }
            report_size(
                a.message.as_ref().map_or(0, String::len)
                    + a.data.as_ref().map_or(0, |d| d.to_string().len()),
            )?;
            let data = match (a.message, a.data) {
                (Some(message), None) => Value::String(message),
                (None, Some(data)) => data,
                (Some(message), Some(data)) => json!({"message": message, "data": data}),
                (None, None) => {
                    return Err(OpError::InvalidArgs(
                        "give a message, data, or both".to_owned(),
                    ));
                }
            };
            binding.ctx.report(ToolNote::Log {
                level: a.level,
                data,
            });
            Ok(json!({}))
        }
        other => match shared
            .extensions
            .iter()
            .find(|e| e.operations().contains(&other))
        {
            Some(extension) => extension_op(extension.as_ref(), binding, op, args).await,
            None => Err(OpError::UnknownOp(other.to_owned(), known_ops(shared))),
        },
    }
}

/// The session services: `send`, `session.get`, `session.wait`,
/// `tools.call`, answered by the call's services under their reach rule.
async fn session_op(binding: &Binding, op: &str, args: Value) -> Result<Value, OpError> {
    let services = &binding.services;
    let ctx = &binding.ctx;
    let answer = match op {
        "send" => {
            let a: SendArgs = parse(op, args)?;
            let send = a.into_message().map_err(OpError::Service)?;
            services.send(ctx, send).await.map(|r| json!(r))
        }
        "session.get" => {
            let a: SessionArgs = parse(op, args)?;
            if a.timeout_ms.is_some() {
                return Err(OpError::InvalidArgs(
                    "`timeoutMs` applies to `session.wait`".to_owned(),
                ));
            }
            let (target, _) = a.into_parts().map_err(OpError::Service)?;
            services.session_get(ctx, target).await.map(|r| json!(r))
        }
        "session.wait" => {
            let a: SessionArgs = parse(op, args)?;
            let (target, wait) = a.into_parts().map_err(OpError::Service)?;
            services
                .session_wait(ctx, target, wait)
                .await
                .map(|r| json!(r))
        }
        _ => {
            let a: ToolCallArgs = parse(op, args)?;
            let input = a.input.unwrap_or_else(|| Value::Object(Map::new()));
            let session = match a.session_id {
                Some(id) if id.trim().is_empty() => {
                    return Err(OpError::InvalidArgs(
                        "sessionId must not be empty".to_owned(),
                    ));
                }
                Some(id) => Some(SessionId::from_string(&id)),
                None => None,
            };
            services
                .call_tool(ctx, &a.tool, input, session)
                .await
                .map(|r| json!(r))
        }
    };
    answer.map_err(OpError::Service)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct McpListTools {
    connection: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct McpCallTool {
    connection: String,
    tool: String,
    #[serde(default)]
    args: Option<Value>,
}

/// The `mcp.*` ops: the agent's MCP connections, as `host.mcp` offers them
/// to native tools.
async fn mcp_op(binding: &Binding, op: &str, args: Value) -> Result<Value, OpError> {
    let Some(mcp) = binding.services.mcp() else {
        return Err(OpError::Unavailable(
            "this agent has no MCP connections (agent/mcp-connections/)",
        ));
    };
    match op {
        "mcp.names" => {
            let _: Map<String, Value> = parse(op, args)?;
            Ok(json!({"names": mcp.names()}))
        }
        "mcp.list_tools" => {
            let a: McpListTools = parse(op, args)?;
            let tools = mcp
                .list_tools(&a.connection)
                .await
                .map_err(|e| OpError::InvalidArgs(e.to_string()))?;
            Ok(json!({"tools": tools}))
        }
        _ => {
            writable(binding, "mcp.call_tool")?;
            let a: McpCallTool = parse(op, args)?;
            let input = a.args.unwrap_or_else(|| Value::Object(Map::new()));
            let output = mcp
                .call_tool(&a.connection, &a.tool, input)
                .await
                .map_err(|e| OpError::InvalidArgs(e.to_string()))?;
            let mut answer = json!({"content": output.content, "isError": output.is_error});
            if !output.blocks.is_empty() {
                answer["blocks"] = Value::Array(output.blocks);
            }
            Ok(answer)
        }
    }
}

async fn file_get(store: &Arc<dyn Store>, a: FileGet) -> Result<Value, OpError> {
    let Some(bytes) = store
        .file_get(&a.path)
        .await
        .map_err(|e| store_error("files.get", e))?
    else {
        return Ok(json!({"found": false}));
    };
    let size = bytes.len();
    // Text when asked for, or by default when the bytes are UTF-8; base64
    // otherwise, so binary files round-trip.
    let text = match a.encoding {
        Some(Encoding::Base64) => Err(bytes),
        Some(Encoding::Text) => Ok(String::from_utf8(bytes).map_err(|_| {
            OpError::NotText(format!(
                "{} is not UTF-8 text; ask with encoding \"base64\"",
                a.path
            ))
        })?),
        None => String::from_utf8(bytes).map_err(|e| e.into_bytes()),
    };
    Ok(match text {
        Ok(text) => json!({"found": true, "size": size, "content": text}),
        Err(bytes) => {
            json!({"found": true, "size": size, "contentBase64": base64_encode(&bytes)})
        }
    })
}

/// Tags an artifact through the host services, which store it and record
/// `artifact.tagged` exactly as the `tag_artifact` built-in does.
async fn tag_artifact(binding: &Binding, args: Value) -> Result<Value, OpError> {
    const OP: &str = "artifacts.tag";
    if binding.ctx.session.id.is_none() {
        return Err(OpError::NoSession(OP));
    }
    writable(binding, OP)?;
    let a: Tag = parse(OP, args)?;
    if a.kind.trim().is_empty() {
        return Err(OpError::InvalidArgs("kind must not be empty".to_owned()));
    }
    let metadata = match a.metadata {
        None | Some(Value::Null) => json!({}),
        Some(Value::Object(map)) => Value::Object(map),
        Some(_) => {
            return Err(OpError::InvalidArgs(
                "metadata must be a JSON object".to_owned(),
            ));
        }
    };
    // A workspace file (recorded with its path, as the built-in does), or
    // inline content (recorded without one).
    let (bytes, default_name, default_type, path) = match a.path {
        Some(rel) => {
            if a.content.is_some() || a.content_base64.is_some() {
                return Err(OpError::InvalidArgs(
                    "give exactly one of path, content (text) or contentBase64".to_owned(),
                ));
            }
            let file = crate::tool::builtin::read_artifact_file(&binding.ctx, &rel)
                .await
                .map_err(|out| OpError::InvalidArgs(out.to_text()))?;
            (file.bytes, file.name, file.content_type, Some(file.path))
        }
        None => {
            let (bytes, text) = content_bytes(a.content, a.content_base64)?;
            let default_type = if text {
                "text/plain; charset=utf-8"
            } else {
                "application/octet-stream"
            };
            (bytes, a.kind.clone(), default_type, None)
        }
    };
    let artifact = NewArtifact {
        name: a.name.unwrap_or(default_name),
        content_type: a.content_type.unwrap_or_else(|| default_type.to_owned()),
        kind: a.kind,
        path,
        content: bytes,
        metadata,
    };
    match binding.services.tag_artifact(&binding.ctx, artifact).await {
        Ok(id) => Ok(json!({"artifactId": id})),
        Err(message) => {
            tracing::warn!(call_id = %binding.ctx.call_id, error = %message, "host endpoint failed to tag an artifact");
            Err(OpError::Internal)
        }
    }
}

/// Standard base64 (RFC 4648): padded when written; read with or without
/// padding (clients differ), anything else refused.
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

pub(super) fn base64_encode(bytes: &[u8]) -> String {
    base64::Engine::encode(&BASE64, bytes)
}

pub(super) fn base64_decode(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    // The crate's padding-indifferent mode also takes a partial pad (`Zg=`);
    // a pad, when there is one, must complete the last group.
    if text.ends_with('=') && !text.len().is_multiple_of(4) {
        return Err(base64::DecodeError::InvalidPadding);
    }
    base64::Engine::decode(&BASE64, text)
}
