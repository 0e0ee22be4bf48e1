//! The `scripted` provider: a deterministic, offline model driven by a rules
//! file in the agent folder.
//!
//! It lets examples, tests and CI evals run a whole agent (tool calls
//! included) with no API key and no network. The rules file is TOML: a list of
//! `[[rules]]`, each with at most one matcher (`user_contains`, `user_regex`
//! or `tool_result`; none makes it a fallback) and an answer (`reasoning`,
//! `reply`, `tool_calls`) whose strings are minijinja templates over the
//! conversation (`user`, `captures`, `result`, `result_text`, `tool`, `step`).
//!
//! Everything that can be checked is checked when the file is loaded (TOML
//! syntax, unknown keys, regexes, template syntax), so a broken rules file
//! fails `bdk validate` rather than a turn. At step time a request that no rule
//! answers fails the step with a message naming the file and the fix.
//!
//! Without the `runtime` feature only the parser is here (what `bdk
//! validate` checks); answering a step is what the `Model` impl does.
#![cfg_attr(not(feature = "runtime"), allow(dead_code, unused_imports))]

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "runtime")]
use async_trait::async_trait;
use bdk_events::Usage;
#[cfg(feature = "runtime")]
use futures::StreamExt;
use minijinja::syntax::SyntaxConfig;
use minijinja::value::Serde;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use regex::Regex;
use serde::Deserialize;
use serde_json::Value;
#[cfg(feature = "runtime")]
use tokio_util::sync::CancellationToken;

use super::{Message, ModelError, ModelEvent, ModelRequest, StopReason, ToolCall};
#[cfg(feature = "runtime")]
use super::{Model, ModelStream};

/// How much of the last message a "no rule matched" error quotes.
const QUOTE_CHARS: usize = 120;

