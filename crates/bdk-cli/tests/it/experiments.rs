#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A/B experiments through the real `bdk` binary: the split of many
//! sessions between weighted arms, arms that survive a restart and an edit
//! of the weights, `GET /v1/abs` against a fold of the session files done
//! here, a suite run once per arm, the diagnostics of broken experiments,
//! and the commands of `docs/experiments.md` as written.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use assert_cmd::cargo::CommandCargoExt;
use chrono::{DateTime, Utc};
use common::{Server, client, copy_dir, get_json, post, run_json, wait_for};
use serde_json::{Value, json};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A private copy of `examples/ab` at `<tmp>/examples/ab`.
fn example() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("examples/ab");
    copy_dir(&workspace().join("examples/ab"), &dir);
    (tmp, dir)
}

fn bdk() -> Command {
    let mut cmd = Command::cargo_bin("bdk").unwrap();
    cmd.env_remove("BDK_STATE_ROOT")
        .env_remove("BDK_BEARER_TOKEN")
        .env_remove("BDK_TOKEN");
    cmd
}

fn serve(dir: &Path, state: &Path) -> Server {
    let mut cmd = bdk();
    cmd.arg("serve")
        .arg(dir)
        .args(["--port", "0", "--mode", "single", "--dev", "--state-root"])
        .arg(state);
    Server::spawn(cmd)
}

/// Every session's events, read from the state root's files as a reader of
/// the documented layout would (`sessions/<id>/events.ndjson`).
fn session_files(state: &Path) -> BTreeMap<String, Vec<Value>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(state.join("sessions")).unwrap() {
        let path = entry.unwrap().path().join("events.ndjson");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let events: Vec<Value> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let id = events[0]["sessionId"].as_str().unwrap().to_owned();
        out.insert(id, events);
    }
    out
}

/// The figures `GET /v1/abs` reports for one arm, computed here from the
/// session files: sessions drawn into the arm, their ended turns, failed
/// turns, tokens, durations (a failed turn measured from its
/// `turn.started`) and cost (the scripted model is free).
#[derive(Debug, Default, PartialEq)]
struct Fold {
    sessions: u64,
    turns: u64,
    failed: u64,
    input: u64,
    output: u64,
    duration_ms: u64,
}

fn fold(files: &BTreeMap<String, Vec<Value>>, experiment: &str) -> BTreeMap<String, Fold> {
    let mut arms: BTreeMap<String, Fold> = BTreeMap::new();
    for events in files.values() {
        let Some(assigned) = events.iter().find(|e| {
            e["type"] == "ab.assigned"
                && e["data"]["experiment"] == experiment
                && e["data"]["unit"] != "pinned"
        }) else {
            continue;
        };
        let f = arms
            .entry(assigned["data"]["arm"].as_str().unwrap().to_owned())
            .or_default();
        f.sessions += 1;
        let mut started: BTreeMap<String, DateTime<Utc>> = BTreeMap::new();
        for e in events {
            let at = || e["at"].as_str().unwrap().parse::<DateTime<Utc>>().unwrap();
            let turn = e["turnId"].as_str().unwrap_or_default().to_owned();
            match e["type"].as_str().unwrap() {
                "turn.started" => {
                    started.insert(turn, at());
                }
                "turn.completed" => {
                    f.turns += 1;
                    f.input += e["data"]["usage"]["inputTokens"].as_u64().unwrap();
                    f.output += e["data"]["usage"]["outputTokens"].as_u64().unwrap();
                    f.duration_ms += e["data"]["durationMs"].as_u64().unwrap();
                }
                "turn.failed" => {
                    f.turns += 1;
                    f.failed += 1;
                    if let Some(u) = e["data"]["usage"].as_object() {
                        f.input += u["inputTokens"].as_u64().unwrap();
                        f.output += u["outputTokens"].as_u64().unwrap();
                    }
                    if let Some(s) = started.get(&turn) {
                        f.duration_ms += u64::try_from((at() - *s).num_milliseconds()).unwrap();
                    }
                }
                _ => {}
            }
        }
    }
    arms
}

