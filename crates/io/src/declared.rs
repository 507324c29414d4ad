//! Lengths that files declare, checked against what holds them before a parser trusts them:
//! symphonia 0.5 allocates the lengths inside FLAC's comment and picture blocks and Vorbis
//! comments (up to 4 GiB each) before it reads them, and an allocation that fails is an abort,
//! not an error. Used for FLAC streams (`decode`) and Ogg streams (`ogg_guard`).

/// Refuses a FLAC metadata block of type `kind` (its bytes after the 4-byte header) whose
/// inner lengths pass its end: symphonia 0.5 allocates the lengths a VORBIS_COMMENT or
/// PICTURE block declares (up to 4 GiB each) before it reads them, and an allocation that
/// fails is an abort, not an error. A block that ends inside a length is let through:
/// symphonia's read of that length fails before it allocates anything (an error for native
/// FLAC, a packet skipped with a warning in Ogg), and refusing it here would refuse files
/// that decode.
pub(crate) fn check_flac_block(kind: u8, block: &[u8]) -> Result<(), String> {
    match kind {
        4 => check_vorbis_comment(block),
        // PICTURE: type, MIME type, description, four numbers, data (big-endian lengths).
        6 => {
            let mut at = 0usize;
            for skip_value in [false, true, true, false, false, false, false, true] {
                let Some(n) = u32_at(block, at, false) else {
                    return Ok(());
                };
                at += 4;
                if skip_value {
                    if n as usize > block.len().saturating_sub(at) {
                        return Err(format!(
                            "a FLAC picture block of {} bytes declares a field of {n} bytes",
                            block.len()
                        ));
                    }
                    at += n as usize;
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Refuses a Vorbis comment structure (vendor string, count, then each comment; little-endian
/// lengths; in FLAC's VORBIS_COMMENT block and in Vorbis's and Opus's comment packets) that
/// declares a comment longer than what is left of it. (The vendor string is skipped, not
/// allocated; a structure that ends inside a length passes, as in [`check_flac_block`].)
pub(crate) fn check_vorbis_comment(block: &[u8]) -> Result<(), String> {
    let vendor = u32_at(block, 0, true).unwrap_or(0) as usize;
    let mut at = 4usize.saturating_add(vendor);
    let Some(count) = u32_at(block, at, true) else {
        return Ok(());
    };
    at += 4;
    for _ in 0..count {
        let Some(n) = u32_at(block, at, true).map(|n| n as usize) else {
            return Ok(());
        };
        at += 4;
        if n > block.len().saturating_sub(at) {
            return Err(format!(
                "a comment block of {} bytes declares a comment of {n} bytes",
                block.len()
            ));
        }
        at += n;
    }
    Ok(())
}

/// The u32 at byte `at` of `bytes`, little- or big-endian; `None` past their end.
fn u32_at(bytes: &[u8], at: usize, little: bool) -> Option<u32> {
    let b: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(if little {
        u32::from_le_bytes(b)
    } else {
        u32::from_be_bytes(b)
    })
}
