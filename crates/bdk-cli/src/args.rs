//! The command line: `bdk`'s subcommands and their arguments, as clap
//! parses them. `main` parses, `commands` dispatches.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::support::ProjectArgs;
use crate::{chat, evals, github, serve, slack};

/// Build, run and inspect BDK agents.
#[derive(Parser, Debug)]
#[command(name = "bdk", version = crate::VERSION, about, propagate_version = true)]
pub(crate) struct Cli {
    /// How log lines on stderr are written: `text` or `json` (one JSON
    /// object a line).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = crate::logs::LogFormat::Text,
        env = "BDK_LOG_FORMAT"
    )]
    pub(crate) log_format: crate::logs::LogFormat,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Scaffold a new agent project (the offline weather example, or an
    /// empty agent).
    #[command(after_help = "Examples:
  bdk init my-agent                      the offline weather example
  bdk init helpdesk --template empty --var name=helpdesk --var model=openai/gpt-4o-mini")]
    Init {
        /// Where to create it (must be empty or absent).
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// What to start from.
        #[arg(long, value_enum, default_value_t = crate::init::Template::Weather)]
        template: crate::init::Template,
        /// Set `name`, `description` or `model` in agent/agent.toml
        /// (repeatable).
        #[arg(long = "var", value_name = "KEY=VALUE")]
        vars: Vec<String>,
    },
    /// Check the project and print every problem with its fix.
    #[command(after_help = "Examples:
  bdk validate                 the project around the current folder
  bdk validate my-agent --json")]
    Validate {
        /// The project directory (same as --dir).
        #[arg(value_name = "DIR")]
        path: Option<PathBuf>,
        #[command(flatten)]
        project: ProjectArgs,
        /// Print diagnostics as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the discovered surface: tools, skills, subagents, ...
    #[command(after_help = "Examples:
  bdk info
  bdk info my-agent --json | jq '.tools[].name'")]
    Info {
        /// The project directory (same as --dir).
        #[arg(value_name = "DIR")]
        path: Option<PathBuf>,
        #[command(flatten)]
        project: ProjectArgs,
        /// Print JSON (the shape `GET /v1/info` serves).
        #[arg(long)]
        json: bool,
    },
    /// Run one turn and print its trajectory as JSON.
    #[command(after_help = "Examples:
  bdk run -m \"What's the weather in Paris?\"
  bdk run -m \"And tomorrow?\" --session ses_...
  bdk run -m \"Plan the release\" --dry-run --as-of 2026-01-15T09:00:00Z")]
    Run {
        #[command(flatten)]
        project: ProjectArgs,
        /// The user message.
        #[arg(long, short = 'm')]
        message: String,
        /// Continue this session instead of starting one.
        #[arg(long)]
        session: Option<String>,
        /// Execute reads, stub writes.
        #[arg(long)]
        dry_run: bool,
        /// Pin "now" for tools (RFC 3339 with a zone, e.g. 2026-01-15T09:00:00Z).
        #[arg(long)]
        as_of: Option<String>,
        /// Record every model step (request and streamed response) to FILE as
        /// JSON lines, appending to an existing recording; play it back with
        /// `model = "replay/<FILE>"`.
        #[arg(long, value_name = "FILE")]
        record: Option<PathBuf>,
        /// Export traces and metrics over OTLP/gRPC to URL (e.g.
        /// http://localhost:4317); `OTEL_EXPORTER_OTLP_ENDPOINT` also turns it on.
        #[arg(long, value_name = "URL")]
        otlp_endpoint: Option<String>,
        /// Print JSON (also what a pipe gets; a terminal gets text).
        #[arg(long)]
        json: bool,
    },
    /// Talk with the agent in the terminal: replies stream as they are
    /// written, tool calls show inline, Esc stops a reply.
    #[command(after_help = "Examples:
  bdk chat                                       the project here
  bdk chat examples/weather --reasoning
  bdk chat --session ses_...                     continue a conversation
  bdk chat --url http://127.0.0.1:3000/weather   a running server's agent
  echo \"What's the weather in Paris?\" | bdk chat examples/weather

