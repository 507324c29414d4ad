//! Which items go into which training batch, epoch by epoch: batches of at most `batch_size`
//! items and at most `max_duration` seconds of audio (the sum of the items' durations, as
//! lhotse's samplers count it), drawn from duration buckets so that the items of a batch are
//! of like length and padding stays small (lhotse's `DynamicBucketingSampler` is the model);
//! shared between the ranks of a distributed job; reshuffled by (seed, epoch) alone. A plan
//! depends on nothing else (not the workers, not the order they finish in), so a job that
//! stops after any batch resumes with the next one by planning the epoch again.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// How batches are made.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerOptions {
    /// Most items in a batch (`None`: as many as `max_duration` allows).
    pub batch_size: Option<usize>,
    /// Most seconds of audio in a batch, summed over its items; an item longer than this is a
    /// batch of its own (`None`: `batch_size` alone decides).
    pub max_duration: Option<f64>,
    /// Buckets of like duration, each holding about the same total duration (1: none).
    pub num_buckets: usize,
    /// Items (and batches) in a seeded order that changes every epoch; else the source's.
    pub shuffle: bool,
    pub seed: u64,
    /// Leave out each bucket's last batch unless a limit closed it: fewer than `batch_size`
    /// items, or (by duration alone) the bucket's remainder, as lhotse's samplers drop it.
    pub drop_last: bool,
    /// This process's share of the batches, of `world_size`.
    pub rank: usize,
    pub world_size: usize,
}

impl Default for SamplerOptions {
    fn default() -> Self {
        SamplerOptions {
            batch_size: Some(32),
            max_duration: None,
            num_buckets: 1,
            shuffle: false,
            seed: 0,
            drop_last: false,
            rank: 0,
            world_size: 1,
        }
    }
}

/// Most buckets: far more than padding needs (lhotse uses 10 to 30).
pub const MAX_BUCKETS: usize = 1024;

impl SamplerOptions {
    /// The options, checked, in their own names.
    pub fn check(&self) -> Result<(), String> {
        if self.batch_size.is_none() && self.max_duration.is_none() {
            return Err("give batch_size, max_duration or both".into());
        }
        if let Some(n) = self.batch_size {
            let range = crate::bounds::BATCH_ITEMS;
            if !range.contains(&n) {
                return Err(format!(
                    "batch_size {n} is outside {}..={}",
                    range.start(),
                    range.end()
                ));
            }
        }
        if let Some(d) = self.max_duration {
            if !(d.is_finite() && d > 0.0) {
                return Err(format!(
                    "max_duration {d} must be a positive number of seconds"
                ));
            }
        }
        if !(1..=MAX_BUCKETS).contains(&self.num_buckets) {
            return Err(format!(
                "num_buckets {} is outside 1..={MAX_BUCKETS}",
                self.num_buckets
            ));
        }
        if self.world_size == 0 || self.rank >= self.world_size {
            return Err(format!(
                "rank {} must be below world_size {}",
                self.rank, self.world_size
            ));
        }
        Ok(())
    }
}

/// The upper edges of `buckets` buckets that each hold about the same total duration (the
/// last edge is infinite): lhotse's estimate, from every duration rather than a sample.
pub fn bucket_edges(durations: &[f64], buckets: usize) -> Vec<f64> {
    let mut sorted: Vec<f64> = durations.iter().map(|&d| d.max(0.0)).collect();
    sorted.sort_by(f64::total_cmp);
    let total: f64 = sorted.iter().sum();
    let mut edges = Vec::with_capacity(buckets);
    let mut acc = 0.0;
    let mut next = 1;
    for &d in &sorted {
        acc += d;
        while next < buckets && acc >= total * next as f64 / buckets as f64 {
            edges.push(d);
            next += 1;
        }
    }
    edges.dedup();
    edges.push(f64::INFINITY);
    edges
}

