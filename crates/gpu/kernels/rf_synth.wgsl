// The exact stage of RF synthesis (sonograph_rf::synth::add_noise), bit for bit: Philox
// 4x32-10 words, normal deviates interpolated in integers on the ndtri table, one exact
// product (12-bit deviate × 12-bit sigma) and one correctly rounded addition per value, then
// quantisation by powers of two. No transcendental function and no inexact product, so a
// fused multiply-add (which a driver may or may not emit) rounds exactly as the CPU does.

struct Job {
    // First value (f32 index) of the recording in `data`, and its interleaved I/Q values.
    offset: u32,
    values: u32,
    // First Philox block of this job in the dispatch (blocks are 4 values).
    first_block: u32,
    seed_lo: u32,
    seed_hi: u32,
    index_lo: u32,
    index_hi: u32,
    sigma: f32,
    // 2^(bits-1) and its inverse; scale 0: no quantisation.
    scale: f32,
    inv_scale: f32,
    _pad0: u32,
    _pad1: u32,
}

struct Params {
    n_jobs: u32,
    total_blocks: u32,
    row: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> jobs: array<Job>;
@group(0) @binding(2) var<storage, read> ndtri: array<i32>;
@group(0) @binding(3) var<storage, read_write> data: array<f32>;

// 32x32 -> 64-bit product as (hi, lo), from 16-bit halves (WGSL has no 64-bit integers).
fn mulhilo(a: u32, b: u32) -> vec2<u32> {
    let al = a & 0xffffu;
    let ah = a >> 16u;
    let bl = b & 0xffffu;
    let bh = b >> 16u;
    let ll = al * bl;
    let hl = ah * bl;
    let lh = al * bh;
    let hh = ah * bh;
    let cross = (ll >> 16u) + (hl & 0xffffu) + lh;
    let hi = hh + (hl >> 16u) + (cross >> 16u);
    let lo = (cross << 16u) | (ll & 0xffffu);
    return vec2<u32>(hi, lo);
}

// sonograph_rf::philox::philox4x32_10.
fn philox(counter: vec4<u32>, key: vec2<u32>) -> vec4<u32> {
    var c = counter;
    var k = key;
    for (var r = 0u; r < 10u; r++) {
        if (r > 0u) {
            k = k + vec2<u32>(0x9E3779B9u, 0xBB67AE85u);
        }
        let p0 = mulhilo(0xD2511F53u, c.x);
        let p1 = mulhilo(0xCD9E8D57u, c.z);
        c = vec4<u32>(p1.x ^ c.y ^ k.x, p1.y, p0.x ^ c.w ^ k.y, p0.y);
    }
    return c;
}

// sonograph_rf::normal::round_sig_int (12 significant bits).
fn round_sig(a: u32) -> u32 {
    let bits = 32u - countLeadingZeros(a);
    if (bits <= 12u) {
        return a;
    }
    let sh = bits - 12u;
    return ((a + (1u << (sh - 1u))) >> sh) << sh;
}

// sonograph_rf::normal::deviate.
fn deviate(w: u32) -> f32 {
    let m = max(w & 0x7fffffffu, 1u);
    let e = 31u - countLeadingZeros(m);
    let t = m << (30u - e);
    let s = (t >> 23u) & 0x7fu;
    let f = i32((t >> 7u) & 0xffffu);
    let base = e * 129u + s;
    let a0 = ndtri[base];
    let a1 = ndtri[base + 1u];
    let a = a0 + (((a1 - a0) * f) >> 16u);
    var q = i32(round_sig(u32(a)));
    if ((w >> 31u) == 1u) {
        q = -q;
    }
    return f32(q) * (1.0 / 1048576.0);
}

fn quantize(v: f32, job: Job) -> f32 {
    if (job.scale == 0.0) {
        return v;
    }
    return clamp(floor(v * job.scale + 0.5), -job.scale, job.scale - 1.0) * job.inv_scale;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let block = gid.y * p.row + gid.x;
    if (block >= p.total_blocks) {
        return;
    }
    // The job holding this block: the last whose first block is at or before it.
    var lo = 0u;
    var hi = p.n_jobs;
    while (hi - lo > 1u) {
        let mid = (lo + hi) / 2u;
        if (jobs[mid].first_block <= block) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let job = jobs[lo];
    let b = block - job.first_block;
    // Counter: [block, stream 2 (Noise), sample index low, high]; key: the seed.
    let words = philox(vec4<u32>(b, 2u, job.index_lo, job.index_hi), vec2<u32>(job.seed_lo, job.seed_hi));
    for (var l = 0u; l < 4u; l++) {
        let j = b * 4u + l;
        if (j < job.values) {
            let at = job.offset + j;
            data[at] = quantize(data[at] + job.sigma * deviate(words[l]), job);
        }
    }
}
