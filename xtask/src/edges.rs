//! The crate-edge check: the layering of the workspace, written down and
//! tested.
//!
//! Dependencies point one way: `bdk-events` <- {`bdk-store`, `bdk-models`}
//! <- `bdk-project` (the agent folder as data, on `bdk-models`' plain
//! types) <- `bdk-exec` (running programs) <- `bdk-core` <- {`bdk-mcp`, `bdk-scheduler`, `bdk-evals`} <-
//! `bdk-http` <- `bdk-cli`. `bdk-api` (the HTTP contract) stands on
//! `bdk-events` alone, so a client pays for no runtime; `bdk-http` serves
//! it, `bdk-evals` (its HTTP target) and `bdk-cli` call it.
//! [`check_edges`] reads `cargo metadata --no-deps` and reports every
//! dependency between workspace crates that the layering does not allow (of
//! any kind: a test that reaches up the stack is still a crate naming one
//! above it), every workspace crate without a rule here, and every crate but
//! the owners that names an external crate family only its owners may know
//! (normal and build dependencies; a dev-dependency may use one to test
//! against).
//!
//! `bdk-bench` (the benchmark programs' report entries) and `bdk-testkit`
//! (what the test suites share) stand outside the layering: any crate may
//! name them as a dev-dependency, and no crate may name them as a normal or
//! build dependency. `bdk-bench` depends on no workspace crate,
//! `bdk-testkit` on the runtime and below.

use std::collections::BTreeSet;

use serde_json::Value;

/// Which workspace crates a crate may depend on.
enum Allowed {
    /// Exactly these (possibly none).
    Only(&'static [&'static str]),
    /// Any workspace crate: the binary that composes everything.
    Any,
}

const CORE_AND_BELOW: &[&str] = &[
    "bdk-events",
    "bdk-api",
    "bdk-store",
    "bdk-models",
    "bdk-project",
    "bdk-exec",
    "bdk-core",
];

/// Workspace crates for benchmarks and tests only: any crate may name them as
/// dev-dependencies, none as normal or build dependencies.
const DEV_ONLY: &[&str] = &["bdk-bench", "bdk-testkit"];

/// The layering. A new workspace crate needs a line here before it builds.
const RULES: &[(&str, Allowed)] = &[
    ("bdk-events", Allowed::Only(&[])),
    ("bdk-store", Allowed::Only(&["bdk-events"])),
    ("bdk-sandbox", Allowed::Only(&[])),
    // The model port and providers, usable without the runtime.
    ("bdk-models", Allowed::Only(&["bdk-events"])),
    // The agent folder as data: discovery, diagnostics, the spec types.
    // (bdk-api for the route paths `bdk info` shows, without its client.)
    (
        "bdk-project",
        Allowed::Only(&["bdk-events", "bdk-models", "bdk-api"]),
    ),
    // Running programs: tools, processes, containment, workspaces,
    // handlers, gates. Below the runtime; knows no session or host.
    (
        "bdk-exec",
        Allowed::Only(&["bdk-events", "bdk-models", "bdk-project", "bdk-sandbox"]),
    ),
    (
        "bdk-core",
        Allowed::Only(&[
            "bdk-events",
            "bdk-store",
            "bdk-models",
            "bdk-project",
            "bdk-exec",
            "bdk-sandbox",
        ]),
    ),
    // The HTTP contract: routes, bodies, error codes, the stream reader and
    // a client. On the event vocabulary alone.
    ("bdk-api", Allowed::Only(&["bdk-events"])),
    ("bdk-mcp", Allowed::Only(CORE_AND_BELOW)),
    ("bdk-scheduler", Allowed::Only(CORE_AND_BELOW)),
    ("bdk-evals", Allowed::Only(CORE_AND_BELOW)),
    // The GitHub pack: webhook ingress, progress, tools and the REST client.
    ("bdk-github", Allowed::Only(CORE_AND_BELOW)),
    // The Slack pack: Events API ingress, placeholders, approval cards and
    // the Web API client.
    ("bdk-slack", Allowed::Only(CORE_AND_BELOW)),
    (
        "bdk-http",
        Allowed::Only(&[
            "bdk-events",
            "bdk-api",
            "bdk-store",
            "bdk-models",
            "bdk-core",
            "bdk-mcp",
            "bdk-scheduler",
            "bdk-evals",
            "bdk-github",
            "bdk-slack",
        ]),
    ),
    ("bdk-cli", Allowed::Any),
    // Report entries for the benchmark programs; see DEV_ONLY.
    ("bdk-bench", Allowed::Only(&[])),
    // Agent folders, hosts and waiters for the test suites; see DEV_ONLY.
    ("bdk-testkit", Allowed::Only(CORE_AND_BELOW)),
    // xtask drives cargo from the outside and links none of the product.
    ("xtask", Allowed::Only(&[])),
];