/// The bucket of an item of `duration`: the first whose edge is not below it.
fn bucket_of(edges: &[f64], duration: f64) -> usize {
    edges.partition_point(|&e| e < duration)
}

/// This rank's batches of epoch `epoch` (indices into `durations`), in the order they are
/// given. Every rank gets the same number: the epoch's batches are dealt in turn, and the
/// last `batches % world_size` are left out of that epoch (a shuffled job sees them in
/// others). Within a rank, over its batches, every item is there at most once.
pub fn plan_epoch(durations: &[f64], o: &SamplerOptions, epoch: u64) -> Vec<Vec<usize>> {
    let mut rng = ChaCha8Rng::seed_from_u64(o.seed);
    // The epoch picks the generator's stream: epoch 0 is the seed's own order.
    rng.set_stream(epoch);
    let mut order: Vec<usize> = (0..durations.len()).collect();
    if o.shuffle {
        order.shuffle(&mut rng);
    }
    let edges = if o.num_buckets > 1 {
        bucket_edges(durations, o.num_buckets)
    } else {
        vec![f64::INFINITY]
    };
    let mut buckets: Vec<Vec<usize>> = vec![Vec::new(); edges.len()];
    for i in order {
        buckets[bucket_of(&edges, durations[i])].push(i);
    }
    let mut batches = Vec::new();
    for bucket in buckets {
        let mut batch: Vec<usize> = Vec::new();
        let mut seconds = 0.0;
        for i in bucket {
            let d = durations[i].max(0.0);
            let full_by_count = o.batch_size.is_some_and(|n| batch.len() >= n);
            let full_by_time = o.max_duration.is_some_and(|m| seconds + d > m);
            if !batch.is_empty() && (full_by_count || full_by_time) {
                batches.push(std::mem::take(&mut batch));
                seconds = 0.0;
            }
            batch.push(i);
            seconds += d;
        }
        let dropped = o.drop_last && o.batch_size.is_none_or(|n| batch.len() < n);
        if !batch.is_empty() && !dropped {
            batches.push(batch);
        }
    }
    if o.shuffle {
        batches.shuffle(&mut rng);
    }
    let per_rank = batches.len() / o.world_size;
    batches
        .into_iter()
        .skip(o.rank)
        .step_by(o.world_size)
        .take(per_rank)
        .collect()
}

