//! Scenario `replicas`: kube-pulse in one process against 1, 2 and 3
//! replicas sharing one NATS JetStream stream (docs/SCALE-OUT.md), on the
//! same simulated member. For each: the change-to-delivery latency with
//! one SSE subscriber per replica (what the broker adds), then the SSE
//! fan-out rate sweep with the subscribers spread over the replicas
//! (deliveries per second). Rounds alternate the modes so that each sees
//! the machine's load alike.

use std::path::Path;

use serde::Serialize;

use crate::scenarios::{self, Crowd, Plan, Step, Sweep};
use crate::targets::Target;

/// One mode in one round.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ReplicaRun {
    pub(crate) round: usize,
    /// 0 for one process without a broker; else replicas over NATS.
    pub(crate) replicas: usize,
    /// One step per `plan.replica_latency_rates`, one subscriber per replica.
    pub(crate) latency: Vec<Step>,
    pub(crate) fanout: Option<Sweep>,
    pub(crate) error: Option<String>,
}

impl ReplicaRun {
    /// How the mode reads in a table.
    pub(crate) fn mode(&self) -> String {
        match self.replicas {
            0 => "one process, no broker".into(),
            1 => "1 replica + NATS".into(),
            n => format!("{n} replicas + NATS"),
        }
    }
}

/// Every round of every mode.
pub(crate) async fn replicas(bin: &Path, plan: &Plan) -> Vec<ReplicaRun> {
    let mut runs = Vec::new();
    for round in 1..=plan.replica_rounds {
        for replicas in std::iter::once(0).chain(plan.replica_counts.iter().copied()) {
            let mut run = ReplicaRun {
                round,
                replicas,
                latency: Vec::new(),
                fanout: None,
                error: None,
            };
            eprintln!("replicas: round {round}, {}", run.mode());
            let started = match replicas {
                0 => Target::kube_pulse(bin, 1).await,
                n => Target::kube_pulse_replicas(bin, n).await,
            };
            let target = match started {
                Ok(t) => t,
                Err(e) => {
                    run.error = Some(e.to_string());
                    runs.push(run);
                    continue;
                }
            };
            if let Err(e) = latency(&target, replicas.max(1), plan, &mut run.latency).await {
                run.error = Some(e.to_string());
            }
            run.fanout =
                Some(scenarios::sweep(&target, "sse", plan.replica_subscribers, plan).await);
            target.stop();
            runs.push(run);
        }
    }
    runs
}

/// `listeners` subscribers, one on each, and one step per latency rate.
async fn latency(
    target: &Target,
    listeners: usize,
    plan: &Plan,
    steps: &mut Vec<Step>,
) -> anyhow::Result<()> {
    let crowd = Crowd::connect(|i| target.sse(i, false), listeners, 0).await?;
    scenarios::warm_up(target, plan).await?;
    let measured = async {
        for &rate in &plan.replica_latency_rates {
            let step = scenarios::step(
                target,
                &crowd,
                0..listeners,
                rate,
                plan.latency_step,
                |_| listeners as u64,
            )
            .await?;
            eprintln!(
                "  {listeners} subscriber(s) at {rate}/s: p50 {:.2} ms, p99 {:.2} ms, loss {}",
                step.p50_ms, step.p99_ms, step.loss
            );
            steps.push(step);
        }
        anyhow::Ok(())
    }
    .await;
    crowd.close().await;
    measured
}
