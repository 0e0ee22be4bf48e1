//! The context budget: keeping each model request inside the model's
//! context window.
//!
//! The host hands the agent loop the whole conversation (rebuilt from the
//! durable session after a restart). Before every model step the request
//! passes through [`fit`], which applies this policy:
//!
//! 1. Estimate the request's size as characters / 4 over the system prompt,
//!    the tool definitions (as JSON) and every message.
//! 2. If the estimate is within the budget (the context window minus a
//!    reserve for the answer, see [`budget_for`]), send it unchanged.
//! 3. Otherwise drop the oldest whole turns, one at a time, until it fits.
//!    A turn is a user message and everything up to the next user message;
//!    a user message that arrives while tool calls are still unanswered does
//!    not start one, so an assistant's tool calls and their results are
//!    never separated. The dropped turns are replaced by a single notice
//!    message (`[n earlier turns omitted to fit the context window]`).
//! 4. The latest turn (the latest user message and everything after it) is
//!    always kept. If it alone does not fit, its largest tool results are
//!    cut, largest first, each to what the budget leaves (never below
//!    [`MIN_TOOL_RESULT_CHARS`]) and marked as truncated.
//!
//! The policy only shapes what one request carries: the durable session and
//! the host's transcript keep every message. It is idempotent: fitting a
//! fitted request changes nothing (an existing notice is recognised and its
//! count carried forward; truncated results are not cut twice).

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::catalog;
use crate::memo::ToolsMemo;
use crate::{Message, Model, ModelError, ModelRequest, ModelStream, ToolDefinition};

/// The context window assumed for a model that is not in the catalog and has
/// no `context_window` in `agent.toml`.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;
/// Tokens kept free for the model's answer.
pub const ANSWER_RESERVE: u64 = 8_192;
/// A truncated tool result keeps at least this many characters.
pub const MIN_TOOL_RESULT_CHARS: usize = 512;
/// What one image in a tool result counts for in the estimate: 1,600
/// tokens, what Anthropic charges for an image of about a megapixel.
pub const IMAGE_CHARS: usize = 6_400;

/// The context window of `model` (a `provider/model` id): `configured`
/// (`agent.toml` `context_window`) when set, else the model's entry in
/// [`crate::catalog`], else [`DEFAULT_CONTEXT_WINDOW`].
pub fn context_window(model: &str, configured: Option<u64>) -> u64 {
    if let Some(w) = configured {
        return w;
    }
    catalog::find(model, |m| m.context_window.is_some())
        .and_then(|m| m.context_window)
        .unwrap_or(DEFAULT_CONTEXT_WINDOW)
}

/// The token budget of a request for a window: the window minus
/// [`ANSWER_RESERVE`], or minus a quarter of the window when the window is
/// too small for the full reserve.
pub fn budget_for(window: u64) -> u64 {
    window.saturating_sub(ANSWER_RESERVE.min(window / 4))
}

fn tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(4)
}

fn text_chars(s: &str) -> usize {
    s.chars().count()
}

