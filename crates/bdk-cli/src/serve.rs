//! `bdk serve`: host one or more agents over HTTP.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bdk_core::host::Host;
use bdk_http::{Auth, BearerToken, Config, Connections, LogBuffer, Mount, Schedules};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// How many ports after a busy preferred one are tried.
const PORT_FALLBACKS: u16 = 20;

/// The port `bdk serve` binds when none is given.
pub const DEFAULT_PORT: u16 = 3000;
/// How long running turns get to settle on shutdown (at most the whole
/// shutdown grace).
const TURN_SETTLE: Duration = Duration::from_secs(10);
/// Slugs that would collide with host routes.
const RESERVED_SLUGS: &[&str] = &["v1", "playground", "docs"];

/// Options of `bdk serve`.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Project directories.
    pub dirs: Vec<PathBuf>,
    /// Dev mode.
    pub dev: bool,
    /// The port (0 = any free port).
    pub port: u16,
    /// When the port is busy, take the next free one (the default port);
    /// otherwise a busy port is an error (a port the user chose).
    pub port_fallback: bool,
    /// Interface to bind.
    pub host: String,
    /// One agent at `/v1/*`.
    pub single: bool,
    /// State root override.
    pub state_root: Option<PathBuf>,
    /// `principal=token` or bare tokens.
    pub bearer_tokens: Vec<String>,
    /// Admit every caller.
    pub allow_anonymous: bool,
    /// Serve `/docs`.
    pub docs: bool,
    /// Serve the web playground (off with `--no-playground`).
    pub playground: bool,
    /// Fire schedules on their cadence (never under `dev`).
    pub schedules: bool,
    /// `--store`: `fs` (default) or a `postgres://` URL.
    pub store: Option<String>,
    /// Connection limits and timeouts.
    pub connections: ConnectionArgs,
    /// `--require-sandbox`: refuse to start with an incomplete tool sandbox.
    pub require_sandbox: bool,
    /// `--session-cache`: bytes of resting sessions' conversations kept per agent.
    pub session_cache: u64,
    /// `bdk dev`: watch each agent's folder and reload the agent on change.
    pub watch: bool,
}

/// The connection limits of `bdk serve`; each one left out takes the
/// default of [`bdk_http::Connections`].
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ConnectionArgs {
    /// Close a connection that takes longer than this to send a request's
    /// headers (default 10s). Durations: `200ms`, `10s`, `2m`, `1h`.
    #[arg(long, value_name = "DURATION", env = "BDK_HEADER_TIMEOUT", value_parser = parse_duration)]
    pub header_timeout: Option<Duration>,
    /// Answer 408 to a request whose body takes longer than this, from the
    /// end of its headers (default 30s).
    #[arg(long, value_name = "DURATION", env = "BDK_BODY_TIMEOUT", value_parser = parse_duration)]
    pub body_timeout: Option<Duration>,
    /// Close a kept-alive connection idle for this long between requests
    /// (default 75s). Streams and running requests are never idle.
    #[arg(long, value_name = "DURATION", env = "BDK_IDLE_TIMEOUT", value_parser = parse_duration)]
    pub idle_timeout: Option<Duration>,
    /// Serve at most N connections at once; more wait to be accepted
    /// (default: half the open-file limit, at most 4096).
    #[arg(long, value_name = "N", env = "BDK_MAX_CONNECTIONS", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: Option<u32>,
    /// On SIGINT/SIGTERM, give running requests and streams this long to
    /// finish, then close their connections (default 15s).
    #[arg(long, value_name = "DURATION", env = "BDK_SHUTDOWN_GRACE", value_parser = parse_duration)]
    pub shutdown_grace: Option<Duration>,
}

impl ConnectionArgs {
    fn resolve(&self) -> Connections {
        let defaults = Connections::default();
        Connections {
            header_read_timeout: self.header_timeout.unwrap_or(defaults.header_read_timeout),
            body_read_timeout: self.body_timeout.unwrap_or(defaults.body_read_timeout),
            idle_timeout: self.idle_timeout.unwrap_or(defaults.idle_timeout),
            max_connections: self
                .max_connections
                .map_or(defaults.max_connections, |n| n as usize),
            shutdown_grace: self.shutdown_grace.unwrap_or(defaults.shutdown_grace),
        }
    }
}

