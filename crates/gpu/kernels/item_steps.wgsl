// Whole-row steps on the device, after the mel kernel, so that the host only copies the rows
// out: the dynamic-range clamp (every value at least its row's maximum minus the range:
// Whisper's max - 8, librosa's top_db) and the affine scaling (Whisper's (x + 4) / 4), or NeMo's
// per-feature normalisation (each band less its mean, over its sample deviation plus 1e-5).
// The arithmetic is the host's `finish_rows`: a maximum is exact in any order, max - range and
// x + add are rounded once as on the host, and the host sends the affine only where its
// divisor is a power of two, whose inverse multiplies exactly; a band's sums are taken in frame
// order in `real` (f64: the host sends the normalisation only then), as the host takes them.
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
    let start = items[i].frame_offset * p.n_mels;
    let count = items[i].step_frames * p.n_mels;
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

// One workgroup per item, an invocation per band: its mean and sample deviation over the
// item's counted frames, each sum in frame order from zero, as `normalize_bins` sums them.
@compute @workgroup_size(64)
fn band_stats(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = wid.x + wid.y * p.item_row;
    if (i >= p.n_items) {
        return;
    }
    let first = items[i].frame_offset;
    let n = items[i].step_frames;
    for (var b = lid; b < p.n_mels; b += 64u) {
        var sum: real = 0.0;
        for (var t = 0u; t < n; t++) {
            sum += real(rows[(first + t) * p.n_mels + b]);
        }
        let mean = sum / real(n);
        var squares: real = 0.0;
        for (var t = 0u; t < n; t++) {
            let d = real(rows[(first + t) * p.n_mels + b]) - mean;
            squares += d * d;
        }
        // One frame has no sample variance: the host's NaN becomes 0 there.
        var deviation: real = 0.0;
        if (n > 1u) {
            deviation = sqrt(squares / real(n - 1u));
        }
        stats[(2u * i) * p.n_mels + b] = mean;
        stats[(2u * i + 1u) * p.n_mels + b] = deviation + 1e-5;
    }
}

// One invocation per (band, frame), on the mel kernel's grid.
@compute @workgroup_size(64)
fn apply(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let b = wid.x * 64u + lid.x;
    let t = wid.y + wid.z * p.grid_y;
    if (b >= p.n_mels || t >= p.total_frames) {
        return;
    }
    let i = frame_item[t];
    if (t - items[i].frame_offset >= items[i].step_frames) {
        return;
    }
    let at = t * p.n_mels + b;
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
        let mean = stats[(2u * i) * p.n_mels + b];
        let deviation = stats[(2u * i + 1u) * p.n_mels + b];
        v = f32((real(v) - mean) / deviation);
    }
    rows[at] = v;
}
