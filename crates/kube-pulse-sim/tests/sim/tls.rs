//! A simulator over HTTPS (`SimConfig::tls`, `kube-pulse sim --tls`): its
//! kubeconfig carries the CA and the token, and kubectl, which sends a
//! bearer token only over TLS, uses it as written; kube-rs too.

use std::process::Command;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::ListParams;
use pulse_testkit::sim::sim_with;

#[tokio::test]
async fn kubectl_and_kube_rs_reach_a_tls_simulator_with_its_token() {
    let sim = sim_with(|c| {
        c.token = Some("sim-token-0123456789".into());
        c.tls = true;
    })
    .await;
    assert!(sim.url().starts_with("https://127.0.0.1:"), "{}", sim.url());
    assert!(
        sim.ca_pem()
            .is_some_and(|p| p.contains("BEGIN CERTIFICATE"))
    );

    let dir = std::env::temp_dir().join(format!("kube-pulse-sim-tls-{}", sim.addr().port()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sim.kubeconfig");
    std::fs::write(&path, sim.kubeconfig("sim")).unwrap();
    let kubectl = |args: &[&str]| {
        let path = path.clone();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let home = dir.clone();
        tokio::task::spawn_blocking(move || {
            Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&path)
                .arg("--request-timeout=20s")
                .args(&args)
                .env("HOME", home)
                .output()
                .expect("kubectl is installed (scripts/test.sh installs it)")
        })
    };
    let out = kubectl(&["get", "namespaces", "-o", "name"]).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("namespace/shop"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let namespaces: Api<Namespace> = Api::all(sim.client());
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.iter().any(|n| n == "shop"), "{names:?}");

    // Without the token the API refuses, over TLS as before.
    let mut anonymous = sim.kube_config();
    anonymous.auth_info.token = None;
    let anonymous: Api<Namespace> = Api::all(kube::Client::try_from(anonymous).unwrap());
    match anonymous.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 401),
        other => panic!("expected 401, got {other:?}"),
    }
    std::fs::remove_dir_all(&dir).ok();
    sim.shutdown().await;
}