/// Errors found while loading a rules file. Every rule-level error names the
/// rule (1-based, in file order) and the line it starts on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptedError {
    /// The file is not valid TOML, or its top level has unknown keys.
    #[error("{}: invalid TOML at line {line}, column {column}: {message}", origin.display())]
    Toml {
        /// The rules file.
        origin: PathBuf,
        /// 1-based line of the problem.
        line: usize,
        /// 1-based column of the problem.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// The file has no `[[rules]]` at all.
    #[error("{}: no rules; add at least one [[rules]] table", origin.display())]
    NoRules {
        /// The rules file.
        origin: PathBuf,
    },
    /// A rule has an unknown key, a value of the wrong type, or an invalid value.
    #[error("{}: rule {rule} (line {line}): {message}", origin.display())]
    InvalidRule {
        /// The rules file.
        origin: PathBuf,
        /// 1-based rule number.
        rule: usize,
        /// 1-based line the rule starts on.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A rule names more than one matcher.
    #[error(
        "{}: rule {rule} (line {line}): more than one matcher ({}); a rule takes at most one of user_contains, user_regex and tool_result",
        origin.display(),
        matchers.join(", ")
    )]
    MultipleMatchers {
        /// The rules file.
        origin: PathBuf,
        /// 1-based rule number.
        rule: usize,
        /// 1-based line the rule starts on.
        line: usize,
        /// The matcher keys present.
        matchers: Vec<String>,
    },
    /// A `user_regex` does not compile.
    #[error("{}: rule {rule} (line {line}): invalid user_regex: {message}", origin.display())]
    Regex {
        /// The rules file.
        origin: PathBuf,
        /// 1-based rule number.
        rule: usize,
        /// 1-based line the rule starts on.
        line: usize,
        /// The regex compiler's message.
        message: String,
    },
    /// A template has a syntax error.
    #[error("{}: rule {rule} (line {line}): template syntax error in {field}: {message}", origin.display())]
    Template {
        /// The rules file.
        origin: PathBuf,
        /// 1-based rule number.
        rule: usize,
        /// 1-based line the rule starts on.
        line: usize,
        /// Which template (`reply`, `tool_calls[0].input.city`, ...).
        field: String,
        /// The template engine's message.
        message: String,
    },
    /// A rule answers with nothing.
    #[error(
        "{}: rule {rule} (line {line}): the rule has neither reply nor tool_calls; give it at least one",
        origin.display()
    )]
    NoAnswer {
        /// The rules file.
        origin: PathBuf,
        /// 1-based rule number.
        rule: usize,
        /// 1-based line the rule starts on.
        line: usize,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDef {
    #[serde(default)]
    rules: Vec<toml::Spanned<toml::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleDef {
    user_contains: Option<String>,
    user_regex: Option<String>,
    tool_result: Option<String>,
    reasoning: Option<String>,
    reply: Option<String>,
    #[serde(default)]
    tool_calls: Vec<CallDef>,
    usage: Option<UsageDef>,
    chunk_chars: Option<usize>,
    #[serde(default)]
    delay_ms: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallDef {
    name: String,
    input: Option<toml::Value>,
}

/// Usage figures a rule reports. A field left out is estimated (input and
/// output tokens) or zero (cache tokens).
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageDef {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_tokens: Option<u64>,
    cache_write_tokens: Option<u64>,
}

#[derive(Debug)]
enum Matcher {
    /// Lowercased needle.
    UserContains(String),
    UserRegex(Regex),
    ToolResult(String),
    Fallback,
}

/// A tool input with its string leaves compiled as templates.
#[derive(Debug)]
enum InputTemplate {
    /// Name of the template in the environment.
    Text(String),
    List(Vec<InputTemplate>),
    Map(Vec<(String, InputTemplate)>),
    Literal(Value),
}

#[derive(Debug)]
struct CallTemplate {
    name: String,
    input: InputTemplate,
}

#[derive(Debug)]
struct Rule {
    number: usize,
    line: usize,
    matcher: Matcher,
    reasoning: Option<String>,
    reply: Option<String>,
    tool_calls: Vec<CallTemplate>,
    usage: Option<UsageDef>,
    chunk_chars: Option<usize>,
    delay: Duration,
}

/// A parsed, checked rules file with its templates compiled.
pub struct RulesFile {
    origin: PathBuf,
    rules: Vec<Rule>,
    env: Environment<'static>,
}

impl fmt::Debug for RulesFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RulesFile")
            .field("origin", &self.origin)
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

/// Where a rule is, for error messages.
struct RuleAt<'a> {
    origin: &'a Path,
    rule: usize,
    line: usize,
}

impl RuleAt<'_> {
    fn invalid(&self, message: impl Into<String>) -> ScriptedError {
        ScriptedError::InvalidRule {
            origin: self.origin.to_owned(),
            rule: self.rule,
            line: self.line,
            message: message.into(),
        }
    }
}

/// 1-based line and column of byte offset `at` in `text`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

fn new_environment() -> Environment<'static> {
    let mut env = Environment::new();
    // Missing fields render empty, and lookups through them (`result.a.b` when
    // `result` is a plain string) stay empty instead of failing the step.
    env.set_undefined_behavior(UndefinedBehavior::Chainable);
    // Rendered text goes to a model and into JSON tool inputs, never into HTML.
    env.set_auto_escape_callback(|_| AutoEscape::None);
    // A literal reply must come out exactly as written, trailing newline included.
    // Building this constant configuration cannot fail; were it to, the
    // default syntax (which only trims one trailing newline) is acceptable.
    if let Ok(syntax) = SyntaxConfig::builder().keep_trailing_newline(true).build() {
        env.set_syntax(syntax);
    }
    env
}

