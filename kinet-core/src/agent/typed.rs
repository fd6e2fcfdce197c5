//! Typed final output: the run's answer as a Rust value, through each API's
//! native structured output.

use futures::StreamExt;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use super::Agent;
use crate::data::conversation::Conversation;
use crate::data::error::AgentError;
use crate::data::model::{ChatRequest, GenerationParams, OutputSchema, StreamEvent, Usage};
use crate::event::{RunOutcome, RunStop, Typed, TypedError};
use crate::message::Message;

/// The instruction for the structured answer, and for the one retry.
const ASK: &str = "Give your final answer now, as JSON matching the requested schema.";

impl Agent {
    /// Runs the agent and returns its final answer as a `T`.
    ///
    /// With tools, the run goes on as usual until the model stops calling
    /// them; then one more model call asks for the answer in `T`'s JSON
    /// schema through the API's native structured output: Chat Completions
    /// `response_format` (`json_schema`, strict), Responses `text.format`,
    /// Anthropic a forced tool whose input is the answer. Without tools that
    /// call is the whole run. The answer is parsed into `T`; when it does
    /// not fit, the model is told why and asked once more.
    pub async fn run_typed<T: JsonSchema + DeserializeOwned>(
        &self,
        conversation: impl Into<Conversation>,
    ) -> Result<Typed<T>, TypedError> {
        let mut outcome = if self.config.run.tools.is_empty() {
            RunOutcome {
                conversation: conversation.into(),
                stop: RunStop::Completed,
                model_stop: None,
                usage: Usage::default(),
                cost: None,
                turns: 0,
            }
        } else {
            let outcome = self.run_to_completion(conversation).await;
            if !outcome.stop.is_completed() {
                return Err(TypedError::Run(Box::new(outcome)));
            }
            outcome
        };
        let output = OutputSchema {
            name: schema_name::<T>(),
            schema: crate::tooldef::schema_for::<T>(),
        };
        outcome.conversation.push(Message::user(ASK));
        let mut last_error = String::new();
        for attempt in 0..2 {
            let answer = match self.structured_answer(&outcome.conversation, &output).await {
                Ok((answer, usage)) => {
                    outcome.usage.add(&usage);
                    outcome.turns += 1;
                    let run = &self.config.run;
                    if let Some(cost) = run
                        .telemetry
                        .price_table()
                        .and_then(|p| p.cost(&run.model, &usage))
                    {
                        outcome.cost = Some(outcome.cost.unwrap_or(0.0) + cost);
                    }
                    answer
                }
                Err(error) => {
                    outcome.stop = RunStop::Failed(error);
                    return Err(TypedError::Run(Box::new(outcome)));
                }
            };
            outcome
                .conversation
                .push(Message::assistant(answer.clone()));
            match serde_json::from_str::<T>(&answer) {
                Ok(value) => return Ok(Typed { value, outcome }),
                Err(error) => {
                    last_error = format!(
                        "{error} in {}",
                        answer.chars().take(300).collect::<String>()
                    );
                    if attempt == 0 {
                        outcome.conversation.push(Message::user(format!(
                            "That answer does not match the schema ({error}). {ASK}"
                        )));
                    }
                }
            }
        }
        Err(TypedError::Invalid {
            message: last_error,
            outcome: Box::new(outcome),
        })
    }

    /// One model call for the structured answer; its JSON text (the text, or
    /// the forced tool's arguments) and usage.
    async fn structured_answer(
        &self,
        conversation: &Conversation,
        output: &OutputSchema,
    ) -> Result<(String, Usage), AgentError> {
        let run = &self.config.run;
        let params = GenerationParams {
            output: Some(output.clone()),
            ..run.params.clone()
        };
        let request = ChatRequest {
            model: std::borrow::Cow::Borrowed(&run.model),
            system: std::borrow::Cow::Borrowed(&run.system_prompt),
            messages: std::borrow::Cow::Borrowed(&conversation.messages),
            tools: std::borrow::Cow::Owned(Vec::new()),
            params: std::borrow::Cow::Owned(params),
        };
        let failed = |source| AgentError::Provider {
            provider: run.provider.name().to_owned(),
            source,
        };
        let mut stream = run.provider.stream(request).await.map_err(failed)?;
        let (mut text, mut arguments, mut usage) = (String::new(), String::new(), Usage::default());
        while let Some(event) = stream.next().await {
            match event.map_err(failed)? {
                StreamEvent::TextDelta(delta) => text.push_str(&delta),
                StreamEvent::ToolCallArgumentsDelta { index: 0, delta } => {
                    arguments.push_str(&delta)
                }
                StreamEvent::Usage(reported) => usage = reported,
                _ => {}
            }
        }
        let answer = if arguments.trim().is_empty() {
            text
        } else {
            arguments
        };
        Ok((answer.trim().to_owned(), usage))
    }
}

/// `T`'s name, made fit for an API's schema name (letters, digits, `_`).
fn schema_name<T: JsonSchema>() -> String {
    let name: String = T::schema_name()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() {
        "answer".into()
    } else {
        name
    }
}
