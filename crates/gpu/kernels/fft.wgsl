// Mixed-radix Stockham FFT in workgroup memory: one workgroup per frame, the whole frame in
// two ping-pong halves of `buf`, one barrier per stage (Govindaraju et al., "High performance
// discrete Fourier transforms on graphics processors", SC 2008, the FftIteration/expand form,
// which holds for mixed radices because Ns is the product of the radices already applied).
// The host fills in N, the stage count and the radices (each 2..8, e.g. 400 = 4·4·5·5) and
// falls back to the DFT kernel when n_fft has a larger prime factor or does not fit in
// workgroup memory. Every twiddle comes from the f64-computed table (WGSL's sin/cos only
// promise 2^-11 absolute); indices are exact integers. Writes |X|^2, or |X| when `magnitude`.

const N: u32 = @N@u;
const NSTAGES: u32 = @NSTAGES@u;
const MAXR: u32 = 8u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> frames: array<real>;
@group(0) @binding(2) var<storage, read> twiddle: array<vec2<real>>;
@group(0) @binding(3) var<storage, read_write> spectrum: array<real>;

var<workgroup> buf: array<vec2<real>, @TWO_N@>;
var<private> radices: array<u32, NSTAGES> = array<u32, NSTAGES>(@RADICES@);

// exp(-2 pi i m / N) for an integer m.
fn w(m: u32) -> vec2<real> {
    let c = twiddle[m % N];
    return vec2<real>(c.x, -c.y);
}

fn cmul(a: vec2<real>, b: vec2<real>) -> vec2<real> {
    return vec2<real>(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    // Uniform across the workgroup, so returning early keeps the barriers uniform.
    let t = wid.x + wid.y * p.grid_y;
    if (t >= p.total_frames) {
        return;
    }
    let base = t * N;
    for (var i = lid; i < N; i += 64u) {
        buf[i] = vec2<real>(frames[base + i], 0.0);
    }
    workgroupBarrier();
    var src = 0u;
    var dst = N;
    var ns = 1u;
    for (var s = 0u; s < NSTAGES; s++) {
        let r = radices[s];
        let nr = N / r;
        // Twiddle step of this stage: exp(-2 pi i k a / (ns r)) = w(k a (N / (ns r))).
        let step = N / (ns * r);
        for (var j = lid; j < nr; j += 64u) {
            let k = j % ns;
            var v: array<vec2<real>, MAXR>;
            for (var a = 0u; a < r; a++) {
                v[a] = cmul(buf[src + j + a * nr], w(k * a * step));
            }
            let idx = (j / ns) * ns * r + k;
            // Radices 2 and 4 exactly (multiplications by ±1 and ±i are swaps, not products
            // with rounded table values); the others as a small direct DFT.
            if (r == 4u) {
                let t0 = v[0] + v[2];
                let t1 = v[0] - v[2];
                let t2 = v[1] + v[3];
                let t3 = v[1] - v[3];
                let mi_t3 = vec2<real>(t3.y, -t3.x);
                buf[dst + idx] = t0 + t2;
                buf[dst + idx + ns] = t1 + mi_t3;
                buf[dst + idx + 2u * ns] = t0 - t2;
                buf[dst + idx + 3u * ns] = t1 - mi_t3;
                continue;
            }
            if (r == 2u) {
                buf[dst + idx] = v[0] + v[1];
                buf[dst + idx + ns] = v[0] - v[1];
                continue;
            }
            for (var b = 0u; b < r; b++) {
                // The r-point DFT; exp(-2 pi i a b / r) = w((a b mod r) N / r).
                var acc = v[0];
                for (var a = 1u; a < r; a++) {
                    acc += cmul(v[a], w(((a * b) % r) * nr));
                }
                buf[dst + idx + b * ns] = acc;
            }
        }
        workgroupBarrier();
        let tmp = src;
        src = dst;
        dst = tmp;
        ns *= r;
    }
    for (var k = lid; k < p.n_freq; k += 64u) {
        let c = buf[src + k];
        var v = c.x * c.x + c.y * c.y;
        if (p.magnitude != 0u) {
            v = sqrt(v);
        }
        spectrum[t * p.n_freq + k] = v;
    }
}
