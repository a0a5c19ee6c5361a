//! The random stream of Go's `math/rand` (`rand.Seed`, `Int63`, `Intn`, `Perm`, `Shuffle`), so the
//! arrival stream draws exactly what the paper's Go simulator drew for every seed
//! (`docs/simulator.md#arrival-stream`).
//!
//! The generator is an additive lagged Fibonacci sequence over 64-bit words,
//! `s[n] = s[n − 607] + s[n − 273] (mod 2^64)`, kept as a 607-word ring. Seeding fills the ring
//! from a Park–Miller sequence (multiplier 48271, modulus 2^31 − 1) and XORs every word with a
//! fixed "seeding table". That table is the same generator's ring after 7.8·10¹² steps from a
//! Park–Miller fill of seed 1 (`docs/simulator.md#the-seeding-table`); it is computed here once, at
//! first use, by jumping the linear recurrence ahead with polynomial arithmetic ([`jump`]).

use std::sync::OnceLock;

/// Ring length: the long lag of the recurrence.
const LEN: usize = 607;
/// The short lag.
const SHORT_LAG: usize = 273;
/// Ring offset between the word read (the short lag) and the word written: a fresh ring writes at
/// index 334 and reads index 0 first.
const READ_AHEAD: usize = LEN - SHORT_LAG;
/// Park–Miller modulus, 2^31 − 1 (prime), and multiplier.
const PM_MODULUS: i64 = (1 << 31) - 1;
const PM_MULTIPLIER: i64 = 48_271;
/// The seed that replaces 0 (and its multiples of the modulus), which Park–Miller cannot use.
const ZERO_SEED_SUBSTITUTE: i64 = 89_482_311;
/// Park–Miller values discarded before the first ring word.
const PM_WARMUP: usize = 20;
/// Steps between the seed-1 fill and the seeding table.
const TABLE_STEPS: u64 = 7_800_000_000_000;
/// The seed of the table's fill.
const TABLE_SEED: i64 = 1;
/// Left shifts combining three Park–Miller values into one ring word: the table's fill used
/// narrower shifts than every later seeding.
const TABLE_FILL_SHIFTS: (u32, u32) = (20, 10);
const SEED_FILL_SHIFTS: (u32, u32) = (40, 20);

/// One stream of Go's `math/rand`, seeded like `rand.Seed(seed)` / `rand.NewSource(seed)`.
#[derive(Clone)]
pub struct GoRand {
    ring: [u64; LEN],
    /// Index of the word the last step wrote; the next step writes the index before it.
    write: usize,
}

impl std::fmt::Debug for GoRand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoRand")
            .field("write", &self.write)
            .finish_non_exhaustive()
    }
}

impl GoRand {
    /// The stream of seed `seed`: seeds equal modulo 2^31 − 1 give one stream, as in Go.
    pub fn new(seed: i64) -> Self {
        let mut ring = park_miller_fill(seed, SEED_FILL_SHIFTS);
        for (word, table) in ring.iter_mut().zip(seeding_table()) {
            *word ^= table;
        }
        Self {
            ring,
            write: READ_AHEAD,
        }
    }

    /// One step of the recurrence: the new word, all 64 bits.
    fn next_word(&mut self) -> u64 {
        self.write = (self.write + LEN - 1) % LEN;
        let read = (self.write + SHORT_LAG) % LEN;
        let word = self.ring[self.write].wrapping_add(self.ring[read]);
        self.ring[self.write] = word;
        word
    }

    /// `Int63()`: a value in `[0, 2^63)`; `Int()` draws the same (one step).
    pub fn int63(&mut self) -> i64 {
        // The top bit is dropped, so the value fits an i64.
        (self.next_word() & (u64::MAX >> 1)) as i64
    }

    /// `Int31()`: the top 31 of `Int63`'s bits.
    fn int31(&mut self) -> u32 {
        (self.int63() >> 32) as u32
    }

    /// `Uint32()`: the top 32 of `Int63`'s bits.
    fn uint32(&mut self) -> u32 {
        (self.int63() >> 31) as u32
    }

    /// `Int31n(n)` for `0 < n < 2^31`: a mask for powers of two, otherwise the remainder of a
    /// draw below the largest multiple of `n` (draws above it are rejected).
    fn int31n(&mut self, n: u32) -> u32 {
        if n.is_power_of_two() {
            return self.int31() & (n - 1);
        }
        let limit = (1u32 << 31) - 1 - (1u32 << 31) % n;
        loop {
            let v = self.int31();
            if v <= limit {
                return v % n;
            }
        }
    }

