//! Results: JSON for machines, a markdown table per scenario (the rounds
//! in docs/benchmarks/ are made of them), and SVG line plots: latency against subscribers and
//! the cost curves (RSS against connections and watched objects, sync time
//! against watched objects, CPU per delivery against subscribers).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::agents::PushMembers;
use crate::compression::Compression;
use crate::curves::{ConnectionCurve, CpuCurve};
use crate::latency::LatencyRound;
use crate::members::MemberFleet;
use crate::objects::{self, ObjectsCurve};
use crate::plot::{Axis, Plot, Series};
use crate::podcurve::{self, PodCurve};
use crate::podwatch::PodFleet;
use crate::queries::LiveQueries;
use crate::registry::{self, RegistryMemory};
use crate::replicas::ReplicaRun;
use crate::scenarios::{Diff, Idle, InitialSync, Plan, Slow, Step, Sweep};
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
    pub(crate) connections: Vec<ConnectionCurve>,
    pub(crate) objects: Option<ObjectsCurve>,
    pub(crate) pod_curve: Option<PodCurve>,
    pub(crate) cpu: Vec<CpuCurve>,
    pub(crate) latency: Vec<LatencyRound>,
    pub(crate) replicas: Vec<ReplicaRun>,
    pub(crate) members: Option<MemberFleet>,
    pub(crate) agents: Option<PushMembers>,
    pub(crate) queries: Option<LiveQueries>,
    pub(crate) compression: Option<Compression>,
}

/// Each server's colour in every plot.
fn colour(kind: Kind) -> &'static str {
    match kind {
        Kind::KubePulse => "#2b6cb0",
        Kind::Pushpin => "#c05621",
        Kind::Nchan => "#2f855a",
        Kind::Raw => "#718096",
        Kind::RawCopy => "#a0aec0",
    }
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
    let memory = crate::proc::meminfo("MemTotal:").unwrap_or(0) as f64;
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
        memory_gb: memory / 1024.0 / 1024.0 / 1024.0,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        fd_limit,
        date: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
    }
}

