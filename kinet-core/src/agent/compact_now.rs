//! Compaction on the host's command.

use super::Agent;
use crate::data::conversation::Conversation;
use crate::data::error::AgentError;

impl Agent {
    /// Compacts `conversation` now, whatever its size (a host's "compact"
    /// command): large tool results pruned, then the turns before the
    /// latest ones summarised by the policy's summariser or the model. The
    /// window is the policy's (or, when unknown, the conversation's own
    /// estimated size, so it halves).
    pub async fn compact(
        &self,
        conversation: Conversation,
    ) -> Result<(Conversation, crate::context::Compaction), AgentError> {
        let run = &self.config.run;
        let mut conversation = conversation;
        let specs = run
            .tools
            .snapshot_for_window(run.context.window_for(&run.model))
            .await;
        let sizer = crate::context::Sizer::new(&run.system_prompt, specs.specs(), 1.0);
        let raw = sizer.raw(&conversation.messages);
        let window = run.context.window_for(&run.model).unwrap_or(raw.max(1));
        let request = crate::context::Request {
            sizer: &sizer,
            raw,
            window,
            force: true,
        };
        let model = crate::context::Model {
            provider: &*run.provider,
            name: &run.model,
            params: &run.params,
        };
        let done =
            crate::context::compact(&mut conversation.messages, request, &run.context, model)
                .await
                .map_err(|message| AgentError::Provider {
                    provider: run.provider.name().to_owned(),
                    source: crate::data::model::ProviderError::Stream(message),
                })?
                .unwrap_or_default();
        Ok((conversation, done))
    }
}
