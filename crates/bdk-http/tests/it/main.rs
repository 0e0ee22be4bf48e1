//! The integration tests of this crate, as one test binary (one link of
//! the dependency graph instead of one per file): each module is the
//! former test file of the same name.

mod abs;
mod channels;
mod client;
mod common;
mod dev_reminders;
mod dev_schedules;
mod docs_links;
mod evals;
mod hostile;
mod layout;
mod mcp;
mod openapi;
mod playground;
mod sessions;
mod stream_disconnect;
mod tools;
