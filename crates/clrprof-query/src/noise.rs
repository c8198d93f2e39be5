//! Sampling noise of a diff: is a sampled weight's change between two profiles larger than what
//! the sampling alone would give?
//!
//! The model: a function's sample count on one side is Poisson, and each of its samples stands for
//! its mean value per sample on that side, `r = v / k` (ns of CPU or wall time per sample: the
//! samples' own CPU times vary with the timer's delivery, so a row's values, not its counts, are
//! compared; a side without samples of the function takes that side's mean over all its samples;
//! the baseline's `r` is scaled like its values when normalized). Under "no change" both sides have one common value `V`; its
//! estimate from both counts is `V̂ = (k₁ + k₂) / (1/r₁ + 1/r₂)`, and the change `v₂ − v₁` has
//! variance `V̂·(r₁ + r₂)`. The score `z = (v₂ − v₁) / √(V̂·(r₁ + r₂))` is the conditional test of
//! two Poisson counts (with equal rates `z = (k₂ − k₁)/√(k₁ + k₂)`): 1 sample against 5 gives
//! z = 1.63, far from significant. A change is significant when |z| ≥ [`Z_SIGNIFICANT`] (3: a
//! two-sided p of 0.27%, one-sided 0.135%) and one side has at least the minimum number of samples
//! ([`MIN_SAMPLES`] by default; below it the normal approximation is poor and the row is marked).
//!
//! The uncertainty shown beside a value is the half-width of the 95% interval of the change,
//! `1.96·√(k₁·r₁² + k₂·r₂²)`, from each side's own count.
//!
//! Only the sampling is modelled: a machine that is busier during one run changes the CPU time of
//! everything, significantly. A gate's threshold (`cpu>+10%`) is what stands against that.

use serde::Serialize;

/// |z| at or above which a sampled change is significant (two-sided p = 0.0027).
pub const Z_SIGNIFICANT: f64 = 3.0;

/// Rows whose larger side has fewer samples than this are marked and never significant.
pub const MIN_SAMPLES: u64 = 20;

/// z of the 95% interval shown as the uncertainty.
pub const Z_95: f64 = 1.959_963_984_540_054;

/// The sampling noise of one change.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Noise {
    /// Samples behind the baseline's and the new value.
    pub base_samples: u64,
    pub new_samples: u64,
    /// Score of the change (0 when both counts are 0).
    pub z: f64,
    /// Half-width of the 95% interval of the change, in the weight's unit.
    pub pm95: f64,
    /// Fewer samples than the minimum on both sides.
    pub few_samples: bool,
    /// |z| ≥ [`Z_SIGNIFICANT`] and enough samples.
    pub significant: bool,
}

/// Each side's value per sample (ns per sample): `base` as scaled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PerSample {
    pub base: f64,
    pub new: f64,
}

impl PerSample {
    /// A row's own value per sample on each side (`base_value` as scaled), `self` (the sides'
    /// means) where the row has no samples or no value.
    pub fn for_row(self, base_value: f64, base_samples: u64, new_value: f64, new_samples: u64) -> PerSample {
        let r = |v: f64, k: u64, mean: f64| if k > 0 && v > 0.0 { v / k as f64 } else { mean };
        PerSample { base: r(base_value, base_samples, self.base), new: r(new_value, new_samples, self.new) }
    }

    /// From each side's total value (the baseline's as scaled) and samples. A side without samples
    /// takes the other side's; `None` when neither has any.
    pub fn of(base_value: f64, base_samples: u64, new_value: f64, new_samples: u64) -> Option<PerSample> {
        let r = |v: f64, k: u64| (k > 0 && v > 0.0).then(|| v / k as f64);
        match (r(base_value, base_samples), r(new_value, new_samples)) {
            (Some(b), Some(n)) => Some(PerSample { base: b, new: n }),
            (Some(b), None) => Some(PerSample { base: b, new: b }),
            (None, Some(n)) => Some(PerSample { base: n, new: n }),
            (None, None) => None,
        }
    }
}

