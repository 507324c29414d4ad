// The chunk's finished rows as IEEE binary16, two values a word (the first in the low half),
// for a job that stores f16 (`--dtype f16`): half the bytes come back. Each value is rounded
// as the host's writer rounds it (the `half` crate's f32 -> f16: to nearest, ties to even;
// overflow to infinity; f16 subnormals; NaN kept quiet with its sign and top payload bits),
// in integer arithmetic on the value's bits, read as bits, so that no device's own conversion
// (whose rounding WGSL leaves open), flushing of subnormals or quieting of NaNs enters.

@group(0) @binding(0) var<uniform> p: Params;
// The mel rows (f32), as their bits.
@group(0) @binding(1) var<storage, read> rows: array<u32>;
@group(0) @binding(2) var<storage, read_write> packed: array<u32>;

fn f16_bits(x: u32) -> u32 {
    let sign = (x >> 16u) & 0x8000u;
    let exp = x & 0x7f800000u;
    let man = x & 0x007fffffu;
    if (exp == 0x7f800000u) {
        // Infinity, or NaN with its mantissa's top bit set.
        return sign | 0x7c00u | select(0u, 0x0200u, man != 0u) | (man >> 13u);
    }
    let half_exp = i32(exp >> 23u) - 127 + 15;
    if (half_exp >= 31) {
        return sign | 0x7c00u;
    }
    if (half_exp <= 0) {
        // A subnormal f16, or zero when nothing is left to round.
        if (14 - half_exp > 24) {
            return sign;
        }
        let full = man | 0x00800000u;
        let shift = u32(14 - half_exp);
        var half_man = full >> shift;
        let round_bit = 1u << (shift - 1u);
        if ((full & round_bit) != 0u && (full & (3u * round_bit - 1u)) != 0u) {
            half_man += 1u;
        }
        return sign | half_man;
    }
    // A carry out of the mantissa raises the exponent (to infinity past 65504), as it should.
    var bits = sign | (u32(half_exp) << 10u) | (man >> 13u);
    if ((man & 0x1000u) != 0u && (man & 0x2fffu) != 0u) {
        bits += 1u;
    }
    return bits;
}

// One invocation per word, in rows of `pack_row` workgroups of 64 (long chunks wrap into the
// grid's second dimension). The last word of an odd count holds a zero in its high half.
@compute @workgroup_size(64)
fn pack(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let w = (wid.x + wid.y * p.pack_row) * 64u + lid;
    let values = p.total_frames * p.out_bins;
    if (2u * w >= values) {
        return;
    }
    let low = f16_bits(rows[2u * w]);
    var high = 0u;
    if (2u * w + 1u < values) {
        high = f16_bits(rows[2u * w + 1u]);
    }
    packed[w] = low | (high << 16u);
}
