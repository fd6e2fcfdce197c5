//! The in-memory vector index of the SQLite backend, quantised.
//!
//! Each vector is held as int8 codes with one scale (384 bytes for 384
//! dimensions instead of 1,536) and, once the index is large, as one sign
//! bit per dimension measured from the mean vector (48 bytes). A search
//! ranks every row by the Hamming distance of its bits (a few ms at a
//! million rows), rescores the closest few thousand by their int8 codes,
//! and the caller rescores the best of those exactly from the stored f32
//! vectors. Small indexes skip the bits and scan the int8 codes.

/// Rows below which the int8 codes are scanned directly.
const BINARY_FROM: usize = 20_000;

/// The vectors of one embedder, loaded from the store.
#[derive(Debug, Default)]
pub(crate) struct VectorIndex {
    embedder: String,
    dims: usize,
    ids: Vec<i64>,
    created: Vec<i64>,
    /// `dims` int8 codes per row.
    codes: Vec<i8>,
    /// The factor turning a row's codes back into its vector.
    scales: Vec<f32>,
    /// Sign bits of `vector - centre`, `words` u64s per row; empty until
    /// the index reaches [`BINARY_FROM`] rows.
    bits: Vec<u64>,
    /// The mean vector the bits are measured from (fixed when the bits are
    /// built; rebuilt when the index has doubled since).
    centre: Vec<f32>,
    /// Rows the bits were last rebuilt at.
    centred_at: usize,
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

/// Integer dot product of two int8 code rows, in 16 lanes of i32.
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let mut lanes = [0i32; 16];
    let (a16, a_rest) = a.as_chunks::<16>();
    let (b16, b_rest) = b.as_chunks::<16>();
    for (x, y) in a16.iter().zip(b16) {
        for lane in 0..16 {
            lanes[lane] += i32::from(x[lane]) * i32::from(y[lane]);
        }
    }
    let mut sum: i32 = lanes.iter().sum();
    for (x, y) in a_rest.iter().zip(b_rest) {
        sum += i32::from(*x) * i32::from(*y);
    }
    sum
}

/// A vector as int8 codes and the scale that turns them back.
fn quantise(vector: &[f32], codes: &mut Vec<i8>) -> f32 {
    let max = vector
        .iter()
        .fold(0.0f32, |m, x| if x.is_finite() { m.max(x.abs()) } else { m });
    if max == 0.0 {
        codes.extend(std::iter::repeat_n(0, vector.len()));
        return 0.0;
    }
    let scale = max / 127.0;
    codes.extend(vector.iter().map(|x| {
        if x.is_finite() {
            (x / scale).round().clamp(-127.0, 127.0) as i8
        } else {
            0
        }
    }));
    scale
}

