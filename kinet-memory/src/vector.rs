//! In-memory brute-force vector search: contiguous f32 rows, an 8-lane
//! dot product the compiler vectorises, a partial sort for the top k.

/// The vectors of one embedder, loaded from the store.
#[derive(Debug, Default)]
pub(crate) struct VectorIndex {
    embedder: String,
    dims: usize,
    ids: Vec<i64>,
    created: Vec<i64>,
    data: Vec<f32>,
    skipped_to: i64,
}

/// Dot product in eight independent lanes (no loop-carried dependency, so
/// it compiles to SIMD).
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (a8, a_rest) = a.as_chunks::<8>();
    let (b8, b_rest) = b.as_chunks::<8>();
    for (x, y) in a8.iter().zip(b8) {
        for lane in 0..8 {
            lanes[lane] += x[lane] * y[lane];
        }
    }
    let mut sum: f32 = lanes.iter().sum();
    for (x, y) in a_rest.iter().zip(b_rest) {
        sum += x * y;
    }
    sum
}

impl VectorIndex {
    pub(crate) fn new(embedder: String, dims: usize) -> Self {
        Self {
            embedder,
            dims,
            ..Self::default()
        }
    }

    pub(crate) fn embedder(&self) -> &str {
        &self.embedder
    }

    pub(crate) fn dims(&self) -> usize {
        self.dims
    }

    pub(crate) fn max_id(&self) -> i64 {
        self.ids.last().copied().unwrap_or(0).max(self.skipped_to)
    }

    /// Records that rows up to `id` were seen without adding a vector.
    pub(crate) fn skip_to(&mut self, id: i64) {
        self.skipped_to = self.skipped_to.max(id);
    }

    /// Adds a row from its stored little-endian blob.
    pub(crate) fn push(&mut self, id: i64, created_at: i64, blob: &[u8]) {
        self.ids.push(id);
        self.created.push(created_at);
        self.data.extend(
            blob.as_chunks::<4>()
                .0
                .iter()
                .map(|bytes| f32::from_le_bytes(*bytes)),
        );
    }

    /// The `k` most similar rows to the unit vector `query` (cosine), best
    /// first, skipping rows older than `since`.
    pub(crate) fn search(&self, query: &[f32], k: usize, since: Option<i64>) -> Vec<(i64, f32)> {
        if self.dims == 0 || query.len() != self.dims || self.ids.is_empty() || k == 0 {
            return Vec::new();
        }
        let mut scored: Vec<(f32, usize)> = self
            .data
            .chunks_exact(self.dims)
            .enumerate()
            .filter(|(row, _)| since.is_none_or(|s| self.created[*row] >= s))
            .map(|(row, vector)| (dot(query, vector), row))
            .collect();
        let k = k.min(scored.len());
        if k < scored.len() {
            scored.select_nth_unstable_by(k, |a, b| b.0.total_cmp(&a.0));
            scored.truncate(k);
        }
        scored.sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
        scored
            .into_iter()
            .map(|(similarity, row)| (self.ids[row], similarity))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_naive_and_search_ranks() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.1).collect();
        let b: Vec<f32> = (0..37).map(|i| 1.0 - i as f32 * 0.02).collect();
        let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - naive).abs() < 1e-3);

        let mut index = VectorIndex::new("t".into(), 2);
        for (id, v) in [
            (1, [1.0f32, 0.0]),
            (2, [0.0, 1.0]),
            (3, [std::f32::consts::FRAC_1_SQRT_2; 2]),
        ] {
            let blob: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            index.push(id, id * 10, &blob);
        }
        let hits = index.search(&[1.0, 0.0], 2, None);
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [1, 3]);
        let recent = index.search(&[1.0, 0.0], 3, Some(20));
        assert_eq!(recent.iter().map(|h| h.0).collect::<Vec<_>>(), [3, 2]);
    }
}
