//! Runs the engine-independent store conformance suite against [`FsStore`].
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bdk_store::conformance::{FsHarness, run_all};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fs_store_passes_the_conformance_suite() {
    run_all(&FsHarness::default()).await;
}
