//! What model calls cost: a price table the host supplies, per model, in
//! whatever currency the host prices in.

use std::collections::HashMap;

use crate::data::model::Usage;

/// Prices of one model per million tokens. Cache prices default to the
/// input price when the provider does not price them apart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// Per million prompt tokens not served from or written to a cache.
    pub input: f64,
    /// Per million generated tokens.
    pub output: f64,
    /// Per million prompt tokens read from a cache. Default: `input`.
    pub cache_read: Option<f64>,
    /// Per million prompt tokens written to a cache. Default: `input`.
    pub cache_write: Option<f64>,
}

impl Price {
    /// Input and output prices per million tokens; cache reads and writes
    /// at the input price.
    pub fn new(input: f64, output: f64) -> Self {
        Self {
            input,
            output,
            cache_read: None,
            cache_write: None,
        }
    }

    /// Sets the cache prices per million tokens (read, write).
    pub fn with_cache(mut self, read: f64, write: f64) -> Self {
        self.cache_read = Some(read);
        self.cache_write = Some(write);
        self
    }

    /// The cost of `usage` at these prices. Cached prompt tokens are part
    /// of `usage.input_tokens` and priced at the cache prices instead.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage
            .cache_read_tokens
            .saturating_add(usage.cache_write_tokens);
        let plain = usage.input_tokens.saturating_sub(cached);
        let per = |tokens: u64, price: f64| tokens as f64 * price / 1_000_000.0;
        per(plain, self.input)
            + per(
                usage.cache_read_tokens,
                self.cache_read.unwrap_or(self.input),
            )
            + per(
                usage.cache_write_tokens,
                self.cache_write.unwrap_or(self.input),
            )
            + per(usage.output_tokens, self.output)
    }
}

/// Prices by model name. A model is found by its exact name, else by the
/// longest entry its name starts with (`gpt-4o` prices
/// `gpt-4o-2024-08-06`).
///
/// ```
/// use kinet_core::telemetry::{Price, PriceTable};
/// use kinet_core::provider::Usage;
///
/// let prices = PriceTable::new().with("gpt-4o", Price::new(2.5, 10.0));
/// let usage = Usage { input_tokens: 1_000_000, output_tokens: 100_000, ..Usage::default() };
/// assert_eq!(prices.cost("gpt-4o-2024-08-06", &usage), Some(3.5));
/// assert_eq!(prices.cost("claude-sonnet-4", &usage), None);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceTable {
    prices: HashMap<String, Price>,
}

impl PriceTable {
    /// An empty table (no model priced).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces the price of `model`.
    pub fn with(mut self, model: impl Into<String>, price: Price) -> Self {
        self.prices.insert(model.into(), price);
        self
    }

    /// The price of `model`, if the table has one.
    pub fn price(&self, model: &str) -> Option<&Price> {
        if let Some(price) = self.prices.get(model) {
            return Some(price);
        }
        self.prices
            .iter()
            .filter(|(name, _)| !name.is_empty() && model.starts_with(name.as_str()))
            .max_by_key(|(name, _)| name.len())
            .map(|(_, price)| price)
    }

    /// The cost of `usage` on `model`, if the table prices it.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.price(model).map(|price| price.cost(usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_tokens_are_priced_apart_from_the_rest_of_the_prompt() {
        let price = Price::new(3.0, 15.0).with_cache(0.3, 3.75);
        let usage = Usage {
            input_tokens: 10_000,
            output_tokens: 1_000,
            cache_read_tokens: 6_000,
            cache_write_tokens: 2_000,
        };
        let expected = (2_000.0 * 3.0 + 6_000.0 * 0.3 + 2_000.0 * 3.75 + 1_000.0 * 15.0) / 1e6;
        assert!((price.cost(&usage) - expected).abs() < 1e-12);
        // More cached than reported in all (a provider's odd count): no
        // negative plain tokens.
        let odd = Usage {
            input_tokens: 10,
            cache_read_tokens: 50,
            ..Usage::default()
        };
        assert!(price.cost(&odd) > 0.0);
    }

    #[test]
    fn the_longest_matching_prefix_wins() {
        let table = PriceTable::new()
            .with("gpt-4o", Price::new(2.5, 10.0))
            .with("gpt-4o-mini", Price::new(0.15, 0.6))
            .with("", Price::new(100.0, 100.0));
        assert_eq!(table.price("gpt-4o-mini-2024").map(|p| p.input), Some(0.15));
        assert_eq!(table.price("gpt-4o-2024").map(|p| p.input), Some(2.5));
        assert_eq!(table.price("other"), None, "an empty name prices nothing");
    }
}