/// The noise of a change from `k1` baseline samples to `k2` new ones.
pub fn noise(k1: u64, k2: u64, r: PerSample, min_samples: u64) -> Noise {
    let (a, b) = (k1 as f64, k2 as f64);
    let (v1, v2) = (a * r.base, b * r.new);
    let common = (a + b) / (1.0 / r.base + 1.0 / r.new);
    let var0 = common * (r.base + r.new);
    let z = if var0 > 0.0 { (v2 - v1) / var0.sqrt() } else { 0.0 };
    let pm95 = Z_95 * (a * r.base * r.base + b * r.new * r.new).sqrt();
    let few_samples = k1.max(k2) < min_samples.max(1);
    Noise {
        base_samples: k1,
        new_samples: k2,
        z,
        pm95,
        few_samples,
        significant: !few_samples && z.abs() >= Z_SIGNIFICANT,
    }
}

/// Probability that a standard normal variable exceeds `z` (the one-sided tail).
pub fn normal_tail(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// The `z` whose one-sided tail is `p` (0 < p < 1), by bisection of [`normal_tail`].
pub fn z_of_tail(p: f64) -> f64 {
    let (mut lo, mut hi) = (-40.0f64, 40.0f64);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if normal_tail(mid) > p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The complementary error function (W. J. Cody's rational Chebyshev fit as given in Numerical
/// Recipes, `erfcc`: relative error below 1.2e-7 everywhere).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EQUAL: PerSample = PerSample { base: 4_000_000.0, new: 4_000_000.0 };

    #[test]
    fn one_against_five_samples_is_noise() {
        let n = noise(1, 5, EQUAL, MIN_SAMPLES);
        assert!((n.z - 4.0 / 6f64.sqrt()).abs() < 1e-12, "{n:?}");
        assert!(n.few_samples && !n.significant);
        // Even without a minimum, z = 1.63 < 3.
        assert!(!noise(1, 5, EQUAL, 1).significant);
        // The 95% interval: 1.96·√6 samples of 4 ms.
        assert!((n.pm95 - Z_95 * 6f64.sqrt() * 4e6).abs() < 1e-3, "{n:?}");
    }

    #[test]
    fn a_doubling_of_many_samples_is_significant() {
        let n = noise(300, 600, EQUAL, MIN_SAMPLES);
        assert!((n.z - 300.0 / 900f64.sqrt()).abs() < 1e-12);
        assert!(n.significant && !n.few_samples);
        // 100 against 118 (+18%): z = 1.22, not significant.
        assert!(!noise(100, 118, EQUAL, MIN_SAMPLES).significant);
        // A function only in the new profile, with 9 samples: z = 3 exactly, but below the minimum.
        let fresh = noise(0, 9, EQUAL, MIN_SAMPLES);
        assert!((fresh.z - 3.0).abs() < 1e-12 && fresh.few_samples && !fresh.significant);
        assert!(noise(0, 9, EQUAL, 5).significant);
    }

    #[test]
    fn unequal_rates_compare_values_not_counts() {
        // 100 samples of 10 ms against 200 of 5 ms: the same time, no change.
        let r = PerSample { base: 10e6, new: 5e6 };
        assert!(noise(100, 200, r, MIN_SAMPLES).z.abs() < 1e-9);
        assert_eq!(PerSample::of(1000.0, 100, 0.0, 0), Some(PerSample { base: 10.0, new: 10.0 }));
        assert_eq!(PerSample::of(0.0, 0, 0.0, 0), None);
        // A row's own values per sample, the sides' means where it has no samples.
        let means = PerSample { base: 4.0, new: 5.0 };
        assert_eq!(means.for_row(300.0, 10, 0.0, 0), PerSample { base: 30.0, new: 5.0 });
        // The same time in fewer, larger samples: no change.
        let r = means.for_row(1000.0, 100, 1000.0, 80);
        assert!(noise(100, 80, r, MIN_SAMPLES).z.abs() < 1e-9);
    }

    #[test]
    fn the_normal_tail_and_its_inverse() {
        assert!((normal_tail(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_tail(1.959_963_985) - 0.025).abs() < 1e-7);
        assert!((normal_tail(3.0) - 0.001_349_898).abs() < 1e-8);
        assert!((normal_tail(-3.0) - 0.998_650_102).abs() < 1e-7);
        assert!((z_of_tail(0.001_349_898) - 3.0).abs() < 1e-4);
        assert!((z_of_tail(0.000_135) - 3.64).abs() < 0.01);
    }
}
