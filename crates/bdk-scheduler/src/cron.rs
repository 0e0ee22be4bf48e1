//! The 5-field UTC crontab matcher, re-exported from [`bdk_core::cron`]: the
//! cadence fires on exactly the expressions `bdk validate` accepts.

pub use bdk_core::cron::{CronError, CronExpr};
