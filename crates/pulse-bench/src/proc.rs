//! Memory and CPU of process trees, from `/proc`.

use std::collections::HashMap;

/// Clock ticks per second of `/proc/*/stat` times (USER_HZ, 100 on Linux).
const TICKS: f64 = 100.0;

fn stat(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields start after its closing paren.
    let rest = &text[text.rfind(')')? + 2..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// `roots` and all their descendants.
pub(crate) fn tree(roots: &[u32]) -> Vec<u32> {
    let mut parents: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if let Some(fields) = stat(pid)
                && let Some(ppid) = fields.get(1).and_then(|p| p.parse::<u32>().ok())
            {
                parents.entry(ppid).or_default().push(pid);
            }
        }
    }
    let mut out = roots.to_vec();
    let mut i = 0;
    while i < out.len() {
        if let Some(children) = parents.get(&out[i]) {
            out.extend(children);
        }
        i += 1;
    }
    out
}

/// The value of a `Field:   N kB` line of a `/proc` file's `text`, in bytes.
fn kb_field(text: &str, field: &str) -> Option<u64> {
    let kb = text
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()?;
    Some(kb * 1024)
}

/// The sum of one `/proc/{pid}/status` field over the processes, in bytes.
fn status_kb(pids: &[u32], field: &str) -> u64 {
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|s| kb_field(&s, field))
        .sum()
}

/// Resident memory of the processes, in bytes.
pub(crate) fn rss(pids: &[u32]) -> u64 {
    status_kb(pids, "VmRSS:")
}

/// Peak resident memory of the processes (each one's `VmHWM`), in bytes.
pub(crate) fn peak_rss(pids: &[u32]) -> u64 {
    status_kb(pids, "VmHWM:")
}

/// CPU seconds (user + system) the processes used so far.
pub(crate) fn cpu_seconds(pids: &[u32]) -> f64 {
    pids.iter()
        .filter_map(|pid| stat(*pid))
        .map(|f| {
            let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            // utime and stime: fields 14 and 15, here 11 and 12 (after pid and comm).
            (t(11) + t(12)) / TICKS
        })
        .sum()
}

/// One field of `/proc/meminfo` (`MemTotal:`, `MemAvailable:`), in bytes;
/// None where it cannot be read.
pub(crate) fn meminfo(field: &str) -> Option<u64> {
    kb_field(&std::fs::read_to_string("/proc/meminfo").ok()?, field)
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_memory_and_cpu() {
        let me = std::process::id();
        let rss = super::rss(&[me]);
        assert!(rss > 1024 * 1024);
        // The peak read after the RSS covers it (read the other way round,
        // another test thread's allocation in between can overtake it).
        assert!(super::peak_rss(&[me]) >= rss);
        let spin: u64 = (0..5_000_000u64).fold(0, |a, b| a.wrapping_add(b * b));
        assert!(spin > 0);
        assert!(super::cpu_seconds(&[me]) > 0.0);
        assert!(super::tree(&[me]).contains(&me));
    }

    #[test]
    fn a_field_in_kb_is_read_in_bytes() {
        let text = "MemTotal:       24000000 kB\nMemFree:  5 kB\nVmRSS:\tx kB\n";
        assert_eq!(super::kb_field(text, "MemFree:"), Some(5 * 1024));
        assert_eq!(super::kb_field(text, "VmRSS:"), None, "not a number");
        assert_eq!(super::kb_field(text, "VmHWM:"), None, "absent");
        let total = super::meminfo("MemTotal:").expect("Linux has /proc/meminfo");
        assert!(super::meminfo("MemAvailable:").is_some_and(|a| a <= total));
    }
}