/// The share of a batch's padded length that is padding, over `batches` (by duration: the
/// longest item times the items, against their sum).
pub fn padding_fraction(durations: &[f64], batches: &[Vec<usize>]) -> f64 {
    let (mut padded, mut held) = (0.0, 0.0);
    for b in batches {
        let longest = b.iter().map(|&i| durations[i]).fold(0.0, f64::max);
        padded += longest * b.len() as f64;
        held += b.iter().map(|&i| durations[i]).sum::<f64>();
    }
    if padded > 0.0 {
        1.0 - held / padded
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Durations from 0.5 to 20 s, scattered.
    fn durations(n: usize) -> Vec<f64> {
        (0..n)
            .map(|i| 0.5 + ((i * 7919) % 1000) as f64 * 0.0195)
            .collect()
    }

    #[test]
    fn batches_hold_every_item_once_within_their_limits() {
        let d = durations(1000);
        let o = SamplerOptions {
            batch_size: Some(16),
            max_duration: Some(60.0),
            num_buckets: 8,
            shuffle: true,
            seed: 3,
            ..Default::default()
        };
        let batches = plan_epoch(&d, &o, 0);
        let mut seen: Vec<usize> = batches.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..1000).collect::<Vec<_>>());
        for b in &batches {
            assert!(b.len() <= 16);
            let seconds: f64 = b.iter().map(|&i| d[i]).sum();
            assert!(seconds <= 60.0 || b.len() == 1, "{seconds} s in {b:?}");
        }
        // The same (seed, epoch), the same plan; another epoch, another order of the same items.
        assert_eq!(plan_epoch(&d, &o, 0), batches);
        let next = plan_epoch(&d, &o, 1);
        assert_ne!(next, batches);
        let mut again: Vec<usize> = next.iter().flatten().copied().collect();
        again.sort_unstable();
        assert_eq!(again, seen);
    }

    #[test]
    fn buckets_hold_like_durations_and_cut_the_padding() {
        let d = durations(2000);
        let edges = bucket_edges(&d, 10);
        assert_eq!(edges.len(), 10);
        // About a tenth of the total duration in each bucket.
        let total: f64 = d.iter().sum();
        let mut held = vec![0.0; edges.len()];
        for &x in &d {
            held[bucket_of(&edges, x)] += x;
        }
        for h in &held {
            assert!((h / total - 0.1).abs() < 0.02, "{held:?}");
        }
        let flat = SamplerOptions {
            batch_size: None,
            max_duration: Some(120.0),
            shuffle: true,
            ..Default::default()
        };
        let bucketed = SamplerOptions {
            num_buckets: 10,
            ..flat.clone()
        };
        let (p_flat, p_bucketed) = (
            padding_fraction(&d, &plan_epoch(&d, &flat, 0)),
            padding_fraction(&d, &plan_epoch(&d, &bucketed, 0)),
        );
        // Uniform 0.5–20 s durations pad 0.44 of a batch unbucketed. Ten buckets of equal
        // total duration cut it to about 0.11: the first spans 0.5–6.3 s (a bucket's share
        // of the duration grows with the square of its edge), where most padding is left.
        assert!(p_flat > 0.4, "{p_flat}");
        assert!(
            p_bucketed < 0.15 && p_bucketed < p_flat / 3.0,
            "{p_bucketed} against {p_flat}"
        );
    }

    #[test]
    fn ranks_get_disjoint_shares_of_equal_length() {
        let d = durations(1003);
        let base = SamplerOptions {
            batch_size: Some(10),
            num_buckets: 4,
            max_duration: Some(80.0),
            shuffle: true,
            seed: 11,
            world_size: 3,
            ..Default::default()
        };
        let all = plan_epoch(
            &d,
            &SamplerOptions {
                world_size: 1,
                ..base.clone()
            },
            2,
        );
        let shares: Vec<Vec<Vec<usize>>> = (0..3)
            .map(|rank| {
                plan_epoch(
                    &d,
                    &SamplerOptions {
                        rank,
                        ..base.clone()
                    },
                    2,
                )
            })
            .collect();
        assert!(shares.iter().all(|s| s.len() == all.len() / 3));
        let mut items: Vec<usize> = shares.iter().flatten().flatten().copied().collect();
        let n = items.len();
        items.sort_unstable();
        items.dedup();
        assert_eq!(items.len(), n, "an item went to two ranks");
        // Rank r has the batches r, r + 3, ... of the single-process plan.
        assert_eq!(shares[1][0], all[1]);
        assert_eq!(shares[2][1], all[5]);
    }

    #[test]
    fn without_shuffle_or_buckets_batches_follow_the_source() {
        let d = vec![1.0; 10];
        let o = SamplerOptions {
            batch_size: Some(4),
            ..Default::default()
        };
        assert_eq!(
            plan_epoch(&d, &o, 5),
            [vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]
        );
        let dropped = SamplerOptions {
            drop_last: true,
            ..o
        };
        assert_eq!(plan_epoch(&d, &dropped, 0).len(), 2);
        // By duration alone, each bucket's remainder is what drop_last leaves out.
        let by_time = SamplerOptions {
            batch_size: None,
            max_duration: Some(3.5),
            drop_last: true,
            ..Default::default()
        };
        assert_eq!(
            plan_epoch(&d, &by_time, 0),
            [vec![0, 1, 2], vec![3, 4, 5], vec![6, 7, 8]]
        );
        assert!(SamplerOptions {
            rank: 2,
            world_size: 2,
            ..Default::default()
        }
        .check()
        .is_err());
    }
}
