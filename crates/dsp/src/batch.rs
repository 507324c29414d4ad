//! Many items at once: one extractor per rayon worker, items in parallel.

use rayon::prelude::*;

use crate::error::{ExtractError, SpecError};
use crate::extractor::{CpuExtractor, Precision};
use crate::spec::FeatureSpec;

/// The features of one item: `frames × bins` values, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Features {
    pub frames: usize,
    pub bins: usize,
    pub data: Vec<f32>,
}

/// Extracts every item in parallel on the current rayon pool. One bad item yields its own
/// error and does not disturb the others.
pub fn extract_batch(
    spec: &FeatureSpec,
    precision: Precision,
    items: &[&[f32]],
) -> Result<Vec<Result<Features, ExtractError>>, SpecError> {
    // Validate once up front so that a bad spec is one error, not one per item.
    CpuExtractor::with_precision(spec, precision)?;
    let bins = spec.n_bins();
    Ok(items
        .par_iter()
        .map_init(
            || CpuExtractor::with_precision(spec, precision).expect("validated above"),
            |ex, samples| {
                let mut data = Vec::with_capacity(spec.n_frames(samples.len()) * bins);
                let frames = ex.extract(samples, &mut data)?;
                Ok(Features { frames, bins, data })
            },
        )
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_equals_one_by_one_and_isolates_bad_items() {
        let spec = FeatureSpec::nemo(80);
        let a: Vec<f32> = (0..5000).map(|i| ((i as f32) * 0.01).sin()).collect();
        let b: Vec<f32> = (0..3210)
            .map(|i| ((i as f32) * 0.037).cos() * 0.2)
            .collect();
        let bad = vec![f32::INFINITY; 10];
        let results = extract_batch(&spec, Precision::F64, &[&a, &bad, &b]).unwrap();
        let mut ex = CpuExtractor::new(&spec).unwrap();
        for (samples, result) in [(&a, &results[0]), (&b, &results[2])] {
            let mut out = Vec::new();
            let frames = ex.extract(samples, &mut out).unwrap();
            let got = result.as_ref().unwrap();
            assert_eq!((got.frames, got.bins), (frames, 80));
            assert_eq!(got.data, out);
        }
        assert!(results[1].is_err());
    }
}
