//! The scale-out families (`leases, stream of changes ──events──▶ [metrics]
//! ──▶ registry`): member ownership through Leases (src/scale/ownership.rs)
//! and the stream of changes between replicas over NATS JetStream
//! (src/scale/relay/). Without Leases or `--nats` their families have no
//! series.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Member ownership through Leases: members owned, Lease changes, and
/// whether the Leases can be read.
#[derive(Debug, Default)]
pub(crate) struct LeaseMetrics {
    pub(crate) owned: Gauge,
    changes: Family<ChangeLabels, Counter>,
    /// One series, labelled with the Leases' namespace, once ownership
    /// runs: without Leases it has none (an alert on it stays quiet).
    store_up: Family<NamespaceLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChangeLabels {
    change: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespaceLabels {
    namespace: String,
}

/// The Lease changes counted, in the order they are exported.
const LEASE_CHANGES: [&str; 3] = ["acquired", "released", "lost"];

impl LeaseMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "lease_owned_members",
            "Member clusters this replica owns (holds the Lease of, runs the sources of)",
            self.owned.clone(),
        );
        registry.register(
            "lease_changes",
            "Member Lease changes of this replica: acquired, released (handed over or at shutdown), lost (not renewed in time, or taken)",
            self.changes.clone(),
        );
        registry.register(
            "lease_store_up",
            "1 while this replica has listed the Leases of the host cluster within a lease duration (as /readyz/Leases), else 0; only with Leases",
            self.store_up.clone(),
        );
    }

    /// Ownership starts: every change counter exists from 0 (so that
    /// `increase()` sees the first one), and the store is not read yet.
    pub(crate) fn start(&self, namespace: &str) {
        for change in LEASE_CHANGES {
            self.changes
                .get_or_create(&ChangeLabels { change })
                .inc_by(0);
        }
        self.store(namespace, false);
    }

    /// Whether the Leases were listed within a lease duration.
    pub(crate) fn store(&self, namespace: &str, up: bool) {
        self.store_up
            .get_or_create(&NamespaceLabels {
                namespace: namespace.to_string(),
            })
            .set(i64::from(up));
    }

    /// Counts one change: `acquired`, `released` or `lost`.
    pub(crate) fn change(&self, change: &'static str) {
        debug_assert!(LEASE_CHANGES.contains(&change), "{change}");
        self.changes.get_or_create(&ChangeLabels { change }).inc();
    }
}

/// The stream of changes over NATS JetStream: what this replica published
/// and consumed, and how far its consumer is behind. Every family has one
/// series, labelled with the stream's name, once the stream runs: without
/// `--nats` there are none.
#[derive(Debug, Default)]
pub(crate) struct StreamMetrics {
    published: Family<StreamLabels, Counter>,
    publish_errors: Family<StreamLabels, Counter>,
    consumed: Family<StreamLabels, Counter>,
    lag: Family<StreamLabels, Gauge>,
    connected: Family<StreamLabels, Gauge>,
    rejected: Family<RejectedLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectedLabels {
    /// `stream` (a change) or `bucket` (a task entry).
    source: &'static str,
    /// `unsigned`, `bad-mac`, `malformed`, `wrong-subject`.
    reason: &'static str,
}

/// What may be rejected, and why, in the order they are exported.
const REJECTED: [(&str, &[&str]); 2] = [
    (
        "stream",
        &["unsigned", "bad-mac", "malformed", "wrong-subject"],
    ),
    ("bucket", &["unsigned", "bad-mac", "malformed"]),
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StreamLabels {
    stream: String,
}

impl StreamMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "stream_published",
            "Changes of the members this replica runs published to the stream of changes",
            self.published.clone(),
        );
        registry.register(
            "stream_publish_errors",
            "Publishes to the stream of changes that failed (the topic's current document is published again later)",
            self.publish_errors.clone(),
        );
        registry.register(
            "stream_consumed",
            "Messages this replica read from the stream of changes (its own and those of members it runs are read and skipped)",
            self.consumed.clone(),
        );
        registry.register(
            "stream_consumer_lag_messages",
            "Messages of the stream of changes this replica's consumer has not read yet, as of its last message",
            self.lag.clone(),
        );
        registry.register(
            "stream_connected",
            "1 while this replica is connected to the NATS server of the stream of changes (as the connection part of /readyz/Nats), else 0",
            self.connected.clone(),
        );
        registry.register(
            "relay_rejected",
            "Messages of the stream of changes (source stream) and entries of the task bucket (source bucket) not accepted: without the replicas' MAC (unsigned), with a MAC that does not match (bad-mac), not a change or task (malformed), or a change on another topic's subject (wrong-subject); neither served nor run",
            self.rejected.clone(),
        );
    }

    fn labels(stream: &str) -> StreamLabels {
        StreamLabels {
            stream: stream.to_string(),
        }
    }

    /// The stream runs: every series exists from 0.
    pub(crate) fn start(&self, stream: &str) {
        let labels = Self::labels(stream);
        self.published.get_or_create(&labels).inc_by(0);
        self.publish_errors.get_or_create(&labels).inc_by(0);
        self.consumed.get_or_create(&labels).inc_by(0);
        self.lag.get_or_create(&labels).set(0);
        for (source, reasons) in REJECTED {
            for reason in reasons {
                self.rejected
                    .get_or_create(&RejectedLabels { source, reason })
                    .inc_by(0);
            }
        }
    }

    /// A change (`stream`) or task entry (`bucket`) was not accepted.
    pub(crate) fn rejected(&self, source: &'static str, reason: &'static str) {
        self.rejected
            .get_or_create(&RejectedLabels { source, reason })
            .inc();
    }

    /// The client connected to the server, or lost it.
    pub(crate) fn connected(&self, stream: &str, up: bool) {
        self.connected
            .get_or_create(&Self::labels(stream))
            .set(i64::from(up));
    }

    pub(crate) fn published(&self, stream: &str, ok: bool) {
        let family = if ok {
            &self.published
        } else {
            &self.publish_errors
        };
        family.get_or_create(&Self::labels(stream)).inc();
    }

    pub(crate) fn consumed(&self, stream: &str, lag: u64) {
        let labels = Self::labels(stream);
        self.consumed.get_or_create(&labels).inc();
        self.lag
            .get_or_create(&labels)
            .set(i64::try_from(lag).unwrap_or(i64::MAX));
    }
}

