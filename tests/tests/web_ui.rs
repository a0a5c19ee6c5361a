//! The extender's dashboard in a real browser: headless Chromium (Debian `chromium`,
//! driven through `chromedriver` with fantoccini) loads the demo cluster's `/ui`, and
//! every number it shows is checked against the JSON API it is built from, and against
//! `hamictl` reading the API server. Screenshots go to `target/dashboard-screenshots/`.
//!
//! Chromium and chromedriver are found through `HAMI_CHROMIUM` / `HAMI_CHROMEDRIVER`,
//! else on the PATH (`.ci/tools.sh` installs both). Without them these tests fail,
//! unless `HAMI_SKIP_BROWSER_TESTS=1` says to skip them on purpose.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use hami_e2e::scenario::{self, demo_examples};
use hami_e2e::{ClusterSpec, DemoCluster, StandaloneExtender, Timing};
use hami_testkit::ApiServer;
use hami_testkit::fixture::{GpuNode, GpuPod};
use hami_testkit::resources::NODES;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

/// How long the page may take to show what the API says.
const PAGE_WAIT: Duration = Duration::from_secs(20);

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| p.is_file())
}

/// Chromium and chromedriver, or `None` when the tests are skipped on purpose.
fn browser_tools() -> Option<(PathBuf, PathBuf)> {
    if std::env::var("HAMI_SKIP_BROWSER_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("HAMI_SKIP_BROWSER_TESTS=1: skipping the dashboard's browser test");
        return None;
    }
    let find = |var: &str, names: &[&str]| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_file())
            .or_else(|| on_path(names))
    };
    match (
        find("HAMI_CHROMIUM", &["chromium", "chromium-browser"]),
        find("HAMI_CHROMEDRIVER", &["chromedriver"]),
    ) {
        (Some(chromium), Some(driver)) => Some((chromium, driver)),
        (chromium, driver) => panic!(
            "headless Chromium is needed (found chromium {chromium:?}, chromedriver {driver:?}). \
             Run `bash .ci/tools.sh` (apt-get install chromium chromium-driver), point \
             HAMI_CHROMIUM and HAMI_CHROMEDRIVER at the binaries, or set \
             HAMI_SKIP_BROWSER_TESTS=1 to skip these tests deliberately."
        ),
    }
}

/// Where screenshots go: `target/dashboard-screenshots/` of the test binary's target
/// directory.
fn screenshot_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test binary>
    let target = exe.ancestors().nth(3).unwrap_or(Path::new("target"));
    let dir = target.join("dashboard-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// chromedriver and one headless Chromium session.
struct Browser {
    driver: Child,
    client: Option<Client>,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Browser {
    async fn start() -> Option<Browser> {
        let (chromium, chromedriver) = browser_tools()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver.display()));
        let profile = tempfile::tempdir().unwrap();
        let mut browser = Browser {
            driver,
            client: None,
            _profile: profile,
        };
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !matches!(hami_e2e::http::get(addr, "/status").await, Ok((200, _))) {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1280,1200", "--hide-scrollbars",
                    format!("--user-data-dir={}", browser._profile.path().display()),
                ],
            }),
        );
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://{addr}"))
            .await
            .unwrap();
        browser.client = Some(client);
        Some(browser)
    }

    fn client(&self) -> &Client {
        self.client.as_ref().unwrap()
    }

    async fn goto(&self, url: &str) {
        self.client().goto(url).await.unwrap();
    }

    /// Runs `script` (a function body) in the page; its return value.
    async fn eval(&self, script: &str) -> Value {
        self.client().execute(script, vec![]).await.unwrap()
    }

    /// Waits until `script` returns something truthy; that value.
    async fn wait_for(&self, what: &str, script: &str) -> Value {
        let deadline = Instant::now() + PAGE_WAIT;
        loop {
            let v = self.eval(script).await;
            if !(v.is_null() || v == json!(false) || v == json!(0) || v == json!("")) {
                return v;
            }
            assert!(Instant::now() < deadline, "the page never showed {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn attr(&self, css: &str, attr: &str) -> String {
        self.client()
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .attr(attr)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{css} has no {attr}"))
    }

    async fn text(&self, css: &str) -> String {
        self.client()
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .text()
            .await
            .unwrap()
    }

    async fn count(&self, css: &str) -> usize {
        self.client()
            .find_all(Locator::Css(css))
            .await
            .unwrap()
            .len()
    }

    async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client().screenshot().await.unwrap();
        save_png(name, png)
    }

    /// The page's content only (`body`, as tall as what it shows, not the window): the
    /// README's picture.
    async fn screenshot_content(&self, name: &str) -> PathBuf {
        let body = self.client().find(Locator::Css("body")).await.unwrap();
        save_png(name, body.screenshot().await.unwrap())
    }

    async fn close(mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.close().await;
        }
    }
}

