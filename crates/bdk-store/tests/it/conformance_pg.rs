//! Runs the engine-independent store conformance suite, unchanged, against
//! [`PgStore`] on the real PostgreSQL (`BDK_TEST_DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`). Each store of the suite lives
//! in its own schema, dropped at the end.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::pg_support;

use std::panic::AssertUnwindSafe;

use bdk_store::conformance::run_all;
use futures::FutureExt;
use pg_support::{PgHarness, admin};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_store_passes_the_conformance_suite() {
    // Fail loudly up front when the database is not there.
    drop(admin().await);
    let harness = PgHarness::default();
    let outcome = AssertUnwindSafe(run_all(&harness)).catch_unwind().await;
    harness.cleanup().await;
    if let Err(payload) = outcome {
        std::panic::resume_unwind(payload);
    }
}