At the prompt: /new, /session ID, /trace, /reasoning, /help, /quit.")]
    Chat(chat::ChatArgs),
    /// Call a server tool without a model turn.
    #[command(after_help = "Examples:
  bdk call get_weather -i '{\"city\": \"Paris\"}'
  jq -n '{city: \"Oslo\"}' | bdk call get_weather -i -
  bdk call deploy -i @deploy.json --approve")]
    Call {
        /// The tool.
        tool: String,
        #[command(flatten)]
        project: ProjectArgs,
        /// The input as JSON, `-` to read it from standard input, or
        /// `@FILE` to read it from a file.
        #[arg(long, short = 'i', default_value = "{}", value_name = "JSON|-|@FILE")]
        input: String,
        /// Bind the call to a session (its workspace, recorded in its events).
        #[arg(long)]
        session: Option<String>,
        /// Approve a `needs_approval` tool yourself (recorded as approved by
        /// `local`); without it such a tool is refused.
        #[arg(long)]
        approve: bool,
        /// Print JSON (also what a pipe gets; a terminal gets text).
        #[arg(long)]
        json: bool,
    },
    /// Summarise a saved event file in the shape `run` prints.
    Trajectory {
        /// An NDJSON events file (a trace, or a session's events.ndjson).
        #[arg(long, short = 'e')]
        events: PathBuf,
    },
    /// List stored sessions.
    #[command(after_help = "Examples:
  bdk sessions
  bdk sessions --json | jq '.[0].id'")]
    Sessions {
        #[command(flatten)]
        project: ProjectArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Serve agents over HTTP: `/<slug>/v1/*` per agent, host routes at `/`.
    #[command(after_help = "Examples:
  bdk serve                          the project here, on port 3000 (or the next free)
  bdk serve --dev                    list every session to loopback callers
  bdk serve a b --port 8080          two agents, under /a/v1 and /b/v1
  bdk serve --mode single --bearer-token \"$TOKEN\" --host 0.0.0.0")]
    Serve {
        /// Project directories (default: the current directory).
        #[arg(value_name = "DIR")]
        dirs: Vec<PathBuf>,
        /// Development mode: every session is listed to loopback callers.
        #[arg(long)]
        dev: bool,
        /// Port [default: 3000, and when it is busy the next free one]; an
        /// explicit port that is busy is an error; 0 picks any free port.
        #[arg(long)]
        port: Option<u16>,
        /// Interface to bind.
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// `single` serves one agent at `/v1/*`; `multi` (default) mounts each under its slug.
        #[arg(long, value_parser = ["single", "multi"], default_value = "multi")]
        mode: String,
        /// State root (an agent's state goes under `<root>/<slug>` in multi mode).
        #[arg(long, value_name = "DIR", env = "BDK_STATE_ROOT")]
        state_root: Option<PathBuf>,
        /// Require `Authorization: Bearer`; `principal=token` names the caller (repeatable).
        #[arg(long = "bearer-token", value_name = "TOKEN", env = "BDK_BEARER_TOKEN")]
        bearer_tokens: Vec<String>,
        /// Admit every caller (no auth).
        #[arg(long)]
        allow_anonymous: bool,
        /// Do not serve the web playground.
        #[arg(long)]
        no_playground: bool,
        /// Do not serve `/docs`.
        #[arg(long)]
        no_docs: bool,
        /// Do not fire schedules.
        #[arg(long)]
        no_schedules: bool,
        /// Export traces and metrics over OTLP/gRPC to URL (e.g.
        /// http://localhost:4317); `OTEL_EXPORTER_OTLP_ENDPOINT` also turns it on.
        #[arg(long, value_name = "URL")]
        otlp_endpoint: Option<String>,
        /// Where sessions and state live: `fs` (default, the state root) or a
        /// `postgres://` URL shared by several replicas (schema `bdk_<slug>`).
        #[arg(long, value_name = "fs|URL", env = "BDK_STORE")]
        store: Option<String>,
        #[command(flatten)]
        connections: serve::ConnectionArgs,
        /// Refuse to start when the system cannot enforce every protection
        /// of the tool sandbox (Landlock, PID namespaces, privilege drop),
        /// instead of warning.
        #[arg(long, env = "BDK_REQUIRE_SANDBOX")]
        require_sandbox: bool,
        /// Memory for the conversations of resting sessions, per agent
        /// (`64MiB`, `512KiB`, bytes); least recently used first out, rebuilt
        /// from the events on the next turn. `0` keeps none.
        #[arg(long, value_name = "SIZE", env = "BDK_SESSION_CACHE", default_value = "4MiB", value_parser = serve::parse_size)]
        session_cache: u64,
    },
    /// Serve the agent for development and reload it when its folder
    /// changes: `serve --dev` that watches `agent/`.
    #[command(after_help = "Examples:
  bdk dev                            the project here, on port 3000 (or the next free)
  bdk dev my-agent --port 8080
