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
    /// Each row's scope hash ([`Scope::hash`](crate::Scope)).
    scopes: Vec<u64>,
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
    /// Row extremes around the centre, for the distance bound.
    stats: CentreStats,
    skipped_to: i64,
}

/// Which rows a search may return: those of one scope (by its hash), from
/// a time on.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Filter {
    /// Leave out rows created before this.
    pub(crate) since: Option<i64>,
    /// Only rows of this scope hash.
    pub(crate) scope: u64,
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

/// A stored little-endian f32 blob as floats.
pub(crate) fn floats(blob: &[u8]) -> Vec<f32> {
    blob.as_chunks::<4>()
        .0
        .iter()
        .map(|bytes| f32::from_le_bytes(*bytes))
        .collect()
}

/// The Euclidean distance between two vectors.
fn distance(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f32>()
        .sqrt()
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
    let max = vector.iter().fold(
        0.0f32,
        |m, x| if x.is_finite() { m.max(x.abs()) } else { m },
    );
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
    pub(crate) fn push(&mut self, id: i64, created_at: i64, scope: u64, blob: &[u8]) {
        let vector = floats(blob);
        self.ids.push(id);
        self.created.push(created_at);
        self.scopes.push(scope);
        let scale = quantise(&vector, &mut self.codes);
        self.scales.push(scale);
        if self.centred_at > 0 {
            let words = self.words();
            self.stats.add(&vector, &self.centre);
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
        let mut stats = CentreStats::start(&self.centre);
        let mut vector = vec![0.0f32; dims];
        for (row, codes) in self.codes.chunks_exact(dims).enumerate() {
            let scale = self.scales[row];
            for (x, c) in vector.iter_mut().zip(codes) {
                *x = f32::from(*c) * scale;
            }
            stats.add(&vector, &self.centre);
            signs(vector.iter().copied(), &self.centre, words, &mut bits);
        }
        self.stats = stats;
        self.bits = bits;
        self.centred_at = rows;
    }

    /// The `k` rows most similar to the unit vector `query` by the
    /// quantised vectors, best first, among the rows `filter` keeps (one
    /// scope, not older than its `since`): (id, approximate cosine). Rescore them exactly before trusting the
    /// order.
    ///
    /// On a large index every row's sign bits are compared with the
    /// query's; the rows nearest by Hamming distance (at least 1% of the
    /// index) are rescored by int8 codes, then every farther row within a
    /// bound: the distance a row would need, with two standard deviations
    /// to spare, to be as similar as the `sure`-th best found so far. So
    /// the first `sure` results are right with about 97% probability per
    /// result whatever the data; structureless (uniformly random) vectors
    /// leave the bound loose and many rows are rescored.
    pub(crate) fn search(
        &self,
        query: &[f32],
        k: usize,
        sure: usize,
        filter: Filter,
    ) -> Vec<(i64, f32)> {
        if self.dims == 0 || query.len() != self.dims || self.ids.is_empty() || k == 0 {
            return Vec::new();
        }
        let keep = |row: usize| {
            self.scopes[row] == filter.scope && filter.since.is_none_or(|s| self.created[row] >= s)
        };
        let mut query_codes = Vec::with_capacity(self.dims);
        let query_scale = quantise(query, &mut query_codes);
        let score = |row: usize| {
            let codes = &self.codes[row * self.dims..(row + 1) * self.dims];
            dot_i8(&query_codes, codes) as f32 * query_scale * self.scales[row]
        };
        let mut scored: Vec<(f32, usize)> = if self.bits.is_empty() {
            (0..self.ids.len())
                .filter(|row| keep(*row))
                .map(|row| (score(row), row))
                .collect()
        } else {
            self.scan_by_bits(query, k, sure.clamp(1, k), &keep, &score)
        };
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

    /// The rows scored by int8 codes, chosen by sign-bit distance (see
    /// [`search`](Self::search)): every row below the distance that takes in
    /// 1% of the index (at least 2,000 rows and 40 per result), then every
    /// row within the bound.
    fn scan_by_bits(
        &self,
        query: &[f32],
        k: usize,
        sure: usize,
        keep: &impl Fn(usize) -> bool,
        score: &impl Fn(usize) -> f32,
    ) -> Vec<(f32, usize)> {
        let words = self.words();
        let mut query_bits = Vec::with_capacity(words);
        signs(query.iter().copied(), &self.centre, words, &mut query_bits);
        // Each row's distance, and how many rows are at each distance.
        let mut distances: Vec<u16> = Vec::with_capacity(self.ids.len());
        let mut counts = vec![0usize; self.dims + 2];
        for (row, bits) in self.bits.chunks_exact(words).enumerate() {
            let distance = if keep(row) {
                let d: u32 = bits
                    .iter()
                    .zip(&query_bits)
                    .map(|(a, b)| (a ^ b).count_ones())
                    .sum();
                d as u16
            } else {
                u16::MAX
            };
            if distance != u16::MAX {
                counts[usize::from(distance)] += 1;
            }
            distances.push(distance);
        }
        // First the rows below the distance `cut` that takes in at least
        // `minimum` of them; then every farther row within the bound. Both
        // are sequential passes over the rows (cache-friendly); the bound
        // tightens as better rows are found.
        let minimum = (self.ids.len() / 100).max(2_000).max(k * 40);
        let mut cut = 0usize;
        let mut taken = 0usize;
        while cut <= self.dims && taken < minimum {
            taken += counts[cut];
            cut += 1;
        }
        let (qc, qn) = self.centred_query(query);
        let mut best = std::collections::BinaryHeap::<std::cmp::Reverse<Similarity>>::new();
        let mut scored = Vec::with_capacity(taken * 2);
        let mut consider = |row: usize, scored: &mut Vec<(f32, usize)>| {
            let similarity = score(row);
            scored.push((similarity, row));
            if best.len() < sure {
                best.push(std::cmp::Reverse(Similarity(similarity)));
            } else if best.peek().is_some_and(|w| similarity > w.0.0) {
                best.pop();
                best.push(std::cmp::Reverse(Similarity(similarity)));
            }
            match best.peek() {
                Some(worst) if best.len() == sure => Some(worst.0.0),
                _ => None,
            }
        };
        let mut worst = None;
        for (row, distance) in distances.iter().enumerate() {
            if usize::from(*distance) < cut {
                worst = consider(row, &mut scored).or(worst);
            }
        }
        let mut bound = worst.map_or(self.dims, |w| self.distance_bound(w, qc, qn));
        for (row, distance) in distances.iter().enumerate() {
            let distance = usize::from(*distance);
            // Rows the filter leaves out are at u16::MAX, past any bound.
            if distance >= cut && distance <= bound {
                let now = consider(row, &mut scored);
                if now != worst
                    && let Some(w) = now
                {
                    worst = now;
                    bound = bound.min(self.distance_bound(w, qc, qn));
                }
            }
        }
        scored
    }

    /// `query · centre` and `|query - centre|`.
    fn centred_query(&self, query: &[f32]) -> (f32, f32) {
        (dot(query, &self.centre), distance(query, &self.centre))
    }

    /// The largest sign-bit distance a row with `similarity` or more to the
    /// query can be expected at, two standard deviations to spare. The
    /// bits measure angles around the centre: the centred cosine of such a
    /// row is at least `(similarity - max x·c - q·c + |c|²) / (|x-c| |q-c|)`,
    /// the row factors taken at their worst over the index; a centred angle
    /// θ flips each bit with probability θ/π.
    fn distance_bound(&self, similarity: f32, qc: f32, qn: f32) -> usize {
        let stats = &self.stats;
        let numerator = similarity - stats.max_xc - qc + stats.cc;
        let norm = if numerator >= 0.0 {
            stats.max_norm
        } else {
            stats.min_norm
        };
        let cosine = if norm * qn > 0.0 {
            (numerator / (norm * qn)).clamp(-1.0, 1.0)
        } else {
            -1.0
        };
        let dims = self.dims as f32;
        let flip = cosine.acos() / std::f32::consts::PI;
        let bound = dims * flip + 2.0 * (dims * flip * (1.0 - flip)).sqrt();
        if bound.is_finite() {
            (bound.ceil() as usize).min(self.dims)
        } else {
            self.dims
        }
    }
}

/// A similarity ordered for the heap (never NaN: scores are finite).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Similarity(f32);

impl Eq for Similarity {}

impl PartialOrd for Similarity {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Similarity {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// What the distance bound needs about the rows, around the centre.
#[derive(Debug, Default, Clone, Copy)]
struct CentreStats {
    /// The largest `x · centre` of any row.
    max_xc: f32,
    /// `|centre|²`.
    cc: f32,
    /// The smallest and largest `|x - centre|`.
    min_norm: f32,
    max_norm: f32,
}

impl CentreStats {
    fn start(centre: &[f32]) -> Self {
        Self {
            max_xc: f32::MIN,
            cc: dot(centre, centre),
            min_norm: f32::MAX,
            max_norm: 0.0,
        }
    }

    fn add(&mut self, vector: &[f32], centre: &[f32]) {
        let xc = dot(vector, centre);
        let norm = distance(vector, centre);
        if xc.is_finite() && norm.is_finite() {
            self.max_xc = self.max_xc.max(xc);
            self.min_norm = self.min_norm.min(norm);
            self.max_norm = self.max_norm.max(norm);
        }
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
            index.push(id, id * 10, 0, &blob(&v));
        }
        let hits = index.search(&[1.0, 0.0], 2, 2, Filter::default());
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [1, 3]);
        let recent = index.search(
            &[1.0, 0.0],
            3,
            3,
            Filter {
                since: Some(20),
                scope: 0,
            },
        );
        assert_eq!(recent.iter().map(|h| h.0).collect::<Vec<_>>(), [3, 2]);
    }

    #[test]
    fn only_the_scope_asked_for_is_returned_in_both_tiers() {
        // Large enough for the sign-bit tier; scopes alternate by row.
        let mut index = VectorIndex::new("t".into(), 16);
        for i in 0..(BINARY_FROM as i64 + 2_000) {
            let v = unit(noise(i as u64, 16));
            index.push(i + 1, 0, (i % 3) as u64, &blob(&v));
        }
        for settle in [false, true] {
            if settle {
                index.settle();
                assert!(!index.bits.is_empty());
            }
            let query = unit(noise(7, 16));
            let filter = Filter {
                since: None,
                scope: 2,
            };
            let hits = index.search(&query, 200, 10, filter);
            assert!(!hits.is_empty());
            assert!(hits.iter().all(|(id, _)| (id - 1) % 3 == 2), "{hits:?}");
            // A scope with no rows gets nothing.
            let none = Filter {
                since: None,
                scope: 9,
            };
            assert!(index.search(&query, 200, 10, none).is_empty());
        }
    }

    #[test]
    fn int8_codes_keep_the_dot_product() {
        let a: Vec<f32> = (0..384)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let b: Vec<f32> = (0..384)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 48.0)
            .collect();
        let (mut ca, mut cb) = (Vec::new(), Vec::new());
        let (sa, sb) = (quantise(&a, &mut ca), quantise(&b, &mut cb));
        let approx = dot_i8(&ca, &cb) as f32 * sa * sb;
        let exact = dot(&a, &b);
        assert!(
            (approx - exact).abs() < 0.01 * exact.abs().max(1.0),
            "{approx} vs {exact}"
        );
    }

    #[test]
    fn zero_and_non_finite_vectors_do_not_poison_the_index() {
        let mut index = VectorIndex::new("t".into(), 3);
        index.push(1, 0, 0, &blob(&[0.0, 0.0, 0.0]));
        index.push(2, 0, 0, &blob(&[f32::NAN, 1.0, 0.0]));
        index.push(3, 0, 0, &blob(&[1.0, 0.0, 0.0]));
        let hits = index.search(&[1.0, 0.0, 0.0], 3, 3, Filter::default());
        assert_eq!(hits[0].0, 3);
        assert!(hits.iter().all(|h| h.1.is_finite()));
    }

    /// Seeded pseudo-random numbers in [-0.5, 0.5).
    fn noise(seed: u64, n: usize) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    }

    fn unit(mut v: Vec<f32>) -> Vec<f32> {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
        v
    }

    /// Recall@10 of the quantised search (sign bits, int8, then an exact
    /// rescore of its top 20 as the store does) against the exact scan.
    fn recall_at_10(vectors: &[Vec<f32>], queries: &[Vec<f32>]) -> f64 {
        let dims = vectors[0].len();
        let mut index = VectorIndex::new("t".into(), dims);
        for (i, v) in vectors.iter().enumerate() {
            index.push(i as i64 + 1, 0, 0, &blob(v));
        }
        index.settle();
        assert!(!index.bits.is_empty(), "the sign-bit tier is exercised");
        let mut found = 0;
        for query in queries {
            let mut exact: Vec<(f32, i64)> = vectors
                .iter()
                .enumerate()
                .map(|(i, v)| (dot(query, v), i as i64 + 1))
                .collect();
            exact.sort_by(|a, b| b.0.total_cmp(&a.0));
            let truth: Vec<i64> = exact[..10].iter().map(|e| e.1).collect();
            let mut approximate: Vec<(f32, i64)> = index
                .search(query, 20, 10, Filter::default())
                .into_iter()
                .map(|(id, _)| (dot(query, &vectors[id as usize - 1]), id))
                .collect();
            approximate.sort_by(|a, b| b.0.total_cmp(&a.0));
            found += approximate[..10]
                .iter()
                .filter(|a| truth.contains(&a.1))
                .count();
        }
        found as f64 / (queries.len() * 10) as f64
    }

    #[test]
    fn the_quantised_search_keeps_recall_at_10_over_095() {
        const ROWS: usize = 30_000;
        const DIMS: usize = 128;
        // Uniformly random vectors: the worst case for sign bits.
        let random: Vec<Vec<f32>> = (0..ROWS).map(|i| unit(noise(i as u64, DIMS))).collect();
        let queries: Vec<Vec<f32>> = (0..30).map(|q| unit(noise(1_000_000 + q, DIMS))).collect();
        let recall = recall_at_10(&random, &queries);
        assert!(recall >= 0.95, "random vectors: recall@10 {recall}");
        // Clustered and off-centre, as embeddings are: 200 topics around a
        // shared direction.
        let shared = noise(7, DIMS);
        let topics: Vec<Vec<f32>> = (0..200).map(|t| noise(500_000 + t, DIMS)).collect();
        let clustered: Vec<Vec<f32>> = (0..ROWS)
            .map(|i| {
                let topic = &topics[i % topics.len()];
                let jitter = noise(2_000_000 + i as u64, DIMS);
                unit(
                    (0..DIMS)
                        .map(|d| shared[d] * 2.0 + topic[d] + 0.6 * jitter[d])
                        .collect(),
                )
            })
            .collect();
        let queries: Vec<Vec<f32>> = (0..30)
            .map(|q| {
                let topic = &topics[(q * 7) as usize % topics.len()];
                let jitter = noise(3_000_000 + q, DIMS);
                unit(
                    (0..DIMS)
                        .map(|d| shared[d] * 2.0 + topic[d] + 0.6 * jitter[d])
                        .collect(),
                )
            })
            .collect();
        let recall = recall_at_10(&clustered, &queries);
        assert!(recall >= 0.95, "clustered vectors: recall@10 {recall}");
    }
}