/// Parses a positive duration: a whole number and a unit, `ms`, `s`, `m` or
/// `h` (`200ms`, `10s`, `2m`).
fn parse_duration(raw: &str) -> Result<Duration, String> {
    let raw = raw.trim();
    let digits = raw.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = raw.split_at(digits);
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => {
            return Err(format!(
                "`{raw}` is not a duration: write a whole number and a unit, ms, s, m or h (e.g. 10s)"
            ));
        }
    };
    let millis = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit_ms))
        .ok_or_else(|| format!("`{raw}` is not a duration: the number is missing or too large"))?;
    if millis == 0 {
        return Err(format!("`{raw}`: the duration must be positive"));
    }
    Ok(Duration::from_millis(millis))
}

/// Parses a byte size: a number of bytes, or one with a unit, binary
/// (`KiB`, `MiB`, `GiB`) or decimal (`kB`/`KB`, `MB`, `GB`); `B` is bytes.
pub fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let unit = unit.trim();
    let multiplier: u64 = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => {
            return Err(format!(
                "unknown unit `{other}`; write a size like 64MiB, 512KiB or a number of bytes"
            ));
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size; write one like 64MiB, 512KiB or 1048576"))?;
    n.checked_mul(multiplier)
        .ok_or_else(|| format!("`{text}` is too large"))
}

/// True for `[A-Za-z0-9][A-Za-z0-9_-]*` and not a reserved segment.
pub fn valid_slug(slug: &str) -> bool {
    let mut chars = slug.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !RESERVED_SLUGS.contains(&slug)
}

fn parse_tokens(raw: &[String]) -> Result<Vec<BearerToken>> {
    let mut out = Vec::new();
    for (i, t) in raw.iter().enumerate() {
        let (principal, token) = match t.split_once('=') {
            Some((p, tok)) if !p.is_empty() => (p.to_owned(), tok.to_owned()),
            _ => (
                if raw.len() == 1 {
                    "bearer".to_owned()
                } else {
                    format!("bearer-{}", i + 1)
                },
                t.clone(),
            ),
        };
        if token.len() < 8 {
            bail!(
                "--bearer-token for `{principal}` is shorter than 8 characters; use a long random token"
            );
        }
        out.push(BearerToken { principal, token });
    }
    Ok(out)
}

/// Binds `host:port`; with `fallback`, the next free port when it is busy.
fn bind(host: &str, port: u16, fallback: bool) -> Result<TcpListener> {
    let ip: IpAddr = host
        .parse()
        .with_context(|| format!("--host `{host}` is not an IP address"))?;
    if port == 0 {
        return listen(SocketAddr::new(ip, 0)).with_context(|| format!("cannot bind {host}"));
    }
    if !fallback {
        return listen(SocketAddr::new(ip, port)).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                anyhow::anyhow!(
                    "port {port} on {host} is busy (another server is listening there); stop it, pick another --port, or pass --port 0 for any free port"
                )
            } else {
                anyhow::Error::new(e).context(format!("cannot bind {host}:{port}"))
            }
        });
    }
    let mut last = None;
    for candidate in port..=port.saturating_add(PORT_FALLBACKS) {
        match listen(SocketAddr::new(ip, candidate)) {
            Ok(l) => {
                if candidate != port {
                    errln!("port {port} is busy; using {candidate} instead");
                }
                return Ok(l);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => last = Some(e),
            Err(e) => return Err(e).with_context(|| format!("cannot bind {host}:{candidate}")),
        }
    }
    Err(anyhow::anyhow!(
        "ports {port}-{} on {host} are all busy ({}); pass --port 0 for any free port",
        port.saturating_add(PORT_FALLBACKS),
        last.map(|e| e.to_string()).unwrap_or_default()
    ))
}

/// How many connections may wait in the kernel's queue to be accepted (the
/// kernel caps it at `net.core.somaxconn`). Beyond the connection limit new
/// connections wait there, holding no descriptor of ours; the standard
/// library's 128 fills under a modest burst, after which clients see their
/// connection attempts dropped and retried.
const LISTEN_BACKLOG: u32 = 1024;

