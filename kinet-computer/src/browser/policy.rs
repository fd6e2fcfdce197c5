//! Which URLs the browser tools open: web pages (`http`, `https`),
//! `about:blank` and `data:` by default. `file:` only when the host allows
//! it, and then only inside the call's workspace roots; browser-internal
//! pages (`chrome:`, `devtools:`), `view-source:`, `javascript:` and every
//! other scheme only when the host names the scheme.

use kinet_core::ToolCtx;

use super::config::BrowserConfig;
use crate::ComputerError;

/// Checks a URL the model asked for against the session's settings.
pub(super) fn check_url(
    url: &str,
    config: &BrowserConfig,
    ctx: &ToolCtx,
) -> Result<(), ComputerError> {
    let parsed = url::Url::parse(url.trim()).map_err(|_| {
        ComputerError::InvalidInput(format!(
            "{url:?} is not a full URL: give http(s)://..., or about:blank"
        ))
    })?;
    let scheme = parsed.scheme();
    if config
        .allowed_schemes
        .iter()
        .any(|s| s.eq_ignore_ascii_case(scheme))
    {
        return Ok(());
    }
    match scheme {
        "http" | "https" | "data" => Ok(()),
        "about" if parsed.path() == "blank" => Ok(()),
        "file" => check_file(&parsed, config, ctx),
        other => Err(ComputerError::Blocked(format!(
            "{other}: URLs are not opened by the browser tools (only web pages, about:blank and \
data:); the host can allow the scheme with BrowserConfig::allowed_schemes"
        ))),
    }
}

/// A `file:` URL: allowed only when the host turned file URLs on, and only
/// inside the workspace roots (symlinks resolved).
fn check_file(url: &url::Url, config: &BrowserConfig, ctx: &ToolCtx) -> Result<(), ComputerError> {
    if !config.allow_file_urls {
        return Err(ComputerError::Blocked(format!(
            "{url} is a local file, and file: URLs are off: read files with the file tools, or \
the host can turn them on with BrowserConfig::allow_file_urls (confined to the workspace roots)"
        )));
    }
    if url
        .host_str()
        .is_some_and(|host| !host.is_empty() && host != "localhost")
    {
        return Err(ComputerError::Blocked(format!(
            "{url} names another machine; only local files inside the workspace can be opened"
        )));
    }
    let path = url
        .to_file_path()
        .map_err(|()| ComputerError::InvalidInput(format!("{url} is not a file path")))?;
    let path = path.to_string_lossy();
    ctx.resolve_path(&path).map_err(|error| {
        ComputerError::Blocked(format!(
            "{url} is outside the workspace roots ({error}); only files inside them can be opened"
        ))
    })?;
    Ok(())
}

/// Whether the tab may show `url` now: a page that navigated itself (a link
/// on an allowed file page) to a file outside the workspace is not read.
pub(super) fn check_landing(
    url: &str,
    config: &BrowserConfig,
    ctx: &ToolCtx,
) -> Result<(), ComputerError> {
    match url::Url::parse(url) {
        Ok(parsed) if parsed.scheme() == "file" => check_file(&parsed, config, ctx),
        _ => Ok(()),
    }
}
