//! Results: JSON for machines, a markdown table per scenario for
//! docs/BENCHMARKS.md, and an SVG plot of latency against subscribers.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::podwatch::PodFleet;
use crate::registry::{self, RegistryMemory};
use crate::scenarios::{Diff, Idle, InitialSync, Plan, Slow, Sweep};
use crate::targets::Kind;

#[derive(Serialize)]
pub(crate) struct Results {
    pub(crate) machine: Machine,
    pub(crate) plan: Plan,
    pub(crate) skipped: Vec<String>,
    pub(crate) fanout: Vec<Sweep>,
    pub(crate) ws: Vec<Sweep>,
    pub(crate) idle: Vec<Idle>,
    pub(crate) slow: Vec<Slow>,
    pub(crate) narrow: Option<Sweep>,
    pub(crate) diff: Option<Diff>,
    pub(crate) initial_sync: Option<InitialSync>,
    pub(crate) pod_watch: Option<PodFleet>,
    pub(crate) registry: Option<RegistryMemory>,
}

#[derive(Serialize)]
pub(crate) struct Machine {
    pub(crate) cpus: usize,
    pub(crate) cpu_model: String,
    pub(crate) memory_gb: f64,
    pub(crate) kernel: String,
    pub(crate) fd_limit: u64,
    pub(crate) date: String,
}

fn machine(fd_limit: u64) -> Machine {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let memory_kb: f64 = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    Machine {
        cpus: std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(1),
        cpu_model: cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .unwrap_or("unknown")
            .trim()
            .to_string(),
        memory_gb: memory_kb / 1024.0 / 1024.0,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        fd_limit,
        date: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "—".into())
}

impl Results {
    pub(crate) fn new(plan: &Plan, fd_limit: u64, skipped: Vec<String>) -> Self {
        Self {
            machine: machine(fd_limit),
            plan: plan.clone(),
            skipped,
            fanout: Vec::new(),
            ws: Vec::new(),
            idle: Vec::new(),
            slow: Vec::new(),
            narrow: None,
            diff: None,
            initial_sync: None,
            pod_watch: None,
            registry: None,
        }
    }