    /// `Int63n(n)` for `0 < n < 2^63`: as [`Self::int31n`] on 63-bit draws.
    fn int63n(&mut self, n: u64) -> u64 {
        if n.is_power_of_two() {
            return self.int63().unsigned_abs() & (n - 1);
        }
        let limit = (1u64 << 63) - 1 - (1u64 << 63) % n;
        loop {
            let v = self.int63().unsigned_abs();
            if v <= limit {
                return v % n;
            }
        }
    }

    /// `Intn(n)`: uniform in `[0, n)`. Go rejects `n == 0`; here it yields 0 without a draw.
    pub fn intn(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        match u32::try_from(n) {
            Ok(small) if small < 1 << 31 => self.int31n(small) as usize,
            _ => {
                let bound = u64::try_from(n).unwrap_or(u64::MAX >> 1);
                usize::try_from(self.int63n(bound)).unwrap_or_default()
            }
        }
    }

    /// The bounded draw of `Shuffle` below 2^31: Lemire's multiply-and-keep-the-high-half, with
    /// a rejection only when the low half falls below `2^32 mod n`.
    fn shuffle_bound(&mut self, n: u32) -> u32 {
        let mut product = u64::from(self.uint32()) * u64::from(n);
        // `as u32` keeps the low half.
        if (product as u32) < n {
            let threshold = n.wrapping_neg() % n;
            while (product as u32) < threshold {
                product = u64::from(self.uint32()) * u64::from(n);
            }
        }
        (product >> 32) as u32
    }

    /// `Shuffle(len, swap)`: Fisher–Yates from the last element down to the second.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = match u32::try_from(i + 1) {
                Ok(bound) if bound < (1 << 31) => self.shuffle_bound(bound) as usize,
                _ => usize::try_from(self.int63n(i as u64 + 1)).unwrap_or_default(),
            };
            items.swap(i, j);
        }
    }

    /// `Perm(n)`: the inside-out Fisher–Yates permutation of `0..n`.
    pub fn perm(&mut self, n: usize) -> Vec<usize> {
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let j = self.intn(i + 1);
            out.push(i);
            out.swap(i, j);
        }
        out
    }
}

/// The Park–Miller successor `x · 48271 mod (2^31 − 1)` of `x` in `[1, 2^31 − 2]`.
fn park_miller(x: i64) -> i64 {
    x * PM_MULTIPLIER % PM_MODULUS
}

/// The ring before the table is applied: the seed reduced to `[1, 2^31 − 2]`, 20 Park–Miller
/// values skipped, then each word the XOR of three successive values shifted by `shifts`.
fn park_miller_fill(seed: i64, shifts: (u32, u32)) -> [u64; LEN] {
    let mut x = seed.rem_euclid(PM_MODULUS);
    if x == 0 {
        x = ZERO_SEED_SUBSTITUTE;
    }
    for _ in 0..PM_WARMUP {
        x = park_miller(x);
    }
    let mut ring = [0u64; LEN];
    for word in &mut ring {
        // Park–Miller values are below 2^31: non-negative, so the conversions are exact.
        let mut next = || {
            x = park_miller(x);
            x.unsigned_abs()
        };
        *word = (next() << shifts.0) ^ (next() << shifts.1) ^ next();
    }
    ring
}

/// The seeding table, computed at first use (milliseconds).
fn seeding_table() -> &'static [u64; LEN] {
    static TABLE: OnceLock<[u64; LEN]> = OnceLock::new();
    TABLE.get_or_init(|| {
        jump(
            &park_miller_fill(TABLE_SEED, TABLE_FILL_SHIFTS),
            TABLE_STEPS,
        )
    })
}

/// The ring of a fresh generator (writing next at index 333) holding `ring` after `steps` steps.
///
/// Number the words by the step that wrote them: the fresh ring's index `i` holds word
/// `(333 − i) mod 607` of the initial 607 (words 0..607), and step `k` writes word `606 + k` at
/// index `(334 − k) mod 607`. Word `n` is a linear combination of the initial words whose
/// coefficients are those of `x^n mod (x^607 − x^334 − 1)` (the recurrence's characteristic
/// polynomial), which square-and-multiply reaches in about 2·log2(n) products of degree-606
/// polynomials. After `steps` steps the ring holds words `steps .. steps + 607`.
fn jump(ring: &[u64; LEN], steps: u64) -> [u64; LEN] {
    let initial: Vec<u64> = (0..LEN).map(|w| ring[word_index(w as u64)]).collect();
    let mut coefficients = x_pow_mod(steps);
    let mut out = [0u64; LEN];
    for n in steps..steps + LEN as u64 {
        out[word_index(n)] = coefficients
            .iter()
            .zip(&initial)
            .fold(0u64, |acc, (c, w)| acc.wrapping_add(c.wrapping_mul(*w)));
        coefficients = times_x_mod(&coefficients);
    }
    out
}