Edit a file under agent/ and the next turn takes the change; sessions, open
streams and the port stay. A change with errors is shown here, in
GET /v1/info and in the playground, and the last good version keeps serving.")]
    Dev {
        /// Project directories (default: the project around the current
        /// directory).
        #[arg(value_name = "DIR")]
        dirs: Vec<PathBuf>,
        /// Port [default: 3000, and when it is busy the next free one]; an
        /// explicit port that is busy is an error; 0 picks any free port.
        #[arg(long)]
        port: Option<u16>,
        /// Interface to bind.
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// `single` serves one agent at `/v1/*`; `multi` (default) mounts each under its slug.
        #[arg(long, value_parser = ["single", "multi"], default_value = "multi")]
        mode: String,
        /// State root (an agent's state goes under `<root>/<slug>` in multi mode).
        #[arg(long, value_name = "DIR", env = "BDK_STATE_ROOT")]
        state_root: Option<PathBuf>,
        /// Do not serve the web playground.
        #[arg(long)]
        no_playground: bool,
    },
    /// Token usage and estimated cost per session, with totals.
    Cost {
        #[command(flatten)]
        project: ProjectArgs,
        /// Only this session.
        #[arg(long)]
        session: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Serve the agent as an MCP server on stdin/stdout (`ask`, `check` and
    /// its server tools), for desktop MCP clients. Logs go to stderr.
    /// `bdk mcp login NAME` signs in to a connection that uses OAuth.
    #[command(args_conflicts_with_subcommands = true)]
    #[command(after_help = "Examples:
  bdk mcp --dir examples/weather         serve over stdio
  bdk mcp login linear                   sign in to the `linear` connection")]
    Mcp {
        #[command(subcommand)]
        command: Option<McpCommand>,
        #[command(flatten)]
        project: ProjectArgs,
    },
    /// Run the project's evals (`evals/**/*.eval.toml`) and report; exits 1
    /// when a case fails.
    #[command(after_help = "Examples:
  bdk evals
  bdk evals --filter paris --verbose
  bdk evals --json --junit report.xml      for CI
  bdk evals --url http://127.0.0.1:3000    against a running server")]
    Evals(evals::EvalsArgs),
    /// Send GitHub webhook deliveries to a running server: replay one (from
    /// a pull request URL or a saved file) or forward a relay's.
    Github(github::GithubArgs),
    /// Print a shell completion script.
    #[command(after_help = "Examples:
  bdk completions bash > ~/.local/share/bash-completion/completions/bdk
  bdk completions zsh > \"${fpath[1]}/_bdk\"
  bdk completions fish > ~/.config/fish/completions/bdk.fish")]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), or write one page per command.
    #[command(after_help = "Examples:
  bdk man | man -l -
  bdk man --out-dir ~/.local/share/man/man1")]
    Man {
        /// Write `bdk.1` and a page per command (`bdk-serve.1`, ...) here
        /// instead of printing `bdk.1`.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
    /// Set up and check a Slack channel's app: print its app manifest, or
    /// check its token, scopes, signing secret and request URL.
    Slack(slack::SlackArgs),
    /// Show one stored session.
    Session {
        /// The session id.
        id: String,
        #[command(flatten)]
        project: ProjectArgs,
        /// Print the raw NDJSON events instead of the summary.
        #[arg(long)]
        events: bool,
        /// Print JSON (also what a pipe gets; a terminal gets text).
        #[arg(long)]
        json: bool,
    },
}

/// `bdk mcp` subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum McpCommand {
    /// Sign in to an HTTP MCP connection that declares `[oauth]` and store
    /// its tokens under the state root (`<state root>/mcp-auth/NAME.json`).
    Login {
        /// The connection (its manifest's file stem under
        /// `agent/mcp-connections/`).
        name: String,
        #[command(flatten)]
        project: ProjectArgs,
        /// Print the sign-in URL without trying to open a browser.
        #[arg(long)]
        no_browser: bool,
    },
}
