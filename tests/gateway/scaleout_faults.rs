//! Scaling out under faults, end to end: a real `nats-server -js` on
//! loopback, a simulated host cluster holding the Leases and three simulated
//! members. The members' apiservers serve as many lists and watches with
//! three replicas as with one; the owner of a member killed with SIGKILL
//! (real `kube-pulse serve` processes) is replaced, and subscribers on the
//! surviving replicas follow the member's revisions without a gap; scaling
//! 3 → 2 → 3 moves members without two owners at any moment and without a
//! conflicting document on the replicas that stay.
//!
//! Needs `nats-server` (scripts/test.sh installs it). Without it the tests
//! say so and pass, unless `CI` is set: then they fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kube_pulse::gateway::Gateway;
use kube_pulse::scale::preferred_owner;
use kube_pulse_sim::{Faults, SimCluster, workload_manifest};
use pulse_testkit::binary::wait_for_url;
use pulse_testkit::http::{get_json, metric, rest, rest_docs};
use pulse_testkit::load::heavy;
use pulse_testkit::mirror::{Mirror, Reader, synced_readers};
use pulse_testkit::nats::nats;
use pulse_testkit::poll::eventually;
use pulse_testkit::scale::{
    LEASE, Replica, WITHIN, Watched, lease_holders, of_member, owners, preferred_holders, replica,
    replica_for, seed, three_members, watch_for_two_owners,
};
use pulse_testkit::sim::{clusters_yaml, sim};
use serde_json::{Value, json};

/// Bound of a takeover after the owner was killed: the lease duration, a
/// round of the ownership loop, the member's lists and probes, and slack
/// for a loaded 2-core machine.
const TAKEOVER: Duration = Duration::from_secs(60);

/// Lists and watches a member's apiserver served, by member and resource.
type Upstream = BTreeMap<String, BTreeMap<String, (u64, u64)>>;

