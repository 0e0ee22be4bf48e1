//! The work an app does on its own, beside its routes: the schedule cadence
//! of every agent and, for agents with channels, resuming event delivery
//! for the channel sessions that existed before the server started.
//!
//! Building an app starts none of it ([`crate::App::new`] only prepares a
//! [`Background`]); the server's owner starts it with
//! [`Background::start`] and stops it with [`Workers::shutdown`]. It shares
//! the routes' per-agent state: the schedule [`Dispatcher`] the dev route
//! uses, and the agent's [`Channels`], so a scheduled hand-off takes the
//! same one-session-per-key path as a message over HTTP and a resumed
//! session is followed once.

use std::fmt;
use std::sync::Arc;

use bdk_core::clock::Clock;
use bdk_core::host::Host;
#[cfg(feature = "scheduler")]
use bdk_scheduler::{Dispatcher, Scheduler};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::channels::Channels;

/// Whether the schedules fire on their cadence ([`Background::start`]). A
/// build without the `scheduler` feature fires none and says so in the log.
#[derive(Clone, Default)]
pub enum Schedules {
    /// Nothing fires on its own (the default; `--no-schedules`). The dev
    /// route still dispatches under `--dev`.
    #[default]
    Off,
    /// Every agent's schedules fire on this clock until the workers stop,
    /// unless the app was built with [`crate::Config::dev`].
    On(Arc<dyn Clock>),
}

impl fmt::Debug for Schedules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The clock itself has nothing worth printing.
        f.write_str(match self {
            Schedules::Off => "Off",
            Schedules::On(_) => "On",
        })
    }
}

/// The background work of an app, not yet started.
pub struct Background {
    dev: bool,
    shutdown: CancellationToken,
    agents: Vec<AgentWork>,
}

/// What one served agent contributes.
struct AgentWork {
    host: Host,
    /// The dispatcher the agent's routes use too.
    #[cfg(feature = "scheduler")]
    schedules: Dispatcher,
    /// The agent's channels, when it serves any.
    channels: Option<Channels>,
}

impl Background {
    /// No work yet, for an app built with `dev` whose shutdown is
    /// `shutdown` (cancelling it stops the workers too).
    pub(crate) fn new(dev: bool, shutdown: CancellationToken) -> Self {
        Self {
            dev,
            shutdown,
            agents: Vec::new(),
        }
    }

    /// Adds one served agent's work: its schedules fire through
    /// `schedules`, and its `channels` resume their delivery.
    pub(crate) fn add(
        &mut self,
        host: Host,
        #[cfg(feature = "scheduler")] schedules: Dispatcher,
        channels: Option<Channels>,
    ) {
        self.agents.push(AgentWork {
            host,
            #[cfg(feature = "scheduler")]
            schedules,
            channels,
        });
    }

    /// Starts the work: channel event delivery resumes for the sessions
    /// that existed when the app was built, and with [`Schedules::On`]
    /// (unless the app serves `--dev`) every agent's schedules fire on
    /// their cadence. A schedule that cannot be scheduled is logged and
    /// none of its agent's schedules fire; the CLI checks them first.
    ///
    /// Must be called inside a Tokio runtime.
    pub fn start(self, schedules: Schedules) -> Workers {
        let stop = self.shutdown.child_token();
        let clock = match schedules {
            Schedules::On(clock) if !self.dev => Some(clock),
            _ => None,
        };
        let mut resuming = Vec::new();
        #[cfg(feature = "scheduler")]
        let mut schedulers = Vec::new();
        for agent in self.agents {
            if let Some(channels) = agent.channels {
                resuming.push(tokio::spawn(async move { channels.resume().await }));
            }
            #[cfg(not(feature = "scheduler"))]
            if clock.is_some() && !agent.host.project().schedules.is_empty() {
                tracing::warn!(agent = %agent.host.project().name, "this build of bdk-http has no scheduler (its `scheduler` feature is off); schedules do not fire");
            }
            #[cfg(feature = "scheduler")]
            {
                let Some(clock) = &clock else { continue };
                let list = &agent.host.project().schedules;
                if list.is_empty() {
                    continue;
                }
                let started = Scheduler::start(
                    list,
                    Arc::clone(agent.host.store()),
                    Arc::new(agent.schedules),
                    Arc::clone(clock),
                    stop.child_token(),
                );
                match started {
                    Ok(scheduler) => schedulers.push(scheduler),
                    Err(e) => {
                        tracing::error!(agent = %agent.host.project().name, error = %e, "schedules do not fire")
                    }
                }
            }
        }
        Workers {
            stop,
            resuming,
            #[cfg(feature = "scheduler")]
            schedulers,
        }
    }
}

impl fmt::Debug for Background {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Background")
            .field("dev", &self.dev)
            .field("agents", &self.agents.len())
            .finish_non_exhaustive()
    }
}

/// Started background work. [`Workers::shutdown`] stops it and waits for
/// it; so does cancelling the app's [`crate::Config::shutdown`], without
/// the wait. Dropping it aborts the schedule loops at once.
pub struct Workers {
    stop: CancellationToken,
    resuming: Vec<JoinHandle<()>>,
    #[cfg(feature = "scheduler")]
    schedulers: Vec<Scheduler>,
}

impl Workers {
    /// Stops the cadence and waits until every schedule loop and the
    /// resumption of channel delivery have ended. (The delivery of each
    /// channel session ends with the app's [`crate::Config::shutdown`].)
    pub async fn shutdown(self) {
        self.stop.cancel();
        #[cfg(feature = "scheduler")]
        for scheduler in self.schedulers {
            scheduler.shutdown().await;
        }
        for task in self.resuming {
            if let Err(e) = task.await
                && e.is_panic()
            {
                tracing::error!(error = %e, "resuming channel event delivery panicked");
            }
        }
    }
}

impl fmt::Debug for Workers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Workers");
        #[cfg(feature = "scheduler")]
        d.field("schedulers", &self.schedulers.len());
        d.finish_non_exhaustive()
    }
}