/// An external crate family only some workspace crates may name: an
/// invariant stated as an absence.
struct Owned {
    family: &'static str,
    /// Members whose names do not start with the family's.
    also: &'static [&'static str],
    /// The crates that may name it. One that does not exist (yet) is fine:
    /// the rule only restricts the crates that do.
    owners: &'static [&'static str],
}

const OWNED: &[Owned] = &[
    Owned {
        family: "axum",
        also: &[],
        owners: &["bdk-http"],
    },
    Owned {
        family: "rmcp",
        also: &[],
        owners: &["bdk-mcp"],
    },
    Owned {
        family: "sqlx",
        also: &[],
        owners: &["bdk-store"],
    },
    Owned {
        family: "landlock",
        also: &[],
        owners: &["bdk-sandbox"],
    },
    // "OpenTelemetry only in the CLI": bdk-core emits plain `tracing` and the
    // binary decides where spans go.
    Owned {
        family: "opentelemetry",
        also: &["tracing-opentelemetry"],
        owners: &["bdk-cli"],
    },
    // "reqwest only where outbound HTTP lives": the model providers, `url`
    // tools and hooks (bdk-core, and bdk-models once the providers move
    // there), the MCP HTTP client, bdk-api's client of a running server
    // (which the HTTP eval target and the CLI use), the GitHub REST and
    // Slack Web API clients, and the CLI.
    Owned {
        family: "reqwest",
        also: &[],
        owners: &[
            "bdk-core",
            "bdk-exec",
            "bdk-models",
            "bdk-api",
            "bdk-mcp",
            "bdk-github",
            "bdk-slack",
            "bdk-cli",
        ],
    },
    // "The agent folder is data": bdk-project (and the event vocabulary
    // under it) run without an async runtime, so `bdk validate`, the eval
    // loader and editor tooling never start one.
    Owned {
        family: "tokio",
        also: &["futures", "async-trait"],
        owners: &[
            "bdk-store",
            "bdk-models",
            "bdk-api",
            "bdk-exec",
            "bdk-core",
            "bdk-mcp",
            "bdk-scheduler",
            "bdk-evals",
            "bdk-github",
            "bdk-slack",
            "bdk-http",
            "bdk-cli",
            "bdk-testkit",
            "bdk-sandbox",
        ],
    },
    // The OpenAPI document is generated from bdk-http's routers.
    Owned {
        family: "aide",
        also: &[],
        owners: &["bdk-http"],
    },
];

impl Owned {
    /// True when `dep` is the family, one of its companion crates
    /// (`sqlx-core`, `axum-extra`, `opentelemetry_sdk`, ...) or one of
    /// [`Owned::also`].
    fn contains(&self, dep: &str) -> bool {
        dep == self.family
            || self.also.contains(&dep)
            || dep
                .strip_prefix(self.family)
                .is_some_and(|rest| rest.starts_with(['-', '_']))
    }

    /// The owners as a sentence fragment: `a`, `a or b`, `a, b or c`.
    fn owner_list(&self) -> String {
        match self.owners {
            [] => "no crate".to_owned(),
            [one] => (*one).to_owned(),
            [init @ .., last] => format!("{} or {last}", init.join(", ")),
        }
    }
}