/// Runs `replicas` replicas (Leases and NATS) over three fresh members,
/// which refuse connections until every member has settled on its owner:
/// the handovers of replicas starting one after another are not counted,
/// only what the owners do from there. Returns the lists and watches each
/// member served until every replica serves every member `Healthy` with
/// every resource `Syncing`, and the watches open on each member then.
/// None without `nats-server`.
async fn upstream(replicas: usize) -> Option<(Upstream, Vec<usize>)> {
    let nats = nats().await?;
    let host = sim().await;
    let sims = three_members().await;
    let refs: Vec<&SimCluster> = sims.iter().collect();
    let members: Vec<String> = sims.iter().map(|s| s.name().to_string()).collect();
    for s in &sims {
        s.set_faults(Faults {
            refuse: true,
            ..Default::default()
        });
    }
    // Leases long enough that no renewal fails on a loaded machine while
    // the requests are counted (a lost Lease would move a member).
    let duration = Duration::from_secs(10);
    let mut live = Vec::new();
    for i in 1..=replicas {
        live.push(replica_for(&format!("r{i}"), &host, &refs, &nats, duration).await);
    }
    let live: Vec<&Replica> = live.iter().collect();
    let settled = owners(&host, &live, &members).await;
    let before: Vec<_> = sims.iter().map(|s| s.stats()).collect();
    for s in &sims {
        s.heal();
    }
    eventually(
        WITHIN,
        "every member Healthy and synced on every replica, every listed resource watched",
        || async {
            for r in &live {
                for m in &members {
                    let doc = rest(&r.url, &format!("/api/v1/clusters/{m}")).await?;
                    let sync = get_json(&format!("{}/api/v1/clusters/{m}/sync", r.url)).await;
                    let sync = sync["items"].as_array()?.clone();
                    let synced = !sync.is_empty() && sync.iter().all(|d| d["phase"] == "Syncing");
                    if doc["phase"] != "Healthy" || !synced {
                        return None;
                    }
                }
            }
            for s in &sims {
                let stats = s.stats();
                // Read: listed in pages, or streamed inside a watch.
                let listed: Vec<&String> = stats
                    .requests
                    .iter()
                    .filter(|(_, verbs)| verbs.contains_key("list") || verbs.contains_key("watch"))
                    .map(|(r, _)| r)
                    .collect();
                let watched = listed.iter().all(|r| stats.count(r, "watch") > 0);
                if listed.is_empty() || !watched || stats.open_watches < listed.len() {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    let mut counts = Upstream::new();
    let mut open = Vec::new();
    for (s, before) in sims.iter().zip(&before) {
        let now = s.stats();
        let per_resource = now
            .requests
            .keys()
            .map(|r| {
                let lists = now.count(r, "list") - before.count(r, "list");
                let watches = now.count(r, "watch") - before.count(r, "watch");
                (r.clone(), (lists, watches))
            })
            .filter(|(_, (l, w))| l + w > 0)
            .collect();
        counts.insert(s.name().to_string(), per_resource);
        open.push(now.open_watches);
        let others: u64 = now
            .requests
            .values()
            .flat_map(|verbs| verbs.iter())
            .filter(|(verb, _)| *verb != "list" && *verb != "watch")
            .map(|(_, n)| n)
            .sum();
        eprintln!(
            "{replicas} replica(s): member {} served {} lists, {} watches, {others} other requests; {} watches open",
            s.name(),
            now.total("list") - before.total("list"),
            now.total("watch") - before.total("watch"),
            now.open_watches
        );
    }
    // The owners did not change while the requests were counted.
    assert_eq!(owners(&host, &live, &members).await, settled);
    for r in &live {
        let lost = metric(&r.url, "kube_pulse_lease_changes_total{change=\"lost\"}").await;
        assert_eq!(
            lost, 0.0,
            "{} lost a Lease while requests were counted",
            r.id
        );
        r.token.cancel();
        r.gateway.stop().await;
    }
    Some((counts, open))
}

/// The "upstream load independent of replicas": each member is
/// listed and watched by its owner only, so its apiserver serves the same
/// lists and watches, resource by resource, with three replicas as with one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_serve_the_same_lists_and_watches_with_one_replica_and_with_three() {
    let _one = heavy().await;
    let Some((one, open_one)) = upstream(1).await else {
        return;
    };
    let (three, open_three) = upstream(3)
        .await
        .expect("nats-server was there a moment ago");
    eprintln!("(lists, watches) by member and resource, 1 replica: {one:?}");
    eprintln!("(lists, watches) by member and resource, 3 replicas: {three:?}");
    eprintln!("open watches by member: 1 replica {open_one:?}, 3 replicas {open_three:?}");
    for (member, resources) in &one {
        // The initial state streamed inside the watch: no LIST.
        assert!(
            resources.values().all(|(l, w)| *l == 0 && *w >= 1),
            "{member} was watched, its initial state streamed: {resources:?}"
        );
    }
    assert_eq!(
        three, one,
        "lists and watches per member and resource, 3 replicas (left) and 1 (right)"
    );
    assert_eq!(open_three, open_one, "open watches per member");
}

/// A `kube-pulse serve` process, one replica.
pub(crate) struct Process {
    pub(crate) id: String,
    pub(crate) url: String,
    pub(crate) child: Child,
    log: PathBuf,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    /// Starts replica `id` with the members of `dir/config.yaml`, the
    /// Leases of `dir/host.kubeconfig` and the stream on `nats`; its log
    /// goes to `dir/{id}.log`.
    pub(crate) fn start(id: &str, dir: &Path, nats: &str) -> Self {
        let log = dir.join(format!("{id}.log"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_kube-pulse"))
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(dir.join("config.yaml"))
            .arg("--lease-kubeconfig")
            .arg(dir.join("host.kubeconfig"))
            .args(["--lease-namespace", "default"])
            .args(["--lease-duration", &LEASE.as_secs().to_string()])
            .args(["--replica-id", id, "--nats", nats])
            .arg("--nats-signing-key-file")
            .arg(pulse_testkit::nats::signing_key_file(dir))
            .env("RUST_LOG", "warn,kube_pulse::scale=info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the binary starts");
        let url = wait_for_url(&mut child);
        Self {
            id: id.into(),
            url,
            child,
            log,
        }
    }

    /// The end of its log, for assertion messages.
    pub(crate) fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log[log.len().saturating_sub(3000)..].to_string()
    }
}

/// The documents of `member` in `docs`.
fn member_docs<'a>(
    docs: impl IntoIterator<Item = (&'a String, &'a Value)>,
    member: &str,
) -> BTreeMap<String, Value> {
    docs.into_iter()
        .filter(|(t, _)| of_member(t, member))
        .map(|(t, d)| (t.clone(), d.clone()))
        .collect()
}

/// Whether every reader holds exactly `truth` of `member`'s documents.
fn readers_hold(
    readers: &[(String, Reader)],
    member: &str,
    truth: &BTreeMap<String, Value>,
) -> bool {
    readers.iter().all(|(_, r)| {
        let mirror = r.mirror.lock();
        member_docs(mirror.docs.iter().map(|(t, (_, d))| (t, d)), member) == *truth
    })
}

/// What a reader holds of `member`: revision and document by topic.
fn held(mirror: &Mirror, member: &str) -> BTreeMap<String, (u64, Value)> {
    mirror
        .docs
        .iter()
        .filter(|(t, _)| of_member(t, member))
        .map(|(t, d)| (t.clone(), d.clone()))
        .collect()
}

/// Readers on every status document, one over WebSocket and one over SSE
/// on each of `urls`, labelled `{id} ws|sse`, synced.
async fn readers(urls: &[(String, String)]) -> Vec<(String, Reader)> {
    let mut readers = Vec::new();
    for (id, url) in urls {
        let synced = synced_readers(url, 2, WITHIN).await;
        readers.extend(
            ["ws", "sse"]
                .map(|via| format!("{id} {via}"))
                .into_iter()
                .zip(synced),
        );
    }
    readers
}

/// Waits until every reader (named `{id} …`) holds what REST on its
/// replica (`urls`: id → URL) serves; fails at once on a conflict
/// ([`no_conflict`]).
async fn agree(readers: &[(String, Reader)], urls: &[(String, String)], what: &str) {
    eventually(WITHIN, what, || async {
        no_conflict(readers, true);
        for (name, reader) in readers {
            let (_, url) = urls
                .iter()
                .find(|(id, _)| name.starts_with(&format!("{id} ")))?;
            let truth = rest_docs(url).await;
            if !reader.mirror.lock().differences(&truth).is_empty() {
                return None;
            }
        }
        Some(())
    })
    .await;
}

/// Asserts that no reader saw a revision gap, a snapshot of a topic it
/// held, a removal or, when `strict`, a revision going back.
fn no_conflict(readers: &[(String, Reader)], strict: bool) {
    for (name, reader) in readers {
        let mirror = reader.mirror.lock();
        assert!(
            mirror.gaps.is_empty(),
            "{name}: revision gaps on {:?}",
            mirror.gaps
        );
        assert_eq!(mirror.late_snapshots, 0, "{name}: snapshots after synced");
        assert!(
            mirror.removed.is_empty(),
            "{name}: removed {:?}",
            mirror.removed
        );
        if strict {
            assert!(
                mirror.stale.is_empty(),
                "{name}: revisions went back on {:?}",
                mirror.stale
            );
        }
    }
}

/// The "kill -9 of the owner": three `kube-pulse serve` processes;
/// the owner of a member is killed with SIGKILL (no release: its Leases
/// expire). Subscribers on the two survivors, over WebSocket and SSE,
/// follow the member's revisions with no gap and end equal to the new
/// owner's REST; the takeover (kill → the new owner serving a change made
/// after the kill) is measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_on_the_survivors_follow_a_member_whose_owner_is_killed() {
    let _one = heavy().await;
    let Some(nats) = nats().await else {
        return;
    };
    let host = sim().await;
    let sims = three_members().await;
    let dir = tempfile::tempdir().unwrap();
    let clusters = clusters_yaml(sims.iter());
    std::fs::write(
        dir.path().join("config.yaml"),
        format!("clusters:\n{clusters}probe: {{intervalSeconds: 1, timeoutSeconds: 1}}\n"),
    )
    .unwrap();
    std::fs::write(dir.path().join("host.kubeconfig"), host.kubeconfig("host")).unwrap();
    let mut processes: Vec<Process> = ["r1", "r2", "r3"]
        .iter()
        .map(|id| Process::start(id, dir.path(), &nats.url))
        .collect();
    let ids: Vec<String> = processes.iter().map(|p| p.id.clone()).collect();
    let members: Vec<String> = sims.iter().map(|s| s.name().to_string()).collect();
    let first = eventually(
        WITHIN,
        "each member held by its preferred replica, served Healthy with its app Running everywhere",
        || async {
            let owners = preferred_holders(&host, &members, &ids).await?;
            for p in &processes {
                for m in &members {
                    let cluster = rest(&p.url, &format!("/api/v1/clusters/{m}")).await?;
                    let app = rest(&p.url, &format!("/api/v1/apps/{m}/shop/web")).await?;
                    if cluster["phase"] != "Healthy" || app["phase"] != "Running" {
                        return None;
                    }
                }
            }
            Some(owners)
        },
    )
    .await;
    let member = "a";
    let killed_id = first[member].clone();
    let survivors: Vec<String> = ids.iter().filter(|id| **id != killed_id).cloned().collect();
    let taker = preferred_owner(member, &survivors).unwrap().clone();
    let urls: Vec<(String, String)> = processes
        .iter()
        .filter(|p| p.id != killed_id)
        .map(|p| (p.id.clone(), p.url.clone()))
        .collect();
    let readers = readers(&urls).await;
    let owner_url = processes
        .iter()
        .find(|p| p.id == killed_id)
        .unwrap()
        .url
        .clone();
    eventually(
        WITHIN,
        "the readers hold the owner's documents of the member",
        || async {
            let truth = member_docs(&rest_docs(&owner_url).await, member);
            readers_hold(&readers, member, &truth).then_some(())
        },
    )
    .await;
    let before: Vec<BTreeMap<String, (u64, Value)>> = readers
        .iter()
        .map(|(_, r)| held(&r.mirror.lock(), member))
        .collect();

    // SIGKILL: no release, no last publish; its Leases expire.
    let at = processes.iter().position(|p| p.id == killed_id).unwrap();
    let mut killed = processes.remove(at);
    let kill_at = Instant::now();
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    // A change right after the kill, which only the new owner can serve.
    let sim_a = &sims[0];
    let mut scaled = workload_manifest(&seed());
    scaled["spec"]["replicas"] = json!(2);
    sim_a.apply(&scaled).unwrap();
    let taker_url = processes
        .iter()
        .find(|p| p.id == taker)
        .unwrap()
        .url
        .clone();
    let app_path = format!("/api/v1/apps/{member}/shop/web");
    let takeover = eventually(
        WITHIN,
        "the new owner serves the change made after the kill",
        || async {
            let holder = lease_holders(&host).await.get(member)?.clone()?;
            let app = rest(&taker_url, &app_path).await?;
            (holder == taker && app["ready"] == 2 && app["phase"] == "Running")
                .then(|| kill_at.elapsed())
        },
    )
    .await;
    eprintln!(
        "{killed_id} (owner of {member}) killed; {taker} serves a change made after the kill {takeover:?} later (lease {LEASE:?})"
    );
    assert!(
        takeover <= TAKEOVER,
        "takeover took {takeover:?}, more than {TAKEOVER:?}\n{}",
        processes
            .iter()
            .map(Process::log_tail)
            .collect::<Vec<_>>()
            .join("\n")
    );
    // A change after the takeover: a new image.
    let mut rolled = seed();
    rolled.image = "registry.example/web:2".into();
    rolled.replicas = 2;
    sim_a.apply(&workload_manifest(&rolled)).unwrap();
    eventually(
        WITHIN,
        "every reader ends as the new owner's REST",
        || async {
            no_conflict(&readers, false);
            let truth = member_docs(&rest_docs(&taker_url).await, member);
            let app = truth.get(&format!("apps/{member}/shop/web"))?;
            if !app.to_string().contains("registry.example/web:2") || app["phase"] != "Running" {
                return None;
            }
            readers_hold(&readers, member, &truth).then_some(())
        },
    )
    .await;
    // The other survivor serves the same (the documents may have moved
    // on meanwhile: probes).
    for p in &processes {
        eventually(
            WITHIN,
            "every survivor's REST as the new owner's",
            || async {
                let served = member_docs(&rest_docs(&p.url).await, member);
                let owner = member_docs(&rest_docs(&taker_url).await, member);
                (served == owner).then_some(())
            },
        )
        .await;
    }
    no_conflict(&readers, false);
    for ((name, reader), before) in readers.iter().zip(&before) {
        let mirror = reader.mirror.lock();
        let after = held(&mirror, member);
        let revs: Vec<String> = before
            .iter()
            .map(|(t, (rev, _))| format!("{t} {rev}→{}", after[t].0))
            .collect();
        eprintln!(
            "{name}: {revs:?}; {} stale patches ignored on {:?}",
            mirror.stale.len(),
            mirror.stale
        );
        let cluster = format!("clusters/{member}");
        assert!(
            after[&cluster].0 > before[&cluster].0,
            "{name}: {cluster} did not move on from {}",
            before[&cluster].0
        );
        assert_eq!(
            after.keys().collect::<Vec<_>>(),
            before.keys().collect::<Vec<_>>(),
            "{name}: the member's topics"
        );
    }
    drop(readers);
    drop(processes);
}

/// The replicas of `watched` that run `member`: they hold its Lease and
/// their pipeline has started it.
fn running(watched: &[(String, Arc<Gateway>)], member: &str) -> Vec<String> {
    watched
        .iter()
        .filter(|(_, g)| {
            let owned = g
                .ownership()
                .is_some_and(|o| o.health().owned().contains(member));
            owned && g.pipeline().members().contains(member)
        })
        .map(|(id, _)| id.clone())
        .collect()
}

/// Waits for `settle`, failing at once with the poller's message when it
/// found two owners meanwhile.
async fn watching<T>(
    poller: &mut tokio::task::JoinHandle<usize>,
    settle: impl std::future::Future<Output = T>,
) -> T {
    tokio::select! {
        value = settle => value,
        ended = &mut *poller => match ended {
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            other => panic!("the poller ended early: {other:?}"),
        },
    }
}

/// Waits until each member's simulator has one watch open per resource
/// that REST on `url` shows `Syncing` for it, all of them (what one gateway
/// opens); returns the open watches by member. Fails with the counts seen
/// last.
async fn watched_as_by_one(sims: &[SimCluster], url: &str) -> Vec<usize> {
    let deadline = Instant::now() + WITHIN;
    loop {
        let mut open = Vec::new();
        let mut syncing = Vec::new();
        for s in sims {
            let sync = get_json(&format!("{url}/api/v1/clusters/{}/sync", s.name())).await;
            let docs = sync["items"].as_array().cloned().unwrap_or_default();
            let all = !docs.is_empty() && docs.iter().all(|d| d["phase"] == "Syncing");
            syncing.push(if all { docs.len() } else { 0 });
            open.push(s.stats().open_watches);
        }
        if open == syncing {
            return open;
        }
        assert!(
            Instant::now() < deadline,
            "watches open by member {open:?}, resources syncing {syncing:?} after {WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The "scaling 3 → 2 → 3": one replica stops gracefully, then a
/// new one joins. Polled every 10 ms, no member runs on two replicas at any
/// moment; subscribers on the replicas that stay up see the moved members'
/// revisions go on with no gap, no revision going back and no removal, and
/// end equal to REST there; each member ends watched as by one replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_three_to_two_to_three_moves_members_without_two_owners() {
    let _one = heavy().await;
    let Some(nats) = nats().await else {
        return;
    };
    let host = sim().await;
    let sims = three_members().await;
    let refs: Vec<&SimCluster> = sims.iter().collect();
    let members: Vec<String> = sims.iter().map(|s| s.name().to_string()).collect();
    let mut live = Vec::new();
    for id in ["r1", "r2", "r3"] {
        live.push(replica(id, &host, &refs, &nats).await);
    }
    let first = owners(&host, &live.iter().collect::<Vec<_>>(), &members).await;
    // One watch per synced resource of each member: as by one gateway.
    let watches = watched_as_by_one(&sims, &live[0].url).await;
    // The replica that stops owns a member; the one that joins takes one.
    let stopping = first[&members[0]].clone();
    let stayers: Vec<String> = live
        .iter()
        .map(|r| r.id.clone())
        .filter(|id| *id != stopping)
        .collect();
    let joining = (4..)
        .map(|i| format!("r{i}"))
        .find(|id| {
            let ids: Vec<String> = stayers.iter().cloned().chain([id.clone()]).collect();
            members.iter().any(|m| preferred_owner(m, &ids) == Some(id))
        })
        .unwrap();
    let urls: Vec<(String, String)> = live
        .iter()
        .filter(|r| r.id != stopping)
        .map(|r| (r.id.clone(), r.url.clone()))
        .collect();
    let readers = readers(&urls).await;
    agree(
        &readers,
        &urls,
        "the readers hold what their replica serves",
    )
    .await;
    let before: Vec<BTreeMap<String, u64>> = readers
        .iter()
        .map(|(_, r)| {
            let mirror = r.mirror.lock();
            mirror
                .docs
                .iter()
                .map(|(t, (rev, _))| (t.clone(), *rev))
                .collect()
        })
        .collect();

    let watched: Watched = Arc::new(parking_lot::Mutex::new(
        live.iter()
            .map(|r| (r.id.clone(), r.gateway.clone()))
            .collect(),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let mut poller = watch_for_two_owners(watched.clone(), members.clone(), stop.clone(), running);

    // 3 → 2: a graceful stop (SIGTERM in the binary).
    let at = live.iter().position(|r| r.id == stopping).unwrap();
    let stopped = live.remove(at);
    let started = Instant::now();
    stopped.token.cancel();
    stopped.gateway.stop().await;
    // Stopped, its pipeline keeps its clients: it runs nothing any more.
    watched.lock().retain(|(id, _)| *id != stopping);
    let down = watching(
        &mut poller,
        owners(&host, &live.iter().collect::<Vec<_>>(), &members),
    )
    .await;
    let scaled_down = started.elapsed();

    // 2 → 3: a new replica joins.
    let started = Instant::now();
    let joined = replica(&joining, &host, &refs, &nats).await;
    watched
        .lock()
        .push((joined.id.clone(), joined.gateway.clone()));
    live.push(joined);
    let up = watching(
        &mut poller,
        owners(&host, &live.iter().collect::<Vec<_>>(), &members),
    )
    .await;
    let scaled_up = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let polls = poller.await.expect("never two owners at once");
    assert!(polls > 10, "the pipelines were polled {polls} times");

    let moved_down: BTreeSet<&String> = members.iter().filter(|m| first[*m] != down[*m]).collect();
    let moved_up: BTreeSet<&String> = members.iter().filter(|m| down[*m] != up[*m]).collect();
    eprintln!(
        "owners {first:?} → stop {stopping}: {down:?} in {scaled_down:?} → {joining} joins: {up:?} in {scaled_up:?}; {polls} polls, never two owners"
    );
    assert!(
        !moved_down.is_empty() && !moved_up.is_empty(),
        "members moved both ways"
    );
    assert!(up.values().any(|o| *o == joining));

    // Every member is watched again as by one replica.
    assert_eq!(watched_as_by_one(&sims, &live[0].url).await, watches);
    eprintln!("watches open by member before and after the moves: {watches:?}");
    // The readers on the replicas that stayed: nothing conflicting, and
    // the moved members' documents moved on, as REST serves them.
    agree(&readers, &urls, "the readers end as their replica serves").await;
    no_conflict(&readers, true);
    for ((name, reader), before) in readers.iter().zip(&before) {
        let mirror = reader.mirror.lock();
        for m in moved_down.iter().chain(&moved_up) {
            let cluster = format!("clusters/{m}");
            let (rev, _) = &mirror.docs[&cluster];
            assert!(*rev > before[&cluster], "{name}: {cluster} stayed at {rev}");
        }
        eprintln!(
            "{name}: {} messages; clusters at {:?}",
            mirror.messages,
            members
                .iter()
                .map(|m| (m.as_str(), mirror.docs[&format!("clusters/{m}")].0))
                .collect::<Vec<_>>()
        );
    }
    drop(readers);
    for r in &live {
        r.token.cancel();
        r.gateway.stop().await;
    }
}
