//! Times the streaming VAD on raw float32 samples already in memory (what bench/models.py
//! gives silero-vad too): `vad_bench SAMPLES.f32 RATE REPEATS`; prints one JSON line with the
//! median seconds, the real-time factor and the segment count.

use std::time::Instant;

use sonograph_model::{Runtime, VadParams, VadSegmenter};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, path, rate, repeats] = &args[..] else {
        return Err("usage: vad_bench SAMPLES.f32 RATE REPEATS".into());
    };
    let bytes = std::fs::read(path)?;
    let x: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let rate: u32 = rate.parse()?;
    let repeats: usize = repeats.parse()?;
    let rt = Runtime::get(None)?;
    let mut seg = VadSegmenter::new(rt, &VadParams::default(), rate)?;
    let mut times = Vec::new();
    let mut segments = 0;
    for _ in 0..repeats {
        let t = Instant::now();
        let mut out = Vec::new();
        // In the decoder's chunk size, as the CLI feeds it.
        for c in x.chunks(4096) {
            seg.push(c, &mut out)?;
        }
        seg.finish(&mut out)?;
        times.push(t.elapsed().as_secs_f64());
        segments = out.len();
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let audio = x.len() as f64 / f64::from(rate);
    println!(
        "{{\"median_s\": {median}, \"rtf\": {}, \"segments\": {segments}, \"audio_s\": {audio}}}",
        audio / median
    );
    Ok(())
}
