//! The BDK event model: the envelope every session event travels in, the whole
//! event vocabulary as typed Rust, id generators, the NDJSON codec, and what a
//! session's log says ([`view`]: its status, the open turn, calls paired with
//! their results, the conversation), derived once for every reader.
//!
//! This crate does no I/O of its own beyond writing to a caller's
//! `std::io::Write`. It is the public wire format of BDK: stores persist it,
//! streams serve it, hooks and evals consume it, and `bdk trajectory` reads
//! saved files of it. See [`event`] for the compatibility rules.

pub mod event;
pub mod ids;
pub mod ndjson;
#[cfg(feature = "schema")]
mod schema;
pub mod sequence;
pub mod view;

pub use event::{
    AbAssigned, AbUnit, ActionApprovalRequested, ActionApprovalResolved, ActionRequest,
    ActionResult, ActionToolRetry, ActionsCompleted, ActionsRequested, Admission, AgentBound,
    ArtifactTagged, ChannelOutbound, EVENT_TYPES, Envelope, Event, FailStatus, GateVerdict,
    MessageAppended, MessageCompleted, MessageReceived, NudgeDelivered, ReasoningAppended,
    ReasoningCompleted, SessionCompleted, SessionFailed, SessionMode, SessionStarted,
    SessionWaiting, StepCompleted, StepStarted, SubagentCalled, SubagentCompleted, TurnCompleted,
    TurnFailed, TurnQueued, TurnStarted, Usage, Verdict,
};
pub use ids::{DeliveryId, SessionId, TurnId};

/// Implements `schemars::JsonSchema` for `$ty` by the derived schema of
/// `$shape`: a private type that mirrors `$ty`'s serializer, for types
/// whose own derive would not describe the wire (hand-written
/// serializers, `&'static str` fields that are enums on the wire). The
/// crates that describe their types this way (bdk-models, bdk-store,
/// bdk-project, bdk-exec, bdk-core, bdk-scheduler, bdk-evals) share it;
/// it names `::schemars` only where it expands, so it needs no feature.
#[doc(hidden)]
#[macro_export]
macro_rules! schema_by_shape {
    ($ty:ty, $shape:ty) => {
        impl ::schemars::JsonSchema for $ty {
            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                <$shape as ::schemars::JsonSchema>::schema_name()
            }

            fn json_schema(generator: &mut ::schemars::SchemaGenerator) -> ::schemars::Schema {
                <$shape as ::schemars::JsonSchema>::json_schema(generator)
            }
        }
    };
}
