//! What the machine gives a job: its memory, as the kernel will enforce it.

/// Bytes of memory this process may use: the machine's physical memory, or the cgroup's
/// limit where one is set and lower (a Kubernetes pod or a Slurm job sees its own limit, not
/// the node's). `None` where neither can be read.
pub fn memory_bytes() -> Option<u64> {
    let physical = physical_memory();
    let cgroup = cgroup_limit();
    match (physical, cgroup) {
        (Some(p), Some(c)) => Some(p.min(c)),
        (p, c) => p.or(c),
    }
}

fn physical_memory() -> Option<u64> {
    // MemTotal, in kB; the same figure sysconf(_SC_PHYS_PAGES) gives, without unsafe code.
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = text
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    kb.checked_mul(1024)
}

/// cgroup v2's `memory.max` of this process's group ("max" when unlimited), else v1's
/// `memory.limit_in_bytes` (a huge number when unlimited, which `min` makes harmless).
fn cgroup_limit() -> Option<u64> {
    let group = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in group.lines() {
        // "0::/path" (v2) or "N:memory:/path" (v1).
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let file = if controllers.is_empty() {
            format!("/sys/fs/cgroup{path}/memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
        } else {
            continue;
        };
        let root = if controllers.is_empty() {
            "/sys/fs/cgroup/memory.max"
        } else {
            "/sys/fs/cgroup/memory/memory.limit_in_bytes"
        };
        // Inside a container the group's path is often not mounted as such: its own limit is
        // then at the root of the mount.
        for f in [file.as_str(), root] {
            if let Ok(v) = std::fs::read_to_string(f) {
                return v.trim().parse().ok();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_machine_has_memory() {
        let bytes = super::memory_bytes().expect("Linux reports its memory");
        // More than 64 MiB and less than 64 TiB: a reading, not a unit slip.
        assert!((64 << 20..64 << 40).contains(&bytes), "{bytes}");
    }
}