fn reported(abs: &Value, experiment: &str) -> BTreeMap<String, Fold> {
    let e = abs["experiments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == experiment)
        .unwrap_or_else(|| panic!("no experiment {experiment}: {abs:#}"));
    e["arms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let t = &a["totals"];
            assert_eq!(t["estimatedCostUsd"], 0.0, "{a}");
            assert_eq!(t["unpricedTurns"], 0, "{a}");
            let n = |k: &str| t[k].as_u64().unwrap_or_else(|| panic!("{k} in {t}"));
            (
                a["name"].as_str().unwrap().to_owned(),
                Fold {
                    sessions: n("sessions"),
                    turns: n("turns"),
                    failed: n("failedTurns"),
                    input: n("inputTokens"),
                    output: n("outputTokens"),
                    duration_ms: n("durationMs"),
                },
            )
        })
        .collect()
}

/// The arm each session of the report was drawn into.
fn assignments(abs: &Value) -> BTreeMap<String, String> {
    abs["experiments"][0]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["sessionId"].as_str().unwrap().to_owned(),
                s["arm"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_split_by_weight_keep_their_arm_and_fold_to_the_report() {
    let (tmp, dir) = example();
    // A turn that only a stop ends, in both arms' rules, for failed turns.
    for rules in ["agent/scripted.toml", "agent/scripted/concise.toml"] {
        let path = dir.join(rules);
        let text = std::fs::read_to_string(&path).unwrap();
        let slow = "[[rules]]\nuser_contains = \"slow\"\nreply = \"late\"\ndelay_ms = 600000\n\n";
        std::fs::write(&path, format!("{slow}{text}")).unwrap();
    }
    let state = tmp.path().join("state");
    let c = client();
    let mut server = serve(&dir, &state);
    let base = server.base.clone();

    // 1,000 new sessions (idle: the draw happens at the start), 50/50.
    const N: usize = 1000;
    for _ in 0..N {
        let (status, body) = post(&c, &format!("{base}/v1/session"), json!({})).await;
        assert_eq!(status, 200, "{body}");
    }
    // A few with turns, so the totals have turns, tokens and durations;
    // one turn is stopped, so there is a failed turn too.
    let mut talked = Vec::new();
    let mut stopped = Vec::new();
    for i in 0..8 {
        let (status, body) = post(
            &c,
            &format!("{base}/v1/session"),
            json!({"message": format!("How do I reset my password? ({i})")}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let id = body["sessionId"].as_str().unwrap().to_owned();
        wait_for(&c, &format!("{base}/v1/session/{id}/events"), |e| {
            e["type"] == "session.waiting" && e["index"].as_u64().unwrap() > 2
        })
        .await;
        talked.push(id);
    }
    for _ in 0..2 {
        let (status, body) = post(
            &c,
            &format!("{base}/v1/session"),
            json!({"message": "slow"}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let id = body["sessionId"].as_str().unwrap().to_owned();
        wait_for(&c, &format!("{base}/v1/session/{id}/events"), |e| {
            e["type"] == "step.started"
        })
        .await;
        let (status, body) = post(&c, &format!("{base}/v1/session/{id}/stop"), json!({})).await;
        assert_eq!(status, 200, "{body}");
        stopped.push(id);
    }
    let abs = get_json(&c, &format!("{base}/v1/abs?limit=10000")).await;
    assert_eq!(abs["ok"], true, "{abs}");
    let tone = &abs["experiments"][0];
    assert_eq!(tone["name"], "tone");
    let total = N + talked.len() + stopped.len();
    assert_eq!(tone["totals"]["sessions"], total as u64);
    assert_eq!(tone["totals"]["failedTurns"], stopped.len() as u64);
    let arms = reported(&abs, "tone");
    let control = arms["control"].sessions as f64;
    let share = control / total as f64;
    // 50% within a few points: a 1,000-session binomial has a standard
    // deviation of 1.6 points, so 6 points is far outside chance.
    assert!(
        (0.44..=0.56).contains(&share),
        "control got {share:.3}: {arms:?}"
    );

    // The report equals a fold of the session files done here.
    let files = session_files(&state);
    assert_eq!(fold(&files, "tone"), arms);
    let before = assignments(&abs);
    assert_eq!(before.len(), total);
    for id in &talked {
        let events = &files[id];
        assert_eq!(events[0]["type"], "session.started");
        assert_eq!(events[1]["type"], "ab.assigned", "{events:#?}");
        assert_eq!(events[1]["data"]["unit"], "session");
        assert_eq!(events[1]["data"]["unitKey"], id.as_str());
        // The concise arm runs its own model; control the agent's.
        let model =
            events.iter().find(|e| e["type"] == "turn.started").unwrap()["data"]["model"].clone();
        let want = if before[id] == "concise" {
            "scripted/concise"
        } else {
            "scripted/default"
        };
        assert_eq!(model, want, "{id} in {}", before[id]);
    }

    // Restart over the same state root with the weights edited to 100/0:
    // every existing session keeps its recorded arm, new ones all go to
    // control.
    assert_eq!(server.terminate(), 0);
    let manifest = dir.join("agent/experiments/tone.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let edited =
        text.replacen("weight = 50", "weight = 100", 1)
            .replacen("weight = 50", "weight = 0", 1);
    assert_ne!(text, edited);
    std::fs::write(&manifest, edited).unwrap();
    let server = serve(&dir, &state);
    let base = server.base.clone();
    for id in &talked {
        let last = files[id].last().unwrap()["index"].as_u64().unwrap();
        let (status, body) = post(
            &c,
            &format!("{base}/v1/session/{id}"),
            json!({"message": "And my username?"}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let events = wait_for(&c, &format!("{base}/v1/session/{id}/events"), |e| {
            e["type"] == "session.waiting" && e["index"].as_u64().unwrap() > last
        })
        .await;
        let models: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "turn.started")
            .map(|e| &e["data"]["model"])
            .collect();
        assert_eq!(models.len(), 2);
        assert_eq!(models[0], models[1], "the arm's model after the restart");
        assert_eq!(
            events.iter().filter(|e| e["type"] == "ab.assigned").count(),
            1
        );
    }
    let mut fresh = Vec::new();
    for _ in 0..20 {
        let (_, body) = post(&c, &format!("{base}/v1/session"), json!({})).await;
        fresh.push(body["sessionId"].as_str().unwrap().to_owned());
    }
    let abs = get_json(&c, &format!("{base}/v1/abs?limit=10000")).await;
    let after = assignments(&abs);
    for (id, arm) in &before {
        assert_eq!(&after[id], arm, "{id} moved");
    }
    for id in &fresh {
        assert_eq!(after[id], "control", "new sessions follow the new weights");
    }
    let arms = reported(&abs, "tone");
    assert_eq!(fold(&session_files(&state), "tone"), arms);
    assert_eq!(
        arms["concise"].sessions,
        before.values().filter(|a| *a == "concise").count() as u64
    );
    assert_eq!(
        abs["experiments"][0]["arms"][1]["weight"], 0,
        "the report shows the edited weights"
    );

    // `limit` bounds the listed assignments, not the totals.
    let short = get_json(&c, &format!("{base}/v1/abs?limit=3")).await;
    assert_eq!(
        short["experiments"][0]["sessions"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        short["experiments"][0]["sessionsOmitted"],
        (total + fresh.len() - 3) as u64
    );
    let r = c
        .get(format!("{base}/v1/abs?limit=99999999"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = c
        .get(format!("{base}/v1/abs?limit=x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

#[test]
fn a_suite_runs_per_arm_side_by_side() {
    let (_tmp, dir) = example();
    let junit = dir.join("junit.xml");
    let (code, report) = run_json(
        bdk()
            .args(["evals", "--per-arm", "tone", "--json", "--junit"])
            .arg(&junit)
            .arg("--dir")
            .arg(&dir),
    );
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["experiment"], "tone");
    assert_eq!(report["passed"], true);
    let arms = report["arms"].as_array().unwrap();
    assert_eq!(
        arms.iter()
            .map(|a| a["arm"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["control", "concise"]
    );
    let files = session_files(&dir.join(".bdk"));
    for arm in arms {
        let name = arm["arm"].as_str().unwrap();
        let cases = arm["run"]["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 2, "{arm:#}");
        for case in cases {
            assert_eq!(case["status"], "passed", "{case:#}");
            let session = case["iterations"][0]["sessionId"].as_str().unwrap();
            let assigned = files[session]
                .iter()
                .find(|e| e["type"] == "ab.assigned")
                .unwrap();
            // The case pinned to `concise` keeps its pin in both runs.
            let want = if case["id"] == "tone/concise-is-short" {
                "concise"
            } else {
                name
            };
            assert_eq!(assigned["data"]["arm"], want, "{case:#}");
            assert_eq!(assigned["data"]["unit"], "pinned");
        }
    }
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("name=\"tone/control\""), "{xml}");
    assert!(xml.contains("name=\"tone/concise\""), "{xml}");

    // The text table: one column per arm.
    let out = bdk()
        .args(["evals", "--per-arm", "tone", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let header = text.lines().nth(1).unwrap();
    assert!(
        header.starts_with("case") && header.contains("control") && header.contains("concise"),
        "{text}"
    );
    assert!(text.contains("tone/password-reset"), "{text}");

    // A suite whose `password-reset` case only the control arm passes:
    // the run fails, and the table says which arm failed.
    let evals = dir.join("evals/tone.eval.toml");
    let strict = std::fs::read_to_string(&evals).unwrap().replacen(
        "expect = { \"$regex\" = \"Security\" }",
        "expect = { \"$regex\" = \"Thanks\" }",
        1,
    );
    std::fs::write(&evals, strict).unwrap();
    let out = bdk()
        .args(["evals", "--per-arm", "tone", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("tone/password-reset"))
        .unwrap();
    let cells: Vec<&str> = row.split("  ").filter(|c| !c.trim().is_empty()).collect();
    assert!(cells[1].trim().starts_with("passed"), "{row}");
    assert!(cells[2].trim().starts_with("FAILED"), "{row}");
    assert!(text.contains("[concise] tone/password-reset"), "{text}");

    // An experiment the agent does not declare is refused up front.
    let out = bdk()
        .args(["evals", "--per-arm", "nope", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("experiment `nope`") && err.contains("declared: tone"),
        "{err}"
    );
}

/// `bdk validate --json` of a copy of the example with `files` written over it.
fn validate_with(files: &[(&str, &str)]) -> (i32, Vec<Value>) {
    let (_tmp, dir) = example();
    bdk_testkit::write_files(&dir, files);
    let (code, v) = run_json(bdk().args(["validate", "--json"]).arg(&dir));
    (code, v["diagnostics"].as_array().unwrap().clone())
}

fn has(diags: &[Value], severity: &str, file: &str, needle: &str) -> bool {
    diags.iter().any(|d| {
        d["severity"] == severity
            && d["file"] == file
            && d["message"].as_str().unwrap().contains(needle)
    })
}

#[test]
fn validate_reports_broken_experiments() {
    // The example itself is clean.
    let (code, diags) = validate_with(&[]);
    assert_eq!((code, diags.len()), (0, 0), "{diags:#?}");

    const TONE: &str = "agent/experiments/tone.toml";
    // Weights that do not add up.
    let (code, diags) = validate_with(&[(
        TONE,
        "[[arms]]\nname = \"a\"\nweight = 60\n[[arms]]\nname = \"b\"\nweight = 30\n",
    )]);
    assert_eq!(code, 2);
    assert!(
        has(
            &diags,
            "error",
            TONE,
            "add up to 90 (a 60 + b 30); they must add up to 100"
        ),
        "{diags:#?}"
    );
    // An arm naming a missing overlay.
    let (code, diags) = validate_with(&[(
        TONE,
        "[[arms]]\nname = \"a\"\nweight = 50\n[[arms]]\nname = \"b\"\nweight = 50\ninstructions = \"gone.md\"\n",
    )]);
    assert_eq!(code, 2);
    assert!(
        has(
            &diags,
            "error",
            TONE,
            "agent/experiments/gone.md, which does not exist"
        ),
        "{diags:#?}"
    );
    // Malformed TOML, with its place.
    let (code, diags) = validate_with(&[(TONE, "[[arms]\nname = \"a\"\n")]);
    assert_eq!(code, 2);
    assert!(
        has(&diags, "error", TONE, "invalid TOML at line 1"),
        "{diags:#?}"
    );
    // Duplicate arms, a bad weight, an unknown key, a path out of the folder.
    let (_, diags) = validate_with(&[(
        TONE,
        "colour = 1\n[[arms]]\nname = \"a\"\nweight = 50\n[[arms]]\nname = \"a\"\nweight = 50\n",
    )]);
    assert!(
        has(&diags, "error", TONE, "arm `a` is declared more than once"),
        "{diags:#?}"
    );
    assert!(
        has(&diags, "warning", TONE, "unknown key `colour`"),
        "{diags:#?}"
    );
    let (_, diags) = validate_with(&[(
        TONE,
        "[[arms]]\nname = \"a\"\nweight = \"half\"\n[[arms]]\nname = \"b\"\nweight = 50\ninstructions = \"../instructions.md\"\n",
    )]);
    assert!(
        has(
            &diags,
            "error",
            TONE,
            "`arms[0].weight` must be a whole number"
        ),
        "{diags:#?}"
    );
    assert!(
        has(
            &diags,
            "error",
            TONE,
            "must be a relative path inside experiments/"
        ),
        "{diags:#?}"
    );
    // A pinned arm of an experiment the agent does not declare.
    let (code, diags) = validate_with(&[(
        "evals/pin.eval.toml",
        "[[cases]]\nname = \"p\"\narm = { experiment = \"colour\", arm = \"red\" }\n[[cases.steps]]\nsend = \"hi\"\n",
    )]);
    assert_eq!(code, 2);
    assert!(
        has(
            &diags,
            "error",
            "evals/pin.eval.toml",
            "experiment `colour`, which the agent does not declare"
        ),
        "{diags:#?}"
    );
    let (_, diags) = validate_with(&[(
        "evals/pin.eval.toml",
        "[[cases]]\nname = \"p\"\narm = { experiment = \"tone\", arm = \"red\" }\n[[cases.steps]]\nsend = \"hi\"\n",
    )]);
    assert!(
        has(
            &diags,
            "error",
            "evals/pin.eval.toml",
            "arm `red`, which experiment `tone` does not have"
        ),
        "{diags:#?}"
    );
    // The TypeScript form points to the TOML one instead of a stray warning.
    let (code, diags) = validate_with(&[
        ("agent/ab.ts", "export default defineAB({})\n"),
        ("agent/experiments/old.ts", "export default defineAB({})\n"),
    ]);
    assert_eq!(code, 0, "{diags:#?}");
    for file in ["agent/ab.ts", "agent/experiments/old.ts"] {
        let d = diags.iter().find(|d| d["file"] == file).unwrap();
        assert!(
            d["fix"]
                .as_str()
                .unwrap()
                .contains("agent/experiments/<name>.toml"),
            "{d}"
        );
        assert!(!d["message"].as_str().unwrap().contains("stray"), "{d}");
    }
}

#[test]
fn info_lists_the_experiments() {
    let (_tmp, dir) = example();
    let (code, info) = run_json(bdk().args(["info", "--json"]).arg(&dir));
    assert_eq!(code, 0);
    let tone = &info["experiments"][0];
    assert_eq!(tone["name"], "tone");
    assert_eq!(tone["unit"], "session");
    assert_eq!(
        tone["arms"][1]["instructions"],
        "agent/experiments/concise.md"
    );
    assert_eq!(tone["arms"][1]["model"], "scripted/concise");
    let text = common::on_a_terminal(&["info", dir.to_str().unwrap()], &dir);
    assert!(text.contains("tone: control 50%, concise 50%"), "{text}");
}

// ---------------------------------------------------------------------------
// docs/experiments.md as written
// ---------------------------------------------------------------------------

/// The ```sh blocks of a Markdown page, in order.
fn sh_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match &mut current {
            None if line.trim_end() == "```sh" => current = Some(String::new()),
            None => {}
            Some(_) if line.trim_end() == "```" => blocks.push(current.take().unwrap()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    blocks
}

#[test]
fn the_experiments_page_runs_as_written() {
    let markdown = std::fs::read_to_string(workspace().join("docs/experiments.md")).unwrap();
    let blocks = sh_blocks(&markdown);
    assert!(blocks.len() >= 4, "{blocks:#?}");
    let (tmp, _dir) = example();
    // The page's server: the example served at the root as `ab`, with its
    // own state root so the page's local commands do not go through it.
    let mut cmd = bdk();
    cmd.current_dir(tmp.path())
        .args(["serve", "examples/ab", "--port", "0", "--state-root"])
        .arg(tmp.path().join("served"));
    let server = Server::spawn(cmd);
    let program = Command::cargo_bin("bdk").unwrap().get_program().to_owned();
    let quoted = format!("'{}'", Path::new(&program).display());
    let mut script = String::new();
    for (i, block) in blocks.iter().enumerate() {
        script.push_str(&format!("printf '\\n@@ block {} @@\\n'\n", i + 1));
        for line in block.lines() {
            let line = line.replace("http://127.0.0.1:3000", &server.base);
            match line.strip_prefix("bdk ") {
                Some(rest) => script.push_str(&format!("{quoted} {rest}\n")),
                None => script.push_str(&format!("{line}\n")),
            }
        }
    }
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(tmp.path())
        .env_remove("BDK_STATE_ROOT")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the page failed:\n--- stdout\n{stdout}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"experiments\""), "{stdout}");
    assert!(stdout.contains("\"arms\""), "{stdout}");
}
