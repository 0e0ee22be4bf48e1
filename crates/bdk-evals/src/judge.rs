//! LLM-as-judge: grade an answer against a rubric with the configured judge
//! model, through the same `Model` port the agent uses (so the scripted
//! provider makes it deterministic offline).

use std::sync::Arc;

use bdk_models::{Message, Model, ModelEvent, ModelRequest};
use futures::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// The judge's verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// From 0 to 1.
    pub score: f64,
    /// The judge's explanation.
    pub reason: String,
}

/// Why a judge could not give a verdict.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JudgeError {
    /// The model step failed.
    #[error("judge model {model} failed: {message}")]
    Model {
        /// The judge model.
        model: String,
        /// What failed.
        message: String,
    },
    /// The answer was not a JSON verdict with a score from 0 to 1.
    #[error(
        "judge model {model} gave no usable verdict (expected JSON {{\"score\": 0..1, \"reason\": \"...\"}}): {reply}"
    )]
    Unparseable {
        /// The judge model.
        model: String,
        /// What it said (shortened).
        reply: String,
    },
}

/// The system prompt of every judge request.
pub const JUDGE_SYSTEM: &str = "You grade an AI agent's answer against a rubric. \
Reply with one JSON object and nothing else: {\"score\": <number from 0 to 1>, \"reason\": \"<one sentence>\"}. \
1 means the answer fully meets the rubric, 0 means it does not meet it at all.";

/// A judge bound to one model.
pub struct Judge {
    model: Arc<dyn Model>,
}

impl Judge {
    /// A judge over `model`.
    pub fn new(model: Arc<dyn Model>) -> Judge {
        Judge { model }
    }

    /// The model id (`provider/model`).
    pub fn model_id(&self) -> &str {
        self.model.id()
    }

    /// The user message sent for one grading. It starts with a fixed line
    /// so that scripted rules files can recognise judge requests.
    pub fn prompt(rubric: &str, question: &str, answer: &str) -> String {
        format!(
            "Evaluate this answer against the rubric.\nRubric: {rubric}\nQuestion: {question}\nAnswer: {answer}"
        )
    }

    /// Grades `answer` (to `question`) against `rubric`.
    pub async fn grade(
        &self,
        rubric: &str,
        question: &str,
        answer: &str,
        cancel: CancellationToken,
    ) -> Result<Verdict, JudgeError> {
        let model = self.model.id().to_owned();
        let (_, name) = bdk_models::split_model(&model);
        let request = ModelRequest {
            model: name.to_owned(),
            system: JUDGE_SYSTEM.to_owned(),
            messages: vec![Message::User {
                text: Self::prompt(rubric, question, answer),
            }],
            tools: Default::default(),
            effort: None,
            tool_choice: None,
            max_tokens: None,
        };
        let fail = |message: String| JudgeError::Model {
            model: model.clone(),
            message,
        };
        let mut stream = self
            .model
            .step(request, cancel)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let mut text = String::new();
        while let Some(item) = stream.next().await {
            match item.map_err(|e| fail(e.to_string()))? {
                ModelEvent::TextDelta(d) => text.push_str(&d),
                ModelEvent::Stop(_) => break,
                _ => {}
            }
        }
        parse_verdict(&text).ok_or_else(|| JudgeError::Unparseable {
            model: model.clone(),
            reply: crate::matcher::short(&Value::String(text)),
        })
    }
}

/// Reads `{"score": .., "reason": ..}` out of a reply, tolerating text or
/// code fences around the object.
pub fn parse_verdict(text: &str) -> Option<Verdict> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    let value: Value = serde_json::from_str(text.get(start..=end)?).ok()?;
    let score = value.get("score")?.as_f64()?;
    if !(0.0..=1.0).contains(&score) {
        return None;
    }
    let reason = value
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    Some(Verdict { score, reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_parse_inside_fences_and_reject_out_of_range_scores() {
        let v = parse_verdict("```json\n{\"score\": 0.75, \"reason\": \"ok\"}\n```").unwrap();
        assert_eq!(v.score, 0.75);
        assert_eq!(v.reason, "ok");
        assert!(parse_verdict("{\"score\": 1.5}").is_none());
        assert!(parse_verdict("no json here").is_none());
        assert!(parse_verdict("{\"reason\": \"x\"}").is_none());
    }
}
