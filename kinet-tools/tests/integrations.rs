//! Vendor integrations against a loopback wiremock server replaying the
//! documented request and response bodies of MiniMax, Feishu and WeCom.
#![cfg(all(
    feature = "integrations-minimax",
    feature = "integrations-feishu",
    feature = "integrations-wecom"
))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kinet_core::builder::Workspace as AgentWorkspace;
use kinet_core::tool::engine::EngineCtx as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kinet_core::confirm::{ConfirmError, ConfirmRequest};
use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_core::tool::ToolErrorKind;
use kinet_core::tool::engine::EventSink;
use kinet_core::{
    Agent, AgentEvent, ConfirmDecision, ConfirmHandler, Tool, ToolCtx, ToolError, ToolOutput,
};
use kinet_tools::integrations::*;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use wiremock::matchers::{body_partial_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

const APP_SECRET: &str = "feishu-app-secret-DO-NOT-LEAK";
const CORP_SECRET: &str = "wecom-corp-secret-DO-NOT-LEAK";
const MINIMAX_KEY: &str = "minimax-key-DO-NOT-LEAK";
const TOKENS: [&str; 4] = [
    "t-first-token",
    "t-second-token",
    "wecom-token-1",
    "wecom-token-2",
];

struct Workspace {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ctx: ToolCtx,
    events: mpsc::UnboundedReceiver<AgentEvent>,
}

fn workspace() -> Workspace {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let (tx, events) = mpsc::unbounded_channel();
    let ctx = ToolCtx::new(&root)
        .with_roots(vec![root.clone()])
        .with_events(EventSink::new(tx))
        .for_call("call-1", "tool");
    Workspace {
        _dir: dir,
        root,
        ctx,
        events,
    }
}

impl Workspace {
    fn file(&self, name: &str, bytes: &[u8]) {
        std::fs::write(self.root.join(name), bytes).unwrap();
    }

    fn drain_events(&mut self) -> Vec<AgentEvent> {
        let mut events = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            events.push(event);
        }
        events
    }
}

async fn call<T: Tool>(tool: &T, ctx: &ToolCtx, args: Value) -> Result<ToolOutput, ToolError> {
    tool.call(serde_json::from_value(args).unwrap(), ctx).await
}

/// No credential or token in anything the host or the model sees.
fn assert_no_secrets(what: &str) {
    for secret in [APP_SECRET, CORP_SECRET, MINIMAX_KEY]
        .iter()
        .chain(TOKENS.iter())
    {
        assert!(!what.contains(secret), "{secret} leaked into: {what}");
    }
}

fn json_response(body: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(body)
}

async fn requests_to(server: &MockServer, to: &str) -> Vec<Request> {
    server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.url.path() == to)
        .collect()
}

// ---------------------------------------------------------------- Feishu

const FEISHU_TOKEN: &str = "/open-apis/auth/v3/tenant_access_token/internal";
const FEISHU_FILES: &str = "/open-apis/im/v1/files";
const FEISHU_MESSAGES: &str = "/open-apis/im/v1/messages";

fn feishu_token(token: &str, expire: u64) -> ResponseTemplate {
    json_response(json!({"code": 0, "msg": "ok", "tenant_access_token": token, "expire": expire}))
}

fn feishu_uploaded() -> ResponseTemplate {
    json_response(json!({"code": 0, "msg": "success", "data": {"file_key": "file_v3_00a1_7d1e"}}))
}

fn feishu_sent() -> ResponseTemplate {
    json_response(json!({
        "code": 0, "msg": "success",
        "data": {
            "message_id": "om_dc13264520392913993dd051dba21dcf",
            "msg_type": "file",
            "chat_id": "oc_5ad11d72b830411d72b836c20",
            "body": {"content": "{\"file_key\":\"file_v3_00a1_7d1e\"}"}
        }
    }))
}

fn feishu_tool(server: &MockServer) -> FeishuSendFileTool {
    let mut config = FeishuConfig::new("cli_a1b2c3", APP_SECRET);
    config.base_url = server.uri();
    FeishuSendFileTool::new(FeishuClient::new(config))
}

