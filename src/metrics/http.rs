//! The HTTP surface's families (`listener, router, transports ──events──▶
//! [metrics] ──▶ registry`): the labels of requests and push sessions,
//! the accepted TCP connections (src/http/connections.rs), and the
//! histogram of the delivery lag from a hub change to its socket.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct HttpLabels {
    pub(crate) method: String,
    pub(crate) route: String,
    pub(crate) status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TransportLabels {
    pub(crate) transport: String,
}

/// Accepted TCP connections: open, refused and closed by limit or timeout,
/// failed accepts (src/http/connections.rs, docs/SECURITY.md "Connections").
#[derive(Debug, Default)]
pub(crate) struct ConnectionMetrics {
    pub(crate) open: Gauge,
    refused: Family<ReasonLabels, Counter>,
    closed: Family<ReasonLabels, Counter>,
    accept_errors: Family<ReasonLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

impl ConnectionMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "tcp_connections",
            "Open accepted TCP connections",
            self.open.clone(),
        );
        registry.register(
            "tcp_refused",
            "Connections closed at accept: per_ip cap or gateway-wide ceiling, nothing idle to shed",
            self.refused.clone(),
        );
        registry.register(
            "tcp_closed",
            "Connections closed by the gateway: shed, header_timeout, idle_timeout, handshake_timeout",
            self.closed.clone(),
        );
        registry.register(
            "accept_errors",
            "Failed accepts: fd_exhausted (EMFILE/ENFILE) or other",
            self.accept_errors.clone(),
        );
    }

    pub(crate) fn refused(&self, reason: &'static str) {
        self.refused.get_or_create(&ReasonLabels { reason }).inc();
    }

    pub(crate) fn closed(&self, reason: &'static str) {
        self.closed.get_or_create(&ReasonLabels { reason }).inc();
    }

    pub(crate) fn accept_error(&self, reason: &'static str) {
        self.accept_errors
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }
}

/// A histogram observed with atomic adds, in microseconds: the delivery lag
/// is observed once per delivered message, from every worker thread at
/// once, and prometheus-client's histogram takes a mutex per observation
/// (two workers fanning one change out to a thousand subscribers contend
/// on it). Encoded as an ordinary Prometheus histogram in seconds.
#[derive(Debug, Clone)]
pub(crate) struct LagHistogram(Arc<Buckets>);

#[derive(Debug)]
struct Buckets {
    /// Upper bounds in seconds, the last +Inf.
    bounds: Vec<f64>,
    /// Upper bounds in microseconds (the last `u64::MAX`).
    bounds_micros: Vec<u64>,
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
}

impl LagHistogram {
    pub(crate) fn new(bounds: impl Iterator<Item = f64>) -> Self {
        let bounds: Vec<f64> = bounds.chain(std::iter::once(f64::INFINITY)).collect();
        let bounds_micros = bounds
            .iter()
            .map(|b| {
                if b.is_finite() {
                    (b * 1e6).round() as u64
                } else {
                    u64::MAX
                }
            })
            .collect();
        let counts = bounds.iter().map(|_| AtomicU64::new(0)).collect();
        Self(Arc::new(Buckets {
            bounds,
            bounds_micros,
            counts,
            sum_micros: AtomicU64::new(0),
        }))
    }

    pub(crate) fn observe_micros(&self, micros: u64) {
        let h = &self.0;
        let bucket = h.bounds_micros.partition_point(|&b| b < micros);
        h.counts[bucket.min(h.counts.len() - 1)].fetch_add(1, Ordering::Relaxed);
        h.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }
}

impl prometheus_client::encoding::EncodeMetric for LagHistogram {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        // Read bucket by bucket while others observe: the count is the sum
        // of what was read, so the histogram stays consistent with itself.
        let h = &self.0;
        let buckets: Vec<(f64, u64)> = h
            .bounds
            .iter()
            .zip(&h.counts)
            .map(|(&bound, count)| (bound, count.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = h.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        encoder
            .encode_histogram::<prometheus_client::encoding::NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Histogram
    }
}
