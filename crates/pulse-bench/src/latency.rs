//! The latency scenario: p50 and p99 with 1 and 1 000 subscribers, over
//! SSE and WebSocket, each server fresh per block and the servers of a
//! block back to back; and kube-pulse's p99 beside the peers'.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::load::Via;
use crate::scenarios::{self, Crowd, Plan, Step};
use crate::targets::{Kind, Target};

/// Latency at a fixed subscriber count: one server, one transport, one
/// round, its steps.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LatencyRound {
    pub(crate) server: Kind,
    /// `SSE` or `WebSocket`.
    pub(crate) transport: &'static str,
    pub(crate) round: usize,
    pub(crate) subscribers: usize,
    pub(crate) steps: Vec<Step>,
    pub(crate) error: Option<String>,
}

impl LatencyRound {
    /// A block with no steps yet, and no error.
    fn new(server: Kind, transport: &'static str, round: usize, subscribers: usize) -> Self {
        Self {
            server,
            transport,
            round,
            subscribers,
            steps: Vec::new(),
            error: None,
        }
    }
}

/// Rounds of: for each transport (SSE, WebSocket) and each of
/// `plan.latency_sizes`, every server in turn, each fresh, with a fresh
/// crowd of subscribers and one step per rate. The servers of a block run
/// back to back, so that a comparison sees the machine's load of the same
/// minute (it drifts over an hour); their order turns by one each round, so
/// that none is always first. One subscriber shows a change's path without
/// fan-out.
pub(crate) async fn latency(bin: &Path, servers: &[Kind], plan: &Plan) -> Vec<LatencyRound> {
    let mut rounds = Vec::new();
    for round in 1..=plan.latency_rounds {
        let order = turned(servers, round - 1);
        for transport in ["SSE", "WebSocket"] {
            for &n in &plan.latency_sizes {
                for &kind in &order {
                    if let Some(r) = latency_block(bin, kind, transport, round, n, plan).await {
                        rounds.push(r);
                    }
                }
            }
        }
    }
    rounds
}

/// `servers` turned left by `by` (round-robin order).
fn turned(servers: &[Kind], by: usize) -> Vec<Kind> {
    let mut order = servers.to_vec();
    if !order.is_empty() {
        let by = by % order.len();
        order.rotate_left(by);
    }
    order
}

/// One block of a latency round: a fresh `kind` server, `n` subscribers
/// over `transport`, every rate. None when the server does not serve the
/// transport.
async fn latency_block(
    bin: &Path,
    kind: Kind,
    transport: &'static str,
    round: usize,
    n: usize,
    plan: &Plan,
) -> Option<LatencyRound> {
    let target = match scenarios::start(kind, bin, 1).await {
        Ok(t) => t,
        Err(e) => {
            return Some(LatencyRound {
                error: Some(e.to_string()),
                ..LatencyRound::new(kind, transport, round, n)
            });
        }
    };
    // The same Via for every WebSocket subscriber; SSE by index.
    let ws = match transport {
        "SSE" => None,
        _ => match target.ws() {
            Some(ws) => Some(ws),
            None => {
                target.stop();
                return None;
            }
        },
    };
    eprintln!(
        "latency: round {round}, {} with {n} {transport} subscribers",
        kind.name()
    );
    let via = |i| ws.clone().unwrap_or_else(|| target.sse(i, false));
    let result = latency_round(&target, transport, via, round, n, plan).await;
    target.stop();
    Some(result)
}

async fn latency_round(
    target: &Target,
    transport: &'static str,
    via: impl Fn(usize) -> Via,
    round: usize,
    n: usize,
    plan: &Plan,
) -> LatencyRound {
    let mut result = LatencyRound::new(target.kind, transport, round, n);
    let crowd = match Crowd::connect(via, n, 0).await {
        Ok(c) => c,
        Err(e) => {
            result.error = Some(e.to_string());
            return result;
        }
    };
    if let Err(e) = scenarios::warm_up(target, plan).await {
        result.error = Some(e.to_string());
    }
    for &rate in &plan.latency_rates {
        match scenarios::step(target, &crowd, 0..n, rate, plan.latency_step, |_| n as u64).await {
            Ok(s) => {
                eprintln!(
                    "  {} {transport} n={n} {rate}/s: p50 {:.2} ms, p99 {:.2} ms, loss {}",
                    target.kind.name(),
                    s.p50_ms,
                    s.p99_ms,
                    s.loss
                );
                result.steps.push(s);
            }
            Err(e) => {
                result.error = Some(e.to_string());
                break;
            }
        }
    }
    crowd.close().await;
    result
}