/// Push members' agents, seen from the replica that owns each member
/// (src/scale/agents/): whether heartbeats arrive, and reports refused.
#[derive(Debug, Default)]
pub(crate) struct AgentMetrics {
    connected: Family<MemberLabels, Gauge>,
    rejected: Family<AgentRejectedLabels, Counter>,
    /// On an agent: reports published, and their bytes, by kind.
    reports: Family<KindLabels, Counter>,
    report_bytes: Family<KindLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MemberLabels {
    cluster: String,
}

/// Why a push member's report is refused, as counted.
const AGENT_REFUSALS: [&str; 7] = [
    "unsigned",
    "bad-signature",
    "malformed",
    "wrong-subject",
    "stale",
    "too-many-topics",
    "future-session",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentRejectedLabels {
    cluster: String,
    reason: &'static str,
}

impl AgentMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "agent_connected",
            "1 while the agent of a push member this replica owns sends heartbeats within the grace period, else 0",
            self.connected.clone(),
        );
        registry.register(
            "agent_rejected",
            "Reports on a push member's subjects not believed: unsigned, bad-signature (not its agent's key), malformed, wrong-subject, stale (older than one already applied), too-many-topics, future-session (a session starting over 10 minutes ahead of the hub's clock)",
            self.rejected.clone(),
        );
        registry.register(
            "agent_reports",
            "On `kube-pulse agent`: reports published (doc, heartbeat)",
            self.reports.clone(),
        );
        registry.register(
            "agent_report_bytes",
            "On `kube-pulse agent`: bytes of the reports published (subject, payload and signature header), by kind",
            self.report_bytes.clone(),
        );
    }

    /// On an agent: one report of `kind` of `bytes` published.
    pub(crate) fn published(&self, kind: &'static str, bytes: usize) {
        let labels = KindLabels { kind };
        self.reports.get_or_create(&labels).inc();
        self.report_bytes
            .get_or_create(&labels)
            .inc_by(u64::try_from(bytes).unwrap_or(u64::MAX));
    }

    /// A push member starts here: its series exist from now on, each
    /// refusal counter at 0 (so that `increase()` sees the first one), the
    /// agent not heard from yet.
    pub(crate) fn follow(&self, cluster: &str) {
        for reason in AGENT_REFUSALS {
            self.rejected
                .get_or_create(&AgentRejectedLabels {
                    cluster: cluster.to_string(),
                    reason,
                })
                .inc_by(0);
        }
        self.connected(cluster, false);
    }

    /// Whether `cluster`'s agent is heard from.
    pub(crate) fn connected(&self, cluster: &str, connected: bool) {
        self.connected
            .get_or_create(&MemberLabels {
                cluster: cluster.to_string(),
            })
            .set(i64::from(connected));
    }

    /// Counts a report of `cluster` not believed.
    pub(crate) fn rejected(&self, cluster: &str, reason: &'static str) {
        self.rejected
            .get_or_create(&AgentRejectedLabels {
                cluster: cluster.to_string(),
                reason,
            })
            .inc();
    }

    /// The member no longer runs here: whether its agent is heard goes (an
    /// alert on it stays quiet here); what was refused stays counted.
    pub(crate) fn forget(&self, cluster: &str) {
        self.connected.remove(&MemberLabels {
            cluster: cluster.to_string(),
        });
    }
}
