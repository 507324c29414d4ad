//! Times the model runner on a batch of feature rows (raw float32, frames × n_mels each):
//! `encoder_bench MODEL.onnx N_MELS THREADS REPEATS ROWS.f32 FRAMES...`; prints one JSON line
//! with the median seconds of `run_batch` (padding, transposes and outputs included).

use std::path::Path;
use std::time::Instant;

use sonograph_model::runner::RunnerOptions;
use sonograph_model::{ModelRunner, Runtime};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 7 {
        return Err("usage: encoder_bench MODEL N_MELS THREADS REPEATS ROWS.f32 FRAMES...".into());
    }
    let n_mels: usize = args[2].parse()?;
    let threads: usize = args[3].parse()?;
    let repeats: usize = args[4].parse()?;
    let bytes = std::fs::read(&args[5])?;
    let all: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let frames: Vec<usize> = args[6..]
        .iter()
        .map(|f| f.parse())
        .collect::<Result<_, _>>()?;
    let mut rows = Vec::new();
    let mut at = 0;
    for f in &frames {
        rows.push(&all[at..at + f * n_mels]);
        at += f * n_mels;
    }
    let rt = Runtime::get(None)?;
    let opts = RunnerOptions {
        threads,
        ..Default::default()
    };
    let mut m = ModelRunner::open(rt, Path::new(&args[1]), &opts)?;
    m.run_batch(&rows, n_mels)?; // warm-up
    let mut times = Vec::new();
    for _ in 0..repeats {
        let t = Instant::now();
        let out = m.run_batch(&rows, n_mels)?;
        times.push(t.elapsed().as_secs_f64());
        assert_eq!(out.len(), rows.len());
    }
    times.sort_by(f64::total_cmp);
    println!("{{\"median_s\": {}}}", times[times.len() / 2]);
    Ok(())
}
