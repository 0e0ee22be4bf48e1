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
