//! The integration tests of this crate, as one test binary (one link of
//! the dependency graph instead of one per file): each module is the
//! former test file of the same name.

mod client;
