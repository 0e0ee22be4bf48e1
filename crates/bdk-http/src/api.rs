//! What the routes say about themselves, for the OpenAPI document.
//!
//! Handlers and extractors carry their own description: a typed body
//! (`Json<T>`, [`JsonBody<T>`](crate::extract::JsonBody)) names its schema,
//! an extractor adds its parameters and the error codes it can answer with,
//! and the route table ([`crate::routes`]) adds what only it knows (the
//! operation id, prose, the error codes of the host call). This module holds
//! the pieces they share: the markers the document generator in
//! [`crate::openapi`] turns into responses and security requirements, the
//! `ok: true` of every success body, and the `202` answer.

use aide::OperationOutput;
use aide::generate::{GenContext, in_context};
use aide::openapi::{Operation, PathItem, Response, StatusCode as DocStatus};
use aide::transform::TransformOperation;
use axum::Json;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::error::{ApiError, ErrorCode};

/// The operation extension listing the error codes an operation can answer
/// with; the generator turns it into one response per status.
pub(crate) const ERRORS: &str = "x-bdk-errors";
/// The operation extension marking an operation that runs no auth; the
/// generator turns it into an empty `security` requirement.
pub(crate) const OPEN: &str = "x-bdk-open";

pub(crate) use bdk_api::True;

/// A JSON answer with status `202 Accepted` (the eval routes start runs
/// with it).
#[cfg_attr(not(feature = "evals"), allow(dead_code))]
pub(crate) struct Accepted<T>(pub(crate) T);

impl<T: Serialize> IntoResponse for Accepted<T> {
    fn into_response(self) -> axum::response::Response {
        (StatusCode::ACCEPTED, Json(self.0)).into_response()
    }
}

impl<T: JsonSchema> OperationOutput for Accepted<T> {
    type Inner = T;

    fn operation_response(ctx: &mut GenContext, operation: &mut Operation) -> Option<Response> {
        Json::<T>::operation_response(ctx, operation)
    }

    fn inferred_responses(
        ctx: &mut GenContext,
        operation: &mut Operation,
    ) -> Vec<(Option<DocStatus>, Response)> {
        Self::operation_response(ctx, operation)
            .map(|r| (Some(DocStatus::Code(202)), r))
            .into_iter()
            .collect()
    }
}

/// Errors are documented by code (see [`ERRORS`]), not by the handler's
/// return type.
impl OperationOutput for ApiError {
    type Inner = ();
}

/// Adds `codes` to the error codes `operation` documents.
pub(crate) fn add_errors(operation: &mut Operation, codes: &[ErrorCode]) {
    let list = operation
        .extensions
        .entry(ERRORS.to_owned())
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(list) = list {
        for code in codes {
            let code = Value::from(code.as_str());
            if !list.contains(&code) {
                list.push(code);
            }
        }
    }
}

/// The schema of `T` as the document refers to it (a `$ref` for named
/// types), registering its definition.
pub(crate) fn schema_of<T: JsonSchema>() -> Value {
    in_context(|ctx| ctx.schema.subschema_for::<T>().to_value())
}

/// A response object written as JSON (for answers that are not a typed
/// JSON body: pages, files, streams). `None` only for a malformed object,
/// which the document's tests would catch as a missing response.
pub(crate) fn response(value: Value) -> Option<Response> {
    serde_json::from_value(value).ok()
}

/// The route table's additions to an operation.
pub(crate) trait Describe: Sized {
    /// The operation id, tag, summary and description in one call.
    fn doc(self, id: &str, tag: &str, summary: &str, description: &str) -> Self;
    /// Error codes the operation answers with beyond those of its
    /// extractors (typically the host call's).
    fn errors(self, codes: &[ErrorCode]) -> Self;
    /// A response that is not a typed JSON body, written as JSON.
    fn raw_response(self, status: u16, value: Value) -> Self;
    /// The request body's description, whether it is required, and an
    /// example.
    fn body(self, required: bool, description: &str, example: Value) -> Self;
}

impl Describe for TransformOperation<'_> {
    fn doc(self, id: &str, tag: &str, summary: &str, description: &str) -> Self {
        self.id(id)
            .tag(tag)
            .summary(summary)
            .description(description)
    }

    fn errors(mut self, codes: &[ErrorCode]) -> Self {
        add_errors(self.inner_mut(), codes);
        self
    }

    fn raw_response(mut self, status: u16, value: Value) -> Self {
        if let Some(r) = response(value) {
            let responses = self.inner_mut().responses.get_or_insert_default();
            responses
                .responses
                .insert(DocStatus::Code(status), aide::openapi::ReferenceOr::Item(r));
        }
        self
    }

    fn body(mut self, required: bool, description: &str, example: Value) -> Self {
        if let Some(aide::openapi::ReferenceOr::Item(body)) = &mut self.inner_mut().request_body {
            body.required = required;
            body.description = Some(description.to_owned());
            for media in body.content.values_mut() {
                media.example = Some(example.clone());
            }
        }
        self
    }
}

/// Every operation of a path item.
pub(crate) fn operations_mut(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .flatten()
}

/// Marks every operation of `router` as behind the auth chain: each can
/// answer `401 unauthorized`.
pub(crate) fn protected<S>(router: aide::axum::ApiRouter<S>) -> aide::axum::ApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    router.with_path_items(|mut t| {
        for op in operations_mut(t.inner_mut()) {
            add_errors(op, &[ErrorCode::Unauthorized]);
        }
        t
    })
}

/// Marks every operation of `router` as running no auth.
pub(crate) fn open<S>(router: aide::axum::ApiRouter<S>) -> aide::axum::ApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    router.with_path_items(|mut t| {
        for op in operations_mut(t.inner_mut()) {
            op.extensions.insert(OPEN.to_owned(), Value::Bool(true));
        }
        t
    })
}