/// The sign bits of `vector - centre`, appended as `words` u64s.
fn signs(vector: impl Iterator<Item = f32>, centre: &[f32], words: usize, out: &mut Vec<u64>) {
    let start = out.len();
    out.extend(std::iter::repeat_n(0u64, words));
    for (dim, (x, c)) in vector.zip(centre).enumerate() {
        if x > *c {
            out[start + dim / 64] |= 1 << (dim % 64);
        }
    }
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

    fn words(&self) -> usize {
        self.dims.div_ceil(64)
    }

    pub(crate) fn max_id(&self) -> i64 {
        self.ids.last().copied().unwrap_or(0).max(self.skipped_to)
    }

    /// Records that rows up to `id` were seen without adding a vector.
    pub(crate) fn skip_to(&mut self, id: i64) {
        self.skipped_to = self.skipped_to.max(id);
    }

    /// Adds a row from its stored little-endian f32 blob.
    pub(crate) fn push(&mut self, id: i64, created_at: i64, blob: &[u8]) {
        let vector: Vec<f32> = blob
            .as_chunks::<4>()
            .0
            .iter()
            .map(|bytes| f32::from_le_bytes(*bytes))
            .collect();
        self.ids.push(id);
        self.created.push(created_at);
        let scale = quantise(&vector, &mut self.codes);
        self.scales.push(scale);
        if !self.bits.is_empty() || self.centred_at > 0 {
            let words = self.words();
            signs(vector.into_iter(), &self.centre, words, &mut self.bits);
        }
    }

    /// Builds (or rebuilds) the sign bits once the index is large enough,
    /// measured from the current mean vector. Called after a batch of
    /// pushes; rebuilds only when the index has doubled since the last
    /// build, so the mean follows the data at a logarithmic cost.
    pub(crate) fn settle(&mut self) {
        let rows = self.ids.len();
        if rows < BINARY_FROM || (self.centred_at > 0 && rows < self.centred_at * 2) {
            return;
        }
        let dims = self.dims;
        let mut centre = vec![0.0f64; dims];
        for (row, codes) in self.codes.chunks_exact(dims).enumerate() {
            let scale = f64::from(self.scales[row]);
            for (sum, code) in centre.iter_mut().zip(codes) {
                *sum += f64::from(*code) * scale;
            }
        }
        self.centre = centre.iter().map(|s| (s / rows as f64) as f32).collect();
        let words = self.words();
        let mut bits = Vec::with_capacity(rows * words);
        for (row, codes) in self.codes.chunks_exact(dims).enumerate() {
            let scale = self.scales[row];
            signs(
                codes.iter().map(|c| f32::from(*c) * scale),
                &self.centre,
                words,
                &mut bits,
            );
        }
        self.bits = bits;
        self.centred_at = rows;
    }

    /// The `k` rows most similar to the unit vector `query` by the
    /// quantised vectors, best first, skipping rows older than `since`:
    /// (id, approximate cosine). Rescore them exactly before trusting the
    /// order.
    pub(crate) fn search(&self, query: &[f32], k: usize, since: Option<i64>) -> Vec<(i64, f32)> {
        if self.dims == 0 || query.len() != self.dims || self.ids.is_empty() || k == 0 {
            return Vec::new();
        }
        let keep = |row: usize| since.is_none_or(|s| self.created[row] >= s);
        let mut query_codes = Vec::with_capacity(self.dims);
        let query_scale = quantise(query, &mut query_codes);
        let rows: Vec<usize> = if self.bits.is_empty() {
            (0..self.ids.len()).filter(|row| keep(*row)).collect()
        } else {
            self.nearest_by_bits(query, self.candidates(k), &keep)
        };
        let mut scored: Vec<(f32, usize)> = rows
            .into_iter()
            .map(|row| {
                let codes = &self.codes[row * self.dims..(row + 1) * self.dims];
                let similarity =
                    dot_i8(&query_codes, codes) as f32 * query_scale * self.scales[row];
                (similarity, row)
            })
            .collect();
        let k = k.min(scored.len());
        if k == 0 {
            return Vec::new();
        }
        scored.select_nth_unstable_by(k - 1, |a, b| b.0.total_cmp(&a.0));
        scored.truncate(k);
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored
            .into_iter()
            .map(|(similarity, row)| (self.ids[row], similarity))
            .collect()
    }

    /// How many rows the bits pass on to the int8 rescoring: 1.5% of the
    /// index, at least 2,000 and 40 per result (at a million rows 15,000
    /// rows, under a millisecond of int8 work).
    fn candidates(&self, k: usize) -> usize {
        (self.ids.len() * 3 / 200).max(2_000).max(k * 40)
    }

    /// The `wanted` rows nearest to `query` by Hamming distance of the
    /// sign bits (all rows at the cut-off distance included, so ties do not
    /// depend on row order).
    fn nearest_by_bits(
        &self,
        query: &[f32],
        wanted: usize,
        keep: &impl Fn(usize) -> bool,
    ) -> Vec<usize> {
        let words = self.words();
        let mut query_bits = Vec::with_capacity(words);
        signs(query.iter().copied(), &self.centre, words, &mut query_bits);
        let mut distances: Vec<u16> = Vec::with_capacity(self.ids.len());
        let mut histogram = vec![0usize; self.dims + 2];
        for (row, bits) in self.bits.chunks_exact(words).enumerate() {
            let distance = if keep(row) {
                bits.iter()
                    .zip(&query_bits)
                    .map(|(a, b)| (a ^ b).count_ones())
                    .sum::<u32>() as u16
            } else {
                u16::MAX
            };
            if distance != u16::MAX {
                histogram[usize::from(distance).min(self.dims)] += 1;
            }
            distances.push(distance);
        }
        let mut cut = 0usize;
        let mut taken = 0usize;
        for (distance, count) in histogram.iter().enumerate() {
            taken += count;
            cut = distance;
            if taken >= wanted {
                break;
            }
        }
        distances
            .iter()
            .enumerate()
            .filter(|(_, d)| usize::from(**d) <= cut && **d != u16::MAX)
            .map(|(row, _)| row)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn nearest_first_and_since_filters() {
        let mut index = VectorIndex::new("t".into(), 2);
        for (id, v) in [
            (1, [1.0f32, 0.0]),
            (2, [0.0, 1.0]),
            (3, [std::f32::consts::FRAC_1_SQRT_2; 2]),
        ] {
            index.push(id, id * 10, &blob(&v));
        }
        let hits = index.search(&[1.0, 0.0], 2, None);
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [1, 3]);
        let recent = index.search(&[1.0, 0.0], 3, Some(20));
        assert_eq!(recent.iter().map(|h| h.0).collect::<Vec<_>>(), [3, 2]);
    }

    #[test]
    fn int8_codes_keep_the_dot_product() {
        let a: Vec<f32> = (0..384).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
        let b: Vec<f32> = (0..384).map(|i| ((i * 53 % 97) as f32 - 48.0) / 48.0).collect();
        let (mut ca, mut cb) = (Vec::new(), Vec::new());
        let (sa, sb) = (quantise(&a, &mut ca), quantise(&b, &mut cb));
        let approx = dot_i8(&ca, &cb) as f32 * sa * sb;
        let exact = dot(&a, &b);
        assert!((approx - exact).abs() < 0.01 * exact.abs().max(1.0), "{approx} vs {exact}");
    }

    #[test]
    fn zero_and_non_finite_vectors_do_not_poison_the_index() {
        let mut index = VectorIndex::new("t".into(), 3);
        index.push(1, 0, &blob(&[0.0, 0.0, 0.0]));
        index.push(2, 0, &blob(&[f32::NAN, 1.0, 0.0]));
        index.push(3, 0, &blob(&[1.0, 0.0, 0.0]));
        let hits = index.search(&[1.0, 0.0, 0.0], 3, None);
        assert_eq!(hits[0].0, 3);
        assert!(hits.iter().all(|h| h.1.is_finite()));
    }
}