/// Ring index of word `n` (see [`jump`]): `(333 − n) mod 607`.
fn word_index(n: u64) -> usize {
    let back = usize::try_from(n % LEN as u64).unwrap_or_default();
    (READ_AHEAD - 1 + LEN - back) % LEN
}

/// Folds the terms of degree ≥ 607 of `p` using `x^607 = x^334 + 1`, from the top down.
fn reduce(mut p: Vec<u64>) -> Vec<u64> {
    for d in (LEN..p.len()).rev() {
        let c = p[d];
        p[d - LEN] = p[d - LEN].wrapping_add(c);
        p[d - SHORT_LAG] = p[d - SHORT_LAG].wrapping_add(c);
    }
    p.truncate(LEN);
    p
}

/// `p · x mod P`.
fn times_x_mod(p: &[u64]) -> Vec<u64> {
    let mut shifted = Vec::with_capacity(LEN + 1);
    shifted.push(0);
    shifted.extend_from_slice(p);
    reduce(shifted)
}

/// `a · b mod P` for `a`, `b` of degree < 607.
fn times_mod(a: &[u64], b: &[u64]) -> Vec<u64> {
    let mut product = vec![0u64; 2 * LEN - 1];
    for (i, &ai) in a.iter().enumerate() {
        if ai == 0 {
            continue;
        }
        for (slot, &bj) in product[i..].iter_mut().zip(b) {
            *slot = slot.wrapping_add(ai.wrapping_mul(bj));
        }
    }
    reduce(product)
}

/// `x^n mod P`, from the top bit of `n` down.
fn x_pow_mod(n: u64) -> Vec<u64> {
    let mut r = vec![0u64; LEN];
    r[0] = 1;
    for bit in (0..u64::BITS - n.leading_zeros()).rev() {
        r = times_mod(&r, &r);
        if n >> bit & 1 == 1 {
            r = times_x_mod(&r);
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Steps a ring one step at a time, as the generator does.
    fn step_naively(ring: &[u64; LEN], steps: u64) -> [u64; LEN] {
        let mut g = GoRand {
            ring: *ring,
            write: READ_AHEAD,
        };
        for _ in 0..steps {
            g.next_word();
        }
        g.ring
    }

    #[test]
    fn jump_equals_stepping() {
        let start = park_miller_fill(7, TABLE_FILL_SHIFTS);
        for steps in [0, 1, 272, 273, 334, 606, 607, 608, 1_214, 5_000, 1_000_000] {
            assert_eq!(
                jump(&start, steps),
                step_naively(&start, steps),
                "{steps} steps"
            );
        }
    }

    /// The first `Int63()` values of `rand.New(rand.NewSource(1))`, widely published (they are
    /// also what `rand.Int()` printed in every Go program before Go 1.20 seeded randomly).
    #[test]
    fn seed_one_gives_gos_published_first_values() {
        let mut r = GoRand::new(1);
        let got: Vec<i64> = (0..3).map(|_| r.int63()).collect();
        assert_eq!(
            got,
            [
                5_577_006_791_947_779_410,
                8_674_665_223_082_153_551,
                6_129_484_611_666_145_821
            ]
        );
    }

    #[test]
    fn seeds_equal_modulo_the_park_miller_modulus_give_one_stream() {
        let first = |seed| GoRand::new(seed).int63();
        assert_eq!(first(5), first(5 + PM_MODULUS));
        assert_eq!(first(5), first(5 - PM_MODULUS));
        assert_eq!(first(0), first(ZERO_SEED_SUBSTITUTE));
        assert_ne!(first(5), first(6));
    }

    #[test]
    fn perm_is_a_permutation_fixed_by_the_seed() {
        let a = GoRand::new(42).perm(100);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        assert_eq!(a, GoRand::new(42).perm(100));
        assert_ne!(a, GoRand::new(43).perm(100));
        assert!(GoRand::new(1).perm(0).is_empty());
    }

    #[test]
    fn bounded_draws_stay_in_range() {
        let mut r = GoRand::new(7);
        for n in [
            1usize,
            2,
            3,
            7,
            8,
            1000,
            8152,
            (1 << 31) - 1,
            1 << 31,
            3 << 40,
        ] {
            for _ in 0..200 {
                assert!(r.intn(n) < n, "intn({n})");
            }
        }
        assert_eq!(r.intn(0), 0);
        for n in [1u32, 2, 5, 1 << 20, (1 << 31) - 1] {
            for _ in 0..200 {
                assert!(r.shuffle_bound(n) < n, "shuffle bound {n}");
            }
        }
    }

    #[test]
    fn shuffle_keeps_the_elements() {
        let mut items: Vec<u32> = (0..500).collect();
        GoRand::new(3).shuffle(&mut items);
        assert_ne!(items, (0..500).collect::<Vec<_>>());
        items.sort_unstable();
        assert_eq!(items, (0..500).collect::<Vec<_>>());
    }
}
