//! Turning MCP tool results and schemas into kinet's shapes.

use base64::Engine as _;
use kinet_core::message::ImagePart;
use kinet_core::{ToolError, ToolOutput};
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::{Map, Value};

/// A tool result as a [`ToolOutput`]: text blocks joined, images as image
/// parts, embedded text resources inlined, other resources and links
/// described, `structuredContent` kept (and shown when there is no text).
/// `isError` results become a failed tool call carrying the same text.
pub(crate) fn normalize_result(
    server: &str,
    result: CallToolResult,
) -> Result<ToolOutput, ToolError> {
    let mut texts: Vec<String> = Vec::new();
    let mut images: Vec<ImagePart> = Vec::new();
    for block in result.content {
        match block {
            ContentBlock::Text(text) => texts.push(text.text),
            ContentBlock::Image(image) => images.push(ImagePart {
                media_type: image.mime_type,
                data: image.data,
            }),
            ContentBlock::Audio(audio) => texts.push(format!(
                "[audio: {}, {} bytes, not shown]",
                audio.mime_type,
                base64_len(&audio.data)
            )),
            ContentBlock::Resource(embedded) => match embedded.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    texts.push(format!("[resource {uri}]\n{text}"));
                }
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => {
                    let mime = mime_type.unwrap_or_else(|| "application/octet-stream".into());
                    if mime.starts_with("image/") {
                        images.push(ImagePart {
                            media_type: mime,
                            data: blob,
                        });
                    } else {
                        texts.push(format!(
                            "[resource {uri}: {mime}, {} bytes]",
                            base64_len(&blob)
                        ));
                    }
                }
                _ => texts.push("[resource of an unknown kind]".into()),
            },
            ContentBlock::ResourceLink(link) => {
                let mut line = format!("[resource link: {} ({})", link.uri, link.name);
                if let Some(description) = &link.description {
                    line.push_str(&format!(" - {description}"));
                }
                line.push(']');
                texts.push(line);
            }
            _ => texts.push("[content of an unknown kind]".into()),
        }
    }
    let structured = result.structured_content;
    let mut text = texts.join("\n");
    if text.is_empty()
        && let Some(value) = &structured
    {
        text = value.to_string();
    }
    if result.is_error == Some(true) {
        let message = if text.is_empty() {
            format!("the `{server}` server reported an error without a message")
        } else {
            text
        };
        return Err(ToolError::failed(message));
    }
    let mut output = ToolOutput::text(text);
    output.images = images;
    output.structured = structured;
    Ok(output)
}

fn base64_len(data: &str) -> usize {
    base64::engine::general_purpose::STANDARD
        .decode(data.as_bytes())
        .map_or(data.len() * 3 / 4, |b| b.len())
}

/// Makes a server's input schema acceptable to model providers: an object
/// schema with `properties`, every local `$ref` inlined (to `$defs`,
/// `definitions` or any JSON pointer such as `#/properties/a`; many
/// compatible servers reject `$ref`), bookkeeping keywords (`$schema`,
/// `$id`, ...) dropped. Provider-specific rules are applied when a request
/// is built (see `kinet_core::schema`).
pub(crate) fn normalize_schema(schema: &Map<String, Value>) -> Value {
    kinet_core::schema::sanitize(
        &Value::Object(schema.clone()),
        kinet_core::schema::SchemaDialect::OpenAi,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_are_normalised() {
        let schema = serde_json::json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"point": {"$ref": "#/$defs/Point"}},
            "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}}}
        });
        let normalized = normalize_schema(schema.as_object().unwrap());
        assert_eq!(
            normalized,
            serde_json::json!({
                "type": "object",
                "properties": {"point": {"type": "object", "properties": {"x": {"type": "number"}}}}
            })
        );
        let empty = normalize_schema(&Map::new());
        assert_eq!(
            empty,
            serde_json::json!({"type": "object", "properties": {}})
        );
    }
}