impl RulesFile {
    /// Parses and checks a rules file. `origin` is the file's path, used in
    /// error messages (the text is not read from it).
    pub fn parse(text: &str, origin: &Path) -> Result<RulesFile, ScriptedError> {
        let file: FileDef = toml::from_str(text).map_err(|e| {
            let (line, column) = e.span().map_or((1, 1), |span| line_col(text, span.start));
            ScriptedError::Toml {
                origin: origin.to_owned(),
                line,
                column,
                message: e.message().trim().to_owned(),
            }
        })?;
        if file.rules.is_empty() {
            return Err(ScriptedError::NoRules {
                origin: origin.to_owned(),
            });
        }
        let mut env = new_environment();
        let mut rules = Vec::with_capacity(file.rules.len());
        for (index, spanned) in file.rules.into_iter().enumerate() {
            let (line, _) = line_col(text, spanned.span().start);
            let at = RuleAt {
                origin,
                rule: index + 1,
                line,
            };
            rules.push(compile_rule(spanned.into_inner(), &at, &mut env)?);
        }
        Ok(RulesFile {
            origin: origin.to_owned(),
            rules,
            env,
        })
    }

    /// The file the rules came from.
    pub fn origin(&self) -> &Path {
        &self.origin
    }

    /// How many rules the file has.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// True when the file has no rules (never the case for a parsed file).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

fn compile_rule(
    value: toml::Value,
    at: &RuleAt<'_>,
    env: &mut Environment<'static>,
) -> Result<Rule, ScriptedError> {
    if !value.is_table() {
        return Err(at.invalid(format!(
            "a rule must be a table, found {}",
            value.type_str()
        )));
    }
    let def: RuleDef = value
        .try_into()
        .map_err(|e: toml::de::Error| at.invalid(e.message().trim().to_owned()))?;

    let present: Vec<String> = [
        ("user_contains", def.user_contains.is_some()),
        ("user_regex", def.user_regex.is_some()),
        ("tool_result", def.tool_result.is_some()),
    ]
    .into_iter()
    .filter(|(_, set)| *set)
    .map(|(key, _)| key.to_owned())
    .collect();
    if present.len() > 1 {
        return Err(ScriptedError::MultipleMatchers {
            origin: at.origin.to_owned(),
            rule: at.rule,
            line: at.line,
            matchers: present,
        });
    }

    let matcher = if let Some(needle) = def.user_contains {
        if needle.is_empty() {
            return Err(at.invalid(
                "user_contains must not be empty (a rule without a matcher is the fallback)",
            ));
        }
        Matcher::UserContains(needle.to_lowercase())
    } else if let Some(pattern) = def.user_regex {
        if pattern.is_empty() {
            return Err(at.invalid(
                "user_regex must not be empty (a rule without a matcher is the fallback)",
            ));
        }
        let regex = Regex::new(&pattern).map_err(|e| ScriptedError::Regex {
            origin: at.origin.to_owned(),
            rule: at.rule,
            line: at.line,
            // The regex crate's message spans several lines with a caret
            // diagram; one line reads better in diagnostics.
            message: e
                .to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
        })?;
        Matcher::UserRegex(regex)
    } else if let Some(tool) = def.tool_result {
        if tool.is_empty() {
            return Err(at.invalid("tool_result must name a tool"));
        }
        Matcher::ToolResult(tool)
    } else {
        Matcher::Fallback
    };

    if def.reply.is_none() && def.tool_calls.is_empty() {
        return Err(ScriptedError::NoAnswer {
            origin: at.origin.to_owned(),
            rule: at.rule,
            line: at.line,
        });
    }
    if def.chunk_chars == Some(0) {
        return Err(at.invalid("chunk_chars must be at least 1"));
    }

    // What `captures.<name>` may name: the regex's named groups (a rule
    // with another matcher captures nothing).
    let groups: Vec<String> = match &matcher {
        Matcher::UserRegex(regex) => regex.capture_names().flatten().map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    let mut added: Vec<(String, String)> = Vec::new();
    let mut add = |field: String, source: String| -> Result<String, ScriptedError> {
        let name = format!("rule{}.{field}", at.rule);
        env.add_template_owned(name.clone(), source)
            .map_err(|e| ScriptedError::Template {
                origin: at.origin.to_owned(),
                rule: at.rule,
                line: at.line,
                field: field.clone(),
                message: template_message(&e),
            })?;
        added.push((field, name.clone()));
        Ok(name)
    };

    let reasoning = def
        .reasoning
        .map(|s| add("reasoning".to_owned(), s))
        .transpose()?;
    let reply = def.reply.map(|s| add("reply".to_owned(), s)).transpose()?;
    let mut tool_calls = Vec::with_capacity(def.tool_calls.len());
    for (j, call) in def.tool_calls.into_iter().enumerate() {
        if call.name.is_empty() {
            return Err(at.invalid(format!("tool_calls[{j}].name must not be empty")));
        }
        let input = match call.input {
            None => InputTemplate::Literal(Value::Object(serde_json::Map::new())),
            Some(value @ toml::Value::Table(_)) => {
                compile_input(value, format!("tool_calls[{j}].input"), &mut add)?
            }
            Some(other) => {
                return Err(at.invalid(format!(
                    "tool_calls[{j}].input must be a table, found {}",
                    other.type_str()
                )));
            }
        };
        tool_calls.push(CallTemplate {
            name: call.name,
            input,
        });
    }

    for (field, name) in &added {
        check_variables(env, name, field, &groups, at)?;
    }

    Ok(Rule {
        number: at.rule,
        line: at.line,
        matcher,
        reasoning,
        reply,
        tool_calls,
        usage: def.usage,
        chunk_chars: def.chunk_chars,
        delay: Duration::from_millis(def.delay_ms),
    })
}

/// The names a rule's templates can see (see [`Vars`]).
const TEMPLATE_VARS: &[&str] = &["user", "captures", "result", "result_text", "tool", "step"];

/// Refuses a template that reads a variable no conversation provides, or a
/// capture group its regex does not have: such a template would render
/// empty at every turn, which is never what its author meant.
fn check_variables(
    env: &Environment<'static>,
    name: &str,
    field: &str,
    groups: &[String],
    at: &RuleAt<'_>,
) -> Result<(), ScriptedError> {
    let Ok(template) = env.get_template(name) else {
        return Ok(());
    };
    let mut used: Vec<String> = template.undeclared_variables(true).into_iter().collect();
    used.sort();
    for var in used {
        let (top, rest) = match var.split_once('.') {
            Some((top, rest)) => (top, Some(rest)),
            None => (var.as_str(), None),
        };
        // Functions the engine provides (`range`, `namespace`, ...) are
        // looked up like variables.
        if env.globals().any(|(global, _)| global == top) {
            continue;
        }
        if !TEMPLATE_VARS.contains(&top) {
            return Err(at.invalid(format!(
                "{field} uses `{top}`, which no conversation provides; templates can use {}",
                TEMPLATE_VARS.join(", ")
            )));
        }
        if top == "captures"
            && let Some(group) = rest.and_then(|r| r.split('.').next())
            && !groups.iter().any(|g| g == group)
        {
            let have = if groups.is_empty() {
                "the rule has no user_regex with named groups".to_owned()
            } else {
                format!("its user_regex names {}", groups.join(", "))
            };
            return Err(at.invalid(format!(
                "{field} uses `captures.{group}`, but {have}; name a group with `(?P<{group}>...)` or use another capture"
            )));
        }
    }
    Ok(())
}

fn compile_input(
    value: toml::Value,
    path: String,
    add: &mut impl FnMut(String, String) -> Result<String, ScriptedError>,
) -> Result<InputTemplate, ScriptedError> {
    Ok(match value {
        toml::Value::String(s) => InputTemplate::Text(add(path, s)?),
        toml::Value::Array(items) => InputTemplate::List(
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| compile_input(item, format!("{path}[{i}]"), add))
                .collect::<Result<_, _>>()?,
        ),
        toml::Value::Table(table) => InputTemplate::Map(
            table
                .into_iter()
                .map(|(key, item)| {
                    let child = compile_input(item, format!("{path}.{key}"), add)?;
                    Ok((key, child))
                })
                .collect::<Result<_, ScriptedError>>()?,
        ),
        toml::Value::Integer(i) => InputTemplate::Literal(Value::from(i)),
        // JSON has no NaN or infinity; null is the closest honest value.
        toml::Value::Float(f) => InputTemplate::Literal(
            serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        ),
        toml::Value::Boolean(b) => InputTemplate::Literal(Value::Bool(b)),
        toml::Value::Datetime(d) => InputTemplate::Literal(Value::String(d.to_string())),
    })
}

/// The engine's message without the template name we made up, which means
/// nothing to the person editing the rules file.
fn template_message(e: &minijinja::Error) -> String {
    let detail = e
        .detail()
        .map(str::to_owned)
        .unwrap_or_else(|| e.kind().to_string());
    match e.line() {
        Some(line) => format!("{detail} (template line {line})"),
        None => detail,
    }
}

/// What a rule's templates can see.
struct Vars {
    user: String,
    captures: BTreeMap<String, String>,
    result: Option<Value>,
    result_text: String,
    tool: String,
    step: usize,
}

impl Vars {
    fn context(&self) -> minijinja::Value {
        let result = self
            .result
            .as_ref()
            .map_or(minijinja::Value::UNDEFINED, |r| {
                minijinja::Value::from(Serde(r))
            });
        minijinja::context! {
            user => self.user.as_str(),
            captures => minijinja::Value::from(Serde(&self.captures)),
            result => result,
            result_text => self.result_text.as_str(),
            tool => self.tool.as_str(),
            step => self.step,
        }
    }
}

fn truncate_quote(text: &str) -> String {
    let mut quoted: String = text.chars().take(QUOTE_CHARS).collect();
    if text.chars().count() > QUOTE_CHARS {
        quoted.push_str("...");
    }
    quoted
}

fn div_ceil_4(chars: usize) -> u64 {
    u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX)
}

