//! What the machine gives a job: its memory, as the kernel will enforce it, and the CPU time
//! the job has taken of it.

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

/// CPU seconds (user and system) this process has used so far, all its threads together,
/// ended ones included: what a job's core utilisation divides by wall time and cores (thread
/// pools such as rayon's and Parquet's encoders do work no stage timer sees). `None` where
/// /proc is absent.
pub fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // utime and stime are fields 14 and 15; the name before them (in parentheses) may hold
    // spaces, so count from the last ')'.
    let mut fields = stat
        .get(stat.rfind(')')? + 2..)?
        .split_whitespace()
        .skip(11);
    let (user, system): (u64, u64) = (fields.next()?.parse().ok()?, fields.next()?.parse().ok()?);
    // In clock ticks of USER_HZ, which Linux fixes at 100 for /proc on the architectures it
    // runs sonograph on (sysconf(_SC_CLK_TCK) reports the same, with unsafe code).
    Some((user + system) as f64 / 100.0)
}

/// The share of this machine's cores a job kept busy since `cpu_at_start` (its
/// [`process_cpu_seconds`] then) over `wall` seconds: 1.0 keeps every core busy.
pub fn core_utilisation(cpu_at_start: Option<f64>, wall: f64) -> f64 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    match (cpu_at_start, process_cpu_seconds()) {
        (Some(start), Some(now)) => (now - start).max(0.0) / (wall * cores).max(1e-9),
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_machine_has_memory() {
        let bytes = super::memory_bytes().expect("Linux reports its memory");
        // More than 64 MiB and less than 64 TiB: a reading, not a unit slip.
        assert!((64 << 20..64 << 40).contains(&bytes), "{bytes}");
    }

    #[test]
    fn cpu_time_grows_with_work_done() {
        // A field that does not count this process's CPU (its start time, a fault count)
        // would not grow by 0.2 s while one thread spins, on however loaded a machine.
        let before = super::process_cpu_seconds().expect("/proc/self/stat on Linux");
        let started = std::time::Instant::now();
        let mut x = 0u64;
        let mut after = before;
        while after - before < 0.2 && started.elapsed().as_secs() < 60 {
            for _ in 0..1_000_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            after = super::process_cpu_seconds().unwrap();
        }
        assert!(
            after - before >= 0.2,
            "{before} -> {after} in 60 s of spinning"
        );
        // And not a faster clock: the process cannot use more CPU than wall time on every
        // core (other test threads spin too), give or take a tick.
        let wall = started.elapsed().as_secs_f64();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        assert!(
            after - before <= cores * wall + 0.02,
            "{} CPU s in {wall} s on {cores} cores",
            after - before
        );
    }
}