/// Where a rate sweep stopped: its first lossy step, its error, or the top.
fn stopped(s: &Sweep) -> String {
    s.steps
        .last()
        .filter(|st| Some(st.rate) != s.lossless_rate)
        .map(|st| {
            format!(
                "{}/s (achieved {:.0}/s): p99 {:.1} ms, loss {}",
                st.rate, st.achieved_rate, st.p99_ms, st.loss
            )
        })
        .or_else(|| s.error.clone())
        .unwrap_or_else(|| "top of the sweep".into())
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
            connections: Vec::new(),
            objects: None,
            pod_curve: None,
            cpu: Vec::new(),
            latency: Vec::new(),
            replicas: Vec::new(),
            members: None,
            agents: None,
            queries: None,
            compression: None,
        }
    }

    pub(crate) fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("results.json"), serde_json::to_vec_pretty(self)?)?;
        std::fs::write(dir.join("results.md"), self.markdown())?;
        std::fs::write(dir.join("latency.svg"), self.svg())?;
        for (name, svg) in self.curve_plots() {
            std::fs::write(dir.join(name), svg)?;
        }
        Ok(())
    }

    fn sweep_table(out: &mut String, sweeps: &[Sweep]) {
        out.push_str("| server | subscribers | sustained rate, p99 ≤ 50 ms (changes/s) | deliveries/s there | highest lossless rate (changes/s) | deliveries/s there | p99 there (ms) | server CPU there | load generator CPU there | where it stopped |\n|---|---|---|---|---|---|---|---|---|---|\n");
        for s in sweeps {
            let there = s.steps.iter().find(|st| Some(st.rate) == s.lossless_rate);
            let stopped = stopped(s);
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
        self.curve_tables(&mut out);
        if let Some(f) = &self.members {
            Self::members_table(&mut out, f);
        }
        if let Some(a) = &self.agents {
            Self::agents_table(&mut out, a);
        }
        if let Some(q) = &self.queries {
            Self::queries_table(&mut out, q);
        }
        if let Some(c) = &self.compression {
            c.markdown(&mut out);
        }
        out
    }

    fn queries_table(out: &mut String, q: &LiveQueries) {
        let _ = writeln!(
            out,
            "\n### 22. Live queries\n\n{} app documents, {} changes a second. One subscriber of the whole pattern (`apps/**`), filtering on its own side, received {:.0} bytes ({:.0} frames) a minute; the gateway spent {:.1} µs a change serving it.\n\n| queries | reached a change (avg) | subscribed in (s) | changes | gateway CPU (s) | µs per change | bytes per query a minute | frames per query a minute | change→frame p50 (ms) | p99 (ms) | max (ms) | samples |\n|---|---|---|---|---|---|---|---|---|---|---|---|",
            q.docs,
            q.rate,
            q.pattern_bytes_per_minute,
            q.pattern_frames_per_minute,
            q.pattern_server_us_per_change,
        );
        for w in &q.windows {
            let _ = writeln!(
                out,
                "| {} | {:.1} | {:.1} | {} | {:.2} | {:.1} | {:.0} | {:.1} | {:.2} | {:.2} | {:.2} | {} |",
                w.queries,
                w.reached_per_change,
                w.subscribed_seconds,
                w.changes,
                w.server_cpu_seconds,
                w.server_us_per_change,
                w.bytes_per_query_minute,
                w.frames_per_query_minute,
                w.p50_ms,
                w.p99_ms,
                w.max_ms,
                w.latency_samples,
            );
        }
    }

    fn agents_table(out: &mut String, a: &PushMembers) {
        let _ = writeln!(
            out,
            "\n### 21. Push members (`kube-pulse agent`)\n\nTwo members of {} Deployments × {} pods ({} pods each), created by the simulators in {:.0} s; one pushed by its agent (heartbeat every {} s), one pulled by the same hub. The hub served every app of the pushed member {:.1} s after the agent started; at the end the agent held {} objects in {} watches. The churn window deleted and created {} pods.\n\n| window | seconds | agent CPU (s) | agent cores | agent RSS / peak (MB) | heartbeats/s | heartbeat bytes/s | bytes per heartbeat | docs/s | doc bytes/s | hub CPU (s) | nats-server CPU (s) | load generator CPU (s) | hub RSS (MB) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            a.deployments,
            a.pods_per_member / a.deployments.max(1),
            a.pods_per_member,
            a.members_ready_seconds,
            a.heartbeat_seconds,
            a.agent_ready_seconds,
            a.agent_objects,
            a.agent_watches,
            a.pods_churned,
        );
        for w in &a.windows {
            let per_s = |n: u64| n as f64 / w.seconds.max(0.001);
            let _ = writeln!(
                out,
                "| {} | {:.1} | {:.2} | {:.4} | {:.1} / {:.1} | {:.2} | {:.1} | {:.0} | {:.2} | {:.0} | {:.2} | {:.2} | {:.2} | {:.1} |",
                w.label,
                w.seconds,
                w.agent_cpu_seconds,
                w.agent_cores,
                w.agent_rss_mb,
                w.agent_peak_rss_mb,
                per_s(w.heartbeats),
                per_s(w.heartbeat_bytes),
                w.heartbeat_bytes as f64 / w.heartbeats.max(1) as f64,
                per_s(w.docs),
                per_s(w.doc_bytes),
                w.hub_cpu_seconds,
                w.nats_cpu_seconds,
                w.bench_cpu_seconds,
                w.hub_rss_mb,
            );
        }
        out.push_str("\n| member | changes | delivered | p50 (ms) | p99 (ms) | max (ms) |\n|---|---|---|---|---|---|\n");
        for l in &a.latency {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.2} | {:.2} | {:.2} |",
                l.mode, l.changes, l.delivered, l.p50_ms, l.p99_ms, l.max_ms
            );
        }
        if let Some(e) = &a.error {
            let _ = writeln!(out, "\nStopped: {e}");
        }
    }

    fn members_table(out: &mut String, f: &MemberFleet) {
        let seconds =
            |s: Option<f64>| s.map_or("not within the window".into(), |s| format!("{s:.0} s"));
        out.push_str(&format!(
            "\n### 20. A fleet of Karpor members\n\n{} Cluster objects created in one burst, {} of them reaching simulated members, the rest a closed loopback port; {:.0} s measured.\n\n| all members past Initializing | live members Healthy | /livez p99 / max (ms) | /livez over 50 ms | RSS empty → end (MB) | peak RSS (MB) | per member (KiB) | log lines (per s) | gateway CPU (s) | error |\n|---|---|---|---|---|---|---|---|---|---|\n| {} | {} | {:.1} / {:.1} | {} of {} | {:.0} → {:.0} | {:.0} | {:.0} | {} ({:.1}) | {:.0} | {} |\n",
            f.members,
            f.live,
            f.window_seconds,
            seconds(f.all_started_seconds),
            seconds(f.live_healthy_seconds),
            f.livez_p99_ms,
            f.livez_max_ms,
            f.livez_over_50ms,
            f.livez_asked,
            f.rss_empty_mb,
            f.rss_end_mb,
            f.peak_rss_mb,
            f.kib_per_member,
            f.log_lines,
            f.log_lines_per_second,
            f.cpu_seconds,
            f.error.as_deref().unwrap_or(""),
        ));
    }

    fn curve_tables(&self, out: &mut String) {
        out.push_str("\n### 12. RSS against idle connections\n\n| server | transport | RSS with none (MB) | connections → RSS (MB), per connection (KiB) | stopped |\n|---|---|---|---|---|\n");
        for c in &self.connections {
            let points: Vec<String> = c
                .points
                .iter()
                .map(|p| {
                    format!(
                        "{}: {:.1}, {:.1}",
                        p.connections, p.rss_mb, p.per_connection_kib
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} | {} | {} |",
                c.server.name(),
                c.transport,
                c.rss_before_mb,
                points.join(" · "),
                c.limited.as_deref().unwrap_or("—")
            );
        }
        out.push_str("\n### 13. RSS and initial sync against watched objects\n\n");
        if let Some(o) = &self.objects {
            let _ = writeln!(
                out,
                "ConfigMaps of {} bytes of data, spread evenly over the members; a fresh gateway per point.\n\n| members | ConfigMaps | simulators' fill (s) | initial sync (s) | gateway CPU in it (s) | RSS synced (MB) | peak RSS (MB) |\n|---|---|---|---|---|---|---|",
                o.object_bytes
            );
            for p in &o.points {
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.1} | {:.2} | {:.2} | {:.1} | {:.1} |{}",
                    p.members,
                    p.objects,
                    p.fill_seconds,
                    p.sync_seconds,
                    p.sync_cpu_seconds,
                    p.rss_mb,
                    p.peak_rss_mb,
                    objects::stopped_note("", p.error.as_deref())
                );
            }
        }
        if let Some(c) = &self.pod_curve {
            out.push_str("\n### 25. RSS against pods held\n\n");
            podcurve::table(out, c);
        }
        out.push_str("\n### 14. CPU per delivery against subscribers (SSE, one topic)\n\n| server | rate (changes/s) | subscribers | achieved rate | delivered | loss | server CPU (s) | server CPU per delivery (µs) | load generator CPU per delivery (µs) | p99 (ms) |\n|---|---|---|---|---|---|---|---|---|---|\n");
        for c in &self.cpu {
            for p in &c.points {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {:.1} | {} | {} | {:.2} | {:.2} | {:.2} | {:.1} |",
                    c.server.name(),
                    c.rate,
                    p.subscribers,
                    p.step.achieved_rate,
                    p.step.delivered,
                    p.step.loss,
                    p.step.server_cpu_seconds,
                    p.server_us_per_delivery,
                    p.bench_us_per_delivery,
                    p.step.p99_ms
                );
            }
            if let Some(e) = &c.error {
                let _ = writeln!(out, "| {} | stopped: {e} ||||||||| ", c.server.name());
            }
        }
        out.push_str("\n### 15. Latency at 1 000 subscribers (and at 1), kube-pulse, Nchan and the raw baseline\n\n");
        if crate::pin::pinned() {
            out.push_str(
                "Servers pinned to core 0, the benchmark to the other cores (`--pin`).\n\n",
            );
        }
        out.push_str("| round | server | transport | subscribers | rate (changes/s) | achieved | p50 (ms) | p99 (ms) | max (ms) | loss | server CPU | benchmark CPU |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for r in &self.latency {
            for st in &r.steps {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {:.1} | {:.2} | {:.2} | {:.1} | {} | {:.0}% | {:.0}% |",
                    r.round,
                    r.server.name(),
                    r.transport,
                    r.subscribers,
                    st.rate,
                    st.achieved_rate,
                    st.p50_ms,
                    st.p99_ms,
                    st.max_ms,
                    st.loss,
                    st.server_cpu_pct,
                    st.bench_cpu_pct
                );
            }
            if let Some(e) = &r.error {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | stopped: {e} ||||||||",
                    r.round,
                    r.server.name(),
                    r.transport,
                    r.subscribers
                );
            }
        }
        crate::latency::comparisons(out, &self.latency);
        if !self.replicas.is_empty() {
            Self::replicas_table(out, &self.replicas);
        }
    }

    fn replicas_table(out: &mut String, runs: &[ReplicaRun]) {
        out.push_str("\n### 17. Replicas over NATS against one process\n\n| round | mode | latency, one subscriber per replica: rate (changes/s) | p50 (ms) | p99 (ms) | fan-out subscribers | highest lossless rate (changes/s) | deliveries/s there | p50 / p99 there (ms) | CPU there (all processes) | where it stopped |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
        for r in runs {
            let latency =
                |f: fn(&Step) -> String| r.latency.iter().map(f).collect::<Vec<_>>().join(" / ");
            let (subscribers, rate, deliveries, there, cpu, stopped) = match &r.fanout {
                Some(s) => {
                    let there = s.steps.iter().find(|st| Some(st.rate) == s.lossless_rate);
                    let stopped = stopped(s);
                    (
                        s.subscribers.to_string(),
                        opt(s.lossless_rate),
                        opt(s.lossless_deliveries_per_sec.map(|d| format!("{d:.0}"))),
                        opt(there.map(|t| format!("{:.1} / {:.1}", t.p50_ms, t.p99_ms))),
                        opt(there.map(|t| format!("{:.0}%", t.server_cpu_pct))),
                        stopped,
                    )
                }
                None => Default::default(),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.round,
                r.mode(),
                latency(|s| s.rate.to_string()),
                latency(|s| format!("{:.2}", s.p50_ms)),
                latency(|s| format!("{:.2}", s.p99_ms)),
                subscribers,
                rate,
                deliveries,
                there,
                cpu,
                r.error
                    .as_deref()
                    .map_or(stopped, |e| format!("error: {e}")),
            );
        }
    }

    /// The cost curves' plots, by file name (only those with points).
    pub(crate) fn curve_plots(&self) -> Vec<(&'static str, String)> {
        let mut plots = Vec::new();
        let mut series = Vec::new();
        for c in &self.connections {
            series.push(Series {
                name: format!("{} {}", c.server.name(), c.transport),
                colour: colour(c.server),
                dashed: c.transport == "WebSocket",
                points: c
                    .points
                    .iter()
                    .map(|p| (p.connections as f64, p.rss_mb))
                    .collect(),
            });
        }
        plots.push((
            "connections.svg",
            Plot {
                title: "Server RSS against idle connections".into(),
                x: Axis::linear("idle connections"),
                y: Axis::linear("RSS (MB)"),
                series,
            },
        ));
        if let Some(o) = &self.objects {
            let by_members = |f: &dyn Fn(&crate::objects::ObjectsPoint) -> f64| {
                let mut members: Vec<usize> = o.points.iter().map(|p| p.members).collect();
                members.dedup();
                let palette = ["#2b6cb0", "#c05621", "#2f855a", "#718096"];
                members
                    .iter()
                    .enumerate()
                    .map(|(i, m)| Series {
                        name: format!("{m} member{}", if *m == 1 { "" } else { "s" }),
                        colour: palette[i % palette.len()],
                        dashed: false,
                        points: o
                            .points
                            .iter()
                            .filter(|p| p.members == *m && p.error.is_none())
                            .map(|p| (p.objects as f64, f(p)))
                            .collect(),
                    })
                    .collect::<Vec<_>>()
            };
            plots.push((
                "objects-rss.svg",
                Plot {
                    title: "kube-pulse RSS against watched objects (metadata-only)".into(),
                    x: Axis::log("watched objects"),
                    y: Axis::linear("RSS synced (MB)"),
                    series: by_members(&|p| p.rss_mb),
                },
            ));
            plots.push((
                "objects-sync.svg",
                Plot {
                    title: "kube-pulse initial sync against watched objects".into(),
                    x: Axis::log("watched objects"),
                    y: Axis::log("initial sync (s)"),
                    series: by_members(&|p| p.sync_seconds),
                },
            ));
        }
        if let Some(c) = &self.pod_curve {
            plots.push(("pods-rss.svg", podcurve::plot(c)));
        }
        let rate = self.cpu.first().map(|c| c.rate).unwrap_or(0);
        plots.push((
            "cpu-per-delivery.svg",
            Plot {
                title: format!("Server CPU per delivery at {rate} changes/s (SSE, one topic)"),
                x: Axis::log("subscribers"),
                y: Axis::linear("CPU per delivery (µs)"),
                series: self
                    .cpu
                    .iter()
                    .map(|c| Series {
                        name: c.server.name().into(),
                        colour: colour(c.server),
                        dashed: false,
                        points: c
                            .points
                            .iter()
                            .map(|p| (p.subscribers as f64, p.server_us_per_delivery))
                            .collect(),
                    })
                    .collect(),
            },
        ));
        plots
            .into_iter()
            .filter(|(_, p)| p.series.iter().any(|s| !s.points.is_empty()))
            .map(|(name, p)| (name, p.svg()))
            .collect()
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
                objects::stopped_note("", run.error.as_deref())
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
            "{} members × {} pods ({} pods), created and started by the simulators in {:.0} s.\n\n| pod watch | initial lists | objects held | initial sync (s) | CPU in it (s) | RSS synced (MB) | simulators' RSS growth in it (MB) | pod watches, lists in it | steady window (s) | pods churned | CPU in it (s) | % of one core | simulators' CPU in it (s) | RSS after (MB) | peak RSS (MB) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            f.members,
            f.pods_per_member,
            f.members * f.pods_per_member,
            f.fleet_ready_seconds
        );
        for r in &f.runs {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.1} | {:.1} | {:.0} | {:.0} | {}, {} | {:.0} | {} | {:.1} | {:.1} % | {:.1} | {:.0} | {:.0} |{}",
                if r.pod_watch { "on" } else { "off" },
                r.initial_lists,
                r.objects,
                r.sync_seconds,
                r.sync_cpu_seconds,
                r.synced_rss_mb,
                r.simulators_rss_growth_mb,
                r.pod_requests.0,
                r.pod_requests.1,
                r.steady_seconds,
                r.pods_churned,
                r.steady_cpu_seconds,
                r.steady_cpu_seconds / r.steady_seconds.max(0.001) * 100.0,
                r.simulators_cpu_seconds,
                r.steady_rss_mb,
                r.peak_rss_mb,
                objects::stopped_note("", r.error.as_deref())
            );
        }
        if f.on_demand.is_empty() && f.on_demand_error.is_none() {
            return;
        }
        let _ = writeln!(
            out,
            "\nPods on demand (`podWatch: {{onDemand: true, lingerSeconds: 5}}`, initial state streamed), one gateway through four stages:\n\n| who looks | members whose pods are watched | open watches on the members | pod watch requests so far | stage reached in (s) | RSS (MB) |\n|---|---|---|---|---|---|"
        );
        for st in &f.on_demand {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {:.1} | {:.0} |",
                st.stage,
                st.members_watched,
                st.open_watches,
                st.pod_watches,
                st.seconds,
                st.rss_mb
            );
        }
        if let Some(e) = &f.on_demand_error {
            let _ = writeln!(out, "\nThe on-demand run stopped: {e}");
        }
    }

    /// p99 latency at each server's sustained rate against subscribers.
    pub(crate) fn svg(&self) -> String {
        let series = [Kind::KubePulse, Kind::Pushpin, Kind::Nchan, Kind::Raw]
            .into_iter()
            .map(|kind| Series {
                name: kind.name().into(),
                colour: colour(kind),
                dashed: false,
                points: self
                    .fanout
                    .iter()
                    .filter(|s| s.server == kind)
                    .filter_map(|s| {
                        let st = s
                            .steps
                            .iter()
                            .find(|st| Some(st.rate) == s.sustained_rate)?;
                        Some((s.subscribers as f64, st.p99_ms))
                    })
                    .collect(),
            })
            .collect();
        Plot {
            title: "p99 latency by subscribers at the sustained rate (SSE, one topic)".into(),
            x: Axis::linear("subscribers"),
            y: Axis::linear("p99 (ms)"),
            series,
        }
        .svg()
    }
}
