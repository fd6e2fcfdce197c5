//! Embedders: text to unit vectors for semantic recall.

use async_trait::async_trait;

/// An embedding failed; recall falls back to full-text search.
#[derive(Debug, Clone, thiserror::Error)]
#[error("embedding failed: {0}")]
pub struct EmbedError(pub String);

/// Turns texts into vectors of `dims()` floats. Vectors should be unit
/// length (the store normalises them anyway).
#[async_trait]
pub trait Embedder: Send + Sync {
    /// A stable name; vectors from another embedder are not compared.
    fn name(&self) -> &str;
    /// Vector length.
    fn dims(&self) -> usize;
    /// Embeds each text.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// Scales `v` to unit length (zero vectors stay zero).
pub(crate) fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in v {
            *x /= norm;
        }
    }
}

/// A deterministic embedder with no model: hashed word and character
/// 3-gram features. It finds texts that share words or word pieces
/// (lexical-semantic only: no synonyms or paraphrases). The fallback when
/// no model is available.
#[derive(Debug, Clone)]
pub struct HashEmbedder {
    dims: usize,
    name: String,
}

impl HashEmbedder {
    /// An embedder with `dims` dimensions (384 is a good size).
    pub fn new(dims: usize) -> Self {
        let dims = dims.max(8);
        Self {
            dims,
            name: format!("hash-v1-{dims}"),
        }
    }

    /// Embeds one text synchronously.
    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0.0f32; self.dims];
        let lower = text.to_lowercase();
        let mut add = |feature: &str, weight: f32| {
            let hash = fnv1a(feature.as_bytes());
            let index = (hash % self.dims as u64) as usize;
            let sign = if (hash >> 63) & 1 == 0 { 1.0 } else { -1.0 };
            v[index] += sign * weight;
        };
        for word in lower
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            add(word, 1.0);
            let padded: Vec<char> = format!(" {word} ").chars().collect();
            for gram in padded.windows(3) {
                add(&gram.iter().collect::<String>(), 0.5);
            }
        }
        normalize(&mut v);
        v
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[async_trait]
impl Embedder for HashEmbedder {
    fn name(&self) -> &str {
        &self.name
    }

    fn dims(&self) -> usize {
        self.dims
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}

/// The bundled offline model: m2v-minilm-128, a model2vec static
/// embedding distilled from all-MiniLM-L6-v2 (128 dimensions, 8 MB,
/// embedded in the binary). It finds paraphrases a lexical embedder misses
/// (22/25 vs 7/25 on a paraphrase retrieval probe).
#[cfg(feature = "model2vec")]
pub struct Model2VecEmbedder {
    model: std::sync::Arc<model2vec_rs::model::StaticModel>,
}

#[cfg(feature = "model2vec")]
impl std::fmt::Debug for Model2VecEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model2VecEmbedder")
            .field("dims", &self.model.dim())
            .finish()
    }
}

#[cfg(feature = "model2vec")]
impl Model2VecEmbedder {
    /// Loads the bundled model (about 80 ms).
    pub fn bundled() -> Result<Self, EmbedError> {
        const TOKENIZER: &[u8] = include_bytes!("../models/m2v-minilm-128/tokenizer.json");
        const MODEL: &[u8] = include_bytes!("../models/m2v-minilm-128/model.safetensors");
        const CONFIG: &[u8] = include_bytes!("../models/m2v-minilm-128/config.json");
        let model =
            model2vec_rs::model::StaticModel::from_bytes(TOKENIZER, MODEL, CONFIG, Some(true))
                .map_err(|e| EmbedError(format!("cannot load the bundled model: {e}")))?;
        Ok(Self {
            model: std::sync::Arc::new(model),
        })
    }
}

#[cfg(feature = "model2vec")]
#[async_trait]
impl Embedder for Model2VecEmbedder {
    fn name(&self) -> &str {
        "m2v-minilm-128"
    }

    fn dims(&self) -> usize {
        self.model.dim()
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // Encoding is CPU work: keep it off the async threads.
        let model = std::sync::Arc::clone(&self.model);
        let texts = texts.to_vec();
        tokio::task::spawn_blocking(move || model.encode(&texts))
            .await
            .map_err(|e| EmbedError(format!("the embedding task failed: {e}")))
    }
}

/// An OpenAI-compatible `/v1/embeddings` client (OpenAI, Ollama, vLLM, ...).
#[cfg(feature = "openai-embeddings")]
#[derive(Debug, Clone)]
pub struct OpenAiEmbedder {
    client: reqwest::Client,
    url: String,
    api_key: Option<String>,
    model: String,
    dims: usize,
    name: String,
}

#[cfg(feature = "openai-embeddings")]
impl OpenAiEmbedder {
    /// An embedder for `model` (of `dims` dimensions) at `base_url` (e.g.
    /// `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`).
    pub fn new(base_url: &str, api_key: Option<String>, model: &str, dims: usize) -> Self {
        Self {
            client: reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(10))
                .timeout(std::time::Duration::from_secs(60))
                .build()
                .unwrap_or_default(),
            url: format!("{}/embeddings", base_url.trim_end_matches('/')),
            api_key,
            model: model.to_owned(),
            dims,
            name: format!("openai:{model}"),
        }
    }
}

#[cfg(feature = "openai-embeddings")]
#[async_trait]
impl Embedder for OpenAiEmbedder {
    fn name(&self) -> &str {
        &self.name
    }

    fn dims(&self) -> usize {
        self.dims
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut request = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(serde_json::json!({"model": self.model, "input": texts}).to_string());
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .await
            .map_err(|e| EmbedError(format!("{}: {e}", self.url)))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| EmbedError(format!("{}: {e}", self.url)))?;
        let body: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| EmbedError(format!("{}: invalid response: {e}", self.url)))?;
        if !status.is_success() {
            return Err(EmbedError(format!(
                "{} answered {status}: {body}",
                self.url
            )));
        }
        let data = body["data"]
            .as_array()
            .ok_or_else(|| EmbedError("the response has no `data`".into()))?;
        let mut out = vec![Vec::new(); texts.len()];
        for item in data {
            let index = item["index"].as_u64().unwrap_or(0) as usize;
            let vector: Vec<f32> = item["embedding"]
                .as_array()
                .map(|v| {
                    v.iter()
                        .filter_map(|x| x.as_f64())
                        .map(|x| x as f32)
                        .collect()
                })
                .unwrap_or_default();
            if let Some(slot) = out.get_mut(index) {
                *slot = vector;
            }
        }
        if out.iter().any(|v| v.len() != self.dims) {
            return Err(EmbedError(format!(
                "expected {} floats per text from `{}`",
                self.dims, self.model
            )));
        }
        Ok(out)
    }
}
