//! Cost curves (docs/BENCHMARKS.md, scenarios 12 and 14): each server's
//! RSS against idle connections and its CPU per delivery against
//! subscribers at one fixed change rate. The watched-objects curve is in
//! `objects.rs`, latency beside the peers in `latency.rs`. Every point is
//! bounded in count and time; all traffic is on 127.0.0.1.

use serde::Serialize;

use crate::load::Via;
use crate::proc;
use crate::scenarios::{self, Crowd, Plan, Step};
use crate::targets::{Kind, Target};

/// Descriptors a process needs besides its sockets (listeners, the
/// simulator's and the publisher's connections, files).
const FD_HEADROOM: u64 = 200;

/// RSS against idle connections, one server and transport.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ConnectionCurve {
    pub(crate) server: Kind,
    /// `SSE` or `WebSocket`.
    pub(crate) transport: &'static str,
    pub(crate) rss_before_mb: f64,
    pub(crate) points: Vec<ConnectionPoint>,
    /// Why the curve stops before its last size, if it does.
    pub(crate) limited: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct ConnectionPoint {
    pub(crate) connections: usize,
    pub(crate) rss_mb: f64,
    /// RSS above the server with no connection, per connection.
    pub(crate) per_connection_kib: f64,
}

/// What keeps `n` connections from fitting, if anything: the load generator
/// holds every client socket in one process, and kube-pulse and the raw
/// baseline every server socket in one (Nginx spreads them over its two
/// workers, each with `worker_rlimit_nofile 40000`).
pub(crate) fn fd_shortfall(kind: Kind, n: usize, fd_limit: u64) -> Option<String> {
    let need = n as u64 + FD_HEADROOM;
    let server_need = match kind {
        Kind::Nchan | Kind::Pushpin => 0,
        Kind::KubePulse | Kind::Raw | Kind::RawCopy => need,
    };
    (need > fd_limit || server_need > fd_limit).then(|| {
        format!(
            "{n} connections need about {need} descriptors in one process; the limit is {fd_limit} (ulimit -n; raising the hard limit takes CAP_SYS_RESOURCE)"
        )
    })
}

/// The most connections that fit under `fd_limit`, in steps of 500.
pub(crate) fn largest_fit(fd_limit: u64) -> usize {
    (fd_limit.saturating_sub(FD_HEADROOM) / 500 * 500) as usize
}

/// Connects idle subscribers size after size (the crowd grows), reading the
/// server's RSS at each size once the connections settled.
pub(crate) async fn connections(
    target: &Target,
    transport: &'static str,
    plan: &Plan,
    fd_limit: u64,
) -> ConnectionCurve {
    let sizes = &plan.connection_sizes;
    let before = proc::rss(&target.pids());
    let mut curve = ConnectionCurve {
        server: target.kind,
        transport,
        rss_before_mb: before as f64 / 1e6,
        points: Vec::new(),
        limited: None,
    };
    let via = |i: usize| -> Option<Via> {
        match transport {
            "WebSocket" => target.ws(),
            _ => Some(target.sse(i, false)),
        }
    };
    if via(0).is_none() {
        curve.limited = Some(format!("{} serves no {transport}", target.kind.name()));
        return curve;
    }
    let mut crowds: Vec<Crowd> = Vec::new();
    let mut held = 0;
    for &wanted in sizes {
        // A size past the descriptor limit is replaced by the largest that
        // fits, the curve's last point.
        let size = match fd_shortfall(target.kind, wanted, fd_limit) {
            None => wanted,
            Some(why) => {
                curve.limited = Some(why);
                match largest_fit(fd_limit) {
                    fit if fit > held => fit,
                    _ => break,
                }
            }
        };
        let more = size.saturating_sub(held);
        match Crowd::connect(|i| via(held + i).expect("checked above"), more, 0).await {
            Ok(c) => crowds.push(c),
            Err(e) => {
                curve.limited = Some(format!("at {size}: {e}"));
                break;
            }
        }
        held = size;
        tokio::time::sleep(plan.settle).await;
        let rss = proc::rss(&target.pids());
        eprintln!(
            "  {} {transport}: {size} connections, RSS {:.1} MB",
            target.kind.name(),
            rss as f64 / 1e6
        );
        curve.points.push(ConnectionPoint {
            connections: size,
            rss_mb: rss as f64 / 1e6,
            per_connection_kib: rss.saturating_sub(before) as f64 / size.max(1) as f64 / 1024.0,
        });
        if size != wanted {
            break;
        }
    }
    for c in crowds {
        c.close().await;
    }
    curve
}

