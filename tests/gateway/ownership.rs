//! Member ownership through Leases (src/scale/): a simulated host cluster
//! holds the Leases, three simulated members are shared by gateway
//! replicas (each with its own replica id), and each member runs on exactly
//! one replica — also while replicas stop, die and come back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, ObjectMeta, PostParams};
use kube_pulse::gateway::Gateway;
use kube_pulse::scale::preferred_owner;
use kube_pulse_sim::{Faults, SimCluster};
use pulse_testkit::gateway::start_gateway;
use pulse_testkit::http::{metric, readiness};
use pulse_testkit::poll::eventually;
use pulse_testkit::scale::{Replica, lease_holders, leased_replica, watch_for_two_owners};
use pulse_testkit::sim::{sim, sim_with};
use tokio_util::sync::CancellationToken;

/// Short Leases, so that failover takes seconds.
const LEASE: Duration = Duration::from_secs(3);
/// Generous bound for anything a loaded 2-core machine does in "a lease
/// duration plus a relist".
const WITHIN: Duration = Duration::from_secs(30);

async fn replica(id: &str, host: &SimCluster, members: &[&SimCluster]) -> Replica {
    replica_for(id, host, members, LEASE).await
}

async fn replica_for(
    id: &str,
    host: &SimCluster,
    members: &[&SimCluster],
    duration: Duration,
) -> Replica {
    leased_replica(id, host, members, duration, |_| {}).await
}

/// Which replicas have `clusters/{member}` in their hub, by member.
fn topics(
    replicas: &[(String, Arc<Gateway>)],
    members: &[String],
) -> BTreeMap<String, Vec<String>> {
    members
        .iter()
        .map(|m| {
            let topic = format!("clusters/{m}");
            let on: Vec<String> = replicas
                .iter()
                .filter(|(_, g)| g.hub().get(&topic).is_some())
                .map(|(id, _)| id.clone())
                .collect();
            (m.clone(), on)
        })
        .collect()
}

/// Waits until every member is owned by exactly one of `live` (its Lease
/// holder, the only hub with its topic, the only one counting it owned),
/// the one rendezvous hashing prefers among them; returns member → owner.
async fn settled(
    host: &SimCluster,
    live: &[&Replica],
    members: &[String],
    what: &str,
) -> BTreeMap<String, String> {
    eventually(WITHIN, what, || async {
        let pairs: Vec<(String, Arc<Gateway>)> = live
            .iter()
            .map(|r| (r.id.clone(), r.gateway.clone()))
            .collect();
        let on = topics(&pairs, members);
        let holders = lease_holders(host).await;
        let mut owners = BTreeMap::new();
        for m in members {
            let [owner] = on[m].as_slice() else {
                return None;
            };
            if holders.get(m)?.as_deref() != Some(owner.as_str()) {
                return None;
            }
            let owned_by: Vec<&str> = live
                .iter()
                .filter(|r| r.gateway.ownership().unwrap().health().owned().contains(m))
                .map(|r| r.id.as_str())
                .collect();
            if owned_by != [owner.as_str()] {
                return None;
            }
            let ids: Vec<String> = live.iter().map(|r| r.id.clone()).collect();
            if preferred_owner(m, &ids) != Some(owner) {
                return None;
            }
            owners.insert(m.clone(), owner.clone());
        }
        Some(owners)
    })
    .await
}

