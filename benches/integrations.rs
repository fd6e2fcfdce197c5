//! Vendor-client overhead against a loopback server (wiremock): a WeCom
//! approval listing over 200 pages of 100 records, and a Feishu file send
//! (token, 10 MB multipart upload, file message). kinet's clients against
//! Python's requests (a keep-alive Session) doing the same calls against the
//! same server, in the same run. Each run starts with a fresh client, so
//! both sides fetch a token every run.
//!
//! ```text
//! pip install requests   # into python3, or set KINET_PYTHON
//! cargo bench --bench integrations --features integrations
//! ```
#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::process::Command;
use std::time::Instant;

use kinet::core::tool::CancellationToken;
use kinet::tools::integrations::{
    FeishuClient, FeishuConfig, FeishuRecipient, WeComClient, WeComConfig,
};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const RUNS: usize = 9;
const PAGES: usize = 200;
const FILE_BYTES: usize = 10 * 1024 * 1024;

/// Pages `p0..p{PAGES-1}` of 100 approval numbers, chained by cursor.
struct Pager;

impl Respond for Pager {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let cursor = body["new_cursor"].as_str().unwrap();
        let page: usize = cursor.strip_prefix('p').map_or(0, |n| n.parse().unwrap());
        let numbers: Vec<String> = (0..100)
            .map(|i| format!("2023110{page:04}{i:03}"))
            .collect();
        let next = if page + 1 < PAGES {
            format!("p{}", page + 1)
        } else {
            String::new()
        };
        ResponseTemplate::new(200).set_body_json(
            json!({"errcode": 0, "errmsg": "ok", "sp_no_list": numbers, "new_next_cursor": next}),
        )
    }
}

fn ok(body: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(body)
}

async fn server() -> MockServer {
    let server = MockServer::start().await;
    let routes = [
        (
            "GET",
            "/cgi-bin/gettoken",
            ok(
                json!({"errcode": 0, "errmsg": "ok", "access_token": "w-token", "expires_in": 7200}),
            ),
        ),
        (
            "POST",
            "/open-apis/auth/v3/tenant_access_token/internal",
            ok(json!({"code": 0, "msg": "ok", "tenant_access_token": "t-token", "expire": 7200})),
        ),
        (
            "POST",
            "/open-apis/im/v1/files",
            ok(json!({"code": 0, "msg": "success", "data": {"file_key": "file_v3_1"}})),
        ),
        (
            "POST",
            "/open-apis/im/v1/messages",
            ok(json!({"code": 0, "msg": "success", "data": {"message_id": "om_1"}})),
        ),
    ];
    for (verb, route, response) in routes {
        Mock::given(method(verb))
            .and(path(route))
            .respond_with(response)
            .mount(&server)
            .await;
    }
    Mock::given(method("POST"))
        .and(path("/cgi-bin/oa/getapprovalinfo"))
        .respond_with(Pager)
        .mount(&server)
        .await;
    server
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = server().await;
    let base = server.uri();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("clip.mp4");
    std::fs::write(&file, vec![7u8; FILE_BYTES]).unwrap();
    let cancel = CancellationToken::new();

    let mut listing = Vec::new();
    let mut sending = Vec::new();
    for _ in 0..RUNS {
        let mut config = WeComConfig::new("ww1", "s");
        config.base_url = base.clone();
        let client = WeComClient::new(config);
        let start = Instant::now();
        let (numbers, more) = client
            .approval_numbers(1698768000, 1701359999, None, None, usize::MAX, &cancel)
            .await
            .unwrap();
        listing.push(start.elapsed().as_secs_f64() * 1e3);
        assert!(numbers.len() == PAGES * 100 && !more);

        let mut config = FeishuConfig::new("cli_1", "s");
        config.base_url = base.clone();
        let client = FeishuClient::new(config);
        let start = Instant::now();
        client
            .send_file(&FeishuRecipient::Chat("oc_1".into()), &file, &cancel)
            .await
            .unwrap();
        sending.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let (listing, sending) = (median(listing), median(sending));
    println!(
        "kinet WeCom approval list, {PAGES} pages x 100: {listing:.1} ms ({:.0} µs/page)",
        listing * 1e3 / PAGES as f64
    );
    println!(
        "kinet Feishu send_file, {} MB: {sending:.1} ms",
        FILE_BYTES / (1024 * 1024)
    );

    let python = std::env::var("KINET_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/benches/integrations/requests_peer.py"
    );
    let output = tokio::task::spawn_blocking(move || {
        Command::new(&python)
            .args([
                script,
                &base,
                &file.to_string_lossy(),
                &RUNS.to_string(),
                &PAGES.to_string(),
            ])
            .output()
    })
    .await
    .unwrap();
    match output {
        Ok(out) if out.status.success() => {
            let value: Value = serde_json::from_slice(&out.stdout).unwrap();
            let peer_listing = value["approval_list_ms"].as_f64().unwrap();
            let peer_sending = value["feishu_send_ms"].as_f64().unwrap();
            println!(
                "python requests approval list: {peer_listing:.1} ms; kinet/requests = {:.2}",
                listing / peer_listing
            );
            println!(
                "python requests Feishu send: {peer_sending:.1} ms; kinet/requests = {:.2}",
                sending / peer_sending
            );
        }
        Ok(out) => eprintln!(
            "python peer failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(error) => eprintln!("python peer unavailable: {error}; install requests"),
    }
}