fn request_chars(request: &ModelRequest) -> usize {
    let messages: usize = request
        .messages
        .iter()
        .map(|m| match m {
            Message::User { text } => text.chars().count(),
            Message::Assistant { text, tool_calls } => {
                text.chars().count()
                    + tool_calls
                        .iter()
                        .map(|c| c.name.chars().count() + c.input.to_string().chars().count())
                        .sum::<usize>()
            }
            Message::Tool { content, .. } => content.chars().count(),
        })
        .sum();
    request.system.chars().count() + messages
}

fn chunks(text: &str, size: Option<usize>) -> Vec<String> {
    match size {
        Some(n) if n > 0 => {
            let chars: Vec<char> = text.chars().collect();
            chars.chunks(n).map(|c| c.iter().collect()).collect()
        }
        _ => vec![text.to_owned()],
    }
}

impl RulesFile {
    fn select(
        &self,
        request: &ModelRequest,
    ) -> Result<(&Rule, BTreeMap<String, String>), ModelError> {
        let fallback = || {
            self.rules
                .iter()
                .find(|r| matches!(r.matcher, Matcher::Fallback))
        };
        if let Some(Message::Tool { name, content, .. }) = request.messages.last() {
            let found = self
                .rules
                .iter()
                .find(|r| matches!(&r.matcher, Matcher::ToolResult(t) if t == name))
                .or_else(fallback);
            return found.map(|r| (r, BTreeMap::new())).ok_or_else(|| {
                ModelError::Provider(format!(
                    "no scripted rule matched the last message (the result of tool `{name}`: \"{}\") in {}; add a rule with tool_result = \"{name}\" or a fallback rule with no matcher",
                    truncate_quote(content),
                    self.origin.display()
                ))
            });
        }
        let user = last_user_text(request);
        let lowered = user.to_lowercase();
        for rule in &self.rules {
            match &rule.matcher {
                Matcher::UserContains(needle) if lowered.contains(needle.as_str()) => {
                    return Ok((rule, BTreeMap::new()));
                }
                Matcher::UserRegex(regex) => {
                    if let Some(caps) = regex.captures(user) {
                        let captures = regex
                            .capture_names()
                            .flatten()
                            .filter_map(|n| {
                                caps.name(n).map(|m| (n.to_owned(), m.as_str().to_owned()))
                            })
                            .collect();
                        return Ok((rule, captures));
                    }
                }
                _ => {}
            }
        }
        fallback().map(|r| (r, BTreeMap::new())).ok_or_else(|| {
            ModelError::Provider(format!(
                "no scripted rule matched the last user message \"{}\" in {}; add a rule that matches it (user_contains or user_regex) or a fallback rule with no matcher",
                truncate_quote(user),
                self.origin.display()
            ))
        })
    }