/// The characters of `value`'s JSON text, counted as it is written rather
/// than collected into a string first.
fn json_chars(value: &impl serde::Serialize) -> usize {
    /// Counts the characters of UTF-8 written to it: every byte that does
    /// not continue a character.
    struct Chars(usize);
    impl std::io::Write for Chars {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.iter().filter(|b| (**b & 0xC0) != 0x80).count();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut chars = Chars(0);
    serde_json::to_writer(&mut chars, value).map_or(0, |()| chars.0)
}

/// Characters one message contributes to the estimate.
pub fn message_chars(m: &Message) -> usize {
    match m {
        Message::User { text } => text_chars(text),
        Message::Assistant { text, tool_calls } => {
            text_chars(text)
                + tool_calls
                    .iter()
                    .map(|c| text_chars(&c.id) + text_chars(&c.name) + json_chars(&c.input))
                    .sum::<usize>()
        }
        Message::Tool {
            call_id,
            name,
            content,
            images,
            ..
        } => {
            text_chars(call_id)
                + text_chars(name)
                + text_chars(content)
                + images.len() * IMAGE_CHARS
        }
    }
}

/// Characters the tool definitions contribute to the estimate.
fn tools_chars(tools: &[ToolDefinition]) -> usize {
    if tools.is_empty() {
        0
    } else {
        json_chars(&tools)
    }
}

fn fixed_chars(system: &str, tools: &[ToolDefinition]) -> usize {
    text_chars(system) + tools_chars(tools)
}

/// The estimated size of a request in tokens (characters / 4, rounded up).
pub fn estimate_tokens(system: &str, tools: &[ToolDefinition], messages: &[Message]) -> u64 {
    tokens(fixed_chars(system, tools) + messages.iter().map(message_chars).sum::<usize>())
}

/// The notice that stands in for `n` omitted turns.
pub fn omitted_notice(n: usize) -> String {
    let turns = if n == 1 { "turn" } else { "turns" };
    format!("[{n} earlier {turns} omitted to fit the context window]")
}

/// The count of a notice written by [`omitted_notice`].
fn parse_notice(text: &str) -> Option<usize> {
    let rest = text.strip_prefix('[')?;
    let (n, rest) = rest.split_once(' ')?;
    let n: usize = n.parse().ok()?;
    (rest == "earlier turn omitted to fit the context window]"
        || rest == "earlier turns omitted to fit the context window]")
        .then_some(n)
}

const TRUNCATED_TAIL: &str = "characters omitted to fit the context window]";

fn truncation_marker(omitted: usize, total: usize) -> String {
    format!("\n[tool result truncated: {omitted} of {total} {TRUNCATED_TAIL}")
}

fn is_truncated(content: &str) -> bool {
    content.ends_with(TRUNCATED_TAIL) && content.contains("\n[tool result truncated: ")
}

/// Where turns start: indices of user messages at which no tool call is
/// waiting for its result. Index 0 always starts the first group.
fn turn_starts(messages: &[Message]) -> Vec<usize> {
    let mut starts = vec![0];
    let mut waiting: HashSet<&str> = HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        match m {
            Message::User { .. } if i > 0 && waiting.is_empty() => starts.push(i),
            Message::User { .. } => {}
            Message::Assistant { tool_calls, .. } => {
                waiting.extend(tool_calls.iter().map(|c| c.id.as_str()));
            }
            Message::Tool { call_id, .. } => {
                waiting.remove(call_id.as_str());
            }
        }
    }
    starts
}

/// What [`fit`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct Fitted {
    /// The messages to send.
    pub messages: Vec<Message>,
    /// Turns replaced by the notice (including turns an earlier notice
    /// in the input already stood for).
    pub omitted_turns: usize,
    /// Tool results cut by this call.
    pub truncated_results: usize,
    /// The estimate of the fitted request, in tokens.
    pub estimated_tokens: u64,
    /// True when the input already fitted and is returned unchanged.
    pub unchanged: bool,
}

/// Applies the policy of this module to one request's messages. `budget`
/// is in tokens (see [`budget_for`]).
pub fn fit(system: &str, tools: &[ToolDefinition], messages: Vec<Message>, budget: u64) -> Fitted {
    fit_with(system, tools_chars(tools), messages, budget)
}