/// kube-pulse's p99 beside the peers' at the largest subscriber count:
/// one comparison per round, transport and rate, where kube-pulse and at
/// least one peer have a step; it is "at or below" when no peer's p99 of
/// that step is lower.
pub(crate) fn comparisons(out: &mut String, rounds: &[LatencyRound]) {
    let Some(n) = rounds.iter().map(|r| r.subscribers).max() else {
        return;
    };
    let p99 = |kind: Kind, round: usize, transport: &str, rate: u32| {
        rounds
            .iter()
            .filter(|r| r.server == kind && r.round == round && r.transport == transport)
            .filter(|r| r.subscribers == n)
            .flat_map(|r| &r.steps)
            .find(|s| s.rate == rate)
            .map(|s| s.p99_ms)
    };
    let mut keys: Vec<(usize, &str, u32)> = rounds
        .iter()
        .filter(|r| r.server == Kind::KubePulse && r.subscribers == n)
        .flat_map(|r| r.steps.iter().map(move |s| (r.round, r.transport, s.rate)))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let peers: Vec<Kind> = {
        let mut p: Vec<Kind> = rounds
            .iter()
            .map(|r| r.server)
            .filter(|k| *k != Kind::KubePulse)
            .collect();
        p.sort_by_key(|k| k.name());
        p.dedup();
        p
    };
    if keys.is_empty() || peers.is_empty() {
        return;
    }
    let _ = write!(
        out,
        "\nkube-pulse's p99 at {n} subscribers beside the peers' (ms):\n\n| round | transport | rate | kube-pulse |"
    );
    for peer in &peers {
        let _ = write!(out, " {} |", peer.name());
    }
    out.push_str(" at or below every peer |\n|---|---|---|---|");
    out.push_str(&"---|".repeat(peers.len() + 1));
    out.push('\n');
    let (mut compared, mut at_or_below) = (0, 0);
    for (round, transport, rate) in keys {
        let Some(own) = p99(Kind::KubePulse, round, transport, rate) else {
            continue;
        };
        let theirs: Vec<Option<f64>> = peers
            .iter()
            .map(|&k| p99(k, round, transport, rate))
            .collect();
        let cells: Vec<String> = theirs
            .iter()
            .map(|p| p.map_or("—".into(), |v| format!("{v:.2}")))
            .collect();
        let verdict = if theirs.iter().all(Option::is_none) {
            "—"
        } else {
            compared += 1;
            if theirs.iter().flatten().all(|&v| own <= v) {
                at_or_below += 1;
                "yes"
            } else {
                "no"
            }
        };
        let _ = writeln!(
            out,
            "| {round} | {transport} | {rate} | {own:.2} | {} | {verdict} |",
            cells.join(" | ")
        );
    }
    let _ = writeln!(
        out,
        "\nAt or below every peer in **{at_or_below} of {compared}** comparisons."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(
        server: Kind,
        transport: &'static str,
        round: usize,
        n: usize,
        p99: &[(u32, f64)],
    ) -> LatencyRound {
        LatencyRound {
            server,
            transport,
            round,
            subscribers: n,
            steps: p99
                .iter()
                .map(|&(rate, p99_ms)| Step {
                    rate,
                    p99_ms,
                    ..Step::default()
                })
                .collect(),
            error: None,
        }
    }

    #[test]
    fn each_round_starts_with_the_next_server() {
        let all = [Kind::KubePulse, Kind::Nchan, Kind::Raw];
        assert_eq!(turned(&all, 0), all);
        assert_eq!(turned(&all, 1), [Kind::Nchan, Kind::Raw, Kind::KubePulse]);
        assert_eq!(turned(&all, 2), [Kind::Raw, Kind::KubePulse, Kind::Nchan]);
        assert_eq!(turned(&all, 3), all);
        assert!(turned(&[], 4).is_empty());
    }

    #[test]
    fn comparisons_count_steps_where_kube_pulse_is_at_or_below_every_peer() {
        let rounds = [
            block(Kind::KubePulse, "SSE", 1, 1, &[(50, 0.1)]),
            block(Kind::Raw, "SSE", 1, 1, &[(50, 9.0)]),
            block(Kind::KubePulse, "SSE", 1, 1000, &[(50, 10.0), (100, 12.0)]),
            block(Kind::Nchan, "SSE", 1, 1000, &[(50, 11.0), (100, 11.0)]),
            block(Kind::Raw, "SSE", 1, 1000, &[(50, 10.0), (100, 13.0)]),
            // Only one peer serves this transport: it is the only one compared.
            block(Kind::KubePulse, "WebSocket", 1, 1000, &[(50, 8.0)]),
            block(Kind::Raw, "WebSocket", 1, 1000, &[(50, 7.0)]),
            // No peer: not a comparison.
            block(Kind::KubePulse, "WebSocket", 2, 1000, &[(50, 1.0)]),
        ];
        let mut out = String::new();
        comparisons(&mut out, &rounds);
        assert!(
            out.contains("| 1 | SSE | 50 | 10.00 | 11.00 | 10.00 | yes |"),
            "{out}"
        );
        assert!(
            out.contains("| 1 | SSE | 100 | 12.00 | 11.00 | 13.00 | no |"),
            "{out}"
        );
        assert!(
            out.contains("| 1 | WebSocket | 50 | 8.00 | — | 7.00 | no |"),
            "{out}"
        );
        assert!(
            out.contains("| 2 | WebSocket | 50 | 1.00 | — | — | — |"),
            "{out}"
        );
        assert!(out.contains("**1 of 3**"), "{out}");
        assert!(
            !out.contains("0.10"),
            "one subscriber is not compared: {out}"
        );
    }
}
