//! The fused kernel's FFT written out for one n_fft: every stage's radix, stride, twiddle steps
//! and ping-pong halves become constants, and a butterfly's inputs named values. The loop over
//! run-time radices it replaces kept those inputs in an indexed private array (local memory on
//! NVIDIA) and divided by run-time strides; on an H200 that kernel ran at 0.28x torchaudio's
//! (bench/RESULTS-gpu.md, 2026-11-27). The arithmetic is the loop's, operation for operation:
//! Govindaraju et al.'s Stockham form, the twiddles read from the f64-computed table, radices
//! 2 and 4 exactly, the others as a small direct DFT; only products with w(0) = 1, which are
//! exact, are left out.

use std::fmt::Write;

/// WGSL `fn fft(lid: u32) -> u32` over `buf[0, n)` for `n` = the product of `radices` (each
/// 2, 3, 4, 5 or 7, as `fft_radices` gives them): it returns the offset (0 or n) of the half
/// that holds the spectrum. It uses fused.wgsl's `buf`, `WG`, `cmul` and `w`.
pub(crate) fn fft_function(n: u32, radices: &[u32]) -> String {
    let mut code = String::from("fn fft(lid: u32) -> u32 {\n");
    let (mut src, mut dst, mut ns) = (0u32, n, 1u32);
    for (stage, &r) in radices.iter().enumerate() {
        let nr = n / r;
        let step = n / (ns * r);
        let _ = writeln!(
            code,
            "    // stage {stage}: radix {r}, {ns} already combined"
        );
        let _ = writeln!(code, "    for (var j = lid; j < {nr}u; j += WG) {{");
        if ns == 1 {
            let _ = writeln!(code, "        let base = j * {r}u + {dst}u;");
        } else {
            let _ = writeln!(code, "        let k = j % {ns}u;");
            let _ = writeln!(
                code,
                "        let base = (j / {ns}u) * {}u + k + {dst}u;",
                ns * r
            );
        }
        for a in 0..r {
            let load = format!("buf[j + {}u]", src + a * nr);
            if a == 0 || ns == 1 {
                let _ = writeln!(code, "        let x{a} = {load};");
            } else {
                let _ = writeln!(
                    code,
                    "        let x{a} = cmul({load}, w(k * {}u));",
                    a * step
                );
            }
        }
        let out = |b: u32| format!("buf[base + {}u]", b * ns);
        match r {
            2 => {
                let _ = writeln!(code, "        {} = x0 + x1;", out(0));
                let _ = writeln!(code, "        {} = x0 - x1;", out(1));
            }
            4 => {
                // Multiplications by ±1 and ±i are swaps, not products with rounded values.
                code.push_str(
                    "        let t0 = x0 + x2;\n        let t1 = x0 - x2;\n        \
                     let t2 = x1 + x3;\n        let t3 = x1 - x3;\n        \
                     let mi_t3 = vec2<real>(t3.y, -t3.x);\n",
                );
                let _ = writeln!(code, "        {} = t0 + t2;", out(0));
                let _ = writeln!(code, "        {} = t1 + mi_t3;", out(1));
                let _ = writeln!(code, "        {} = t0 - t2;", out(2));
                let _ = writeln!(code, "        {} = t1 - mi_t3;", out(3));
            }
            _ => {
                // The r-point DFT: exp(-2 pi i a b / r) = w((a b mod r) n / r).
                for b in 0..r {
                    let mut sum = String::from("x0");
                    for a in 1..r {
                        let m = (a * b) % r * nr;
                        if m == 0 {
                            let _ = write!(sum, " + x{a}");
                        } else {
                            let _ = write!(sum, " + cmul(x{a}, w({m}u))");
                        }
                    }
                    let _ = writeln!(code, "        {} = {sum};", out(b));
                }
            }
        }
        code.push_str("    }\n    workgroupBarrier();\n");
        std::mem::swap(&mut src, &mut dst);
        ns *= r;
    }
    let _ = writeln!(code, "    return {src}u;\n}}");
    code
}

#[cfg(test)]
mod tests {
    use super::fft_function;

    #[test]
    fn stages_are_constants_and_every_twiddle_index_is_inside_the_table() {
        let code = fft_function(400, &[4, 4, 5, 5]);
        assert_eq!(code.matches("workgroupBarrier").count(), 4);
        // Four stages swap halves an even number of times: the spectrum is back in the first.
        assert!(code.ends_with("    return 0u;\n}\n"), "{code}");
        assert!(!code.contains("radices"));
        for index in code.split("w(").skip(1) {
            let literal = index.split('u').next().unwrap();
            let m: u32 = literal
                .rsplit(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap_or_else(|_| panic!("twiddle index {literal:?}"));
            assert!(m < 400, "twiddle index {m} outside the table of 400");
        }
        let odd = fft_function(512, &[4, 4, 4, 4, 2]);
        assert!(odd.ends_with("    return 512u;\n}\n"), "{odd}");
    }
}