/// [`fit`] for tools whose size in characters (`tools_chars`) is known.
fn fit_with(system: &str, tools_chars: usize, messages: Vec<Message>, budget: u64) -> Fitted {
    let fixed = text_chars(system) + tools_chars;
    let sizes: Vec<usize> = messages.iter().map(message_chars).collect();
    let total: usize = fixed + sizes.iter().sum::<usize>();
    if tokens(total) <= budget {
        return Fitted {
            omitted_turns: messages
                .first()
                .and_then(|m| match m {
                    Message::User { text } => parse_notice(text),
                    _ => None,
                })
                .unwrap_or(0),
            messages,
            truncated_results: 0,
            estimated_tokens: tokens(total),
            unchanged: true,
        };
    }

    // An earlier notice is set aside and re-issued with the new count.
    let (prior, body_from) = match messages.first() {
        Some(Message::User { text }) => match parse_notice(text) {
            Some(n) => (n, 1),
            None => (0, 0),
        },
        _ => (0, 0),
    };
    let body = &messages[body_from..];
    let body_sizes = &sizes[body_from..];
    let starts = turn_starts(body);
    let notice_chars = |n: usize| {
        if n == 0 {
            0
        } else {
            text_chars(&omitted_notice(n))
        }
    };

    // Drop whole turns, oldest first, keeping at least the last one.
    let mut dropped = 0;
    let mut cut = 0;
    for (k, &start) in starts.iter().enumerate() {
        dropped = k;
        cut = start;
        let kept: usize = body_sizes[start..].iter().sum();
        if tokens(fixed + notice_chars(prior + k) + kept) <= budget {
            break;
        }
    }
    let omitted = prior + dropped;
    let mut out = Vec::with_capacity(body.len() - cut + 1);
    if omitted > 0 {
        out.push(Message::User {
            text: omitted_notice(omitted),
        });
    }
    let current_from = out.len();
    out.extend(messages.into_iter().skip(body_from + cut));

    // The latest turn alone is too big: cut its largest tool results.
    let mut truncated_results = 0;
    loop {
        let total = fixed + out.iter().map(message_chars).sum::<usize>();
        let estimate = tokens(total);
        if estimate <= budget {
            break;
        }
        let largest = out
            .iter()
            .enumerate()
            .skip(current_from)
            .filter_map(|(i, m)| match m {
                Message::Tool {
                    content, images, ..
                } if !images.is_empty() || !is_truncated(content) => {
                    Some((i, text_chars(content) + images.len() * IMAGE_CHARS))
                }
                _ => None,
            })
            .filter(|(_, len)| *len > MIN_TOOL_RESULT_CHARS)
            .max_by_key(|(i, len)| (*len, std::cmp::Reverse(*i)));
        let Some((i, _)) = largest else { break };
        // Images go first: the text says what they were.
        if let Message::Tool {
            content, images, ..
        } = &mut out[i]
            && !images.is_empty()
        {
            content.push_str(&format!(
                "\n[{} image(s) left out to fit the context window]",
                images.len()
            ));
            images.clear();
            truncated_results += 1;
            continue;
        }
        let len = match &out[i] {
            Message::Tool { content, .. } if !is_truncated(content) => text_chars(content),
            _ => break,
        };
        if len <= MIN_TOOL_RESULT_CHARS {
            break;
        }
        let excess_chars = usize::try_from(estimate - budget)
            .unwrap_or(usize::MAX)
            .saturating_mul(4);
        let marker_len = text_chars(&truncation_marker(len, len));
        let keep = len
            .saturating_sub(excess_chars.saturating_add(marker_len))
            .max(MIN_TOOL_RESULT_CHARS);
        if let Message::Tool { content, .. } = &mut out[i] {
            let cut_at = content
                .char_indices()
                .nth(keep)
                .map_or(content.len(), |(b, _)| b);
            let mut cut_content = content[..cut_at].to_owned();
            cut_content.push_str(&truncation_marker(len - keep, len));
            *content = cut_content;
            truncated_results += 1;
        }
    }
    let estimated_tokens = tokens(fixed + out.iter().map(message_chars).sum::<usize>());
    Fitted {
        messages: out,
        omitted_turns: omitted,
        truncated_results,
        estimated_tokens,
        unchanged: false,
    }
}

/// A model decorator that applies [`fit`] to every step's request before
/// the wrapped model sees it.
pub struct BudgetedModel {
    inner: Arc<dyn Model>,
    window: u64,
    /// The size of the last tool definitions seen: the same for every
    /// step of a turn, and for every turn while the tools stay the same.
    tools_chars: ToolsMemo<usize>,
}