/// A listening socket on `addr` with [`LISTEN_BACKLOG`].
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // As `TcpListener::bind` does: a restarted server can take its port back
    // while connections of the old one linger in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Runs the server until SIGINT or SIGTERM. Returns the exit code.
pub async fn run(opts: ServeOptions, logs: LogBuffer) -> Result<u8> {
    for note in secrets_on_command_line(std::env::args().skip(1)) {
        errln!("note: {note}");
    }
    crate::sandbox::lower_oom_score();
    let dirs = if opts.dirs.is_empty() {
        // The project around the current directory, found as for the
        // other commands.
        vec![crate::support::ProjectArgs::default().dir(None)]
    } else {
        opts.dirs.clone()
    };
    if opts.single && dirs.len() != 1 {
        errln!(
            "error: --mode single serves exactly one agent; got {}",
            dirs.len()
        );
        return Ok(2);
    }
    if opts.allow_anonymous && !opts.bearer_tokens.is_empty() {
        errln!("error: --allow-anonymous and --bearer-token exclude each other");
        return Ok(2);
    }
    let tokens = match parse_tokens(&opts.bearer_tokens) {
        Ok(t) => t,
        Err(e) => {
            errln!("error: {e}");
            return Ok(2);
        }
    };

    // Discover everything first: one bad project stops the whole server.
    let mut projects = Vec::new();
    let mut failed = false;
    let mut slugs = std::collections::BTreeSet::new();
    for dir in &dirs {
        let discovery = bdk_core::discover(dir);
        crate::support::print_diagnostics(&discovery.diagnostics, true);
        let (errors, _) = crate::support::counts(&discovery.diagnostics);
        let Some(project) = discovery.project.filter(|_| errors == 0) else {
            errln!(
                "error: {} has validation errors; not serving",
                dir.display()
            );
            failed = true;
            continue;
        };
        let slug = slug_of(&project.root);
        if !opts.single {
            if !valid_slug(&slug) {
                errln!(
                    "error: `{slug}` ({}) is not a usable URL slug: use letters, digits, `_` and `-`, starting with a letter or digit, and not v1, playground or docs; rename the directory",
                    dir.display()
                );
                failed = true;
                continue;
            }
            if !slugs.insert(slug.clone()) {
                errln!("error: two agents would be served at /{slug}; rename one directory");
                failed = true;
                continue;
            }
        }
        // A cron expression that names no real date (`0 0 31 2 *`) passes
        // the syntax check of discovery; refuse it here, before serving.
        if let Err(e) = bdk_scheduler::check_schedules(&project.schedules) {
            errln!("error: {}: {e}", dir.display());
            failed = true;
            continue;
        }
        projects.push((slug, project, discovery.diagnostics));
    }
    if failed {
        return Ok(2);
    }

    let store_spec = match crate::store::StoreSpec::parse(opts.store.as_deref()) {
        Ok(spec) => spec,
        Err(e) => {
            errln!("error: {e}");
            return Ok(2);
        }
    };
    let mut mounts = Vec::new();
    let mut locks = Vec::new();
    let mut hosts: Vec<Host> = Vec::new();
    let mut watched: Vec<crate::dev::Watched> = Vec::new();
    // One clock for tools, reminders and the schedule cadence.
    let clock: Arc<dyn bdk_scheduler::Clock> = Arc::new(bdk_scheduler::SystemClock);
    let state_roots: Vec<PathBuf> = projects
        .iter()
        .map(|(slug, project, _)| match (&opts.state_root, opts.single) {
            (Some(r), true) => r.clone(),
            (Some(r), false) => r.join(slug),
            (None, _) => project.root.join(".bdk"),
        })
        .collect();
    for root in &state_roots {
        std::fs::create_dir_all(root)
            .with_context(|| format!("cannot create the state root {}", root.display()))?;
    }
    // No agent's programs read another agent's folder or state.
    let protected = crate::sandbox::Protected(
        projects
            .iter()
            .map(|(_, project, _)| project.root.clone())
            .chain(state_roots.iter().cloned())
            .collect(),
    );
    for ((slug, project, diagnostics), root) in projects.into_iter().zip(state_roots) {
        let folder = (
            project.name.clone(),
            project.root.clone(),
            project.agent_dir.clone(),
        );
        let sandbox = match crate::sandbox::for_project(&project, &protected, opts.require_sandbox)
        {
            Ok(sandbox) => sandbox,
            Err(e) => {
                errln!("error: {e:#}");
                return Ok(2);
            }
        };
        let (store, held) = crate::store::open(&store_spec, &slug, &root).await?;
        locks.push(held);
        // Advertised MCP tools are listed in the background: serving starts
        // at once and the tools join the catalog as their servers answer.
        let hub = crate::support::mcp_hub(&project, &root, false, sandbox.as_ref()).await;
        // Under --dev reminders stay armed but fire only through
        // POST /v1/dev/reminders/:id, like schedules.
        let mut builder = crate::support::reserve_server_namespaces(Host::builder(project, store))
            .clock(Arc::clone(&clock))
            .extension(Arc::new(bdk_scheduler::Reminders::new().timers(!opts.dev)))
            .session_cache_bytes(opts.session_cache);
        if let Some(sandbox) = sandbox {
            builder = builder.sandbox(sandbox);
        }
        if store_spec.is_shared()
            && let crate::store::StoreSpec::Postgres(url) = &store_spec
        {
            // Several replicas share this store: each turn takes the
            // session's lease there, and startup recovery only interrupts
            // turns that no live replica runs (see docs/replicas.md).
            let schema = crate::store::schema_for(&slug);
            let coord = bdk_store::PgCoordination::connect(url, &schema)
                .await
                .with_context(|| format!("failed to join the replicas of agent `{slug}`"))?;
            builder = builder.coordination(Arc::new(coord));
        }
        if let Some(hub) = hub {
            builder = builder.mcp(hub);
        }
        // A GitHub channel brings the pack: progress on GitHub, the
        // `github_*` tools and the `github.*` host service.
        let base_path = if opts.single {
            String::new()
        } else {
            format!("/{slug}")
        };
        if let Some(github) = bdk_github::Github::from_project(
            builder.project(),
            bdk_github::GithubOptions::default().with_base_path(base_path),
        ) {
            builder = builder.extension(Arc::new(github));
        }
        // A Slack channel brings its pack: placeholders, replies and
        // approval cards in the thread, and the `slack.*` host service.
        if let Some(slack) =
            bdk_slack::Slack::from_project(builder.project(), bdk_slack::SlackOptions::default())
        {
            builder = builder.extension(Arc::new(slack));
        }
        let host = builder
            .build()
            .await
            .with_context(|| format!("failed to start agent `{slug}`"))?;
        hosts.push(host.clone());
        let reload = opts.watch.then(|| {
            let status = bdk_http::ReloadStatus::new(host.version(), diagnostics.clone());
            let (name, root, agent_dir) = folder;
            watched.push(crate::dev::Watched {
                name,
                root,
                agent_dir,
                host: host.clone(),
                status: status.clone(),
            });
            status
        });
        mounts.push(Mount {
            slug: (!opts.single).then(|| slug.clone()),
            host,
            diagnostics,
            reload,
        });
    }

    let shutdown = CancellationToken::new();
    let config = Config {
        auth: if opts.allow_anonymous {
            Auth::Anonymous
        } else if !tokens.is_empty() {
            Auth::Bearer(tokens)
        } else {
            Auth::LocalDevStrict
        },
        dev: opts.dev,
        playground: opts.playground,
        docs: opts.docs,
        max_body_bytes: 1024 * 1024,
        heartbeat: Duration::from_secs(15),
        logs,
        shutdown: shutdown.clone(),
        connections: opts.connections.resolve(),
    };
    let connections = config.connections.clone();
    let names: Vec<(Option<String>, String)> = mounts
        .iter()
        .map(|m| (m.slug.clone(), m.host.project().name.clone()))
        .collect();
    let app = bdk_http::App::new(mounts, config);
    // The work the app does on its own (the schedule cadence, channel
    // event delivery for existing sessions) runs beside the router until
    // shutdown.
    let workers = app.background.start(if opts.schedules && !opts.dev {
        Schedules::On(Arc::clone(&clock))
    } else {
        Schedules::Off
    });
    let app = app.router;
    let listener = bind(&opts.host, opts.port, opts.port_fallback)?;
    let addr = listener.local_addr()?;
    let base = format!("http://{addr}");
    // Tell CLI commands on the same state roots where to send their work
    // (`bdk run` next to a running server goes through its API).
    let reachable = {
        let mut a = addr;
        if a.ip().is_unspecified() {
            a.set_ip(match a.ip() {
                std::net::IpAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                std::net::IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        format!("http://{a}")
    };
    for (lock, (slug, _)) in locks.iter_mut().zip(&names) {
        match slug {
            Some(s) => lock.record_server(&format!("{reachable}/{s}")),
            None => lock.record_server(&reachable),
        }
    }
    outln!("listening on {base}");
    for (slug, name) in &names {
        match slug {
            Some(s) => outln!("  {name}: {base}/{s}/v1"),
            None => outln!("  {name}: {base}/v1"),
        }
        if opts.playground {
            let prefix = slug.as_ref().map_or_else(String::new, |s| format!("/{s}"));
            outln!("  {name} playground: {base}{prefix}/playground");
        }
    }
    if opts.docs {
        outln!("  docs: {base}/docs");
    }
    let count: usize = hosts.iter().map(|h| h.project().schedules.len()).sum();
    if count > 0 {
        if opts.dev {
            errln!(
                "note: {count} schedule(s) discovered; under --dev they fire only through POST /v1/dev/schedules/:id"
            );
        } else if !opts.schedules {
            errln!("note: {count} schedule(s) discovered; --no-schedules keeps them from firing");
        } else {
            outln!("  schedules: {count} firing on their cadence (UTC); missed fires are skipped");
        }
    }
    if !opts.dev
        && !opts.allow_anonymous
        && opts.bearer_tokens.is_empty()
        && !addr.ip().is_loopback()
    {
        errln!(
            "note: only loopback callers are admitted; pass --bearer-token to serve remote callers"
        );
    }

    // On a signal the server stops accepting at once and closes the
    // connections that have no request in flight; running turns are then
    // interrupted (recorded `turn.failed`, status interrupted) so that open
    // streams carry that, the streams end, and what is still open when the
    // shutdown grace runs out is closed. So the process stops within the
    // grace whatever clients do (docs/deploy.md).
    let stop = CancellationToken::new();
    // Kept until the server stops: dropping them ends the watching.
    let _watchers = crate::dev::start(watched, stop.clone())?;
    let signal = stop.clone();
    let stopping = hosts.clone();
    let grace = connections.shutdown_grace;
    let settle = TURN_SETTLE.min(grace);
    let (signalled, signalled_at) = tokio::sync::oneshot::channel();
    let stopping = tokio::spawn(async move {
        wait_for_signal().await;
        let _ = signalled.send(tokio::time::Instant::now());
        errln!("shutting down: recording running turns as interrupted and ending streams");
        signal.cancel();
        futures::future::join_all(stopping.iter().map(|h| h.shutdown(settle))).await;
        shutdown.cancel();
        if tokio::time::timeout(grace, workers.shutdown())
            .await
            .is_err()
        {
            tracing::warn!(
                ?grace,
                "the schedule cadence did not stop within the shutdown grace"
            );
        }
        // What the shutdown recorded (interrupted turns) reaches the hooks
        // too, within what is left of the grace.
        let drains = stopping.iter().map(|h| h.drain_hooks(grace));
        for late in futures::future::join_all(drains)
            .await
            .into_iter()
            .flat_map(Result::err)
        {
            tracing::warn!(%late, "hooks did not finish before the server stopped");
        }
    });
    bdk_http::serve_with(listener, app, &connections, stop)
        .await
        .context("the server failed")?;
    // Every connection is closed. The hosts may still be recording their
    // interrupted turns (and leaving the cluster, stopping MCP servers);
    // they get what is left of the grace, and a turn they do not record is
    // recorded interrupted at the next start.
    if let Ok(at) = signalled_at.await
        && tokio::time::timeout_at(at + grace, stopping).await.is_err()
    {
        tracing::warn!(
            ?grace,
            "the hosts did not finish shutting down within the shutdown grace"
        );
    }
    drop(locks);
    Ok(0)
}

/// Notes for secrets given as flags: any process on the machine can read a
/// command line (`/proc/<pid>/cmdline`), tools included, while the
/// environment is private to the server.
fn secrets_on_command_line(args: impl Iterator<Item = String>) -> Vec<&'static str> {
    let mut notes = Vec::new();
    let mut previous: Option<String> = None;
    for arg in args {
        let (flag, value) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_owned(), Some(value.to_owned()))
            }
            _ => match previous.take() {
                Some(flag) => (flag, Some(arg.clone())),
                None => (arg.clone(), None),
            },
        };
        match (flag.as_str(), value) {
            ("--bearer-token", Some(_)) => notes.push(
                "--bearer-token on the command line is visible to every process on this machine; set BDK_BEARER_TOKEN instead",
            ),
            ("--store", Some(url)) if store_url_has_password(&url) => notes.push(
                "--store carries a password on the command line, visible to every process on this machine; set BDK_STORE instead",
            ),
            ("--bearer-token" | "--store", None) => previous = Some(flag),
            _ => {}
        }
    }
    notes.dedup();
    notes
}

