//! Choosing a provider from environment variables (for examples and CLIs).

use std::sync::Arc;

use crate::backend::Provider;
use crate::data::model::ProviderError;

/// A provider chosen from the environment.
#[derive(Clone)]
pub struct EnvProvider {
    /// The provider.
    pub provider: Arc<dyn Provider>,
    /// The model to ask for (`KINET_MODEL`, or the provider's default).
    pub model: String,
    /// A one-line description for a banner, e.g. `openai at http://... (gpt-4.1-mini)`.
    pub label: String,
}

impl std::fmt::Debug for EnvProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvProvider")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

/// Picks a provider from the process environment; see [`from_env_with`].
pub fn from_env() -> Result<Option<EnvProvider>, ProviderError> {
    from_env_with(|name| std::env::var(name).ok())
}

/// Picks a provider from variables looked up with `get`:
///
/// - `KINET_PROVIDER`: `openai` (also any OpenAI-compatible server),
///   `responses` (OpenAI Responses API), `anthropic`, or `scripted` (no real
///   provider: returns `None`). When unset: `anthropic` if only
///   `ANTHROPIC_API_KEY` is set, `openai` if `OPENAI_API_KEY` or
///   `KINET_BASE_URL` is set, otherwise `None`.
/// - `KINET_BASE_URL`: the API root (e.g. `http://127.0.0.1:11434/v1` for Ollama).
/// - `KINET_MODEL`: the model name.
/// - `KINET_API_KEY`, else `OPENAI_API_KEY` / `ANTHROPIC_API_KEY`: the key.
///
/// ```
/// use kinet_core::provider::from_env_with;
///
/// let vars = [("KINET_BASE_URL", "http://127.0.0.1:11434/v1"), ("KINET_MODEL", "qwen3:8b")];
/// let chosen = from_env_with(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
///     .unwrap()
///     .unwrap();
/// assert_eq!(chosen.model, "qwen3:8b");
/// assert!(from_env_with(|_| None).unwrap().is_none());
/// ```
pub fn from_env_with(
    get: impl Fn(&str) -> Option<String>,
) -> Result<Option<EnvProvider>, ProviderError> {
    let var = |name: &str| {
        get(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let base_url = var("KINET_BASE_URL");
    let model = var("KINET_MODEL");
    let kind = match var("KINET_PROVIDER").map(|k| k.to_ascii_lowercase()) {
        Some(kind) => kind,
        None if var("ANTHROPIC_API_KEY").is_some()
            && var("OPENAI_API_KEY").is_none()
            && base_url.is_none() =>
        {
            "anthropic".to_owned()
        }
        None if var("OPENAI_API_KEY").is_some() || base_url.is_some() => "openai".to_owned(),
        None => return Ok(None),
    };
    let key = |specific: &str| var("KINET_API_KEY").or_else(|| var(specific));
    match kind.as_str() {
        "scripted" | "offline" => Ok(None),
        "openai" | "openai-compatible" | "compatible" | "responses" | "openai-responses" => {
            openai(&kind, base_url, model, key("OPENAI_API_KEY"))
        }
        "anthropic" | "claude" => anthropic(base_url, model, key("ANTHROPIC_API_KEY")),
        other => Err(ProviderError::Config(format!(
            "unknown KINET_PROVIDER `{other}`: use openai, responses, anthropic or scripted"
        ))),
    }
}

#[cfg(feature = "openai")]
fn openai(
    kind: &str,
    base_url: Option<String>,
    model: Option<String>,
    key: Option<String>,
) -> Result<Option<EnvProvider>, ProviderError> {
    use super::{OpenAiConfig, OpenAiProvider, OpenAiResponsesProvider};
    let mut config = OpenAiConfig::new();
    if let Some(url) = base_url {
        config = config.base_url(url);
    }
    if let Some(key) = key {
        config = config.api_key(key);
    }
    let model = model.unwrap_or_else(|| config.default_model.clone());
    let responses = kind.contains("responses");
    let label = format!(
        "{} at {} ({model})",
        if responses {
            "openai-responses"
        } else {
            "openai"
        },
        config.base_url
    );
    let provider: Arc<dyn Provider> = if responses {
        Arc::new(OpenAiResponsesProvider::new(config)?)
    } else {
        Arc::new(OpenAiProvider::new(config)?)
    };
    Ok(Some(EnvProvider {
        provider,
        model,
        label,
    }))
}

#[cfg(not(feature = "openai"))]
fn openai(
    _kind: &str,
    _base_url: Option<String>,
    _model: Option<String>,
    _key: Option<String>,
) -> Result<Option<EnvProvider>, ProviderError> {
    Err(ProviderError::Config(
        "kinet-core was built without the `openai` feature".into(),
    ))
}

#[cfg(feature = "anthropic")]
fn anthropic(
    base_url: Option<String>,
    model: Option<String>,
    key: Option<String>,
) -> Result<Option<EnvProvider>, ProviderError> {
    use super::{AnthropicConfig, AnthropicProvider};
    let mut config = AnthropicConfig::new();
    if let Some(url) = base_url {
        config = config.base_url(url);
    }
    if let Some(key) = key {
        config = config.api_key(key);
    }
    let model = model.unwrap_or_else(|| config.default_model.clone());
    let label = format!("anthropic at {} ({model})", config.base_url);
    Ok(Some(EnvProvider {
        provider: Arc::new(AnthropicProvider::new(config)?),
        model,
        label,
    }))
}

#[cfg(not(feature = "anthropic"))]
fn anthropic(
    _base_url: Option<String>,
    _model: Option<String>,
    _key: Option<String>,
) -> Result<Option<EnvProvider>, ProviderError> {
    Err(ProviderError::Config(
        "kinet-core was built without the `anthropic` feature".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(vars: &[(&str, &str)]) -> Result<Option<EnvProvider>, ProviderError> {
        from_env_with(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn selection_rules() {
        assert!(pick(&[]).unwrap().is_none());
        assert!(
            pick(&[("KINET_PROVIDER", "scripted"), ("OPENAI_API_KEY", "k")])
                .unwrap()
                .is_none()
        );
        let anthropic = pick(&[("ANTHROPIC_API_KEY", "k")]).unwrap().unwrap();
        assert_eq!(anthropic.provider.name(), "anthropic");
        let openai = pick(&[("ANTHROPIC_API_KEY", "a"), ("OPENAI_API_KEY", "o")])
            .unwrap()
            .unwrap();
        assert_eq!(openai.provider.name(), "openai");
        let responses = pick(&[("KINET_PROVIDER", "responses"), ("KINET_MODEL", "o4")])
            .unwrap()
            .unwrap();
        assert_eq!(responses.provider.name(), "openai-responses");
        assert_eq!(responses.model, "o4");
        let local = pick(&[("KINET_BASE_URL", "http://127.0.0.1:8000/v1")])
            .unwrap()
            .unwrap();
        assert!(
            local.label.contains("http://127.0.0.1:8000/v1"),
            "{}",
            local.label
        );
        let error = pick(&[("KINET_PROVIDER", "palm")]).unwrap_err();
        assert!(error.to_string().contains("unknown KINET_PROVIDER `palm`"));
    }
}