/// Waits for a round of renewals of the member Leases `holder` holds and
/// returns when the last poll that still saw none of them renewed began:
/// the host took those renewals after that instant.
async fn after_renewals(host: &SimCluster, holder: &str) -> Instant {
    let api: Api<Lease> = Api::namespaced(host.client(), "default");
    let versions = || async {
        let leases = api.list(&Default::default()).await.unwrap().items;
        leases
            .into_iter()
            .filter(|l| {
                let member = l
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key("kube-pulse.io/member"));
                let held = l.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
                member && held == Some(holder)
            })
            .map(|l| (l.metadata.name.unwrap(), l.metadata.resource_version))
            .collect::<BTreeMap<_, _>>()
    };
    let before = versions().await;
    assert!(!before.is_empty(), "{holder} holds no member Lease");
    let started = Instant::now();
    let mut cut = started;
    loop {
        let polled = Instant::now();
        let now = versions().await;
        let changed = before
            .iter()
            .filter(|(l, v)| now.get(*l) != Some(*v))
            .count();
        if changed == before.len() {
            return cut;
        }
        if changed == 0 {
            cut = polled;
        }
        assert!(started.elapsed() < WITHIN, "no renewals by {holder}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A dead replica's members may move only once its Leases expired.
fn moved_death_at_least(elapsed: Duration) -> bool {
    elapsed >= LEASE
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_refuses_stale_and_duplicate_lease_writes() {
    let host = sim().await;
    let api: Api<Lease> = Api::namespaced(host.client(), "default");
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("l".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("a".into()),
            ..Default::default()
        }),
    };
    let created = api.create(&PostParams::default(), &lease).await.unwrap();
    let again = api
        .create(&PostParams::default(), &lease)
        .await
        .unwrap_err();
    assert!(
        matches!(again, kube::Error::Api(ref s) if s.code == 409),
        "{again:?}"
    );
    let mut mine = created.clone();
    mine.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let written = api
        .replace("l", &PostParams::default(), &mine)
        .await
        .unwrap();
    assert_ne!(
        written.metadata.resource_version,
        created.metadata.resource_version
    );
    // A second writer still holding the first version loses.
    let mut stale = created;
    stale.spec.as_mut().unwrap().holder_identity = Some("c".into());
    let lost = api
        .replace("l", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert!(
        matches!(lost, kube::Error::Api(ref s) if s.code == 409),
        "{lost:?}"
    );
    let now = api.get("l").await.unwrap();
    assert_eq!(now.spec.unwrap().holder_identity.as_deref(), Some("b"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_member_runs_on_one_replica_and_moves_when_replicas_stop_die_and_return() {
    let host = sim().await;
    let named = |name: &'static str| sim_with(move |c| c.name = name.into());
    let (a, b, c) = (named("a").await, named("b").await, named("c").await);
    let sims = [&a, &b, &c];
    let members: Vec<String> = sims.iter().map(|s| s.name().to_string()).collect();
    let r1 = replica("r1", &host, &sims).await;
    let r2 = replica("r2", &host, &sims).await;
    let r3 = replica("r3", &host, &sims).await;
    let watched = Arc::new(parking_lot::Mutex::new(
        [&r1, &r2, &r3]
            .iter()
            .map(|r| (r.id.clone(), r.gateway.clone()))
            .collect::<Vec<_>>(),
    ));
    let stop_watching = Arc::new(AtomicBool::new(false));
    let watcher = watch_for_two_owners(
        watched.clone(),
        members.clone(),
        stop_watching.clone(),
        |replicas, m| {
            topics(replicas, &[m.to_string()])
                .remove(m)
                .unwrap_or_default()
        },
    );

    let owners = settled(
        &host,
        &[&r1, &r2, &r3],
        &members,
        "each member owned by one of 3",
    )
    .await;
    // Upstream load does not grow with replicas: each member sim is
    // watched as by one gateway (the same open watches as a baseline
    // member that one plain gateway watches).
    let baseline = sim().await;
    let plain = CancellationToken::new();
    let _plain = start_gateway(&[&baseline], |_| {}, &plain).await;
    let per_member = eventually(WITHIN, "members watched as by one gateway", || async {
        let want = baseline.stats().open_watches;
        let open: Vec<usize> = sims.iter().map(|s| s.stats().open_watches).collect();
        (want > 0 && open.iter().all(|n| *n == want)).then_some(want)
    })
    .await;
    eprintln!("owners {owners:?}; {per_member} open watches per member");

    // The owner of `a` stops (gracefully): its members move at once.
    let mut live = vec![r1, r2, r3];
    let at = live.iter().position(|r| r.id == owners["a"]).unwrap();
    let stopped = live.remove(at);
    let stopped_owned = stopped.gateway.ownership().unwrap().health().owned();
    assert!(stopped_owned.contains("a"));
    let started = Instant::now();
    watched.lock().retain(|(id, _)| *id != stopped.id);
    stopped.token.cancel();
    stopped.gateway.stop().await;
    let refs: Vec<&Replica> = live.iter().collect();
    let after_stop = settled(&host, &refs, &members, "members of a stopped replica move").await;
    let moved_stop = started.elapsed();
    assert!(after_stop.values().all(|o| *o != stopped.id));

    // The owner of `a` now dies (no release; its Leases expire): its
    // members move after a lease duration.
    let at = live.iter().position(|r| r.id == after_stop["a"]).unwrap();
    let dead = live.remove(at);
    let alive = live.pop().unwrap();
    // It dies right after renewing: others may take its members a whole
    // duration after they saw those renewals, not before.
    let renewed = after_renewals(&host, &dead.id).await;
    let started = Instant::now();
    watched.lock().retain(|(id, _)| *id != dead.id);
    dead.token.cancel();
    let after_death = settled(&host, &[&alive], &members, "members of a dead replica move").await;
    let moved_death = started.elapsed();
    let since_renewal = renewed.elapsed();
    assert!(
        moved_death_at_least(since_renewal),
        "moved {since_renewal:?} after the dead replica's last renewals, before its Leases expired"
    );
    assert!(after_death.values().all(|o| *o == alive.id));

    // Both come back: members rebalance, never on two replicas at once.
    let back1 = replica(&stopped.id, &host, &sims).await;
    watched
        .lock()
        .push((back1.id.clone(), back1.gateway.clone()));
    let back2 = replica(&dead.id, &host, &sims).await;
    watched
        .lock()
        .push((back2.id.clone(), back2.gateway.clone()));
    let rebalanced = settled(
        &host,
        &[&alive, &back1, &back2],
        &members,
        "rebalanced over 3",
    )
    .await;
    // Rendezvous hashing over the same three ids gives the same owners.
    assert_eq!(rebalanced, owners, "the first owners come back");
    stop_watching.store(true, Ordering::Relaxed);
    let polls = watcher.await.expect("never two owners at once");
    assert!(polls > 10, "the watcher polled {polls} times");
    eprintln!(
        "{} owned {stopped_owned:?}; moved after a graceful stop in {moved_stop:?}, after a death in {moved_death:?} ({since_renewal:?} after its last renewals; lease {LEASE:?})",
        stopped.id
    );
    // Metrics and readiness say the same.
    let mut owned = 0.0;
    for r in [&alive, &back1, &back2] {
        owned += metric(&r.url, "kube_pulse_lease_owned_members").await;
        let (status, body) = readiness(&r.url, "Leases").await;
        assert_eq!(status, 200, "{}: {body}", r.id);
    }
    assert_eq!(owned, 3.0);
    let acquired = metric(
        &alive.url,
        "kube_pulse_lease_changes_total{change=\"acquired\"}",
    )
    .await;
    assert!(acquired >= 1.0, "{acquired}");
    for r in [&alive, &back1, &back2] {
        r.token.cancel();
        r.gateway.stop().await;
    }
    plain.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_off_from_the_host_stops_its_members_before_their_leases_expire() {
    // Others may take a Lease a duration after they saw its last renewal;
    // its owner must have stopped the member by then, however the host
    // apiserver fails (here: it takes requests and never answers).
    const DURATION: Duration = Duration::from_secs(9);
    let host = sim().await;
    let named = |name: &'static str| sim_with(move |c| c.name = name.into());
    let (a, b, c) = (named("a").await, named("b").await, named("c").await);
    let sims = [&a, &b, &c];
    let members: Vec<String> = sims.iter().map(|s| s.name().to_string()).collect();
    let r1 = replica_for("r1", &host, &sims, DURATION).await;
    settled(&host, &[&r1], &members, "r1 owns every member").await;
    const STORE_UP: &str = "kube_pulse_lease_store_up{namespace=\"default\"}";
    const LOST: &str = "kube_pulse_lease_changes_total{change=\"lost\"}";
    assert_eq!(metric(&r1.url, STORE_UP).await, 1.0);
    assert_eq!(metric(&r1.url, LOST).await, 0.0);
    // Cut the host off right after a round of renewals: the worst case
    // for a loop that checks its deadlines only between slow requests.
    let cut = after_renewals(&host, "r1").await;
    host.set_faults(Faults {
        stall: true,
        ..Default::default()
    });
    let pair = [(r1.id.clone(), r1.gateway.clone())];
    eventually(WITHIN, "r1 stops its members", || async {
        topics(&pair, &members)
            .values()
            .all(|on| on.is_empty())
            .then_some(())
    })
    .await;
    let stopped = cut.elapsed();
    eprintln!("members stopped {stopped:?} after their last renewal (lease {DURATION:?})");
    assert!(
        stopped < DURATION,
        "members ran {stopped:?} after their last renewal; others may take them after {DURATION:?}"
    );
    assert!(r1.gateway.ownership().unwrap().health().owned().is_empty());
    // Readiness says why; once the host answers again, the members return.
    let not_ready = eventually(WITHIN, "Leases not ready", || async {
        let (status, body) = readiness(&r1.url, "Leases").await;
        (status == 500).then_some(body)
    })
    .await;
    assert!(not_ready.contains("lease store"), "{not_ready}");
    // What the alerts watch: the store down, and every member lost.
    eventually(WITHIN, "kube_pulse_lease_store_up 0", || async {
        (metric(&r1.url, STORE_UP).await == 0.0).then_some(())
    })
    .await;
    assert_eq!(metric(&r1.url, LOST).await, members.len() as f64);
    host.heal();
    settled(&host, &[&r1], &members, "r1 owns every member again").await;
    eventually(WITHIN, "kube_pulse_lease_store_up 1 again", || async {
        (metric(&r1.url, STORE_UP).await == 1.0).then_some(())
    })
    .await;
    r1.token.cancel();
    r1.gateway.stop().await;
}