/// True for `scheme://user:password@host...`.
fn store_url_has_password(url: &str) -> bool {
    url.split_once("://")
        .and_then(|(_, rest)| rest.split(['/', '?']).next())
        .and_then(|authority| authority.rsplit_once('@'))
        .is_some_and(|(userinfo, _)| userinfo.contains(':'))
}

fn slug_of(root: &Path) -> String {
    root.canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "agent".to_owned())
}

/// Resolves on Ctrl-C or SIGTERM (also what `bdk github forward` stops on).
pub(crate) async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate());
        match term {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units_and_refuse_the_rest() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_size("512 KiB"), Ok(512 << 10));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size("100B"), Ok(100));
        for bad in [
            "",
            "MiB",
            "4 megs",
            "-1",
            "1.5MiB",
            "99999999999999999999GiB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn slugs_follow_the_rules() {
        for ok in ["weather", "a", "A1_b-c", "9lives"] {
            assert!(valid_slug(ok), "{ok}");
        }
        for bad in [
            "",
            "-x",
            "_x",
            "v1",
            "docs",
            "playground",
            "a b",
            "a/b",
            "é",
        ] {
            assert!(!valid_slug(bad), "{bad}");
        }
    }

    #[test]
    fn durations_need_a_unit_and_a_positive_value() {
        assert_eq!(parse_duration("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in [
            "",
            "10",
            "s",
            "0s",
            "1.5s",
            "-1s",
            "10 s",
            "10sec",
            "ms",
            "99999999999999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn connection_flags_fall_back_to_the_library_defaults() {
        assert_eq!(ConnectionArgs::default().resolve(), Connections::default());
        let set = ConnectionArgs {
            header_timeout: Some(Duration::from_millis(200)),
            max_connections: Some(3),
            ..ConnectionArgs::default()
        }
        .resolve();
        assert_eq!(set.header_read_timeout, Duration::from_millis(200));
        assert_eq!(set.max_connections, 3);
        assert_eq!(set.idle_timeout, bdk_http::DEFAULT_IDLE_TIMEOUT);
    }

    #[test]
    fn secrets_given_as_flags_get_a_note() {
        let notes = |args: &[&str]| secrets_on_command_line(args.iter().map(|a| (*a).to_owned()));
        assert_eq!(notes(&["serve", ".", "--port", "0"]).len(), 0);
        assert_eq!(notes(&["--bearer-token", "abcdefghij"]).len(), 1);
        assert_eq!(notes(&["--bearer-token=abcdefghij"]).len(), 1);
        assert_eq!(notes(&["--store", "postgres://bdk:pw@db/bdk"]).len(), 1);
        assert_eq!(notes(&["--store=postgres://bdk:pw@db/bdk"]).len(), 1);
        assert!(notes(&["--store", "postgres://bdk@db/bdk"]).is_empty());
        assert!(notes(&["--store", "fs"]).is_empty());
        assert!(notes(&["--store", "postgres:///bdk?host=/run/postgresql"]).is_empty());
    }

    #[test]
    fn bearer_tokens_name_their_principals() {
        let t = parse_tokens(&["alice=aaaaaaaaaa".into(), "bbbbbbbbbb".into()]).unwrap();
        assert_eq!(t[0].principal, "alice");
        assert_eq!(t[0].token, "aaaaaaaaaa");
        assert_eq!(t[1].principal, "bearer-2");
        assert!(parse_tokens(&["short".into()]).is_err());
    }
}
