// Whole-row steps on the device, after the mel kernel (or the waveform's copy), so that the
// host only copies the rows out: the dynamic-range clamp (every value at least its row's
// maximum minus the range: Whisper's max - 8, librosa's top_db) and the affine scaling
// (Whisper's (x + 4) / 4), or a normalisation of each band over the item: NeMo's per-feature
// one (less its mean, over its sample deviation plus 1e-5) or a waveform's zero mean and unit
// variance (transformers' Wav2Vec2: over sqrt(population variance + 1e-7)).
// The arithmetic is the host's `finish_rows`: a maximum is exact in any order, max - range and
// x + add are rounded once as on the host, and the host sends the affine only where its
// divisor is a power of two, whose inverse multiplies exactly; a band's sums are taken in the
// host's lane order (`band_sums`) in `real` (f64: the host sends the normalisation only then).
// A row is an item or a piece of one (each piece is its own row, as on the CPU); a last frame
// the host drops is left out (`step_frames`).

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> items: array<Item>;
@group(0) @binding(2) var<storage, read> frame_item: array<u32>;
@group(0) @binding(3) var<storage, read_write> rows: array<f32>;
// Per item: its maximum (item_max), or each band's mean then each band's deviation
// (band_stats).
@group(0) @binding(4) var<storage, read_write> stats: array<real>;

const WG: u32 = 256u;
// Under every finite value: WGSL lets a shader assume that no infinity is present.
const LOWEST: f32 = -3.40282347e+38f;

var<workgroup> partial: array<f32, WG>;

// The greater of two values; a NaN loses, as in the host's fold of f32::max.
fn greater(a: f32, b: f32) -> f32 {
    return select(a, b, b > a);
}

// One workgroup per item: the maximum of its counted frames' values. The item index is
// uniform across the workgroup, so the early return keeps the barriers uniform.
@compute @workgroup_size(256)
fn item_max(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = wid.x + wid.y * p.item_row;
    if (i >= p.n_items) {
        return;
    }
    let start = items[i].frame_offset * p.out_bins;
    let count = items[i].step_frames * p.out_bins;
    var m = LOWEST;
    for (var j = lid; j < count; j += WG) {
        m = greater(m, rows[start + j]);
    }
    partial[lid] = m;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            partial[lid] = greater(partial[lid], partial[lid + s]);
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        stats[i] = real(partial[0]);
    }
}

// A band's sums in a workgroup of WG lanes: frame t into lane t % WG in frame order, then the
// lanes added in a tree, the host's `band_sums` order (so the host's bits); no invocation walks
// more than 1 / WG of the item (lavapipe ends an invocation's loops after 65,535 iterations).
var<workgroup> lanes: array<real, WG>;

fn lanes_total(lid: u32) -> real {
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            lanes[lid] += lanes[lid + s];
        }
        workgroupBarrier();
    }
    let total = lanes[0];
    // Every lane has read the total before the next sum overwrites it.
    workgroupBarrier();
    return total;
}

// One workgroup per (band, item): the band's mean and deviation over the item's counted frames.
@compute @workgroup_size(256)
fn band_stats(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let b = wid.x;
    let i = wid.y + wid.z * p.item_row;
    let width = p.out_bins;
    if (i >= p.n_items || b >= width) {
        return;
    }
    let first = items[i].frame_offset;
    let n = items[i].step_frames;
    // std's neutral element for a sum, as the host starts from.
    var sum: real = -0.0;
    for (var t = lid; t < n; t += WG) {
        sum += real(rows[(first + t) * width + b]);
    }
    lanes[lid] = sum;
    let mean = lanes_total(lid) / real(n);
    var squares: real = -0.0;
    for (var t = lid; t < n; t += WG) {
        let d = real(rows[(first + t) * width + b]) - mean;
        squares += d * d;
    }
    lanes[lid] = squares;
    let total = lanes_total(lid);
    if (lid != 0u) {
        return;
    }
    var deviation: real;
    if ((p.item_steps & 8u) != 0u) {
        // The population variance, never zero once 1e-7 is added.
        deviation = sqrt(total / real(n) + 1e-7);
    } else {
        // One frame has no sample variance: the host's NaN becomes 0 there.
        deviation = 0.0;
        if (n > 1u) {
            deviation = sqrt(total / real(n - 1u));
        }
        deviation += 1e-5;
    }
    stats[(2u * i) * width + b] = mean;
    stats[(2u * i + 1u) * width + b] = deviation;
}

// One invocation per (band, frame), on the mel kernel's grid.
@compute @workgroup_size(64)
fn apply(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let b = wid.x * 64u + lid.x;
    let t = wid.y + wid.z * p.grid_y;
    let width = p.out_bins;
    if (b >= width || t >= p.total_frames) {
        return;
    }
    let i = frame_item[t];
    if (t - items[i].frame_offset >= items[i].step_frames) {
        return;
    }
    let at = t * width + b;
    var v = rows[at];
    if ((p.item_steps & 1u) != 0u) {
        // The host's v.max(floor): the floor over a NaN.
        let floor = f32(stats[i]) - p.dynamic_range;
        v = select(floor, v, v >= floor);
    }
    if ((p.item_steps & 2u) != 0u) {
        v = (v + p.affine_add) * p.affine_scale;
    }
    if ((p.item_steps & 4u) != 0u) {
        let mean = stats[(2u * i) * width + b];
        let deviation = stats[(2u * i + 1u) * width + b];
        v = f32((real(v) - mean) / deviation);
    }
    rows[at] = v;
}