#[tokio::test]
async fn feishu_uploads_with_the_right_file_type_and_sends_a_file_message_reusing_the_token() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(FEISHU_TOKEN))
        .and(body_partial_json(
            json!({"app_id": "cli_a1b2c3", "app_secret": APP_SECRET}),
        ))
        .respond_with(feishu_token(TOKENS[0], 7200))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(FEISHU_FILES))
        .and(header(
            "authorization",
            format!("Bearer {}", TOKENS[0]).as_str(),
        ))
        .respond_with(feishu_uploaded())
        .expect(2)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(FEISHU_MESSAGES))
        .and(header(
            "authorization",
            format!("Bearer {}", TOKENS[0]).as_str(),
        ))
        .respond_with(feishu_sent())
        .expect(2)
        .mount(&server)
        .await;
    let mut ws = workspace();
    ws.file("report.pdf", b"%PDF-1.7 quarterly numbers");
    ws.file("notes.md", b"# notes");
    let tool = feishu_tool(&server);

    let out = call(
        &tool,
        &ws.ctx,
        json!({"chat_id": "oc_5ad11d72b830411d72b836c20", "path": "report.pdf"}),
    )
    .await
    .unwrap();
    assert!(
        out.text
            .contains("message om_dc13264520392913993dd051dba21dcf"),
        "{}",
        out.text
    );
    let out2 = call(
        &tool,
        &ws.ctx,
        json!({"open_id": "ou_7d8a6e6df7621556ce0d21922b676706ccs", "path": "notes.md"}),
    )
    .await
    .unwrap();

    let uploads = requests_to(&server, FEISHU_FILES).await;
    let first = String::from_utf8_lossy(&uploads[0].body);
    assert!(
        first.contains("name=\"file_type\"\r\n\r\npdf\r\n"),
        "{first}"
    );
    assert!(
        first.contains("name=\"file_name\"\r\n\r\nreport.pdf\r\n"),
        "{first}"
    );
    assert!(first.contains("filename=\"report.pdf\""), "{first}");
    assert!(first.contains("%PDF-1.7 quarterly numbers"), "{first}");
    let second = String::from_utf8_lossy(&uploads[1].body);
    assert!(
        second.contains("name=\"file_type\"\r\n\r\nstream\r\n"),
        "{second}"
    );

    let messages = requests_to(&server, FEISHU_MESSAGES).await;
    assert_eq!(messages[0].url.query(), Some("receive_id_type=chat_id"));
    assert_eq!(messages[1].url.query(), Some("receive_id_type=open_id"));
    let body: Value = serde_json::from_slice(&messages[0].body).unwrap();
    assert_eq!(body["receive_id"], "oc_5ad11d72b830411d72b836c20");
    assert_eq!(body["msg_type"], "file");
    assert_eq!(body["content"], "{\"file_key\":\"file_v3_00a1_7d1e\"}");

    let seen = format!("{out:?}{out2:?}{:?}", ws.drain_events());
    assert_no_secrets(&seen);
}

#[tokio::test]
async fn feishu_refreshes_the_token_on_the_invalid_token_code_and_after_expiry() {
    let server = MockServer::start().await;
    // The first token is short-lived; the platform also calls it invalid.
    Mock::given(method("POST"))
        .and(path(FEISHU_TOKEN))
        .respond_with(feishu_token(TOKENS[0], 7200))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(FEISHU_TOKEN))
        .respond_with(feishu_token(TOKENS[1], 1))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(FEISHU_FILES))
        .and(header("authorization", format!("Bearer {}", TOKENS[0]).as_str()))
        .respond_with(ResponseTemplate::new(400).set_body_json(
            json!({"code": 99991663, "msg": "Invalid access token for authorization. Please make a request with token attached."}),
        ))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(FEISHU_FILES))
        .and(header(
            "authorization",
            format!("Bearer {}", TOKENS[1]).as_str(),
        ))
        .respond_with(feishu_uploaded())
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(FEISHU_MESSAGES))
        .respond_with(feishu_sent())
        .mount(&server)
        .await;
    let ws = workspace();
    ws.file("a.txt", b"hello");
    let tool = feishu_tool(&server);
    let args = json!({"chat_id": "oc_1", "path": "a.txt"});

    call(&tool, &ws.ctx, args.clone()).await.unwrap();
    assert_eq!(
        requests_to(&server, FEISHU_TOKEN).await.len(),
        2,
        "refetched after 99991663"
    );
    assert_eq!(
        requests_to(&server, FEISHU_FILES).await.len(),
        2,
        "upload retried once"
    );
    let message = &requests_to(&server, FEISHU_MESSAGES).await[0];
    assert_eq!(
        message.headers.get("authorization").unwrap(),
        &format!("Bearer {}", TOKENS[1])
    );

    // The second token lives 1 s (renewed a quarter early): a later call
    // fetches a third.
    tokio::time::sleep(Duration::from_millis(900)).await;
    call(&tool, &ws.ctx, args).await.unwrap();
    assert_eq!(
        requests_to(&server, FEISHU_TOKEN).await.len(),
        3,
        "refetched after expiry"
    );
}