    fn render(
        &self,
        rule: &Rule,
        template: &str,
        field: &str,
        ctx: &minijinja::Value,
    ) -> Result<String, ModelError> {
        self.env
            .get_template(template)
            .and_then(|t| t.render(ctx))
            .map_err(|e| {
                ModelError::Provider(format!(
                    "{}: rule {} (line {}): failed to render {field}: {}",
                    self.origin.display(),
                    rule.number,
                    rule.line,
                    template_message(&e)
                ))
            })
    }

    fn render_input(
        &self,
        rule: &Rule,
        input: &InputTemplate,
        ctx: &minijinja::Value,
    ) -> Result<Value, ModelError> {
        Ok(match input {
            InputTemplate::Text(name) => {
                let field = name.split_once('.').map_or(name.as_str(), |(_, f)| f);
                Value::String(self.render(rule, name, field, ctx)?)
            }
            InputTemplate::List(items) => Value::Array(
                items
                    .iter()
                    .map(|i| self.render_input(rule, i, ctx))
                    .collect::<Result<_, _>>()?,
            ),
            InputTemplate::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), self.render_input(rule, v, ctx)?)))
                    .collect::<Result<_, ModelError>>()?,
            ),
            InputTemplate::Literal(value) => value.clone(),
        })
    }

    /// Picks the rule for `request` and renders its answer as the events of
    /// one step (without the delay, which the stream applies).
    fn answer(&self, request: &ModelRequest) -> Result<(Vec<ModelEvent>, Duration), ModelError> {
        let (rule, captures) = self.select(request)?;
        let vars = vars_for(request, captures);
        let ctx = vars.context();

        let reasoning = match &rule.reasoning {
            Some(t) => self.render(rule, t, "reasoning", &ctx)?,
            None => String::new(),
        };
        let reply = match &rule.reply {
            Some(t) => self.render(rule, t, "reply", &ctx)?,
            None => String::new(),
        };
        let mut calls = Vec::with_capacity(rule.tool_calls.len());
        for call in &rule.tool_calls {
            calls.push(ToolCall {
                id: bdk_events::ids::new_call_id(),
                name: call.name.clone(),
                input: self.render_input(rule, &call.input, &ctx)?,
            });
        }

        let declared = rule.usage.unwrap_or_default();
        let output_chars = reply.chars().count()
            + reasoning.chars().count()
            + calls
                .iter()
                .map(|c| c.input.to_string().chars().count())
                .sum::<usize>();
        let usage = Usage {
            input_tokens: declared
                .input_tokens
                .unwrap_or_else(|| div_ceil_4(request_chars(request))),
            output_tokens: declared
                .output_tokens
                .unwrap_or_else(|| div_ceil_4(output_chars)),
            cache_read_tokens: declared.cache_read_tokens.unwrap_or(0),
            cache_write_tokens: declared.cache_write_tokens.unwrap_or(0),
        };

        let mut events = Vec::new();
        if !reasoning.is_empty() {
            events.extend(
                chunks(&reasoning, rule.chunk_chars)
                    .into_iter()
                    .map(ModelEvent::ReasoningDelta),
            );
        }
        if !reply.is_empty() {
            events.extend(
                chunks(&reply, rule.chunk_chars)
                    .into_iter()
                    .map(ModelEvent::TextDelta),
            );
        }
        let stop = if calls.is_empty() {
            StopReason::Stop
        } else {
            StopReason::ToolCalls
        };
        events.extend(calls.into_iter().map(ModelEvent::ToolCall));
        events.push(ModelEvent::Usage(usage));
        events.push(ModelEvent::Stop(stop));
        Ok((events, rule.delay))
    }
}

