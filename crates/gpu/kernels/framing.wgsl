// Framing helpers of the two kernels that read samples (fused.wgsl and frame.wgsl, which both
// declare `samples` and `load_sample`, as f32 or as packed 16-bit PCM: src/extractor.rs):
// where a frame's window starts, and its padded, dithered samples.

// numpy's "reflect" index for any i, periodic beyond one reflection (as the CPU path).
fn reflect_index(i: i32, n: i32) -> i32 {
    if (n == 1) {
        return 0;
    }
    let period = 2 * (n - 1);
    var m = i % period;
    if (m < 0) {
        m += period;
    }
    if (m < n) {
        return m;
    }
    return period - m;
}

// Kaldi's mirror index for any i (the edge sample repeated: -1 reads 0, n reads n - 1),
// periodic with period 2n (as the CPU path).
fn symmetric_index(i: i32, n: i32) -> i32 {
    var m = i % (2 * n);
    if (m < 0) {
        m += 2 * n;
    }
    if (m < n) {
        return m;
    }
    return 2 * n - 1 - m;
}

// Index (relative to the item's first uploaded sample) of the first window sample of the
// item's local frame `local`; negative inside the left padding.
fn window_start(it: Item, local: u32) -> i32 {
    return it.first_start + i32(local * p.hop);
}

// Sample m of the window starting at `start` (from `window_start`) of item `it`, whose frame
// index in the item is j: outside the signal, numpy's reflection, Kaldi's mirror or zero; then the spec's
// dither. Relative indices reflect as the item's own: the left edge only ever falls in a
// window that starts the item, and the host checked that a window holds what its frames read.
fn frame_sample(it: Item, start: i32, j: u32, m: u32) -> real {
    var idx = start + i32(m);
    let n = i32(it.signal_len);
    var v: real = 0.0;
    if (idx < 0 || idx >= n) {
        if (p.edge == 0u) {
            return dithered(v, j, m);
        }
        if (p.edge == 2u) {
            idx = symmetric_index(idx, n);
        } else {
            idx = reflect_index(idx, n);
        }
    }
    v = real(signal_sample(it, u32(idx)));
    return dithered(v, j, m);
}

// Sample i of item `it`'s signal as the spectral core takes it: pre-emphasised here where the
// kernels do it (`p.signal_preemph`), x - a * prev in f32 as the CPU path computes it (a
// driver may fuse it into one rounding, within an ulp of the CPU's; the f32 and 16-bit uploads
// share this code and so the bits), the first sample of the signal as it is and a later piece's
// first reading the context before it.
fn signal_sample(it: Item, i: u32) -> f32 {
    let x = load_sample(it.sample_offset + i);
    if (p.signal_preemph == 0.0 || (i == 0u && it.context == 0u)) {
        return x;
    }
    let prev = load_sample(it.sample_offset + i - 1u);
    return x - p.signal_preemph * prev;
}

// sonograph_dsp::dither, transcribed: Chris Wellons' lowbias32 hash.
fn lowbias32(v: u32) -> u32 {
    var x = v;
    x ^= x >> 16u;
    x *= 0x7feb352du;
    x ^= x >> 15u;
    x *= 0x846ca68bu;
    x ^= x >> 16u;
    return x;
}

// Unit-variance dither for sample m of frame `frame` of an item: twelve 16-bit uniforms
// summed exactly in integers (Irwin-Hall), the same bits as the CPU's `unit_noise`.
fn unit_noise(frame: u32, m: u32) -> f32 {
    let golden = 0x9e3779b9u;
    var h = lowbias32(golden ^ p.dither_seed_lo);
    h = lowbias32(h ^ p.dither_seed_hi);
    h = lowbias32(h ^ frame);
    h = lowbias32(h ^ m);
    var sum = 0u;
    for (var k = 0u; k < 6u; k++) {
        let r = lowbias32(h + k * golden);
        sum += (r & 0xffffu) + (r >> 16u);
    }
    return (f32(sum) + 6.0) / 65536.0 - 6.0;
}

// A frame sample with the spec's dither added, in the CPU's order and rounding.
fn dithered(v: real, frame: u32, m: u32) -> real {
    if (p.dither == 0.0) {
        return v;
    }
    return v + real(unit_noise(frame, m)) * real(p.dither);
}