#[tokio::test]
async fn feishu_vendor_errors_become_clear_tool_errors_without_secrets() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(FEISHU_TOKEN))
        .respond_with(feishu_token(TOKENS[0], 7200))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(FEISHU_FILES))
        .respond_with(feishu_uploaded())
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(FEISHU_MESSAGES))
        .respond_with(
            ResponseTemplate::new(400).set_body_json(
                json!({"code": 230002, "msg": "Bot/User can NOT be out of the chat."}),
            ),
        )
        .mount(&server)
        .await;
    let ws = workspace();
    ws.file("a.txt", b"hello");
    let err = call(
        &feishu_tool(&server),
        &ws.ctx,
        json!({"chat_id": "oc_gone", "path": "a.txt"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::Failed);
    assert_eq!(
        err.message(),
        "Feishu /open-apis/im/v1/messages failed with error code 230002: Bot/User can NOT be out of the chat."
    );

    // Bad app credentials: the token call fails, naming the API.
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(FEISHU_TOKEN))
        .respond_with(json_response(
            json!({"code": 10003, "msg": "invalid param"}),
        ))
        .mount(&server)
        .await;
    let err = call(
        &feishu_tool(&server),
        &ws.ctx,
        json!({"chat_id": "oc_1", "path": "a.txt"}),
    )
    .await
    .unwrap_err();
    assert!(
        err.message()
            .contains(&format!("{FEISHU_TOKEN} failed with error code 10003")),
        "{}",
        err.message()
    );
    assert_no_secrets(&format!("{err:?}"));

    // Neither or both recipients.
    let err = call(&feishu_tool(&server), &ws.ctx, json!({"path": "a.txt"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::InvalidArguments);
    // Outside the workspace.
    let err = call(
        &feishu_tool(&server),
        &ws.ctx,
        json!({"chat_id": "oc_1", "path": "/etc/hostname"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::PermissionDenied);
}

#[tokio::test]
async fn files_over_the_vendor_limit_are_refused_before_any_request() {
    let server = MockServer::start().await;
    let ws = workspace();
    let big = std::fs::File::create(ws.root.join("big.mp4")).unwrap();
    big.set_len(30 * 1024 * 1024 + 1).unwrap();
    let err = call(
        &feishu_tool(&server),
        &ws.ctx,
        json!({"chat_id": "oc_1", "path": "big.mp4"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::InvalidArguments);
    assert!(
        err.message()
            .contains("over Feishu's limit of 31457280 bytes"),
        "{}",
        err.message()
    );

    let wecom_big = std::fs::File::create(ws.root.join("big.zip")).unwrap();
    wecom_big.set_len(20 * 1024 * 1024 + 1).unwrap();
    let err = call(
        &wecom_send_tool(&server),
        &ws.ctx,
        json!({"touser": "zhangsan", "path": "big.zip"}),
    )
    .await
    .unwrap_err();
    assert!(
        err.message()
            .contains("over WeCom's limit of 20971520 bytes"),
        "{}",
        err.message()
    );
    ws.file("tiny.txt", b"hi");
    let err = call(
        &wecom_send_tool(&server),
        &ws.ctx,
        json!({"touser": "zhangsan", "path": "tiny.txt"}),
    )
    .await
    .unwrap_err();
    assert!(
        err.message().contains("under WeCom's minimum of 5 bytes"),
        "{}",
        err.message()
    );
    let err = call(
        &feishu_tool(&server),
        &ws.ctx,
        json!({"chat_id": "oc_1", "path": "missing.txt"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::NotFound);
    assert!(
        server.received_requests().await.unwrap().is_empty(),
        "nothing may be sent"
    );
}

// ----------------------------------------------------------------- WeCom

const WECOM_TOKEN: &str = "/cgi-bin/gettoken";
const WECOM_UPLOAD: &str = "/cgi-bin/media/upload";
const WECOM_SEND: &str = "/cgi-bin/message/send";
const WECOM_APPCHAT: &str = "/cgi-bin/appchat/send";
const WECOM_APPROVALS: &str = "/cgi-bin/oa/getapprovalinfo";
const WECOM_DETAIL: &str = "/cgi-bin/oa/getapprovaldetail";

fn wecom_client(server: &MockServer) -> WeComClient {
    let mut config = WeComConfig::new("ww1234567890abcdef", CORP_SECRET).agent_id(1000002);
    config.base_url = server.uri();
    WeComClient::new(config)
}

fn wecom_send_tool(server: &MockServer) -> WeComSendFileTool {
    WeComSendFileTool::new(wecom_client(server))
}

async fn mount_wecom_token(server: &MockServer, token: &str, times: Option<u64>) {
    let mock = Mock::given(method("GET"))
        .and(path(WECOM_TOKEN))
        .and(query_param("corpid", "ww1234567890abcdef"))
        .and(query_param("corpsecret", CORP_SECRET))
        .respond_with(json_response(
            json!({"errcode": 0, "errmsg": "ok", "access_token": token, "expires_in": 7200}),
        ));
    match times {
        Some(n) => mock.up_to_n_times(n).mount(server).await,
        None => mock.mount(server).await,
    }
}

fn wecom_ok(extra: Value) -> ResponseTemplate {
    let mut body = json!({"errcode": 0, "errmsg": "ok"});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json_response(body)
}

#[tokio::test]
async fn wecom_uploads_media_and_sends_to_users_and_to_a_group_chat() {
    let server = MockServer::start().await;
    mount_wecom_token(&server, TOKENS[2], None).await;
    Mock::given(method("POST"))
        .and(path(WECOM_UPLOAD))
        .and(query_param("access_token", TOKENS[2]))
        .and(query_param("type", "file"))
        .respond_with(wecom_ok(json!({"type": "file", "media_id": "1G6nrLmr5EC3MMb_-zK1dDdzmd0p7cNliYu9V5w7o8K0", "created_at": "1380000000"})))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(WECOM_SEND))
        .and(query_param("access_token", TOKENS[2]))
        .respond_with(wecom_ok(json!({"invaliduser": "ghost", "invalidparty": "", "invalidtag": "", "unlicenseduser": "", "msgid": "xxxx-msg-1"})))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(WECOM_APPCHAT))
        .respond_with(wecom_ok(json!({})))
        .expect(1)
        .mount(&server)
        .await;
    let mut ws = workspace();
    ws.file("minutes.docx", b"PK\x03\x04 minutes of the meeting");
    let tool = wecom_send_tool(&server);

    let out = call(
        &tool,
        &ws.ctx,
        json!({"touser": "zhangsan|ghost", "path": "minutes.docx"}),
    )
    .await
    .unwrap();
    assert!(
        out.text
            .contains("Sent minutes.docx (27 bytes) to users zhangsan|ghost."),
        "{}",
        out.text
    );
    assert!(
        out.text
            .contains("Not delivered to (unknown or out of the app's scope): ghost."),
        "{}",
        out.text
    );
    let out2 = call(
        &tool,
        &ws.ctx,
        json!({"chat_id": "wrkSFfCgAALFgnrSsWU38puiv4yvExuw", "path": "minutes.docx"}),
    )
    .await
    .unwrap();
    assert!(
        out2.text
            .contains("to group chat wrkSFfCgAALFgnrSsWU38puiv4yvExuw"),
        "{}",
        out2.text
    );

    assert_eq!(
        requests_to(&server, WECOM_TOKEN).await.len(),
        1,
        "token cached"
    );
    let upload =
        String::from_utf8_lossy(&requests_to(&server, WECOM_UPLOAD).await[0].body).into_owned();
    assert!(
        upload.contains("name=\"media\"; filename=\"minutes.docx\""),
        "{upload}"
    );
    let send: Value =
        serde_json::from_slice(&requests_to(&server, WECOM_SEND).await[0].body).unwrap();
    assert_eq!(
        send,
        json!({"touser": "zhangsan|ghost", "msgtype": "file", "agentid": 1000002,
               "file": {"media_id": "1G6nrLmr5EC3MMb_-zK1dDdzmd0p7cNliYu9V5w7o8K0"}})
    );
    let chat: Value =
        serde_json::from_slice(&requests_to(&server, WECOM_APPCHAT).await[0].body).unwrap();
    assert_eq!(chat["chatid"], "wrkSFfCgAALFgnrSsWU38puiv4yvExuw");
    assert_eq!(chat["msgtype"], "file");
    assert_no_secrets(&format!("{out:?}{out2:?}{:?}", ws.drain_events()));
}

#[tokio::test]
async fn wecom_refreshes_the_token_on_42001_and_maps_errors_without_leaking_it() {
    let server = MockServer::start().await;
    mount_wecom_token(&server, TOKENS[2], Some(1)).await;
    mount_wecom_token(&server, TOKENS[3], None).await;
    Mock::given(method("POST"))
        .and(path(WECOM_DETAIL))
        .and(query_param("access_token", TOKENS[2]))
        .respond_with(json_response(json!({"errcode": 42001, "errmsg": "access_token expired, more info at https://open.work.weixin.qq.com/devtool/query?e=42001"})))
        .mount(&server)
        .await;
    let detail: Value = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{}/tests/fixtures/integrations/wecom_approval_detail.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap(),
    )
    .unwrap();
    Mock::given(method("POST"))
        .and(path(WECOM_DETAIL))
        .and(query_param("access_token", TOKENS[3]))
        .and(body_partial_json(json!({"sp_no": "202311170001"})))
        .respond_with(json_response(detail.clone()))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(WECOM_DETAIL))
        .and(body_partial_json(json!({"sp_no": "999"})))
        .respond_with(json_response(
            json!({"errcode": 301025, "errmsg": "sp_no is invalid"}),
        ))
        .mount(&server)
        .await;
    let ws = workspace();
    let client = wecom_client(&server);
    let tool = WeComApprovalDetailTool::new(client.clone());
    let out = call(&tool, &ws.ctx, json!({"sp_no": "202311170001"}))
        .await
        .unwrap();
    assert_eq!(requests_to(&server, WECOM_TOKEN).await.len(), 2);
    assert_eq!(out.structured.as_ref().unwrap(), &detail["info"]);
    let summary = out.text.split("\nJSON:\n").next().unwrap();
    insta::assert_snapshot!("wecom_approval_detail_summary", summary);
    let json_part: Value =
        serde_json::from_str(out.text.split("\nJSON:\n").nth(1).unwrap()).unwrap();
    assert_eq!(json_part, detail["info"]);

    let err = call(&tool, &ws.ctx, json!({"sp_no": "999"}))
        .await
        .unwrap_err();
    assert_eq!(
        err.message(),
        "WeCom /cgi-bin/oa/getapprovaldetail failed with error code 301025: sp_no is invalid"
    );
    // A dead server: the transport error has no URL, so neither the secret
    // (in the gettoken query) nor a token shows.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut config = WeComConfig::new("ww1234567890abcdef", CORP_SECRET);
    config.base_url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let dead = WeComApprovalDetailTool::new(WeComClient::new(config));
    let err = call(&dead, &ws.ctx, json!({"sp_no": "202311170001"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::Failed);
    assert!(
        err.message().contains("could not be reached"),
        "{}",
        err.message()
    );
    assert_no_secrets(&format!("{err:?} {}", err.message()));
}

#[tokio::test]
async fn wecom_approval_list_follows_the_cursor_with_filters() {
    let server = MockServer::start().await;
    mount_wecom_token(&server, TOKENS[2], None).await;
    let filters = json!([
        {"key": "template_id", "value": "3WLJF6naF5jhnXvwisuPmE85wVMYcy1S1ZvYibkw"},
        {"key": "sp_status", "value": "2"}
    ]);
    let pages = [
        ("", vec!["202311010001", "202311010002"], "cursor-2"),
        ("cursor-2", vec!["202311020001", "202311020002"], "cursor-3"),
        ("cursor-3", vec!["202311030001"], ""),
    ];
    for (cursor, numbers, next) in pages {
        Mock::given(method("POST"))
            .and(path(WECOM_APPROVALS))
            .and(body_partial_json(json!({
                // 2023-11-01 00:00 to 2023-11-30 23:59:59 at UTC+8.
                "starttime": "1698768000", "endtime": "1701359999",
                "new_cursor": cursor, "size": 100, "filters": filters,
            })))
            .respond_with(wecom_ok(
                json!({"sp_no_list": numbers, "new_next_cursor": next}),
            ))
            .mount(&server)
            .await;
    }
    let ws = workspace();
    let tool = WeComApprovalListTool::new(wecom_client(&server));
    let args = json!({
        "start_time": "2023-11-01", "end_time": "2023-11-30",
        "template_id": "3WLJF6naF5jhnXvwisuPmE85wVMYcy1S1ZvYibkw", "status": "approved"
    });
    let out = call(&tool, &ws.ctx, args.clone()).await.unwrap();
    assert_eq!(
        out.text,
        "5 approval record(s) submitted 2023-11-01 00:00 to 2023-11-30 23:59 (UTC+08:00), approved, \
template 3WLJF6naF5jhnXvwisuPmE85wVMYcy1S1ZvYibkw:\n202311010001\n202311010002\n202311020001\n202311020002\n202311030001"
    );
    assert_eq!(out.structured.unwrap()["more"], false);
    assert_eq!(
        requests_to(&server, WECOM_APPROVALS).await.len(),
        3,
        "one request per page"
    );

    // A cap stops paging and says more exist.
    let capped = WeComApprovalListTool::new(wecom_client(&server)).max_records(3);
    let out = call(&capped, &ws.ctx, args).await.unwrap();
    assert!(out.text.starts_with("3 approval record(s)"), "{}", out.text);
    assert!(
        out.text
            .ends_with("More records exist beyond these 3; narrow the range or filter."),
        "{}",
        out.text
    );

    // Ranges are checked before any request.
    let before = server.received_requests().await.unwrap().len();
    for (args, expected) in [
        (
            json!({"start_time": "2023-10-01", "end_time": "2023-11-30"}),
            "longer than 31 days",
        ),
        (
            json!({"start_time": "2023-11-30", "end_time": "2023-11-01"}),
            "end_time must be after start_time",
        ),
        (
            json!({"start_time": "last monday", "end_time": 1701359999}),
            "start_time \"last monday\" is not a date",
        ),
    ] {
        let err = call(&tool, &ws.ctx, args).await.unwrap_err();
        assert_eq!(err.kind(), ToolErrorKind::InvalidArguments);
        assert!(err.message().contains(expected), "{}", err.message());
    }
    assert_eq!(server.received_requests().await.unwrap().len(), before);
}

// --------------------------------------------------------------- MiniMax

const MINIMAX_CREATE: &str = "/v1/video_generation";
const MINIMAX_QUERY: &str = "/v1/query/video_generation";
const MINIMAX_RETRIEVE: &str = "/v1/files/retrieve";

fn minimax_config(server: &MockServer) -> MiniMaxConfig {
    let mut config = MiniMaxConfig::new(MINIMAX_KEY);
    config.base_url = server.uri();
    config.poll_interval = Duration::from_millis(10);
    config.max_poll_interval = Duration::from_millis(40);
    config
}

fn task_status(status: &str) -> ResponseTemplate {
    json_response(json!({
        "task_id": "106916112212032", "status": status,
        "base_resp": {"status_code": 0, "status_msg": "success"}
    }))
}

async fn mount_created(server: &MockServer) {
    Mock::given(method("POST"))
        .and(path(MINIMAX_CREATE))
        .and(header(
            "authorization",
            format!("Bearer {MINIMAX_KEY}").as_str(),
        ))
        .respond_with(json_response(json!({
            "task_id": "106916112212032",
            "base_resp": {"status_code": 0, "status_msg": "success"}
        })))
        .mount(server)
        .await;
}

#[tokio::test]
async fn video_gen_polls_to_success_and_saves_the_video_without_sending_the_key_to_the_download_host()
 {
    let server = MockServer::start().await;
    mount_created(&server).await;
    for (status, times) in [("Preparing", 1), ("Queueing", 2), ("Processing", 2)] {
        Mock::given(method("GET"))
            .and(path(MINIMAX_QUERY))
            .and(query_param("task_id", "106916112212032"))
            .respond_with(task_status(status))
            .up_to_n_times(times)
            .mount(&server)
            .await;
    }
    Mock::given(method("GET"))
        .and(path(MINIMAX_QUERY))
        .respond_with(json_response(json!({
            "task_id": "106916112212032", "status": "Success", "file_id": 205258526306433_u64,
            "video_width": 1366, "video_height": 768,
            "base_resp": {"status_code": 0, "status_msg": "success"}
        })))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(MINIMAX_RETRIEVE))
        .and(query_param("file_id", "205258526306433"))
        .respond_with(json_response(json!({
            "file": {
                "file_id": 205258526306433_u64, "bytes": 4096, "created_at": 1700469398,
                "filename": "output.mp4", "purpose": "video_generation",
                "download_url": format!("{}/download/output.mp4?Expires=1700473000&Signature=abc", server.uri())
            },
            "base_resp": {"status_code": 0, "status_msg": "success"}
        })))
        .mount(&server)
        .await;
    let video: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    Mock::given(method("GET"))
        .and(path("/download/output.mp4"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_bytes(video.clone())
                .insert_header("content-type", "video/mp4"),
        )
        .mount(&server)
        .await;

    let mut ws = workspace();
    let tool = VideoGenTool::new(minimax_config(&server));
    let out = call(
        &tool,
        &ws.ctx,
        json!({"prompt": "A man picks up a book [Pedestal up], then reads [Static shot].", "duration": 6, "resolution": "1080P"}),
    )
    .await
    .unwrap();
    assert_eq!(
        out.text,
        "Saved the video to videos/minimax-106916112212032.mp4 (4.1 KB, 1366x768; model MiniMax-Hailuo-02, task 106916112212032)."
    );
    assert_eq!(
        std::fs::read(ws.root.join("videos/minimax-106916112212032.mp4")).unwrap(),
        video
    );
    let leftovers: Vec<_> = std::fs::read_dir(ws.root.join("videos")).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temporary file left");

    let create: Value =
        serde_json::from_slice(&requests_to(&server, MINIMAX_CREATE).await[0].body).unwrap();
    assert_eq!(
        create,
        json!({"model": "MiniMax-Hailuo-02", "prompt": "A man picks up a book [Pedestal up], then reads [Static shot].", "duration": 6, "resolution": "1080P"})
    );
    assert_eq!(requests_to(&server, MINIMAX_QUERY).await.len(), 6);
    let download = &requests_to(&server, "/download/output.mp4").await[0];
    assert!(
        download.headers.get("authorization").is_none(),
        "the key went to the download host"
    );

    let events = ws.drain_events();
    let progress: String = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolProgress { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        progress.starts_with("MiniMax task 106916112212032 created (MiniMax-Hailuo-02)\n"),
        "{progress}"
    );
    assert!(
        progress.contains("MiniMax task 106916112212032: Queueing after"),
        "{progress}"
    );
    assert!(
        progress.contains("MiniMax task 106916112212032: Processing after"),
        "{progress}"
    );
    assert!(
        !progress.contains("Signature"),
        "the download URL is not shown"
    );
    assert_no_secrets(&format!("{out:?}{events:?}"));
}

#[tokio::test]
async fn video_gen_reports_a_failed_task_and_vendor_codes() {
    let server = MockServer::start().await;
    mount_created(&server).await;
    Mock::given(method("GET"))
        .and(path(MINIMAX_QUERY))
        .respond_with(task_status("Processing"))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(MINIMAX_QUERY))
        .respond_with(task_status("Fail"))
        .mount(&server)
        .await;
    let ws = workspace();
    let tool = VideoGenTool::new(minimax_config(&server));
    let err = call(&tool, &ws.ctx, json!({"prompt": "a cat"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::Failed);
    assert_eq!(
        err.message(),
        "MiniMax task 106916112212032 failed: the generation failed on MiniMax's side"
    );
    assert!(!ws.root.join("videos").exists());

    // A refused prompt (sensitive content) and a bad key, as documented.
    for (code, msg) in [
        (1026, "input new_sensitive"),
        (
            1004,
            "login fail: Please carry the API secret key in the 'Authorization' field of the request header",
        ),
    ] {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path(MINIMAX_CREATE))
            .respond_with(json_response(
                json!({"task_id": "", "base_resp": {"status_code": code, "status_msg": msg}}),
            ))
            .mount(&server)
            .await;
        let err = call(
            &VideoGenTool::new(minimax_config(&server)),
            &ws.ctx,
            json!({"prompt": "x"}),
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.message(),
            format!("MiniMax /v1/video_generation failed with error code {code}: {msg}")
        );
        assert_no_secrets(&format!("{err:?}"));
    }
}

#[tokio::test]
async fn video_gen_stops_polling_when_cancelled_and_gives_up_after_max_wait() {
    let server = MockServer::start().await;
    mount_created(&server).await;
    Mock::given(method("GET"))
        .and(path(MINIMAX_QUERY))
        .respond_with(task_status("Processing"))
        .mount(&server)
        .await;
    let ws = workspace();
    let tool = VideoGenTool::new(minimax_config(&server));
    let cancel = ws.ctx.cancellation().clone();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        cancel.cancel();
    });
    let started = std::time::Instant::now();
    let err = call(&tool, &ws.ctx, json!({"prompt": "a cat"}))
        .await
        .unwrap_err();
    canceller.await.unwrap();
    assert_eq!(err.kind(), ToolErrorKind::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(2));
    let polls = requests_to(&server, MINIMAX_QUERY).await.len();
    assert!(polls >= 2, "polled {polls} times before the cancel");
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        requests_to(&server, MINIMAX_QUERY).await.len(),
        polls,
        "polling stopped"
    );

    let ws = workspace();
    let mut config = minimax_config(&server);
    config.max_wait = Duration::from_millis(100);
    let err = call(
        &VideoGenTool::new(config),
        &ws.ctx,
        json!({"prompt": "a cat"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::Timeout);
    assert!(
        err.message()
            .contains("was not finished after 0 s (last status Processing)"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn video_gen_refuses_a_taken_output_before_spending_credit() {
    let server = MockServer::start().await;
    let ws = workspace();
    ws.file("taken.mp4", b"old");
    let tool = VideoGenTool::new(minimax_config(&server));
    let err = call(
        &tool,
        &ws.ctx,
        json!({"prompt": "a cat", "output": "taken.mp4"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::InvalidArguments);
    let err = call(
        &tool,
        &ws.ctx,
        json!({"prompt": "a cat", "output": "../escape.mp4"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::PermissionDenied);
    assert!(server.received_requests().await.unwrap().is_empty());
    assert_eq!(std::fs::read(ws.root.join("taken.mp4")).unwrap(), b"old");
}

// ------------------------------------------------------- through the loop

/// Records confirmation requests and denies them.
#[derive(Default)]
struct Recorder(Mutex<Vec<ConfirmRequest>>);

#[async_trait]
impl ConfirmHandler for Recorder {
    async fn confirm(&self, request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        self.0.lock().unwrap().push(request);
        Ok(ConfirmDecision::Deny {
            reason: Some("not now".into()),
        })
    }
}

#[tokio::test]
async fn sending_asks_the_confirm_handler_and_reading_approvals_does_not() {
    let server = MockServer::start().await;
    mount_wecom_token(&server, TOKENS[2], None).await;
    Mock::given(method("POST"))
        .and(path(WECOM_APPROVALS))
        .respond_with(wecom_ok(
            json!({"sp_no_list": ["202311010001"], "new_next_cursor": ""}),
        ))
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("plan.pdf"), b"%PDF-1.4 plan").unwrap();
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .tool_call(
                "a",
                "wecom_approval_list",
                json!({"start_time": "2023-11-01", "end_time": "2023-11-02"}),
            )
            .tool_call(
                "s",
                "wecom_send_file",
                json!({"chat_id": "wrk1", "path": "plan.pdf"}),
            ),
        ScriptedTurn::text("done"),
    ]);
    let recorder = Arc::new(Recorder::default());
    let agent = Agent::builder(provider)
        .tools(wecom_tools(&wecom_client(&server)))
        .confirm_handler(Arc::clone(&recorder) as Arc<dyn ConfirmHandler>)
        .workspace(AgentWorkspace::new().cwd(dir.path()).root(dir.path()))
        .build();
    let outcome = agent.run_to_completion("list and send").await;
    let requests = recorder.0.lock().unwrap().clone();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].tool, "wecom_send_file");
    assert_eq!(
        requests[0].summary,
        "Send plan.pdf to WeCom group chat wrk1"
    );
    let transcript = format!("{:?}", outcome.conversation);
    assert!(transcript.contains("202311010001"), "{transcript}");
    assert!(transcript.contains("not now"), "{transcript}");
    assert!(
        requests_to(&server, WECOM_UPLOAD).await.is_empty(),
        "denied means nothing sent"
    );
    assert_no_secrets(&transcript);
}

#[tokio::test]
async fn concurrent_calls_share_one_token_fetch() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(WECOM_TOKEN))
        .respond_with(
            json_response(json!({"errcode": 0, "errmsg": "ok", "access_token": TOKENS[2], "expires_in": 7200}))
                .set_delay(Duration::from_millis(100)),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(WECOM_APPROVALS))
        .respond_with(wecom_ok(
            json!({"sp_no_list": ["1"], "new_next_cursor": ""}),
        ))
        .mount(&server)
        .await;
    let ws = workspace();
    let tool = WeComApprovalListTool::new(wecom_client(&server));
    let calls = (0..8).map(|_| {
        call(
            &tool,
            &ws.ctx,
            json!({"start_time": 1698768000, "end_time": 1698854400}),
        )
    });
    for result in futures::future::join_all(calls).await {
        result.unwrap();
    }
    assert_eq!(requests_to(&server, WECOM_TOKEN).await.len(), 1);
    assert_eq!(requests_to(&server, WECOM_APPROVALS).await.len(), 8);

    // Lark is the same API under another root.
    assert_eq!(
        FeishuConfig::new("cli_x", "s").lark().base_url,
        FeishuConfig::LARK_BASE_URL
    );
}
