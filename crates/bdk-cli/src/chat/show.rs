//! How a conversation reads in the terminal: the reply as it streams, each
//! tool call on one line, approvals asked in place, how a turn ended; and
//! what a pipe gets instead (the reply alone on stdout, the rest on stderr).
//!
//! The [`Printer`] is a small state machine over a turn's events that knows
//! where the cursor is (at the start of a line, inside the reply, inside a
//! tool call's line, after a question), so every kind of output starts on a
//! line of its own without blank lines in between. It collects what it
//! would write; [`Printer::flush`] writes it.
//!
//! Text from the model and from tools can hold terminal controls. The reply
//! keeps its line breaks and tabs and loses every other control character;
//! inputs and outputs in a tool line are shown on one line with their
//! controls escaped, so no event can move the cursor or recolour the screen.

use crate::logs::escape::is_unsafe;
use std::collections::{HashMap, HashSet};

use bdk_events::{Event, FailStatus, Verdict};
use serde_json::Value;

/// Which stream a piece of output goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum To {
    Out,
    Err,
}

/// Colour, or none: only on a terminal and never with `NO_COLOR` set to a
/// non-empty value (<https://no-color.org>).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Style {
    colour: bool,
}

impl Style {
    /// Plain text.
    #[cfg(test)]
    pub(crate) const PLAIN: Style = Style { colour: false };

    /// Colour when the stream is a terminal and `NO_COLOR` does not forbid it.
    pub(crate) fn for_stream(is_terminal: bool) -> Style {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Style {
            colour: is_terminal && !no_color,
        }
    }

    fn paint(self, code: &str, text: &str) -> String {
        if self.colour && !text.is_empty() {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    pub(crate) fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }

    pub(crate) fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }

    pub(crate) fn red(self, text: &str) -> String {
        self.paint("31", text)
    }

    pub(crate) fn green(self, text: &str) -> String {
        self.paint("32", text)
    }

    pub(crate) fn yellow(self, text: &str) -> String {
        self.paint("33", text)
    }
}

/// How much of a tool's input a tool line shows, in characters.
const INPUT_CHARS: usize = 60;
/// How much of a tool's output a tool line shows, in characters.
const OUTPUT_CHARS: usize = 72;