impl BudgetedModel {
    /// Wraps `inner` with a budget for a `window`-token context.
    pub fn new(inner: Arc<dyn Model>, window: u64) -> Self {
        Self {
            inner,
            window,
            tools_chars: ToolsMemo::default(),
        }
    }

    /// The context window this model is budgeted for.
    pub fn window(&self) -> u64 {
        self.window
    }
}

#[async_trait]
impl Model for BudgetedModel {
    fn id(&self) -> &str {
        self.inner.id()
    }

    async fn step(
        &self,
        mut request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ModelError> {
        let budget = budget_for(self.window);
        let messages = std::mem::take(&mut request.messages);
        let tools_chars = self.tools_chars.get(&request.tools, tools_chars);
        let fitted = fit_with(&request.system, tools_chars, messages, budget);
        if !fitted.unchanged {
            tracing::info!(
                model = %self.inner.id(),
                window = self.window,
                estimated_tokens = fitted.estimated_tokens,
                omitted_turns = fitted.omitted_turns,
                truncated_results = fitted.truncated_results,
                "conversation trimmed to fit the context window"
            );
        }
        // What is left is the latest turn, which the policy never drops. If
        // it alone is over the whole window (not just the budget, which
        // keeps room for the answer), no server can take it: say so now
        // instead of sending it and reading whatever the server makes of it
        // (an error, a truncated prompt, or an empty answer).
        if fitted.estimated_tokens > self.window {
            return Err(ModelError::ContextOverflow {
                estimated: fitted.estimated_tokens,
                window: self.window,
            });
        }
        request.messages = fitted.messages;
        self.inner.step(request, cancel).await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::ToolCall;

    fn user(t: &str) -> Message {
        Message::User { text: t.into() }
    }

    fn assistant(t: &str) -> Message {
        Message::Assistant {
            text: t.into(),
            tool_calls: Vec::new(),
        }
    }

    fn call(id: &str) -> Message {
        Message::Assistant {
            text: String::new(),
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "lookup".into(),
                input: json!({"q": id}),
            }],
        }
    }

    fn result(id: &str, content: &str) -> Message {
        Message::Tool {
            call_id: id.into(),
            name: "lookup".into(),
            content: content.into(),
            is_error: false,
            images: Vec::new(),
        }
    }

    /// Turns of roughly `chars` characters each: question, tool call,
    /// result, answer.
    fn history(turns: usize, chars: usize) -> Vec<Message> {
        let mut out = Vec::new();
        for t in 0..turns {
            out.push(user(&format!("question {t} {}", "q".repeat(chars / 4))));
            out.push(call(&format!("c{t}")));
            out.push(result(&format!("c{t}"), &"r".repeat(chars / 2)));
            out.push(assistant(&format!("answer {t} {}", "a".repeat(chars / 4))));
        }
        out
    }