/// Every layering problem in `metadata` (the JSON of
/// `cargo metadata --format-version 1 --no-deps`), one message each, naming
/// the offending edge. Empty when the workspace follows the rules.
pub fn check_edges(metadata: &Value) -> Vec<String> {
    let Some(packages) = metadata.get("packages").and_then(Value::as_array) else {
        return vec!["cargo metadata has no `packages` array".to_owned()];
    };
    let ours: BTreeSet<&str> = packages
        .iter()
        .filter_map(|p| p.get("name").and_then(Value::as_str))
        .collect();

    let mut problems = Vec::new();
    for package in packages {
        let Some(name) = package.get("name").and_then(Value::as_str) else {
            problems.push("a package in cargo metadata has no name".to_owned());
            continue;
        };
        let Some((_, allowed)) = RULES.iter().find(|(crate_name, _)| *crate_name == name) else {
            problems.push(format!(
                "workspace crate {name} has no layering rule: add it to RULES in xtask/src/edges.rs"
            ));
            continue;
        };
        let deps = package
            .get("dependencies")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for dep in deps {
            let Some(dep_name) = dep.get("name").and_then(Value::as_str) else {
                problems.push(format!("a dependency of {name} has no name"));
                continue;
            };
            let kind = dep.get("kind").and_then(Value::as_str).unwrap_or("normal");
            // A crate may name itself as a dev-dependency to turn on its own
            // features in tests (bdk-store does, for its conformance suite).
            if dep_name == name {
                continue;
            }
            if DEV_ONLY.contains(&dep_name) {
                if kind != "dev" {
                    problems.push(format!(
                        "forbidden edge {name} -> {dep_name} ({kind} dependency): \
                         {dep_name} may only be a dev-dependency"
                    ));
                }
                continue;
            }
            if ours.contains(dep_name) {
                if let Allowed::Only(list) = allowed
                    && !list.contains(&dep_name)
                {
                    let may = if list.is_empty() {
                        "none of ours".to_owned()
                    } else {
                        list.join(", ")
                    };
                    problems.push(format!(
                        "forbidden edge {name} -> {dep_name} ({kind} dependency): \
                         {name} may depend on {may}"
                    ));
                }
                continue;
            }
            if kind == "dev" {
                continue;
            }
            for owned in OWNED {
                if owned.contains(dep_name) && !owned.owners.contains(&name) {
                    problems.push(format!(
                        "forbidden edge {name} -> {dep_name} ({kind} dependency): \
                         only {} may depend on {}",
                        owned.owner_list(),
                        owned.family
                    ));
                }
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// A fabricated `cargo metadata` document: (crate, [(dep, kind)]).
    fn metadata(packages: &[(&str, &[(&str, &str)])]) -> Value {
        let packages: Vec<Value> = packages
            .iter()
            .map(|(name, deps)| {
                let deps: Vec<Value> = deps
                    .iter()
                    .map(|(dep, kind)| {
                        let kind = if *kind == "normal" {
                            Value::Null
                        } else {
                            json!(kind)
                        };
                        json!({"name": dep, "kind": kind, "rename": null, "optional": false})
                    })
                    .collect();
                json!({"name": name, "version": "0.0.0", "dependencies": deps})
            })
            .collect();
        json!({"packages": packages, "version": 1})
    }

    /// Every crate of the layering with every edge it is allowed, plus
    /// dev-dependencies on engines, which are allowed anywhere, and a crate's
    /// dev-dependency on itself.
    fn allowed_workspace() -> Vec<(&'static str, Vec<(&'static str, &'static str)>)> {
        vec![
            ("bdk-events", vec![("serde", "normal")]),
            (
                "bdk-api",
                vec![
                    ("bdk-events", "normal"),
                    ("reqwest", "normal"),
                    ("tokio", "normal"),
                ],
            ),
            (
                "bdk-store",
                vec![
                    ("bdk-events", "normal"),
                    ("sqlx", "normal"),
                    ("bdk-store", "dev"),
                ],
            ),
            (
                "bdk-core",
                vec![
                    ("bdk-events", "normal"),
                    ("bdk-store", "normal"),
                    ("bdk-store", "dev"),
                    ("axum", "dev"),
                    ("bdk-bench", "dev"),
                    ("reqwest", "normal"),
                ],
            ),
            (
                "bdk-mcp",
                vec![
                    ("bdk-core", "normal"),
                    ("rmcp", "normal"),
                    ("reqwest", "normal"),
                ],
            ),
            (
                "bdk-scheduler",
                vec![("bdk-core", "normal"), ("bdk-store", "normal")],
            ),
            (
                "bdk-evals",
                vec![
                    ("bdk-core", "normal"),
                    ("bdk-events", "normal"),
                    ("bdk-api", "normal"),
                ],
            ),
            (
                "bdk-http",
                vec![
                    ("bdk-mcp", "normal"),
                    ("bdk-scheduler", "normal"),
                    ("bdk-evals", "normal"),
                    ("axum", "normal"),
                    ("axum-extra", "normal"),
                    // Its tests are HTTP clients of the router.
                    ("reqwest", "dev"),
                ],
            ),
            (
                "bdk-cli",
                vec![
                    ("bdk-http", "normal"),
                    ("bdk-core", "normal"),
                    ("rmcp", "dev"),
                    ("bdk-bench", "dev"),
                    ("reqwest", "normal"),
                    ("opentelemetry", "normal"),
                    ("opentelemetry_sdk", "normal"),
                    ("opentelemetry-otlp", "normal"),
                    ("tracing-opentelemetry", "normal"),
                    ("opentelemetry-proto", "dev"),
                ],
            ),
            ("bdk-bench", vec![("serde_json", "normal")]),
            (
                "bdk-testkit",
                vec![("bdk-core", "normal"), ("bdk-store", "normal")],
            ),
            ("xtask", vec![("serde_json", "normal")]),
        ]
    }

    fn check_with(extra: &[(&'static str, (&'static str, &'static str))]) -> Vec<String> {
        let mut workspace = allowed_workspace();
        for (crate_name, dep) in extra {
            match workspace.iter_mut().find(|(name, _)| name == crate_name) {
                Some((_, deps)) => deps.push(*dep),
                None => workspace.push((crate_name, vec![*dep])),
            }
        }
        let packages: Vec<(&str, &[(&str, &str)])> = workspace
            .iter()
            .map(|(name, deps)| (*name, deps.as_slice()))
            .collect();
        check_edges(&metadata(&packages))
    }

    #[test]
    fn the_workspace_follows_the_layering() {
        let root = crate::workspace_root();
        let metadata = crate::workspace_metadata(&root).unwrap();
        // Guard against a vacuous pass: the metadata must show our crates.
        let names: BTreeSet<&str> = metadata["packages"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        for expected in ["bdk-events", "bdk-store", "bdk-core", "bdk-cli", "xtask"] {
            assert!(
                names.contains(expected),
                "{expected} missing from {names:?}"
            );
        }
        let problems = check_edges(&metadata);
        assert!(
            problems.is_empty(),
            "crate edges break the layering:\n{}",
            problems.join("\n")
        );
    }

    #[test]
    fn every_allowed_edge_passes() {
        assert_eq!(check_with(&[]), Vec::<String>::new());
    }

    #[test]
    fn an_upward_edge_fails_naming_it() {
        let problems = check_with(&[("bdk-store", ("bdk-core", "normal"))]);
        assert_eq!(
            problems,
            ["forbidden edge bdk-store -> bdk-core (normal dependency): \
              bdk-store may depend on bdk-events"]
        );
    }

    #[test]
    fn sibling_and_dev_edges_are_checked_too() {
        let problems = check_with(&[
            ("bdk-mcp", ("bdk-scheduler", "normal")),
            ("bdk-events", ("bdk-store", "dev")),
            ("xtask", ("bdk-core", "build")),
        ]);
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(problems[0].contains("bdk-events -> bdk-store (dev dependency)"));
        assert!(problems[0].contains("may depend on none of ours"));
        assert!(problems[1].contains("bdk-mcp -> bdk-scheduler"));
        assert!(problems[2].contains("xtask -> bdk-core (build dependency)"));
    }

    #[test]
    fn the_bench_crate_is_a_dev_dependency_only() {
        // A dev-dependency from any crate passes, even from the lowest one.
        assert!(check_with(&[("bdk-events", ("bdk-bench", "dev"))]).is_empty());
        let problems = check_with(&[
            ("bdk-cli", ("bdk-bench", "normal")),
            ("bdk-store", ("bdk-bench", "build")),
            ("bdk-bench", ("bdk-events", "normal")),
        ]);
        assert_eq!(
            problems,
            [
                "forbidden edge bdk-store -> bdk-bench (build dependency): \
                 bdk-bench may only be a dev-dependency",
                "forbidden edge bdk-cli -> bdk-bench (normal dependency): \
                 bdk-bench may only be a dev-dependency",
                "forbidden edge bdk-bench -> bdk-events (normal dependency): \
                 bdk-bench may depend on none of ours",
            ]
        );
    }

    #[test]
    fn the_agent_folder_reader_never_names_an_async_runtime() {
        let problems = check_with(&[
            ("bdk-project", ("tokio", "normal")),
            ("bdk-project", ("futures", "normal")),
            ("bdk-project", ("tempfile", "dev")),
        ]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0]
                .starts_with("forbidden edge bdk-project -> tokio (normal dependency): only "),
            "{problems:?}"
        );
        assert!(
            problems[1].contains("bdk-project -> futures "),
            "{problems:?}"
        );
    }

    #[test]
    fn the_testkit_is_a_dev_dependency_only_and_stays_below_the_surfaces() {
        // The runtime's own tests may use it, though it depends on the runtime.
        assert!(check_with(&[("bdk-core", ("bdk-testkit", "dev"))]).is_empty());
        let problems = check_with(&[
            ("bdk-http", ("bdk-testkit", "normal")),
            ("bdk-testkit", ("bdk-http", "normal")),
        ]);
        assert_eq!(
            problems,
            [
                "forbidden edge bdk-http -> bdk-testkit (normal dependency): \
                 bdk-testkit may only be a dev-dependency",
                "forbidden edge bdk-testkit -> bdk-http (normal dependency): \
                 bdk-testkit may depend on bdk-events, bdk-api, bdk-store, bdk-models, bdk-project, bdk-exec, bdk-core",
            ]
        );
    }

    #[test]
    fn engine_crates_belong_to_their_owner() {
        let problems = check_with(&[
            ("bdk-core", ("axum", "normal")),
            ("bdk-cli", ("sqlx-postgres", "normal")),
            ("bdk-http", ("rmcp", "build")),
        ]);
        assert_eq!(
            problems,
            [
                "forbidden edge bdk-core -> axum (normal dependency): only bdk-http may depend on axum",
                "forbidden edge bdk-http -> rmcp (build dependency): only bdk-mcp may depend on rmcp",
                "forbidden edge bdk-cli -> sqlx-postgres (normal dependency): only bdk-store may depend on sqlx",
            ]
        );
        // A crate whose name merely starts with a family name is not in it.
        assert!(check_with(&[("bdk-core", ("axumish", "normal"))]).is_empty());
    }

    #[test]
    fn a_family_with_several_owners_is_open_to_each_and_closed_to_the_rest() {
        // Every owner of reqwest may name it (the allowed workspace does);
        // the others may not, but may as a dev-dependency.
        assert!(check_with(&[("bdk-scheduler", ("reqwest", "dev"))]).is_empty());
        let problems = check_with(&[
            ("bdk-http", ("reqwest", "normal")),
            ("bdk-store", ("reqwest", "build")),
        ]);
        assert_eq!(
            problems,
            [
                "forbidden edge bdk-store -> reqwest (build dependency): \
                 only bdk-core, bdk-exec, bdk-models, bdk-api, bdk-mcp, bdk-github, bdk-slack or bdk-cli may depend on reqwest",
                "forbidden edge bdk-http -> reqwest (normal dependency): \
                 only bdk-core, bdk-exec, bdk-models, bdk-api, bdk-mcp, bdk-github, bdk-slack or bdk-cli may depend on reqwest",
            ]
        );
    }

    #[test]
    fn an_owner_that_does_not_exist_yet_fails_nothing() {
        // bdk-models is named as a reqwest owner before the crate exists.
        let owners = OWNED.iter().flat_map(|o| o.owners.iter());
        assert!(owners.clone().any(|o| *o == "bdk-models"));
        assert!(allowed_workspace().iter().all(|(n, _)| *n != "bdk-models"));
        assert!(check_with(&[]).is_empty());
    }

    #[test]
    fn opentelemetry_is_the_clis_alone_companions_included() {
        let problems = check_with(&[
            ("bdk-core", ("opentelemetry", "normal")),
            ("bdk-http", ("opentelemetry_sdk", "normal")),
            (
                "bdk-scheduler",
                ("opentelemetry-semantic-conventions", "normal"),
            ),
            ("bdk-core", ("tracing-opentelemetry", "normal")),
        ]);
        let only = "only bdk-cli may depend on opentelemetry";
        assert_eq!(
            problems,
            [
                format!("forbidden edge bdk-core -> opentelemetry (normal dependency): {only}"),
                format!(
                    "forbidden edge bdk-core -> tracing-opentelemetry (normal dependency): {only}"
                ),
                format!(
                    "forbidden edge bdk-scheduler -> opentelemetry-semantic-conventions (normal dependency): {only}"
                ),
                format!("forbidden edge bdk-http -> opentelemetry_sdk (normal dependency): {only}"),
            ]
        );
        // A dev-dependency stays free, and `tracing` itself is no member.
        assert!(
            check_with(&[
                ("bdk-core", ("opentelemetry", "dev")),
                ("bdk-core", ("tracing", "normal")),
                ("bdk-core", ("tracing-subscriber", "normal")),
            ])
            .is_empty()
        );
    }

    #[test]
    fn a_crate_without_a_rule_fails() {
        let problems = check_with(&[("bdk-new", ("bdk-events", "normal"))]);
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].contains("bdk-new has no layering rule"),
            "{problems:?}"
        );
    }

    #[test]
    fn malformed_metadata_is_a_problem_not_a_pass() {
        assert_eq!(check_edges(&json!({})).len(), 1);
        assert_eq!(
            check_edges(&json!({"packages": [{"dependencies": []}]})).len(),
            1
        );
    }
}