/// `value` on one line of at most `max` characters (then `…`): a string as
/// its text, anything else as compact JSON, control characters escaped.
pub(crate) fn one_line(value: &Value, max: usize) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        other => serde_json::to_string(other).unwrap_or_default(),
    };
    let mut out = String::new();
    for (n, ch) in text.chars().enumerate() {
        if n == max {
            out.push('…');
            break;
        }
        match ch {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_unsafe(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

/// Reply text with the controls it may not carry to a terminal removed:
/// line breaks and tabs stay.
pub(crate) fn clean_text(text: &str) -> String {
    text.chars()
        .filter(|c| matches!(c, '\n' | '\t') || !is_unsafe(*c))
        .collect()
}

/// Who reads the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A person at the terminal: everything on stdout as it happens.
    Chat,
    /// A program reading stdout: the final reply there, tool lines and
    /// failures on stderr.
    Pipe,
}

/// Where the cursor is on stdout (chat mode).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Cursor {
    /// At the start of a line.
    Start,
    /// Inside the reply or the reasoning text.
    Text,
    /// After a tool call's name and input, waiting for its outcome.
    Call(String),
    /// After an approval question about this call.
    Asking(String),
}

/// Prints a turn's events (see the module doc).
pub(crate) struct Printer {
    mode: Mode,
    style: Style,
    /// Show `reasoning.appended` text.
    pub(crate) reasoning: bool,
    cursor: Cursor,
    /// The reasoning text is what is being written.
    in_reasoning: bool,
    /// Name and shown input of each call requested in this turn.
    calls: HashMap<String, (String, String)>,
    /// Calls whose approval was answered here.
    answered: HashSet<String>,
    /// Some reply text of this turn was streamed.
    streamed: bool,
    pending: Vec<(To, String)>,
}

impl Printer {
    pub(crate) fn new(mode: Mode, style: Style, reasoning: bool) -> Printer {
        Printer {
            mode,
            style,
            reasoning,
            cursor: Cursor::Start,
            in_reasoning: false,
            calls: HashMap::new(),
            answered: HashSet::new(),
            streamed: false,
            pending: Vec::new(),
        }
    }

    pub(crate) fn style(&self) -> Style {
        self.style
    }

    /// Forgets the last turn: a new one starts.
    pub(crate) fn begin_turn(&mut self) {
        self.cursor = Cursor::Start;
        self.in_reasoning = false;
        self.calls.clear();
        self.answered.clear();
        self.streamed = false;
    }

    fn push(&mut self, to: To, text: impl Into<String>) {
        self.pending.push((to, text.into()));
    }

    /// Where lines about the turn (tool calls, notes) go.
    fn side(&self) -> To {
        match self.mode {
            Mode::Chat => To::Out,
            Mode::Pipe => To::Err,
        }
    }

    /// Ends the current line unless the cursor is at the start of one.
    pub(crate) fn fresh_line(&mut self) {
        if self.mode == Mode::Chat && self.cursor != Cursor::Start {
            self.push(To::Out, "\n");
        }
        self.cursor = Cursor::Start;
        self.in_reasoning = false;
    }

    /// A line of its own about the session (not the turn): `/trace`, a
    /// note, a refusal.
    pub(crate) fn line(&mut self, text: &str) {
        self.fresh_line();
        let to = self.side();
        self.push(to, format!("{text}\n"));
    }

    /// What was collected so far, emptied.
    pub(crate) fn take(&mut self) -> Vec<(To, String)> {
        std::mem::take(&mut self.pending)
    }

    /// Writes what was collected.
    pub(crate) fn flush(&mut self) {
        for (to, text) in self.take() {
            match to {
                To::Out => out!("{text}"),
                To::Err => err!("{text}"),
            }
        }
    }

    /// Shows one event of the turn.
    pub(crate) fn event(&mut self, event: &Event) {
        match event {
            Event::MessageAppended(m) => self.text(&m.delta),
            Event::ReasoningAppended(r) => self.reasoning_text(&r.delta),
            Event::ReasoningCompleted(_) if self.in_reasoning => self.fresh_line(),
            Event::ActionsRequested(batch) => {
                for action in &batch.actions {
                    let input = one_line(&action.input, INPUT_CHARS);
                    self.calls
                        .insert(action.call_id.clone(), (action.name.clone(), input.clone()));
                    if self.mode == Mode::Chat {
                        self.fresh_line();
                        let name = self.style.bold(&action.name);
                        self.push(To::Out, format!("  ⚙ {name} {input}"));
                        self.cursor = Cursor::Call(action.call_id.clone());
                    }
                }
            }
            Event::ActionResult(r) => {
                let outcome = if r.stubbed {
                    self.style.yellow("stubbed")
                } else if r.is_error {
                    self.style.red("error")
                } else {
                    self.style.green("ok")
                };
                let output = self.style.dim(&one_line(&r.output, OUTPUT_CHARS));
                let outcome = format!("→ {outcome} {} ms {output}", r.duration_ms);
                if self.cursor == Cursor::Call(r.call_id.clone()) {
                    self.push(To::Out, format!(" {outcome}\n"));
                    self.cursor = Cursor::Start;
                    return;
                }
                self.fresh_line();
                let name = self.style.bold(&r.name);
                let line = match (self.mode, self.calls.get(&r.call_id)) {
                    // On stderr the line is written whole, input included.
                    (Mode::Pipe, Some((_, input))) => format!("  ⚙ {name} {input} {outcome}\n"),
                    _ => format!("  ⚙ {name} {outcome}\n"),
                };
                let to = self.side();
                self.push(to, line);
            }
            Event::ActionToolRetry(r) => {
                let note = format!("  ↻ {} again (attempt {}): {}", r.name, r.attempt, r.error);
                let note = self.style.dim(&one_line(&Value::String(note), 200));
                self.line(&note);
            }
            Event::ActionApprovalResolved(r) => {
                if self.answered.contains(&r.call_id) {
                    return;
                }
                // Decided elsewhere (another client, the HTTP API).
                let by =
                    r.by.as_deref()
                        .map(|b| format!(" by {b}"))
                        .unwrap_or_default();
                let decision = if r.approved { "approved" } else { "denied" };
                if self.cursor == Cursor::Asking(r.call_id.clone()) {
                    self.push(To::Out, format!("{decision}{by}\n"));
                    self.cursor = Cursor::Start;
                } else {
                    let note = format!("  {} {decision}{by}", r.name);
                    self.line(&self.style.dim(&note));
                }
            }
            Event::TurnQueued(q) if self.mode == Mode::Chat => {
                let note = format!("(waiting for a free turn slot, position {})", q.position);
                self.line(&self.style.dim(&note));
            }
            Event::GateVerdict(v) => match v.verdict {
                Verdict::Accept => {}
                Verdict::Reject => {
                    let feedback = v.feedback.as_deref().unwrap_or("no reason given");
                    let note = format!("  ⚑ gate {} asked for a revision: {feedback}", v.gate);
                    let note = self.style.dim(&one_line(&Value::String(note), 200));
                    self.line(&note);
                }
                Verdict::Fail => {
                    let message = v.message.as_deref().unwrap_or("no reason given");
                    let note = format!("  ⚑ gate {} failed the reply: {message}", v.gate);
                    let note = self.style.red(&one_line(&Value::String(note), 200));
                    self.line(&note);
                }
            },
            Event::TurnCompleted(done) => match self.mode {
                Mode::Chat => {
                    if !self.streamed && !done.reply.is_empty() {
                        self.fresh_line();
                        self.text(&done.reply);
                    }
                    self.fresh_line();
                }
                Mode::Pipe => {
                    let newline = if done.reply.ends_with('\n') { "" } else { "\n" };
                    self.push(To::Out, format!("{}{newline}", done.reply));
                }
            },
            Event::TurnFailed(failed) => {
                let message = one_line(&Value::String(failed.message.clone()), 300);
                match (self.mode, failed.status) {
                    (Mode::Chat, FailStatus::Cancelled) => {
                        let stopped = self.style.yellow("stopped");
                        self.line(&stopped);
                    }
                    (Mode::Chat, FailStatus::Interrupted) => {
                        let line = self.style.yellow(&format!("interrupted: {message}"));
                        self.line(&line);
                    }
                    (Mode::Chat, FailStatus::Failed) => {
                        let line = self.style.red(&format!("✗ {message}"));
                        self.line(&line);
                    }
                    (Mode::Pipe, status) => {
                        self.line(&format!("error: the turn {}: {message}", status.as_str()));
                    }
                }
            }
            _ => {}
        }
    }

    fn text(&mut self, delta: &str) {
        if self.mode == Mode::Pipe || delta.is_empty() {
            return;
        }
        if self.in_reasoning || matches!(self.cursor, Cursor::Call(_) | Cursor::Asking(_)) {
            self.fresh_line();
        }
        let text = clean_text(delta);
        self.cursor = if text.ends_with('\n') {
            Cursor::Start
        } else {
            Cursor::Text
        };
        self.push(To::Out, text);
        self.streamed = true;
    }

    fn reasoning_text(&mut self, delta: &str) {
        if self.mode == Mode::Pipe || !self.reasoning || delta.is_empty() {
            return;
        }
        if !self.in_reasoning {
            self.fresh_line();
            let label = self.style.dim("thinking: ");
            self.push(To::Out, label);
        }
        let text = self.style.dim(&clean_text(delta));
        self.push(To::Out, text);
        self.in_reasoning = true;
        self.cursor = Cursor::Text;
    }

    /// Asks whether to run `name` with `input`, in place: on the call's own
    /// line when the cursor is still there.
    pub(crate) fn ask(&mut self, call_id: &str, name: &str, input: &Value) {
        let question = format!("approve? {}", self.style.bold("[y]es/[n]o "));
        if self.cursor == Cursor::Call(call_id.to_owned()) {
            self.push(To::Out, format!(" · {question}"));
        } else {
            self.fresh_line();
            let input = one_line(input, INPUT_CHARS);
            let name = self.style.bold(name);
            self.push(To::Out, format!("  ? {name} {input} · {question}"));
        }
        self.cursor = Cursor::Asking(call_id.to_owned());
    }

    /// The answer typed to [`Printer::ask`].
    pub(crate) fn answer(&mut self, call_id: &str, approved: bool) {
        self.answered.insert(call_id.to_owned());
        let word = if approved {
            self.style.green("yes")
        } else {
            self.style.red("no")
        };
        if self.cursor == Cursor::Asking(call_id.to_owned()) {
            self.push(To::Out, format!("{word}\n"));
            self.cursor = Cursor::Start;
        } else {
            self.line(&word);
        }
    }

    /// A call that could not be asked about (no terminal) and was denied.
    pub(crate) fn denied_unasked(&mut self, call_id: &str, name: &str, input: &Value) {
        self.answered.insert(call_id.to_owned());
        let input = one_line(input, INPUT_CHARS);
        self.line(&format!(
            "  ? {name} {input} needs approval; denied, since standard input is not a terminal to ask at"
        ));
    }

    /// A note on its own line, dimmed (`stopping…`).
    pub(crate) fn note(&mut self, text: &str) {
        let text = self.style.dim(text);
        self.line(&text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bdk_events::{
        ActionRequest, ActionResult, ActionsRequested, MessageAppended, ReasoningAppended,
        TurnCompleted, TurnFailed,
    };
    use serde_json::json;

    fn text_of(printer: &mut Printer, to: To) -> String {
        printer
            .take()
            .into_iter()
            .filter(|(t, _)| *t == to)
            .map(|(_, s)| s)
            .collect()
    }

    fn requested(id: &str, name: &str, input: Value) -> Event {
        Event::ActionsRequested(ActionsRequested {
            step: 1,
            actions: vec![ActionRequest {
                call_id: id.into(),
                name: name.into(),
                input,
            }],
        })
    }

    fn result(id: &str, name: &str, is_error: bool, output: Value) -> Event {
        Event::ActionResult(ActionResult {
            call_id: id.into(),
            name: name.into(),
            is_error,
            output,
            content: Vec::new(),
            duration_ms: 12,
            stubbed: false,
        })
    }

    fn delta(text: &str) -> Event {
        Event::MessageAppended(MessageAppended { delta: text.into() })
    }

    fn completed(reply: &str) -> Event {
        Event::TurnCompleted(TurnCompleted {
            reply: reply.into(),
            usage: None,
            model: "scripted".into(),
            duration_ms: 30,
            steps: 2,
        })
    }

    #[test]
    fn a_turn_reads_as_its_tool_lines_then_the_streamed_reply() {
        let mut p = Printer::new(Mode::Chat, Style::PLAIN, false);
        for e in [
            Event::ReasoningAppended(ReasoningAppended {
                delta: "hidden".into(),
            }),
            requested("c1", "get_weather", json!({"city": "Paris"})),
            result("c1", "get_weather", false, json!({"temp": 18})),
            delta("It is "),
            delta("18°C.\u{1b}[2J"),
            completed("It is 18°C."),
        ] {
            p.event(&e);
        }
        assert_eq!(
            text_of(&mut p, To::Out),
            "  ⚙ get_weather {\"city\":\"Paris\"} → ok 12 ms {\"temp\":18}\nIt is 18°C.[2J\n"
        );
    }

    #[test]
    fn calls_of_one_batch_keep_a_line_each_and_long_values_are_cut() {
        let mut p = Printer::new(Mode::Chat, Style::PLAIN, false);
        let long = "x".repeat(100);
        p.event(&Event::ActionsRequested(ActionsRequested {
            step: 1,
            actions: vec![
                ActionRequest {
                    call_id: "a".into(),
                    name: "one".into(),
                    input: json!({}),
                },
                ActionRequest {
                    call_id: "b".into(),
                    name: "two".into(),
                    input: json!(long),
                },
            ],
        }));
        p.event(&result("a", "one", true, json!("bad\ninput")));
        p.event(&result("b", "two", false, json!(null)));
        let cut = format!("{}…", "x".repeat(INPUT_CHARS));
        assert_eq!(
            text_of(&mut p, To::Out),
            format!(
                "  ⚙ one {{}}\n  ⚙ two {cut}\n  ⚙ one → error 12 ms bad\\ninput\n  ⚙ two → ok 12 ms null\n"
            )
        );
    }

    #[test]
    fn an_approval_is_asked_on_the_calls_line_and_a_stop_reads_stopped() {
        let mut p = Printer::new(Mode::Chat, Style::PLAIN, true);
        p.event(&requested("c1", "deploy", json!({"target": "prod"})));
        p.ask("c1", "deploy", &json!({"target": "prod"}));
        p.answer("c1", true);
        p.event(&result("c1", "deploy", false, json!({"deployed": true})));
        p.event(&Event::ReasoningAppended(ReasoningAppended {
            delta: "hmm".into(),
        }));
        p.event(&Event::TurnFailed(TurnFailed {
            message: "stopped by the user".into(),
            status: FailStatus::Cancelled,
            usage: None,
        }));
        assert_eq!(
            text_of(&mut p, To::Out),
            "  ⚙ deploy {\"target\":\"prod\"} · approve? [y]es/[n]o yes\n  ⚙ deploy → ok 12 ms {\"deployed\":true}\nthinking: hmm\nstopped\n"
        );
    }

    #[test]
    fn a_pipe_gets_the_reply_alone_and_the_rest_on_stderr() {
        let mut p = Printer::new(Mode::Pipe, Style::PLAIN, true);
        p.event(&requested("c1", "get_weather", json!({"city": "Paris"})));
        p.event(&result("c1", "get_weather", false, json!({"temp": 18})));
        p.event(&delta("It is 18°C."));
        p.event(&completed("It is 18°C."));
        let all = p.take();
        let of = |to: To| -> String {
            all.iter()
                .filter(|(t, _)| *t == to)
                .map(|(_, s)| s.as_str())
                .collect()
        };
        assert_eq!(of(To::Out), "It is 18°C.\n");
        assert_eq!(
            of(To::Err),
            "  ⚙ get_weather {\"city\":\"Paris\"} → ok 12 ms {\"temp\":18}\n"
        );
    }

    #[test]
    fn colour_is_only_for_terminals() {
        assert_eq!(Style::PLAIN.red("x"), "x");
        assert_eq!(Style { colour: true }.red("x"), "\u{1b}[31mx\u{1b}[0m");
        assert_eq!(Style::for_stream(false), Style::PLAIN);
    }
}