fn last_user_text(request: &ModelRequest) -> &str {
    request
        .messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::User { text } => Some(text.as_str()),
            _ => None,
        })
        .unwrap_or("")
}

fn vars_for(request: &ModelRequest, captures: BTreeMap<String, String>) -> Vars {
    let last_tool = request.messages.iter().rev().find_map(|m| match m {
        Message::Tool { name, content, .. } => Some((name.as_str(), content.as_str())),
        _ => None,
    });
    let assistants_since_user = request
        .messages
        .iter()
        .rev()
        .take_while(|m| !matches!(m, Message::User { .. }))
        .filter(|m| matches!(m, Message::Assistant { .. }))
        .count();
    Vars {
        user: last_user_text(request).to_owned(),
        captures,
        result: last_tool.map(|(_, content)| {
            serde_json::from_str::<Value>(content)
                .unwrap_or_else(|_| Value::String(content.to_owned()))
        }),
        result_text: last_tool.map(|(_, c)| c.to_owned()).unwrap_or_default(),
        tool: last_tool.map(|(n, _)| n.to_owned()).unwrap_or_default(),
        step: assistants_since_user + 1,
    }
}

/// The deterministic offline model.
#[derive(Clone, Debug)]
pub struct ScriptedModel {
    id: String,
    rules: Arc<RulesFile>,
}

