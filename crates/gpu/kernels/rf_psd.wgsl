// Welch PSD of complex recordings (sonograph_rf::features::Welch): one workgroup per segment
// windows it (after removing its mean when detrending), runs an in-place radix-2 FFT in
// workgroup memory and writes |X|^2 per bin; a second pass sums each bin over the segments of
// its recording in order and scales it. `real` is f64 where the adapter has it.

alias real = @REAL@;
const N: u32 = @N@u;
const LOG2N: u32 = @LOG2N@u;
const THREADS: u32 = 256u;

struct Params {
    total_segments: u32,
    row: u32,
    hop: u32,
    detrend: u32,
    n_recordings: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

// A segment: its recording and the sample where it starts (in `samples`, complex units).
struct Segment {
    recording: u32,
    start: u32,
}

// A recording's segments (first, count). The host applies the scale 1 / (fs Σw² K) in the
// CPU path's own arithmetic.
struct Recording {
    first_segment: u32,
    segments: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> samples: array<f32>;
@group(0) @binding(2) var<storage, read> segs: array<Segment>;
@group(0) @binding(3) var<storage, read> win: array<real>;
@group(0) @binding(4) var<storage, read> twiddle: array<real>;
@group(0) @binding(5) var<storage, read_write> power: array<real>;
@group(0) @binding(6) var<storage, read> recs: array<Recording>;
@group(0) @binding(7) var<storage, read_write> psd: array<real>;

var<workgroup> re: array<real, N>;
var<workgroup> im: array<real, N>;
var<workgroup> sum_re: array<real, THREADS>;
var<workgroup> sum_im: array<real, THREADS>;

fn bit_reverse(i: u32) -> u32 {
    return reverseBits(i) >> (32u - LOG2N);
}

@compute @workgroup_size(256)
fn segment_power(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = wg.y * p.row + wg.x;
    if (g >= p.total_segments) {
        return;
    }
    let t = lid.x;
    let seg = segs[g];
    // The segment's mean (a tree reduction), when detrending.
    var mr: real = 0.0;
    var mi: real = 0.0;
    if (p.detrend != 0u) {
        var ar: real = 0.0;
        var ai: real = 0.0;
        for (var i = t; i < N; i += THREADS) {
            ar += real(samples[2u * (seg.start + i)]);
            ai += real(samples[2u * (seg.start + i) + 1u]);
        }
        sum_re[t] = ar;
        sum_im[t] = ai;
        workgroupBarrier();
        for (var s = THREADS / 2u; s > 0u; s >>= 1u) {
            if (t < s) {
                sum_re[t] += sum_re[t + s];
                sum_im[t] += sum_im[t + s];
            }
            workgroupBarrier();
        }
        mr = sum_re[0] / real(N);
        mi = sum_im[0] / real(N);
    }
    for (var i = t; i < N; i += THREADS) {
        let w = win[i];
        let r = bit_reverse(i);
        re[r] = (real(samples[2u * (seg.start + i)]) - mr) * w;
        im[r] = (real(samples[2u * (seg.start + i) + 1u]) - mi) * w;
    }
    workgroupBarrier();
    // Radix-2 decimation in time; twiddle k is exp(-2πik/N) as (cos, sin) pairs.
    for (var s = 0u; s < LOG2N; s++) {
        let half = 1u << s;
        let stride = N / (2u * half);
        for (var b = t; b < N / 2u; b += THREADS) {
            let j = b % half;
            let i0 = (b / half) * 2u * half + j;
            let i1 = i0 + half;
            let c = twiddle[2u * j * stride];
            let sn = -twiddle[2u * j * stride + 1u];
            let xr = re[i1] * c - im[i1] * sn;
            let xi = re[i1] * sn + im[i1] * c;
            re[i1] = re[i0] - xr;
            im[i1] = im[i0] - xi;
            re[i0] = re[i0] + xr;
            im[i0] = im[i0] + xi;
        }
        workgroupBarrier();
    }
    for (var k = t; k < N; k += THREADS) {
        power[g * N + k] = re[k] * re[k] + im[k] * im[k];
    }
}

// One invocation per (recording, bin): the sum over the recording's segments in order, as the
// CPU accumulates them.
@compute @workgroup_size(64)
fn average(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.y * p.row * 64u + gid.x;
    if (i >= p.n_recordings * N) {
        return;
    }
    let r = recs[i / N];
    let k = i % N;
    var acc: real = 0.0;
    for (var s = 0u; s < r.segments; s++) {
        acc += power[(r.first_segment + s) * N + k];
    }
    psd[i] = acc;
}
