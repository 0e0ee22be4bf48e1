//! The integration tests of this crate, as one test binary (one link of
//! the dependency graph instead of one per file): each module is the
//! former test file of the same name.

mod conformance_fs;
mod conformance_pg;
mod coord_pg;
mod fs;
mod pg;
mod pg_support;