    /// Every tool result directly follows its call's assistant message (or
    /// a sibling result), every call is answered, and the first message is
    /// a user message.
    fn assert_provider_valid(messages: &[Message]) {
        assert!(
            matches!(messages.first(), Some(Message::User { .. })),
            "starts with a user message: {messages:#?}"
        );
        let mut open: Vec<String> = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            match m {
                Message::Tool { call_id, .. } => {
                    assert!(
                        matches!(
                            messages[i - 1],
                            Message::Assistant { .. } | Message::Tool { .. }
                        ),
                        "result {call_id} follows its call"
                    );
                    let at = open.iter().position(|c| c == call_id);
                    assert!(at.is_some(), "result {call_id} answers an open call");
                    open.retain(|c| c != call_id);
                }
                other => {
                    assert!(
                        open.is_empty(),
                        "calls {open:?} unanswered before {other:?}"
                    );
                    if let Message::Assistant { tool_calls, .. } = other {
                        open.extend(tool_calls.iter().map(|c| c.id.clone()));
                    }
                }
            }
        }
        assert!(open.is_empty(), "calls {open:?} unanswered at the end");
    }

    #[test]
    fn windows_come_from_config_then_table_then_default() {
        assert_eq!(context_window("anthropic/claude-sonnet-4-5", None), 200_000);
        assert_eq!(
            context_window("anthropic/claude-sonnet-4-5-20250929", None),
            200_000
        );
        assert_eq!(context_window("openai/gpt-4o", None), 128_000);
        assert_eq!(context_window("xai/grok-4.3", None), 1_000_000);
        assert_eq!(
            context_window("ollama/llama3.2", None),
            DEFAULT_CONTEXT_WINDOW
        );
        assert_eq!(
            context_window("scripted/default", None),
            DEFAULT_CONTEXT_WINDOW
        );
        assert_eq!(context_window("xai/grok-4.3", Some(32_000)), 32_000);
        assert_eq!(budget_for(128_000), 128_000 - ANSWER_RESERVE);
        assert_eq!(budget_for(8_000), 6_000, "small windows keep a quarter");
    }

    #[test]
    fn the_estimate_is_characters_over_four() {
        let msgs = vec![user("abcd"), assistant("éééé")];
        assert_eq!(estimate_tokens("12345678", &[], &msgs), 4);
        let tools = vec![ToolDefinition {
            name: "t".into(),
            description: "d".into(),
            input_schema: json!({"type": "object"}),
        }];
        let tools_chars = serde_json::to_string(&tools).unwrap().len();
        assert_eq!(
            estimate_tokens("", &tools, &[]),
            (tools_chars as u64).div_ceil(4)
        );
    }

    #[test]
    fn a_fitting_request_is_untouched() {
        let msgs = history(3, 400);
        let f = fit("system", &[], msgs.clone(), 100_000);
        assert!(f.unchanged);
        assert_eq!(f.messages, msgs);
        assert_eq!(f.omitted_turns, 0);
    }

    #[test]
    fn oldest_whole_turns_are_replaced_by_one_notice() {
        let msgs = history(10, 400);
        let last_turn = msgs[msgs.len() - 4..].to_vec();
        let budget = estimate_tokens("system", &[], &msgs) / 2;
        let f = fit("system", &[], msgs.clone(), budget);
        assert!(!f.unchanged);
        assert!(
            f.estimated_tokens <= budget,
            "{} > {budget}",
            f.estimated_tokens
        );
        assert!(
            f.omitted_turns >= 5 && f.omitted_turns < 10,
            "{}",
            f.omitted_turns
        );
        assert_eq!(f.messages[0], user(&omitted_notice(f.omitted_turns)));
        // What is kept is a suffix of whole turns of the original.
        let kept = &f.messages[1..];
        assert_eq!(kept, &msgs[msgs.len() - kept.len()..]);
        assert!(matches!(kept[0], Message::User { .. }));
        assert_eq!(kept.len(), (10 - f.omitted_turns) * 4);
        assert!(kept.ends_with(&last_turn));
        assert_provider_valid(&f.messages);
        assert_eq!(f.truncated_results, 0);
    }

    #[test]
    fn tool_calls_are_never_separated_from_their_results() {
        // A nudge (user message) steered in between a call and its result
        // would be a bad place to cut; the cut must come before the call.
        let mut msgs = vec![user("first"), call("a")];
        msgs.push(user("nudge while the call runs"));
        msgs.push(result("a", &"x".repeat(4000)));
        msgs.push(assistant("done"));
        msgs.push(user("second"));
        msgs.push(call("b"));
        msgs.push(result("b", "small"));
        msgs.push(assistant("ok"));
        let starts = turn_starts(&msgs);
        assert_eq!(starts, vec![0, 5], "the nudge does not start a turn");
        let budget = estimate_tokens("", &[], &msgs[5..]) + 20;
        let f = fit("", &[], msgs.clone(), budget);
        assert_eq!(f.omitted_turns, 1);
        assert_eq!(&f.messages[1..], &msgs[5..]);
        assert_provider_valid(&f.messages);
    }

    #[test]
    fn the_latest_turn_is_kept_and_its_largest_results_are_truncated() {
        let mut msgs = history(3, 400);
        msgs.push(user("now a big one"));
        msgs.push(Message::Assistant {
            text: String::new(),
            tool_calls: vec![
                ToolCall {
                    id: "big".into(),
                    name: "lookup".into(),
                    input: json!({}),
                },
                ToolCall {
                    id: "small".into(),
                    name: "lookup".into(),
                    input: json!({}),
                },
            ],
        });
        msgs.push(result("big", &"B".repeat(40_000)));
        msgs.push(result("small", &"s".repeat(600)));
        let budget = 2_000;
        let f = fit("system", &[], msgs.clone(), budget);
        assert!(f.estimated_tokens <= budget, "{}", f.estimated_tokens);
        assert_eq!(f.omitted_turns, 3);
        assert_eq!(f.truncated_results, 1, "only the largest needed cutting");
        assert_eq!(f.messages[1], user("now a big one"));
        let Message::Tool { content, .. } = &f.messages[3] else {
            panic!("{:?}", f.messages[3]);
        };
        assert!(content.starts_with("BBBB"));
        assert!(is_truncated(content), "{content}");
        assert!(content.contains("of 40000 characters omitted"), "{content}");
        assert_eq!(
            f.messages[4],
            msgs[msgs.len() - 1],
            "small result untouched"
        );
        assert_provider_valid(&f.messages);
    }

    #[test]
    fn images_count_and_go_before_text_is_cut() {
        let image = crate::Image {
            media_type: "image/png".into(),
            data: "AAAA".into(),
        };
        let mut shot = result("shot", "three screenshots");
        if let Message::Tool { images, .. } = &mut shot {
            *images = vec![image.clone(), image.clone(), image];
        }
        let msgs = vec![
            user("look"),
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![ToolCall {
                    id: "shot".into(),
                    name: "lookup".into(),
                    input: json!({}),
                }],
            },
            shot,
        ];
        assert!(message_chars(&msgs[2]) >= 3 * IMAGE_CHARS);
        // Room for the text but not for three images.
        let f = fit("system", &[], msgs.clone(), 2_000);
        assert!(f.estimated_tokens <= 2_000, "{}", f.estimated_tokens);
        assert_eq!(f.truncated_results, 1);
        let Message::Tool {
            content, images, ..
        } = &f.messages[2]
        else {
            panic!("{:?}", f.messages[2]);
        };
        assert!(images.is_empty());
        assert_eq!(
            content,
            "three screenshots\n[3 image(s) left out to fit the context window]"
        );
        // Fitting again changes nothing.
        let again = fit("system", &[], f.messages.clone(), 2_000);
        assert_eq!(again.messages, f.messages);
        // With room, the images stay.
        let roomy = fit("system", &[], msgs.clone(), 100_000);
        assert_eq!(roomy.messages, msgs);
    }

    #[test]
    fn when_nothing_helps_the_latest_turn_is_still_sent() {
        let msgs = vec![user(&"u".repeat(10_000))];
        let f = fit("", &[], msgs.clone(), 10);
        assert_eq!(f.messages, msgs, "the latest user message is never cut");
        assert!(f.estimated_tokens > 10);
        // Results are never cut below the floor.
        let msgs = vec![user("q"), call("a"), result("a", &"r".repeat(5_000))];
        let f = fit("", &[], msgs, 10);
        let Message::Tool { content, .. } = &f.messages[2] else {
            panic!()
        };
        assert!(content.chars().count() >= MIN_TOOL_RESULT_CHARS);
        assert!(is_truncated(content));
    }

    /// A model that counts the steps that reach it and answers none.
    struct Counting(std::sync::atomic::AtomicUsize);

    #[async_trait]
    impl Model for Counting {
        fn id(&self) -> &str {
            "test/counting"
        }

        async fn step(
            &self,
            _request: ModelRequest,
            _cancel: CancellationToken,
        ) -> Result<ModelStream, ModelError> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(Box::pin(futures::stream::empty()))
        }
    }

    fn request(messages: Vec<Message>) -> ModelRequest {
        ModelRequest {
            model: "test/counting".into(),
            system: "be brief".into(),
            messages,
            tools: Default::default(),
            effort: None,
            tool_choice: None,
            max_tokens: None,
        }
    }

    #[tokio::test]
    async fn a_latest_turn_over_the_whole_window_is_not_sent() {
        let inner = Arc::new(Counting(Default::default()));
        let model = BudgetedModel::new(inner.clone(), 1_000);
        // About 1,250 tokens: over the window itself, so no server can
        // take it, and the step fails saying so without sending.
        let too_big = request(vec![user(&"u".repeat(5_000))]);
        let err = model
            .step(too_big, CancellationToken::new())
            .await
            .err()
            .expect("an oversized request fails");
        assert!(
            matches!(err, ModelError::ContextOverflow { window: 1_000, estimated } if estimated > 1_000),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(
            message.contains("does not fit the model's context window")
                && message.contains("context_window"),
            "{message}"
        );
        assert_eq!(inner.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        // Over the budget but inside the window: trimmed as far as the policy
        // goes, then sent (the answer reserve is a margin, not a limit).
        let tight = request(vec![user(&"u".repeat(3_600))]);
        assert!(model.step(tight, CancellationToken::new()).await.is_ok());
        assert_eq!(inner.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn json_is_counted_in_characters_as_its_text_would_be() {
        for value in [
            serde_json::json!({"city": "Zürich", "note": "日本語 \u{1F600}", "n": [1, 2.5, null]}),
            serde_json::json!("quote \" and \\ escapes"),
            serde_json::json!({}),
        ] {
            assert_eq!(json_chars(&value), value.to_string().chars().count());
        }
    }

    #[test]
    fn fitting_is_idempotent() {
        let cases: Vec<(Vec<Message>, u64)> = vec![
            (history(10, 400), 500),
            (history(10, 400), 300),
            (history(2, 40), 100_000),
            (
                {
                    let mut m = history(4, 400);
                    m.push(user("big"));
                    m.push(call("z"));
                    m.push(result("z", &"Z".repeat(30_000)));
                    m
                },
                1_000,
            ),
            (
                {
                    let mut m = history(1, 40);
                    m.push(user("huge"));
                    m.push(call("z"));
                    m.push(result("z", &"Z".repeat(30_000)));
                    m
                },
                5,
            ),
        ];
        for (msgs, budget) in cases {
            let once = fit("sys", &[], msgs, budget);
            let twice = fit("sys", &[], once.messages.clone(), budget);
            assert_eq!(twice.messages, once.messages, "budget {budget}");
            assert_eq!(twice.omitted_turns, once.omitted_turns, "budget {budget}");
            assert_provider_valid(&once.messages);
        }
    }

    #[test]
    fn a_notice_from_an_earlier_fit_is_counted_forward() {
        let msgs = history(10, 400);
        let first = fit("", &[], msgs, 500);
        assert!(first.omitted_turns > 0);
        // The conversation grows by more turns; fitting again keeps one
        // notice whose count includes the turns omitted the first time.
        let mut grown = first.messages.clone();
        grown.extend(history(3, 400));
        let second = fit("", &[], grown, 500);
        assert!(second.omitted_turns > first.omitted_turns);
        let notices = second
            .messages
            .iter()
            .filter(|m| matches!(m, Message::User { text } if parse_notice(text).is_some()))
            .count();
        assert_eq!(notices, 1);
        assert_eq!(parse_notice(&omitted_notice(1)), Some(1));
        assert_eq!(parse_notice("[2 earlier turns omitted]"), None);
    }
}
