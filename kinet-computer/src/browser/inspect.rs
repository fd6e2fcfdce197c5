//! `browser_eval` and `browser_screenshot`: looking at the page other
//! than through snapshots.

use std::fmt::Write as _;

use async_trait::async_trait;
use chromiumoxide::cdp::browser_protocol::page::{
    CaptureScreenshotFormat, CaptureScreenshotParams, Viewport,
};
use kinet_core::message::ImagePart;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

use super::browser_error;
use super::document;
use super::shared::{Shared, cancellable};

/// Arguments of `browser_eval`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EvalArgs {
    /// A JavaScript expression evaluated in the active tab; promises are
    /// awaited; the result is returned as JSON.
    pub expression: String,
}

pub(super) struct EvalTool(pub(super) Shared);

#[async_trait]
impl Tool for EvalTool {
    type Args = EvalArgs;
    fn name(&self) -> &str {
        "browser_eval"
    }
    fn description(&self) -> &str {
        "Evaluates a JavaScript expression in the active tab (promises awaited) and returns \
its value as JSON. Prefer the other browser tools for clicking and typing."
    }
    async fn confirm_summary(&self, args: &EvalArgs, _ctx: &ToolCtx) -> Option<String> {
        Some(format!(
            "Run JavaScript in the browser:\n{}",
            args.expression
        ))
    }
    async fn call(&self, args: EvalArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        cancellable(ctx, self.0.call_limit(), async {
            let page = self.0.page().await?;
            let value = document::evaluate(&page, &args.expression).await?;
            let text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string());
            Ok(self.0.with_notes(text).with_structured(value))
        })
        .await
    }
}

/// Arguments of `browser_screenshot`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct BrowserScreenshotArgs {
    /// The whole scrollable page instead of the visible part.
    #[serde(default)]
    pub full_page: bool,
}

pub(super) struct ScreenshotTool(pub(super) Shared);

/// The largest width or height of a full-page screenshot, in CSS pixels
/// (model APIs refuse larger images).
const MAX_FULL_PAGE: f64 = 8000.0;

/// Width and height from the header of a base64-encoded PNG.
fn png_size(base64_png: &str) -> Option<(u32, u32)> {
    use base64::Engine as _;
    let head = base64::engine::general_purpose::STANDARD
        .decode(base64_png.get(..32)?)
        .ok()?;
    let png = head.as_slice();
    let width = png.get(16..20)?.try_into().ok().map(u32::from_be_bytes)?;
    let height = png.get(20..24)?.try_into().ok().map(u32::from_be_bytes)?;
    Some((width, height))
}

#[async_trait]
impl Tool for ScreenshotTool {
    type Args = BrowserScreenshotArgs;
    fn name(&self) -> &str {
        "browser_screenshot"
    }
    fn description(&self) -> &str {
        "Takes a PNG screenshot of the active tab (the visible part, or the full page)."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only().open_world(true)
    }
    async fn call(
        &self,
        args: BrowserScreenshotArgs,
        ctx: &ToolCtx,
    ) -> Result<ToolOutput, ToolError> {
        cancellable(ctx, self.0.call_limit(), async {
            let page = self.0.page().await?;
            page.activate().await.map_err(browser_error)?;
            let mut params =
                CaptureScreenshotParams::builder().format(CaptureScreenshotFormat::Png);
            let mut cropped = None;
            if args.full_page {
                // A clip beyond the viewport leaves the page's layout alone
                // (no device-metrics override to undo if the call fails).
                let size = page
                    .layout_metrics()
                    .await
                    .map_err(browser_error)?
                    .css_content_size;
                let (width, height) = (size.width.max(1.0), size.height.max(1.0));
                // One image pixel per CSS pixel, also on HiDPI screens.
                let ratio = document::evaluate(&page, "devicePixelRatio")
                    .await?
                    .as_f64()
                    .filter(|r| r.is_finite() && *r > 0.0)
                    .unwrap_or(1.0);
                if width > MAX_FULL_PAGE || height > MAX_FULL_PAGE {
                    cropped = Some((width, height));
                }
                params = params.capture_beyond_viewport(true).clip(Viewport {
                    x: 0.0,
                    y: 0.0,
                    width: width.min(MAX_FULL_PAGE),
                    height: height.min(MAX_FULL_PAGE),
                    scale: 1.0 / ratio,
                });
            }
            let shot = page
                .execute(params.build())
                .await
                .map_err(browser_error)?
                .result
                .data;
            let data: &str = shot.as_ref();
            let url = page.url().await.ok().flatten().unwrap_or_default();
            let (width, height) = png_size(data).unwrap_or_default();
            let mut text = format!("Screenshot of {url} ({width}x{height}).");
            if let Some((full_width, full_height)) = cropped {
                let _ = write!(
                    text,
                    " The page is {full_width:.0}x{full_height:.0}; this shows its top-left \
{MAX_FULL_PAGE:.0}x{MAX_FULL_PAGE:.0} at most."
                );
            }
            Ok(ToolOutput::text(text).with_image(ImagePart {
                media_type: "image/png".into(),
                data: data.to_owned(),
            }))
        })
        .await
    }
}