fn save_png(name: &str, png: Vec<u8>) -> PathBuf {
    assert!(png.starts_with(b"\x89PNG"), "{name}: not a PNG");
    let path = screenshot_dir().join(name);
    std::fs::write(&path, png).unwrap();
    path
}

async fn api(admin: SocketAddr, path: &str) -> Value {
    let (code, body) = hami_e2e::http::get(admin, path).await.unwrap();
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// `hamictl ARGS -o json` against the API server at `url`.
async fn hamictl(url: &str, args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, hami_testkit::emulator::kubeconfig(url)).unwrap();
    let kubeconfig = kubeconfig.display().to_string();
    let argv = ["hamictl"]
        .into_iter()
        .chain(args.iter().copied())
        .chain(["--kubeconfig", &kubeconfig, "-o", "json"])
        .map(OsString::from)
        .collect();
    let out = hamictl::run_from_async(argv, hamictl::Style::PLAIN)
        .await
        .unwrap();
    serde_json::from_str(&out.stdout).unwrap()
}

fn as_u64(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_demo_cluster_as_its_api_and_hamictl_do() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let cluster = DemoCluster::start(ClusterSpec::demo().timing(Timing::fast()))
        .await
        .unwrap();
    let outcome = scenario::run(&cluster, &demo_examples()).await;
    assert!(outcome.ok(), "the demo misbehaved: {:?}", outcome.problems);
    let admin = cluster.extender_admin().unwrap();
    let base = format!("http://{admin}/ui");

    // The overview: every figure as the API gives it.
    browser.goto(&base).await;
    browser
        .wait_for(
            "the overview",
            "return document.querySelector('#card-gpus') !== null",
        )
        .await;
    let doc = api(admin, "/api/v1/cluster").await;
    let s = &doc["summary"];
    assert_eq!(
        browser.attr("#card-gpus", "data-value").await,
        s["gpus"].to_string()
    );
    assert_eq!(
        browser.attr("#card-nodes", "data-value").await,
        s["nodes"].to_string()
    );
    for (card, key) in [
        ("memory", "memory_mib"),
        ("cores", "cores"),
        ("slots", "slots"),
    ] {
        let css = format!("#card-{card}");
        assert_eq!(
            browser.attr(&css, "data-used").await,
            s[key]["used"].to_string(),
            "{card}"
        );
        assert_eq!(
            browser.attr(&css, "data-total").await,
            s[key]["total"].to_string(),
            "{card}"
        );
    }
    let mem = &s["memory_mib"];
    let shown = browser.text("#card-memory .value").await;
    assert_eq!(
        shown,
        format!(
            "{:.1} / {:.1}",
            as_u64(&mem["used"]) as f64 / 1024.0,
            as_u64(&mem["total"]) as f64 / 1024.0
        )
    );
    assert_eq!(browser.attr("#card-pending", "data-value").await, "1");
    assert_eq!(doc["pending"][0]["name"], "too-big");
    assert_eq!(
        browser.count("#models tr").await,
        s["by_model"].as_array().unwrap().len()
    );
    let nodes = doc["nodes"].as_array().unwrap();
    assert_eq!(browser.count("#node-list .vrow").await, nodes.len());
    for n in nodes {
        let row = format!("#node-list [data-node='{}']", n["name"].as_str().unwrap());
        assert_eq!(
            browser.text(&format!("{row} [data-field='pods']")).await,
            n["pods"].to_string()
        );
        assert_eq!(
            browser.text(&format!("{row} [data-field='gpus']")).await,
            n["gpus"].to_string()
        );
    }
    browser.screenshot_content("overview.png").await;

    // A node page by deep link: each GPU's bars and pods as the API has them, and as
    // hamictl top gpus reads them from the API server.
    let busiest = nodes.iter().max_by_key(|n| as_u64(&n["pods"])).unwrap()["name"]
        .as_str()
        .unwrap()
        .to_string();
    browser.goto(&format!("{base}#/nodes/{busiest}")).await;
    let node = api(admin, &format!("/api/v1/nodes/{busiest}")).await;
    let devices = node["devices"].as_array().unwrap();
    browser
        .wait_for(
            "the node's GPUs",
            &format!(
                "return document.querySelectorAll('#gpus .gpu').length === {}",
                devices.len()
            ),
        )
        .await;
    for g in devices {
        let card = format!("#gpus [data-uuid='{}']", g["uuid"].as_str().unwrap());
        for (meter, key) in [
            ("Memory", "memory_mib"),
            ("Compute", "cores"),
            ("Slots", "slots"),
        ] {
            let css = format!("{card} [data-meter='{meter}']");
            assert_eq!(
                browser.attr(&css, "data-used").await,
                g[key]["used"].to_string()
            );
            assert_eq!(
                browser.attr(&css, "data-total").await,
                g[key]["total"].to_string()
            );
        }
        assert_eq!(
            browser.count(&format!("{card} li[data-pod]")).await,
            g["pods"].as_array().unwrap().len()
        );
    }
    let top = hamictl(&cluster.api().url(), &["top", "gpus", "--node", &busiest]).await;
    assert_eq!(&top["gpus"], &node["devices"]);
    browser.screenshot("node.png").await;

    // The pending pod: node by node, the reasons /filter gave, the same as hamictl's.
    browser.goto(&format!("{base}#/pods/default/too-big")).await;
    let explained = api(admin, "/api/v1/pods/default/too-big/explain").await;
    let failed = explained["failed_nodes"].as_object().unwrap();
    assert_eq!(failed.len(), cluster.spec().nodes.len());
    browser
        .wait_for(
            "the reasons per node",
            &format!(
                "return document.querySelectorAll('#verdicts .vrow').length === {}",
                failed.len()
            ),
        )
        .await;
    assert!(browser.text("#verdict").await.starts_with("No node fits"));
    for (node, reason) in failed {
        let shown = browser
            .text(&format!("#verdicts [data-node='{node}'] .nofit"))
            .await;
        assert_eq!(Some(shown.as_str()), reason.as_str(), "{node}");
        assert!(reason.as_str().unwrap().contains("CardInsufficientMemory"));
    }
    assert!(browser.text("#refused").await.contains("no available node"));
    let from_hamictl = hamictl(&cluster.api().url(), &["explain", "pod", "too-big"]).await;
    assert_eq!(&from_hamictl["failed_nodes"], &explained["failed_nodes"]);
    browser.screenshot("pending-pod.png").await;

    // Live: a new pod shows up on the open overview without a reload.
    browser.goto(&base).await;
    browser
        .wait_for(
            "the overview",
            "return document.querySelector('#card-memory') !== null",
        )
        .await;
    browser
        .eval("window.__notReloaded = true; return true;")
        .await;
    let before = as_u64(&api(admin, "/api/v1/cluster").await["summary"]["memory_mib"]["used"]);
    cluster
        .create_pod(&GpuPod::new("late-comer").gpus(1).gpumem(1500))
        .await
        .unwrap();
    cluster
        .wait_running("default", "late-comer", scenario::SETTLE_TIMEOUT)
        .await
        .unwrap();
    let want = before + 1500;
    browser
        .wait_for(
            "the new pod's memory",
            &format!("return document.querySelector('#card-memory').dataset.used === '{want}'"),
        )
        .await;
    assert_eq!(
        browser.eval("return window.__notReloaded === true").await,
        json!(true)
    );
    assert!(browser.text("#status").await.starts_with("live"));

    browser.close().await;
    cluster.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_nodes_stay_responsive_in_a_virtualised_list() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let server = ApiServer::start().await.unwrap();
    for i in 0..1000 {
        let node = GpuNode::new(&format!("node-{i:04}"), 4).to_object();
        server.store().create(&NODES, None, node).unwrap();
    }
    let client = hami_e2e::cluster::client_for(&server.url()).unwrap();
    let extender = StandaloneExtender::start(&ClusterSpec::demo(), client)
        .await
        .unwrap();
    let admin = extender.admin();
    let doc = api(admin, "/api/v1/cluster").await;
    assert_eq!(doc["nodes"].as_array().unwrap().len(), 1000);
    assert_eq!(doc["summary"]["gpus"], 4000);

    let started = Instant::now();
    browser.goto(&format!("http://{admin}/ui")).await;
    browser
        .wait_for(
            "1,000 nodes in the list",
            "const l = document.querySelector('#node-list'); return l && l.dataset.count === '1000'",
        )
        .await;
    let shown_in = started.elapsed();
    // Only the rows in view exist: the page does not build 1,000 of them.
    let rows = browser.count("#node-list .vrow").await;
    assert!((10..=60).contains(&rows), "{rows} rows in the document");
    assert!(shown_in < Duration::from_secs(15), "took {shown_in:?}");
    // Scrolled to the end, the last node is there.
    browser
        .eval("document.querySelector('#node-list').scrollTop = 1e9; return true;")
        .await;
    browser
        .wait_for(
            "the last node after scrolling",
            "return document.querySelector(\"#node-list [data-node='node-0999']\") !== null",
        )
        .await;
    browser
        .eval("document.querySelector('#node-list').scrollIntoView(); return true;")
        .await;
    browser.screenshot("nodes-1000.png").await;
    // Filtering narrows the list to one row.
    browser
        .client()
        .find(Locator::Css("#node-filter"))
        .await
        .unwrap()
        .send_keys("node-0500")
        .await
        .unwrap();
    browser
        .wait_for(
            "one node after filtering",
            "return document.querySelectorAll('#node-list .vrow').length === 1",
        )
        .await;
    assert_eq!(browser.text("#node-count").await, "1 of 1000 nodes");

    browser.close().await;
    extender.stop().await.unwrap();
}
