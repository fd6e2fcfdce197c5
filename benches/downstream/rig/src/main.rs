//! The README's word-count tool offered to an OpenAI model, written with
//! rig-core 0.44 (compiled for the build-time comparison: it would call
//! OpenAI, so it runs the model only with RUN set). rig-core 0.44 has no
//! agent loop of its own; the tool's definition goes with the request.
use rig_core::completion::CompletionRequest;
use rig_core::providers::openai::{self, OpenAI};
use rig_core::tool::{Tool, ToolContext, tool_definition};
use serde::Deserialize;

#[derive(Deserialize)]
struct WordCountArgs {
    text: String,
}

struct WordCount;

impl Tool for WordCount {
    const NAME: &'static str = "word_count";
    type Args = WordCountArgs;
    type Output = String;
    type Error = std::convert::Infallible;

    fn description(&self) -> String {
        "Counts the words in a text.".to_string()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": { "text": { "type": "string", "description": "The text to count words in." } },
            "required": ["text"]
        })
    }

    async fn call(&self, _context: &mut ToolContext, args: WordCountArgs) -> Result<String, Self::Error> {
        Ok(args.text.split_whitespace().count().to_string())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var("RUN").is_ok() {
        let model = OpenAI::from_env()?.completion(openai::GPT_5_2);
        let request = CompletionRequest::new("How many words in 'a b c'?").tool(tool_definition(&WordCount));
        let response = model.call(request).await?;
        println!("{}", response.text());
    }
    Ok(())
}
