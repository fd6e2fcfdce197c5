//! What the messaging clients (Feishu, WeCom) share: cached access tokens
//! with one refresh on the vendor's "token expired" codes, and files read
//! for upload after a size check.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use kinet_core::ToolError;
use kinet_core::tool::CancellationToken;
use tokio::time::Instant;

use super::common::{IntegrationError, Secret};

/// Time limit of one upload (files of tens of MB on a slow link), instead
/// of the client's per-request limit.
pub(crate) const UPLOAD_TIMEOUT: Duration = Duration::from_secs(600);

/// Where a service gets its access token, and which error codes mean the
/// token went stale before its announced expiry.
#[async_trait]
pub(crate) trait TokenSource: Send + Sync {
    /// The cache this source fills.
    fn token_cache(&self) -> &TokenCache;
    /// Error codes that mean "fetch a new token and try again".
    fn expired_codes(&self) -> &'static [i64];
    /// Fetches a fresh token and how long it is valid.
    async fn fetch_token(
        &self,
        cancel: &CancellationToken,
    ) -> Result<(Secret, Duration), IntegrationError>;
}

/// One cached access token. Concurrent callers share one fetch; a token is
/// renewed a little before its expiry (a quarter of its lifetime, at most
/// five minutes early).
#[derive(Default)]
pub(crate) struct TokenCache {
    slot: tokio::sync::Mutex<Option<(Secret, Instant)>>,
}

impl TokenCache {
    async fn get(
        &self,
        source: &(impl TokenSource + ?Sized),
        cancel: &CancellationToken,
    ) -> Result<Secret, IntegrationError> {
        let mut slot = self.slot.lock().await;
        if let Some((token, renew_at)) = slot.as_ref()
            && Instant::now() < *renew_at
        {
            return Ok(token.clone());
        }
        let (token, lifetime) = source.fetch_token(cancel).await?;
        let early = (lifetime / 4).min(Duration::from_secs(300));
        *slot = Some((
            token.clone(),
            Instant::now() + lifetime.saturating_sub(early),
        ));
        Ok(token)
    }

    /// Forgets `stale` (and only it: another caller may have renewed it).
    async fn invalidate(&self, stale: &Secret) {
        let mut slot = self.slot.lock().await;
        if slot.as_ref().is_some_and(|(token, _)| token == stale) {
            *slot = None;
        }
    }
}

/// Runs `op` with the current token; when the vendor says the token is
/// stale, fetches a new one and runs `op` once more.
pub(crate) async fn with_token<S, T, F, Fut>(
    source: &S,
    cancel: &CancellationToken,
    op: F,
) -> Result<T, IntegrationError>
where
    S: TokenSource + ?Sized,
    F: Fn(Secret) -> Fut,
    Fut: Future<Output = Result<T, IntegrationError>>,
{
    let cache = source.token_cache();
    let token = cache.get(source, cancel).await?;
    match op(token.clone()).await {
        Err(IntegrationError::Vendor { code, .. }) if source.expired_codes().contains(&code) => {
            cache.invalidate(&token).await;
            let token = cache.get(source, cancel).await?;
            op(token).await
        }
        other => other,
    }
}

/// A file read for upload.
pub(crate) struct Upload {
    pub(crate) file_name: String,
    /// Cheaply clonable: a retry with a fresh token sends them again.
    pub(crate) bytes: bytes::Bytes,
}

impl Upload {
    /// The file as a multipart part with a known length.
    pub(crate) fn part(&self) -> reqwest::multipart::Part {
        let length = self.bytes.len() as u64;
        reqwest::multipart::Part::stream_with_length(self.bytes.clone(), length)
            .file_name(self.file_name.clone())
    }
}

/// Where an upload comes from: a host-given path, or a model-given path
/// opened beneath the workspace root.
pub(crate) enum UploadSource<'a> {
    /// A path from the host.
    Path(&'a Path),
    /// A path from the model, confined to the workspace.
    Workspace(&'a kinet_core::tool::workspace::WorkspacePath),
}

/// Reads a file for upload after checking its size against the vendor's
/// limits, so an oversized file is refused before anything is sent. The
/// file is opened first (never blocking on a FIFO) and checked and read
/// through that one descriptor.
pub(crate) async fn read_upload(
    service: &'static str,
    source: UploadSource<'_>,
    min: u64,
    limit: u64,
) -> Result<Upload, IntegrationError> {
    let (path, open): (
        PathBuf,
        Box<dyn FnOnce() -> std::io::Result<std::fs::File> + Send>,
    ) = match source {
        UploadSource::Path(path) => {
            let owned = path.to_path_buf();
            (owned.clone(), Box::new(move || open_nonblocking(&owned)))
        }
        UploadSource::Workspace(place) => {
            let place = place.clone();
            (
                place.path().to_path_buf(),
                Box::new(move || place.open_read()),
            )
        }
    };
    let shown = path.clone();
    let read = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, IntegrationError> {
        use std::io::Read;
        let io = |source| IntegrationError::Io {
            path: shown.clone(),
            source,
        };
        let file = open().map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(IntegrationError::Config(format!(
                "{}: not a regular file",
                shown.display()
            )));
        }
        let size = meta.len();
        if size > limit {
            return Err(IntegrationError::TooLarge {
                service,
                path: shown.clone(),
                size,
                limit,
            });
        }
        if size < min {
            return Err(IntegrationError::TooSmall {
                service,
                path: shown.clone(),
                size,
                min,
            });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.take(limit).read_to_end(&mut bytes).map_err(io)?;
        Ok(bytes)
    })
    .await
    .map_err(|e| IntegrationError::Config(format!("reading {} failed: {e}", path.display())))??;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".to_owned());
    Ok(Upload {
        file_name,
        bytes: read.into(),
    })
}

/// Opens a host path for reading without waiting on a FIFO.
fn open_nonblocking(path: &Path) -> std::io::Result<std::fs::File> {
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    std::fs::File::open(path)
}

/// Which of two alternative recipient arguments was given.
pub(crate) enum OneOf<'a> {
    First(&'a str),
    Second(&'a str),
}

/// Exactly one of two optional, non-blank arguments; `hint` names them for
/// the model otherwise.
pub(crate) fn one_of<'a>(
    first: &'a Option<String>,
    second: &'a Option<String>,
    hint: &str,
) -> Result<OneOf<'a>, ToolError> {
    let given = |v: &'a Option<String>| v.as_deref().filter(|s| !s.trim().is_empty());
    match (given(first), given(second)) {
        (Some(first), None) => Ok(OneOf::First(first)),
        (None, Some(second)) => Ok(OneOf::Second(second)),
        _ => Err(ToolError::invalid_arguments(format!(
            "give exactly one of {hint}"
        ))),
    }
}