    pub(crate) fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("results.json"), serde_json::to_vec_pretty(self)?)?;
        std::fs::write(dir.join("results.md"), self.markdown())?;
        std::fs::write(dir.join("latency.svg"), self.svg())?;
        Ok(())
    }

    fn sweep_table(out: &mut String, sweeps: &[Sweep]) {
        out.push_str("| server | subscribers | sustained rate, p99 ≤ 50 ms (changes/s) | deliveries/s there | highest lossless rate (changes/s) | deliveries/s there | p99 there (ms) | server CPU there | load generator CPU there | where it stopped |\n|---|---|---|---|---|---|---|---|---|---|\n");
        for s in sweeps {
            let there = s.steps.iter().find(|st| Some(st.rate) == s.lossless_rate);
            let stopped = s
                .steps
                .last()
                .filter(|st| Some(st.rate) != s.lossless_rate)
                .map(|st| {
                    format!(
                        "{}/s (achieved {:.0}/s): p99 {:.1} ms, loss {}",
                        st.rate, st.achieved_rate, st.p99_ms, st.loss
                    )
                })
                .or_else(|| s.error.clone())
                .unwrap_or_else(|| "top of the sweep".into());
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                s.server.name(),
                s.subscribers,
                opt(s.sustained_rate),
                opt(s.sustained_deliveries_per_sec.map(|d| format!("{d:.0}"))),
                opt(s.lossless_rate),
                opt(s.lossless_deliveries_per_sec.map(|d| format!("{d:.0}"))),
                opt(s.lossless_p99_ms.map(|p| format!("{p:.1}"))),
                opt(there.map(|t| format!("{:.0}%", t.server_cpu_pct))),
                opt(there.map(|t| format!("{:.0}%", t.bench_cpu_pct))),
                stopped
            );
        }
    }

    pub(crate) fn markdown(&self) -> String {
        let mut out = String::new();
        let m = &self.machine;
        let _ = writeln!(
            out,
            "Machine: {} CPUs ({}), {:.0} GiB, Linux {}, fd limit {}; run {}.\n",
            m.cpus, m.cpu_model, m.memory_gb, m.kernel, m.fd_limit, m.date
        );
        if !self.skipped.is_empty() {
            let _ = writeln!(out, "Not run: {}.\n", self.skipped.join(", "));
        }
        out.push_str("### 1. SSE fan-out on one topic\n\n");
        Self::sweep_table(&mut out, &self.fanout);
        out.push_str("\n### 2. WebSocket fan-out\n\n");
        Self::sweep_table(&mut out, &self.ws);
        out.push_str("\n### 3. Idle connections\n\n| server | transport | subscribers | RSS before (MB) | RSS after (MB) | per connection (KiB) |\n|---|---|---|---|---|---|\n");
        for i in &self.idle {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.1} | {:.1} | {:.1}{} |",
                i.server.name(),
                i.transport,
                i.subscribers,
                i.rss_before_mb,
                i.rss_after_mb,
                i.per_connection_kib,
                i.error
                    .as_ref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            );
        }
        out.push_str("\n### 4. Slow readers (10 % stop reading)\n\n| server | subscribers | stalled | rate | healthy p99 per window (ms) | healthy loss per window | server RSS per window (MB) |\n|---|---|---|---|---|---|---|\n");
        for s in &self.slow {
            let join = |f: &dyn Fn(&crate::scenarios::Step) -> String| {
                s.windows.iter().map(f).collect::<Vec<_>>().join(" → ")
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {}/s | {} | {} | {}{} |",
                s.server.name(),
                s.subscribers,
                s.stalled,
                s.rate,
                join(&|w| format!("{:.1}", w.p99_ms)),
                join(&|w| w.loss.to_string()),
                join(&|w| format!("{:.0}", w.server_rss_mb)),
                s.error
                    .as_ref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            );
        }
        out.push_str(
            "\n### 5. Narrow subscriptions (kube-pulse: each subscriber on its own app)\n\n",
        );
        if let Some(n) = &self.narrow {
            out.push_str("| rate (changes/s) | deliveries/s | p50 (ms) | p99 (ms) | loss | server CPU |\n|---|---|---|---|---|---|\n");
            for st in &n.steps {
                let _ = writeln!(
                    out,
                    "| {} | {:.0} | {:.1} | {:.1} | {} | {:.0}% |",
                    st.rate,
                    st.deliveries_per_sec,
                    st.p50_ms,
                    st.p99_ms,
                    st.loss,
                    st.server_cpu_pct
                );
            }
            if let Some(e) = &n.error {
                let _ = writeln!(out, "\nStopped: {e}");
            }
        }
        out.push_str("\n### 6. Upstream load (kube-pulse: simulator requests as subscribers join)\n\n| subscribers | list requests | watch requests | open watches |\n|---|---|---|---|\n");
        for i in self
            .idle
            .iter()
            .filter(|i| i.server == Kind::KubePulse && i.transport == "SSE")
        {
            if let Some(u) = &i.upstream {
                for (n, list, watch, open) in &u.points {
                    let _ = writeln!(out, "| {n} | {list} | {watch} | {open} |");
                }
            }
        }
        out.push_str("\n### 7. Diff size (the demo scenario)\n\n");
        if let Some(d) = &self.diff {
            let _ = writeln!(
                out,
                "{:.0} s of the demo scenario, one round of its script every {:.0} s.\n\n| window | changes | merge-patch bytes | full-document bytes | patch / full |\n|---|---|---|---|---|",
                d.seconds, d.round_seconds
            );
            for w in &d.windows {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {:.1} % |",
                    w.label, w.changes, w.patch_bytes, w.full_bytes, w.ratio_pct
                );
            }
            let total: u64 = d.patch_bytes_by_member.iter().map(|(_, b)| b).sum();
            let top: Vec<String> = d
                .patch_bytes_by_member
                .iter()
                .take(6)
                .map(|(k, b)| format!("`{k}` {:.0} %", *b as f64 / total.max(1) as f64 * 100.0))
                .collect();
            let _ = writeln!(out, "\nPatch bytes by member: {}.", top.join(", "));
        }
        out.push_str("\n### 8. Initial sync\n\n");
        if let Some(s) = &self.initial_sync {
            let _ = writeln!(
                out,
                "| clusters | objects per cluster | seconds until all Healthy and Syncing | process RSS, simulators included (MB) |\n|---|---|---|---|\n| {} | {} | {:.2} | {:.0} |",
                s.clusters, s.objects_per_cluster, s.seconds, s.server_rss_mb
            );
        }
        out.push_str("\n### 9. The pod watch over a fleet\n\n");
        if let Some(f) = &self.pod_watch {
            Self::pod_watch_table(&mut out, f);
        }
        out.push_str("\n### 11. Memory per watched object\n\n");
        if let Some(r) = &self.registry {
            Self::registry_table(&mut out, r);
        }
        out
    }

    fn registry_table(out: &mut String, r: &RegistryMemory) {
        let _ = writeln!(
            out,
            "One member, ConfigMaps of {} bytes of data in a sync registry, a fresh gateway per size.\n\n| ConfigMaps | initial sync (s) | gateway CPU in it (s) | RSS synced (MB) | above the empty run, per object (bytes) | peak RSS (MB) | RSS after the registry's removal (MB) | RSS with the registry back (MB) |\n|---|---|---|---|---|---|---|---|",
            r.object_bytes
        );
        for run in &r.runs {
            let _ = writeln!(
                out,
                "| {} | {:.1} | {:.1} | {:.1} | {} | {:.1} | {:.1} | {:.1} |{}",
                run.objects,
                run.sync_seconds,
                run.sync_cpu_seconds,
                run.rss_mb,
                registry::above_empty(&r.runs, run)
                    .map(|b| format!("{b:.0}"))
                    .unwrap_or_else(|| "—".into()),
                run.peak_rss_mb,
                run.removed_rss_mb,
                run.readded_rss_mb,
                run.error
                    .as_ref()
                    .map(|e| format!(" stopped: {e}"))
                    .unwrap_or_default()
            );
        }
        if let Some(bytes) = r.bytes_per_object {
            let _ = writeln!(
                out,
                "\nRSS per watched object (least-squares slope over the non-zero sizes): {bytes:.0} bytes."
            );
        }
    }

    fn pod_watch_table(out: &mut String, f: &PodFleet) {
        let _ = writeln!(
            out,
            "{} members × {} pods ({} pods), created by the simulators in {:.0} s.\n\n| pod watch | objects held | initial sync (s) | CPU in it (s) | RSS synced (MB) | steady window (s) | pods churned | CPU in it (s) | % of one core | simulators' CPU in it (s) | RSS after (MB) | peak RSS (MB) |\n|---|---|---|---|---|---|---|---|---|---|---|---|",
            f.members,
            f.pods_per_member,
            f.members * f.pods_per_member,
            f.fleet_ready_seconds
        );
        for r in &f.runs {
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} | {:.1} | {:.0} | {:.0} | {} | {:.1} | {:.1} % | {:.1} | {:.0} | {:.0} |{}",
                if r.pod_watch { "on" } else { "off" },
                r.objects,
                r.sync_seconds,
                r.sync_cpu_seconds,
                r.synced_rss_mb,
                r.steady_seconds,
                r.pods_churned,
                r.steady_cpu_seconds,
                r.steady_cpu_seconds / r.steady_seconds.max(0.001) * 100.0,
                r.simulators_cpu_seconds,
                r.steady_rss_mb,
                r.peak_rss_mb,
                r.error
                    .as_ref()
                    .map(|e| format!(" stopped: {e}"))
                    .unwrap_or_default()
            );
        }
    }

    /// p99 latency at each server's sustained rate against subscribers.
    pub(crate) fn svg(&self) -> String {
        let (w, h, pad) = (640.0, 360.0, 56.0);
        let colours = [
            (Kind::KubePulse, "#2b6cb0"),
            (Kind::Pushpin, "#c05621"),
            (Kind::Nchan, "#2f855a"),
            (Kind::Raw, "#718096"),
        ];
        let points = |kind: Kind| -> Vec<(f64, f64)> {
            self.fanout
                .iter()
                .filter(|s| s.server == kind)
                .filter_map(|s| {
                    let st = s
                        .steps
                        .iter()
                        .find(|st| Some(st.rate) == s.sustained_rate)?;
                    Some((s.subscribers as f64, st.p99_ms))
                })
                .collect()
        };
        let max_x = self.fanout.iter().map(|s| s.subscribers).max().unwrap_or(1) as f64;
        let max_y = colours
            .iter()
            .flat_map(|(k, _)| points(*k))
            .map(|(_, y)| y)
            .fold(1.0f64, f64::max)
            * 1.15;
        let x = |v: f64| pad + v / max_x * (w - 2.0 * pad);
        let y = |v: f64| h - pad - v / max_y * (h - 2.0 * pad);
        let mut svg = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="20" text-anchor="middle" font-size="14">p99 latency by subscribers at 5 changes/s (SSE, one topic)</text>
<line x1="{pad}" y1="{}" x2="{}" y2="{}" stroke="black"/>
<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{}" stroke="black"/>
<text x="{}" y="{}" text-anchor="middle">subscribers</text>
<text x="14" y="{}" transform="rotate(-90 14 {})" text-anchor="middle">p99 (ms)</text>
"#,
            w / 2.0,
            h - pad,
            w - pad,
            h - pad,
            h - pad,
            w / 2.0,
            h - 12.0,
            h / 2.0,
            h / 2.0
        );
        for s in self
            .fanout
            .iter()
            .map(|s| s.subscribers)
            .collect::<std::collections::BTreeSet<_>>()
        {
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{s}</text>"#,
                x(s as f64),
                h - pad + 16.0
            );
        }
        for i in 0..=4 {
            let v = max_y * f64::from(i) / 4.0;
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{:.1}" text-anchor="end">{v:.1}</text>"#,
                pad - 6.0,
                y(v) + 4.0
            );
        }
        for (i, (kind, colour)) in colours.iter().enumerate() {
            let pts = points(*kind);
            if pts.is_empty() {
                continue;
            }
            let line: Vec<String> = pts
                .iter()
                .map(|(a, b)| format!("{:.1},{:.1}", x(*a), y(*b)))
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
                line.join(" ")
            );
            for (a, b) in &pts {
                let _ = writeln!(
                    svg,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"/>"#,
                    x(*a),
                    y(*b)
                );
            }
            let ly = pad + 16.0 * i as f64;
            let _ = writeln!(
                svg,
                r#"<rect x="{}" y="{:.1}" width="10" height="10" fill="{colour}"/><text x="{}" y="{:.1}">{}</text>"#,
                w - pad - 110.0,
                ly,
                w - pad - 95.0,
                ly + 9.0,
                kind.name()
            );
        }
        svg.push_str("</svg>\n");
        svg
    }
}