/// CPU per delivery against subscribers, one server.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CpuCurve {
    pub(crate) server: Kind,
    pub(crate) rate: u32,
    pub(crate) points: Vec<CpuPoint>,
    pub(crate) error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct CpuPoint {
    pub(crate) subscribers: usize,
    pub(crate) step: Step,
    /// Server CPU (user + system, its whole process tree) over the window, per delivery.
    pub(crate) server_us_per_delivery: f64,
    pub(crate) bench_us_per_delivery: f64,
}

/// The least-squares slope of `y` over `x` (at least two distinct `x`):
/// the cost of one more object, pod or connection on a curve.
pub(crate) fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    (points.len() >= 2 && sxx > 0.0).then(|| sxy / sxx)
}

/// CPU microseconds per delivery over a step.
pub(crate) fn per_delivery_us(cpu_seconds: f64, delivered: u64) -> f64 {
    if delivered == 0 {
        return 0.0;
    }
    cpu_seconds * 1e6 / delivered as f64
}

/// One fresh server; for each size a fresh crowd of SSE subscribers, a
/// warm-up change, then one step at the plan's fixed rate.
pub(crate) async fn cpu(target: &Target, plan: &Plan) -> CpuCurve {
    let mut curve = CpuCurve {
        server: target.kind,
        rate: plan.cpu_rate,
        points: Vec::new(),
        error: None,
    };
    for &n in &plan.cpu_sizes {
        let crowd = match Crowd::connect(|i| target.sse(i, false), n, 0).await {
            Ok(c) => c,
            Err(e) => {
                curve.error = Some(format!("at {n}: {e}"));
                break;
            }
        };
        let measured = async {
            scenarios::warm_up(target, plan).await?;
            scenarios::step(target, &crowd, 0..n, plan.cpu_rate, plan.cpu_step, |_| {
                n as u64
            })
            .await
        }
        .await;
        crowd.close().await;
        let step = match measured {
            Ok(s) => s,
            Err(e) => {
                curve.error = Some(format!("at {n}: {e}"));
                break;
            }
        };
        let point = CpuPoint {
            subscribers: n,
            server_us_per_delivery: per_delivery_us(step.server_cpu_seconds, step.delivered),
            bench_us_per_delivery: per_delivery_us(step.bench_cpu_seconds, step.delivered),
            step,
        };
        eprintln!(
            "  {} n={n} at {}/s (achieved {:.0}/s): {:.2} µs server CPU per delivery, {} delivered, loss {}",
            target.kind.name(),
            plan.cpu_rate,
            point.step.achieved_rate,
            point.server_us_per_delivery,
            point.step.delivered,
            point.step.loss
        );
        curve.points.push(point);
    }
    curve
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_that_does_not_fit_says_which_limit() {
        // The load generator's process holds every client socket.
        assert!(fd_shortfall(Kind::Nchan, 20_000, 20_000).is_some());
        assert!(fd_shortfall(Kind::Nchan, 19_000, 20_000).is_none());
        // kube-pulse and the raw baseline hold every server socket in one process.
        let why = fd_shortfall(Kind::KubePulse, 19_900, 20_000).unwrap();
        assert!(why.contains("limit is 20000"), "{why}");
        assert!(fd_shortfall(Kind::Raw, 20_000, 50_000).is_none());
        // What does fit is the curve's last point instead.
        assert_eq!(largest_fit(20_000), 19_500);
        assert!(fd_shortfall(Kind::KubePulse, largest_fit(20_000), 20_000).is_none());
        assert_eq!(largest_fit(100), 0);
    }

    #[test]
    fn cpu_per_delivery_is_in_microseconds() {
        assert_eq!(per_delivery_us(0.5, 100_000), 5.0);
        assert_eq!(per_delivery_us(1.0, 0), 0.0);
    }
}
