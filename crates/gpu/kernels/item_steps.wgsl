// Whole-row steps on the device, after the mel kernel: the dynamic-range clamp (every value at
// least its row's maximum minus the range: Whisper's max - 8, librosa's top_db) and the affine
// scaling (Whisper's (x + 4) / 4), so that the host only copies the rows out. The arithmetic is
// the host's `finish_rows`, bit for bit: a maximum is exact in any order, max - range and
// x + add are rounded once as on the host, and the host sends the affine only where its
// divisor is a power of two, whose inverse multiplies exactly. A row is an item or a piece of
// one (each piece is its own row, as on the CPU); a last frame the host drops is left out
// (`step_frames`).

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> items: array<Item>;
@group(0) @binding(2) var<storage, read> frame_item: array<u32>;
@group(0) @binding(3) var<storage, read_write> rows: array<f32>;
@group(0) @binding(4) var<storage, read_write> maxima: array<f32>;

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
        maxima[i] = partial[0];
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
        let floor = maxima[i] - p.dynamic_range;
        v = select(floor, v, v >= floor);
    }
    if ((p.item_steps & 2u) != 0u) {
        v = (v + p.affine_add) * p.affine_scale;
    }
    rows[at] = v;
}
