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
/// minute (it drifts over an hour); their order changes each round
/// ([`turned`]), so that none is always first or always right after the
/// same other. One subscriber shows a change's path without fan-out.
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

/// The servers' order in round `round` (from 0): turned left by one each
/// round, then, after as many rounds as servers, the same with the list
/// reversed. Each server is first as often as the others; and over 2 × n
/// rounds each server runs right after each of its neighbours in the list
/// as often as right before it (for up to three servers, after every other
/// server as often as before it), so that what one server leaves behind
/// on the machine does not always fall on the same next one.
fn turned(servers: &[Kind], round: usize) -> Vec<Kind> {
    let mut order = servers.to_vec();
    let n = order.len();
    if n == 0 {
        return order;
    }
    let k = round % (2 * n);
    if k >= n {
        order.reverse();
    }
    order.rotate_left(k % n);
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

/// kube-pulse's p99 beside the peers' at the largest subscriber count (see
/// [`compare`]); and, when the copy of the raw baseline ran, the raw
/// baseline beside its copy: an A/A control, what the same count gives
/// between two identical servers on this machine.
pub(crate) fn comparisons(out: &mut String, rounds: &[LatencyRound]) {
    let ran = |kind: Kind| rounds.iter().any(|r| r.server == kind);
    let mut peers: Vec<Kind> = rounds
        .iter()
        .map(|r| r.server)
        .filter(|k| !matches!(k, Kind::KubePulse | Kind::RawCopy))
        .collect();
    peers.sort_by_key(|k| k.name());
    peers.dedup();
    compare(out, rounds, Kind::KubePulse, &peers, "the peers'");
    if ran(Kind::Raw) && ran(Kind::RawCopy) {
        compare(
            out,
            rounds,
            Kind::Raw,
            &[Kind::RawCopy],
            "a second copy of itself, an A/A control",
        );
    }
}

/// `subject`'s p99 beside `peers'` at the largest subscriber count: one
/// comparison per round, transport and rate where `subject` and at least
/// one peer have a step; it is "at or below" when no peer's p99 of that
/// step is lower. Ends with the count, and the median of `subject`'s p99
/// minus the lowest peer's.
fn compare(out: &mut String, rounds: &[LatencyRound], subject: Kind, peers: &[Kind], beside: &str) {
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
        .filter(|r| r.server == subject && r.subscribers == n)
        .flat_map(|r| r.steps.iter().map(move |s| (r.round, r.transport, s.rate)))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    if keys.is_empty() || peers.is_empty() {
        return;
    }
    let name = subject.name();
    let _ = write!(
        out,
        "\n{name}'s p99 at {n} subscribers beside {beside} (ms):\n\n| round | transport | rate | {name} |"
    );
    for peer in peers {
        let _ = write!(out, " {} |", peer.name());
    }
    out.push_str(" at or below every peer |\n|---|---|---|---|");
    out.push_str(&"---|".repeat(peers.len() + 1));
    out.push('\n');
    let mut at_or_below = 0;
    let mut differences = Vec::new();
    for (round, transport, rate) in keys {
        let Some(own) = p99(subject, round, transport, rate) else {
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
        let lowest = theirs.iter().flatten().copied().reduce(f64::min);
        let verdict = match lowest {
            None => "—",
            Some(lowest) => {
                differences.push(own - lowest);
                if own <= lowest {
                    at_or_below += 1;
                    "yes"
                } else {
                    "no"
                }
            }
        };
        let _ = writeln!(
            out,
            "| {round} | {transport} | {rate} | {own:.2} | {} | {verdict} |",
            cells.join(" | ")
        );
    }
    let _ = write!(
        out,
        "\nAt or below every peer in **{at_or_below} of {}** comparisons",
        differences.len()
    );
    match median(&mut differences) {
        Some(m) => {
            let _ = writeln!(
                out,
                "; median of {name}'s p99 minus the lowest peer's: {m:+.2} ms."
            );
        }
        None => out.push_str(".\n"),
    }
}

/// The median of `values` (sorted in place), None when empty.
fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
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
    fn each_round_starts_with_the_next_server_then_the_list_turns_around() {
        use Kind::{KubePulse as K, Nchan as N, Raw as R};
        let all = [K, N, R];
        let orders: Vec<Vec<Kind>> = (0..7).map(|r| turned(&all, r)).collect();
        assert_eq!(
            orders,
            [
                vec![K, N, R],
                vec![N, R, K],
                vec![R, K, N],
                vec![R, N, K],
                vec![N, K, R],
                vec![K, R, N],
                vec![K, N, R],
            ]
        );
        // Two servers: each first in two rounds of four.
        let two: Vec<Vec<Kind>> = (0..4).map(|r| turned(&[K, R], r)).collect();
        assert_eq!(two, [vec![K, R], vec![R, K], vec![R, K], vec![K, R]]);
        assert!(turned(&[], 4).is_empty());
    }

    #[test]
    fn over_six_rounds_of_three_each_server_follows_every_other_twice() {
        let all = [Kind::KubePulse, Kind::Raw, Kind::RawCopy];
        let mut after = std::collections::HashMap::new();
        let mut at = std::collections::HashMap::new();
        for round in 0..6 {
            let order = turned(&all, round);
            for (i, kind) in order.iter().enumerate() {
                *at.entry((*kind, i)).or_insert(0) += 1;
            }
            for pair in order.windows(2) {
                *after.entry((pair[0], pair[1])).or_insert(0) += 1;
            }
        }
        assert_eq!(after.len(), 6, "{after:?}");
        assert!(after.values().all(|&n| n == 2), "{after:?}");
        assert_eq!(at.len(), 9, "{at:?}");
        assert!(at.values().all(|&n| n == 2), "{at:?}");
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
            out.contains("median of kube-pulse's p99 minus the lowest peer's: +1.00 ms"),
            "{out}"
        );
        assert!(!out.contains("A/A"), "no copy ran: {out}");
        assert!(
            !out.contains("0.10"),
            "one subscriber is not compared: {out}"
        );
    }

    #[test]
    fn the_copy_of_the_raw_baseline_is_compared_with_the_raw_baseline_only() {
        let rounds = [
            block(Kind::KubePulse, "SSE", 1, 1000, &[(50, 10.0)]),
            block(Kind::Raw, "SSE", 1, 1000, &[(50, 9.0)]),
            block(Kind::RawCopy, "SSE", 1, 1000, &[(50, 8.5)]),
            block(Kind::KubePulse, "SSE", 2, 1000, &[(50, 10.0)]),
            block(Kind::Raw, "SSE", 2, 1000, &[(50, 12.0)]),
            block(Kind::RawCopy, "SSE", 2, 1000, &[(50, 12.5)]),
        ];
        let mut out = String::new();
        comparisons(&mut out, &rounds);
        let (kube, control) = out.split_once("A/A").expect("the control's table");
        // kube-pulse beside the raw baseline (not its copy); the raw
        // baseline beside its copy.
        let tables = [
            (
                kube,
                [
                    "| 1 | SSE | 50 | 10.00 | 9.00 | no |",
                    "| 2 | SSE | 50 | 10.00 | 12.00 | yes |",
                ],
                "-0.50 ms",
            ),
            (
                control,
                [
                    "| 1 | SSE | 50 | 9.00 | 8.50 | no |",
                    "| 2 | SSE | 50 | 12.00 | 12.50 | yes |",
                ],
                "+0.00 ms",
            ),
        ];
        for (table, rows, median) in tables {
            for row in rows {
                assert!(table.contains(row), "{row} in {out}");
            }
            assert!(
                table.contains("**1 of 2**") && table.contains(median),
                "{out}"
            );
        }
    }

    #[test]
    fn median_of_odd_even_and_no_values() {
        assert_eq!(median(&mut [3.0, -1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&mut []), None);
    }
}
