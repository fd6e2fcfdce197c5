//! The conversation model: messages, content parts and tool calls.

pub use crate::data::message::{ContentPart, Conversation, ImagePart, Message, ToolCall};