impl ScriptedModel {
    /// Reads and parses the rules file at `path`. `id` is the full model
    /// string reported on `turn.completed` (`scripted/default`).
    ///
    /// The read is synchronous: rules files are small local files read once
    /// when an agent loads, alongside discovery's other reads.
    pub fn load(path: &Path, id: impl Into<String>) -> Result<Self, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ModelError::Config(format!(
                "cannot read scripted rules file {}: {e}",
                path.display()
            ))
        })?;
        let rules = RulesFile::parse(&text, path).map_err(|e| ModelError::Config(e.to_string()))?;
        Ok(Self::from_rules(rules, id))
    }

    /// Wraps already parsed rules.
    pub fn from_rules(rules: RulesFile, id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            rules: Arc::new(rules),
        }
    }

    /// The rules in use.
    pub fn rules(&self) -> &RulesFile {
        &self.rules
    }
}

#[cfg(feature = "runtime")]
struct StreamState {
    events: VecDeque<ModelEvent>,
    delay: Option<Duration>,
    cancel: CancellationToken,
    done: bool,
}

#[cfg(feature = "runtime")]
#[async_trait]
impl Model for ScriptedModel {
    fn id(&self) -> &str {
        &self.id
    }

    async fn step(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ModelError> {
        let (events, delay) = self.rules.answer(&request)?;
        let state = StreamState {
            events: events.into(),
            delay: (!delay.is_zero()).then_some(delay),
            cancel,
            done: false,
        };
        let stream = futures::stream::unfold(state, |mut st| async move {
            if st.done {
                return None;
            }
            if let Some(delay) = st.delay.take() {
                tokio::select! {
                    biased;
                    () = st.cancel.cancelled() => {
                        st.done = true;
                        return Some((Err(ModelError::Cancelled), st));
                    }
                    () = tokio::time::sleep(delay) => {}
                }
            }
            // Checked before every event so a cancelled step stops between
            // chunks, as a streaming provider would.
            if st.cancel.is_cancelled() {
                st.done = true;
                return Some((Err(ModelError::Cancelled), st));
            }
            let event = st.events.pop_front()?;
            Some((Ok(event), st))
        });
        Ok(stream.boxed())
    }
}

#[cfg(test)]
#[cfg(feature = "runtime")]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }

    #[test]
    fn chunks_split_on_chars() {
        assert_eq!(chunks("héllo", Some(2)), vec!["hé", "ll", "o"]);
        assert_eq!(chunks("héllo", None), vec!["héllo"]);
    }
}
