//! The browser tools on pages built to catch untruthful results: frames,
//! elements that cannot take a click, faithful text, navigations that hang,
//! HTTP errors, local files, large pages, and Chrome outliving its host.
#![cfg(feature = "browser")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::time::{Duration, Instant};

use kinet_computer::browser::BrowserConfig;
use kinet_core::ToolCtx;
use kinet_core::tool::ToolErrorKind;
use serde_json::{Value, json};

mod support;
use support::{Reply, browser, browser_with, call, call_in, ref_of, text};

const FRAMES: &str = r#"<!doctype html>
<html><head><title>Frames</title></head><body>
<h1>Framed</h1>
<iframe id="same" title="Same origin" src="/inner" style="width:400px;height:120px"></iframe>
<iframe id="doc" title="Inline" srcdoc="<p>Inline words</p><button onclick=&quot;this.textContent='Inline pressed'&quot;>Inline button</button>" style="width:400px;height:120px"></iframe>
<iframe id="far" title="Other site" src="OTHER/inner?site=other" style="width:400px;height:160px"></iframe>
</body></html>"#;

const INNER: &str = r#"<!doctype html>
<html><head><title>Inner</title></head><body>
<p>Inner words</p>
<button onclick="this.textContent = 'Inner pressed'">Inner button</button>
<input id="field" placeholder="inner field" oninput="document.getElementById('echo').textContent = 'Echo ' + this.value">
<p id="echo">Echo</p>
</body></html>"#;

const TRAPS: &str = r#"<!doctype html>
<html><head><title>Traps</title></head><body>
<script>window.hits = [];</script>
<div><button id="hidden" style="visibility:hidden" onclick="hits.push('hidden')">Hidden by visibility</button></div>
<div><button id="ghost" style="pointer-events:none" onclick="hits.push('ghost')">No pointer events</button></div>
<fieldset disabled><button id="fs" onclick="hits.push('fieldset')">In a disabled fieldset</button></fieldset>
<button id="aria" aria-disabled="true" onclick="hits.push('aria')">Aria disabled</button>
<button id="later" disabled onclick="hits.push('later')">Enabled later</button>
<button id="vanish" onclick="hits.push('vanish')">Vanishes</button>
<div style="position:relative"><button id="under" onclick="hits.push('under')">Under a cover</button>
<div style="position:absolute;inset:0;background:white"></div></div>
</body></html>"#;

/// Syntax-highlighted code as documentation generators write it: one span
/// per token, the spaces between tokens as text nodes or none at all.
const CODE: &str = r#"<!doctype html>
<html><head><title>Code</title></head><body>
<div class="highlight"><pre id="code"><span class="gp">&gt;&gt;&gt; </span><span class="n">n</span> <span class="o">=</span> <span class="o">-</span><span class="mi">37</span>
<span class="gp">&gt;&gt;&gt; </span><span class="nb">bytes</span><span class="p">(</span><span class="sa">b</span><span class="s1">'\x00\x10'</span><span class="p">)</span>
<span class="go">b'\x00\x10'</span>
    <span class="k">return</span>  <span class="n">x</span>
</pre></div>
<p id="long">LONG</p>
<table id="t"><caption>Sizes</caption>
<tr><th>Name</th><th>Value</th></tr>
<tr><td>alpha</td><td>1</td></tr>
<tr><td>beta</td><td><a href="/b">two</a></td></tr>
</table>
<ul id="l"><li>first item</li><li>second <b>bold</b> item</li><li><a href="/x">a link</a></li></ul>
<p>Mixed <code>inline</code>code<em>and</em> emphasis.</p>
</body></html>"#;

fn rows_page(rows: usize) -> String {
    let mut page = String::from(
        "<!doctype html><html><head><title>Rows</title></head><body><h1>Rows</h1><table>",
    );
    for i in 0..rows {
        page.push_str(&format!(
            "<tr><td>Row {i} has a label</td><td><button onclick=\"this.textContent='Done {i}'\">Do {i}</button></td><td><a href=\"/row/{i}\">Details {i}</a></td></tr>"
        ));
    }
    page.push_str("</table></body></html>");
    page
}

/// Pages for these tests on one server, and a second server (another site
/// to the browser: `localhost` instead of `127.0.0.1`) for frames.
async fn site() -> (String, String) {
    let other = support::serve(|path, _| match path {
        "/inner" => Reply::ok(INNER),
        _ => Reply::ok("").status("404 Not Found"),
    })
    .await
    .replace("127.0.0.1", "localhost");
    let long = "word ".repeat(400) + "the very end.";
    let frames = FRAMES.replace("OTHER", &other);
    let code = CODE.replace("LONG", &long);
    let rows = rows_page(500);
    let base = support::serve(move |path, _| match path {
        "/frames" => Reply::ok(frames.clone()),
        "/inner" => Reply::ok(INNER),
        "/traps" => Reply::ok(TRAPS),
        "/code" => Reply::ok(code.clone()),
        "/rows" => Reply::ok(rows.clone()),
        "/other" => Reply::ok("<title>Other</title><h1>The other page</h1>"),
        "/hang" => Reply::ok("<title>Late</title>late").after(Duration::from_secs(30)),
        "/slow90" => Reply::ok("<title>Late</title>late").after(Duration::from_secs(90)),
        "/to-slow" => Reply::ok("<title>Links</title><a href=\"/slow90\">Very slow page</a>"),
        _ => Reply::ok("<title>Missing</title><h1>Not found</h1>").status("404 Not Found"),
    })
    .await;
    (base, other)
}

/// The whole snapshot a result says it saved to a file.
fn saved_snapshot(result: &str) -> String {
    let path = result
        .split("The whole snapshot is saved at ")
        .nth(1)
        .and_then(|rest| rest.split(". ").next())
        .unwrap_or_else(|| panic!("no saved snapshot in {result}"));
    std::fs::read_to_string(path).unwrap()
}

async fn eval(tools: &kinet_core::Toolset, expression: &str) -> Value {
    call(tools, "browser_eval", json!({ "expression": expression }))
        .await
        .unwrap()
        .structured
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_of_every_kind_are_in_the_snapshot_and_take_clicks_and_typing() {
    let Some((tools, session)) = browser() else {
        return;
    };
    let (site, _) = site().await;
    let page = text(
        &tools,
        "browser_navigate",
        json!({"url": format!("{site}/frames")}),
    )
    .await;
    for (title, words) in [
        ("Same origin", "Inner words"),
        ("Inline", "Inline words"),
        ("Other site", "Inner words"),
    ] {
        let line = page
            .lines()
            .position(|l| l.contains(&format!("- iframe \"{title}\" [frame=f")))
            .unwrap_or_else(|| panic!("no frame {title}:\n{page}"));
        assert!(
            page.lines()
                .nth(line + 1)
                .unwrap()
                .starts_with("  - text: ")
                && page.contains(words),
            "{title}: {page}"
        );
    }
    // Frame-scoped refs, one per frame, distinct.
    let frame_refs: Vec<String> = page
        .lines()
        .filter(|l| l.contains("button \"Inner button\"") || l.contains("button \"Inline button\""))
        .map(|l| ref_of(l, "button"))
        .collect();
    assert_eq!(frame_refs.len(), 3, "{page}");
    assert!(
        frame_refs
            .iter()
            .all(|r| r.starts_with('f') && r.contains('e')),
        "{frame_refs:?}"
    );

    // Clicks land inside each frame.
    for button in frame_refs {
        let after = text(&tools, "browser_click", json!({"ref": button})).await;
        assert!(after.starts_with(&format!("Clicked {button}.")), "{after}");
    }
    let page = text(&tools, "browser_snapshot", json!({})).await;
    assert_eq!(
        page.matches("button \"Inner pressed\"").count(),
        2,
        "{page}"
    );
    assert!(page.contains("button \"Inline pressed\""), "{page}");

    // Typing into a field of the other site's frame.
    let field = page
        .lines()
        .filter(|l| l.contains("textbox \"inner field\""))
        .map(|l| ref_of(l, "textbox"))
        .next_back()
        .unwrap();
    text(
        &tools,
        "browser_type",
        json!({"ref": field, "text": "far away"}),
    )
    .await;
    let page = text(&tools, "browser_snapshot", json!({})).await;
    assert!(page.contains("- text: Echo far away"), "{page}");

    // A frame alone, by its key.
    let key = page
        .lines()
        .find(|l| l.contains("iframe \"Other site\""))
        .and_then(|l| l.split("[frame=").nth(1))
        .map(|rest| rest.trim_end_matches([']', ':']).to_owned())
        .unwrap();
    let part = text(&tools, "browser_snapshot", json!({"root": key})).await;
    assert!(
        part.contains("Echo far away") && !part.contains("Framed"),
        "{part}"
    );
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clicks_are_reported_only_when_the_element_takes_them() {
    let config = BrowserConfig {
        action_wait: Duration::from_millis(800),
        ..BrowserConfig::default()
    };
    let Some((tools, session)) = browser_with(config) else {
        return;
    };
    let (site, _) = site().await;
    let page = text(
        &tools,
        "browser_navigate",
        json!({"url": format!("{site}/traps")}),
    )
    .await;
    assert!(
        !page.contains("Hidden by visibility"),
        "a hidden button is not listed:\n{page}"
    );
    let fieldset = page
        .lines()
        .find(|l| l.contains("In a disabled fieldset"))
        .unwrap();
    assert!(fieldset.ends_with("[disabled]"), "{fieldset}");
    let aria = page.lines().find(|l| l.contains("Aria disabled")).unwrap();
    assert!(aria.ends_with("[disabled]"), "{aria}");

    for (needle, reason) in [
        ("No pointer events", "pointer-events: none"),
        ("In a disabled fieldset", "is disabled"),
        ("Aria disabled", "aria-disabled"),
        ("Under a cover", "is covered by"),
    ] {
        let started = Instant::now();
        let err = call(
            &tools,
            "browser_click",
            json!({"ref": ref_of(&page, needle)}),
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ToolErrorKind::Failed, "{needle}");
        assert!(
            err.message().contains(reason),
            "{needle}: {}",
            err.message()
        );
        assert!(
            err.message().contains("after waiting 0.8 s"),
            "{}",
            err.message()
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{needle}: {:?}",
            started.elapsed()
        );
    }
    // Hidden after the snapshot: refused too.
    let vanish = ref_of(&page, "Vanishes");
    eval(
        &tools,
        "document.getElementById('vanish').style.visibility = 'hidden'",
    )
    .await;
    let err = call(&tools, "browser_click", json!({"ref": vanish}))
        .await
        .unwrap_err();
    assert!(
        err.message().contains("is not visible"),
        "{}",
        err.message()
    );
    assert_eq!(eval(&tools, "hits").await, json!([]), "no handler ran");

    // Enabled while the click waits: it goes through.
    let later = ref_of(&page, "Enabled later");
    eval(
        &tools,
        "setTimeout(() => document.getElementById('later').disabled = false, 300)",
    )
    .await;
    let done = text(&tools, "browser_click", json!({"ref": later})).await;
    assert!(done.starts_with(&format!("Clicked {later}.")), "{done}");
    assert_eq!(eval(&tools, "hits").await, json!(["later"]));
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_paragraphs_tables_and_lists_are_kept_faithfully() {
    let Some((tools, session)) = browser() else {
        return;
    };
    let (site, _) = site().await;
    let page = text(
        &tools,
        "browser_navigate",
        json!({"url": format!("{site}/code")}),
    )
    .await;
    let rendered = eval(&tools, "document.getElementById('code').innerText").await;
    let rendered = rendered.as_str().unwrap().trim_end_matches('\n');
    // The code block, character for character, below `- code: |`.
    let lines: Vec<&str> = page.lines().collect();
    let start = lines.iter().position(|l| *l == "- code: |").expect(&page) + 1;
    let code: Vec<&str> = lines[start..]
        .iter()
        .take_while(|l| l.starts_with("  "))
        .map(|l| &l[2..])
        .collect();
    assert_eq!(code.join("\n"), rendered, "{page}");
    assert!(
        rendered.contains("n = -37") && rendered.contains("b'\\x00\\x10'"),
        "{rendered}"
    );

    // A 2,000-character paragraph, whole.
    let long = lines
        .iter()
        .find(|l| l.starts_with("- text: word word"))
        .unwrap();
    assert!(long.ends_with("the very end."), "{long}");
    assert_eq!(long.len(), "- text: ".len() + 2000 + "the very end.".len());

    // Table rows and cells; list items.
    assert!(page.contains("- table:\n  - text: Sizes\n  - row: Name | Value\n  - row: alpha | 1\n  - row: beta | link \"two\" [ref="), "{page}");
    assert!(page.contains("- list:\n  - listitem: first item\n  - listitem: second bold item\n  - listitem: link \"a link\" [ref="), "{page}");
    // Inline elements join without added spaces.
    assert!(
        page.contains("- text: Mixed inlinecodeand emphasis."),
        "{page}"
    );

    // A longer paragraph is cut with a marker naming the ref that shows it all.
    eval(
        &tools,
        "document.getElementById('long').textContent = 'x'.repeat(9000)",
    )
    .await;
    let page = text(&tools, "browser_snapshot", json!({})).await;
    let cut = page.lines().find(|l| l.contains("xxxx")).unwrap();
    assert!(
        cut.contains("… [5000 more characters: browser_snapshot root=e"),
        "{}",
        &cut[cut.len() - 80..]
    );
    let root = cut.rsplit("root=").next().unwrap().trim_end_matches(']');
    // Shown whole under its ref (here too long for one result: saved whole).
    let whole = text(&tools, "browser_snapshot", json!({"root": root})).await;
    let saved = saved_snapshot(&whole);
    assert!(
        saved.contains(&format!("- text: {}\n", "x".repeat(9000)))
            || saved.ends_with(&"x".repeat(9000)),
        "{}",
        saved.len()
    );
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn navigations_hold_their_time_limits_and_say_where_the_tab_is() {
    let config = BrowserConfig {
        navigation_timeout: Duration::from_secs(3),
        ..BrowserConfig::default()
    };
    let Some((tools, session)) = browser_with(config) else {
        return;
    };
    let (site, _) = site().await;
    text(
        &tools,
        "browser_navigate",
        json!({"url": format!("{site}/other")}),
    )
    .await;

    // A server that does not answer for 30 s: stopped at the limit.
    let started = Instant::now();
    let hung = text(
        &tools,
        "browser_navigate",
        json!({"url": format!("{site}/hang")}),
    )
    .await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(hung.contains("timed out: no answer within 3 s"), "{hung}");
    assert!(
        hung.contains(&format!("the tab stays at {site}/other")),
        "{hung}"
    );
    // The next navigation goes where it was asked to, at once.
    let started = Instant::now();
    let next = text(
        &tools,
        "browser_navigate",
        json!({"url": format!("{site}/code")}),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}: {next}",
        started.elapsed()
    );
    assert!(
        next.starts_with(&format!("Opened {site}/code (HTTP 200 OK).")),
        "{next}"
    );

    // A link to a page that takes 90 s: the click is done, and said so.
    let page = text(
        &tools,
        "browser_navigate",
        json!({"url": format!("{site}/to-slow")}),
    )
    .await;
    let started = Instant::now();
    let clicked = text(
        &tools,
        "browser_click",
        json!({"ref": ref_of(&page, "Very slow page")}),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(clicked.starts_with("Clicked "), "{clicked}");
    assert!(clicked.contains("had not answered after 3 s"), "{clicked}");
    assert!(
        clicked.contains("It started opening ") && clicked.contains("/slow90"),
        "{clicked}"
    );
    // Meanwhile the tab is not taken for a hung one (and not reopened).
    let started = Instant::now();
    let err = call(&tools, "browser_snapshot", json!({}))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(
        err.message().contains("still waiting for") && err.message().contains("/slow90"),
        "{}",
        err.message()
    );
    // And the page is still usable: a navigation elsewhere wins.
    let next = text(
        &tools,
        "browser_navigate",
        json!({"url": format!("{site}/other")}),
    )
    .await;
    assert!(next.contains(&format!("URL: {site}/other")), "{next}");

    // HTTP errors are said.
    let missing = text(
        &tools,
        "browser_navigate",
        json!({"url": format!("{site}/missing")}),
    )
    .await;
    assert!(
        missing.starts_with(&format!("Opened {site}/missing (HTTP 404 Not Found).")),
        "{missing}"
    );
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_web_urls_are_opened_unless_the_host_allows_files_in_the_workspace() {
    let Some((tools, session)) = browser() else {
        return;
    };
    for url in [
        "file:///etc/hostname",
        "FILE:///etc/passwd",
        "chrome://version",
        "view-source:http://x/",
        "javascript:alert(1)",
        "about:version",
    ] {
        let err = call(&tools, "browser_navigate", json!({ "url": url }))
            .await
            .unwrap_err();
        assert_eq!(
            err.kind(),
            ToolErrorKind::PermissionDenied,
            "{url}: {}",
            err.message()
        );
    }
    let err = call(
        &tools,
        "browser_tabs",
        json!({"action": "new", "url": "file:///etc/hostname"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::PermissionDenied);
    session.shutdown().await;

    let config = BrowserConfig {
        allow_file_urls: true,
        ..BrowserConfig::default()
    };
    let Some((tools, session)) = browser_with(config) else {
        return;
    };
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(
        workspace.path().join("page.html"),
        "<title>Local</title><p>From the workspace</p><a href=\"file:///etc/hostname\">out</a>",
    )
    .unwrap();
    std::os::unix::fs::symlink("/etc/hostname", workspace.path().join("link.html")).unwrap();
    let ctx = || ToolCtx::new(workspace.path()).with_roots(vec![workspace.path().to_path_buf()]);
    let inside = format!("file://{}/page.html", workspace.path().display());
    let page = call_in(&tools, "browser_navigate", json!({ "url": inside }), ctx())
        .await
        .unwrap()
        .text;
    assert!(page.contains("From the workspace"), "{page}");
    for url in [
        "file:///etc/hostname".to_owned(),
        format!("file://{}/link.html", workspace.path().display()),
    ] {
        let err = call_in(&tools, "browser_navigate", json!({ "url": url }), ctx())
            .await
            .unwrap_err();
        assert_eq!(
            err.kind(),
            ToolErrorKind::PermissionDenied,
            "{url}: {}",
            err.message()
        );
        assert!(
            err.message().contains("outside the workspace"),
            "{}",
            err.message()
        );
    }
    // A link on an allowed page to a file outside: the page is not read.
    let out = ref_of(&page, "link \"out\"");
    let err = call_in(&tools, "browser_click", json!({ "ref": out }), ctx())
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        ToolErrorKind::PermissionDenied,
        "{}",
        err.message()
    );
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_pages_answer_with_changes_parts_and_a_saved_file() {
    let snapshots = tempfile::tempdir().unwrap();
    let config = BrowserConfig {
        snapshot_dir: Some(snapshots.path().to_path_buf()),
        ..BrowserConfig::default()
    };
    let Some((tools, session)) = browser_with(config) else {
        return;
    };
    let (site, _) = site().await;
    let page = text(
        &tools,
        "browser_navigate",
        json!({"url": format!("{site}/rows")}),
    )
    .await;
    // Too large for a tool result: the first part, the file, how to ask.
    assert!(page.chars().count() < 8_000, "{}", page.len());
    let full = saved_snapshot(&page);
    assert!(full.contains("button \"Do 499\""), "{}", full.len());
    assert!(
        page.contains("Ask for a part with browser_snapshot"),
        "{page}"
    );

    // One element changes: the answer is the change, under 1% of the page.
    let button = ref_of(&full, "button \"Do 250\"");
    let after = text(&tools, "browser_click", json!({ "ref": button })).await;
    assert!(
        after.contains("removed:   - row: Row 250 has a label | button \"Do 250\""),
        "{after}"
    );
    assert!(
        after.contains("added:     - row: Row 250 has a label | button \"Done 250\""),
        "{after}"
    );
    assert!(
        after.len() * 100 < full.len(),
        "{} of {}",
        after.len(),
        full.len()
    );

    // Parts: a selector root, interactive only, a depth.
    let part = text(&tools, "browser_snapshot", json!({"root": "h1"})).await;
    assert!(part.ends_with("- heading \"Rows\" [level=1]"), "{part}");
    let shallow = text(&tools, "browser_snapshot", json!({"depth": 0})).await;
    assert!(
        shallow.contains("- table:\n  - … 500 more lines: browser_snapshot root=e"),
        "{shallow}"
    );
    let interactive = text(
        &tools,
        "browser_snapshot",
        json!({"mode": "interactive", "root": "tr"}),
    )
    .await;
    assert!(
        interactive.contains("button \"Do 0\"") && !interactive.contains("heading"),
        "{interactive}"
    );
    let reading = text(
        &tools,
        "browser_snapshot",
        json!({"mode": "text", "root": "tr:nth-child(3)"}),
    )
    .await;
    assert!(
        reading.ends_with("- text: Row 2 has a label\n- text: Do 2\n- text: Details 2"),
        "{reading}"
    );
    assert!(!reading.contains("[ref="), "{reading}");
    session.shutdown().await;
}

/// The host process of the kill test: starts Chrome, prints its process
/// id, then waits to be killed. Runs only when the kill test starts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_for_the_kill_test() {
    let Ok(how) = std::env::var("KINET_BROWSER_HOST") else {
        return;
    };
    let Some((tools, session)) = browser() else {
        return;
    };
    text(
        &tools,
        "browser_navigate",
        json!({"url": "data:text/html,<p>host</p>"}),
    )
    .await;
    println!("CHROME {}", session.pid().await.unwrap());
    use std::io::Write as _;
    std::io::stdout().flush().unwrap();
    match how.as_str() {
        "exit" => {
            tokio::time::sleep(Duration::from_millis(300)).await;
            std::process::exit(3);
        }
        "drop" => {
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop(tools);
            drop(session);
            println!("DROPPED");
            std::io::stdout().flush().unwrap();
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        _ => tokio::time::sleep(Duration::from_secs(60)).await,
    }
}

/// Every process whose parent chain reaches `root`, with its command line.
fn tree(root: u32) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let mut at = pid;
        for _ in 0..64 {
            if at == root {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                found.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
                break;
            }
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{at}/stat")) else {
                break;
            };
            let Some(ppid) = stat
                .rsplit(')')
                .next()
                .and_then(|s| s.split_whitespace().nth(1))
                .and_then(|p| p.parse().ok())
            else {
                break;
            };
            if ppid == 0 || ppid == at {
                break;
            }
            at = ppid;
        }
    }
    found
}

/// A host process, killed and reaped when the test is done with it.
struct Host(std::process::Child);

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn chrome_and_its_profile_go_when_the_host_dies_in_any_way() {
    if BrowserConfig::default().find_executable().is_err() {
        kinet_core::testing::skipped(
            "no Chromium for the host-death test (.ci/test installs chromium)",
        );
        return;
    }
    for how in ["kill", "term", "exit", "drop"] {
        let mut host = Host(
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "host_for_the_kill_test",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("KINET_BROWSER_HOST", how)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        let stdout = host.0.stdout.take().unwrap();
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
        let chrome: u32 = loop {
            let line = lines
                .next()
                .expect("the host printed Chrome's pid")
                .unwrap();
            // The harness may print the test's name on the same line.
            if let Some(pid) = line.split("CHROME ").nth(1) {
                break pid.trim().parse().unwrap();
            }
        };
        let processes = tree(chrome);
        let profile = processes
            .iter()
            .find_map(|(_, cmd)| {
                cmd.split_whitespace()
                    .find_map(|arg| arg.strip_prefix("--user-data-dir="))
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| {
                panic!("{how}: no Chrome with a profile under {chrome}: {processes:?}")
            });
        assert!(std::path::Path::new(&profile).is_dir(), "{profile}");
        let host_pid = host.0.id().to_string();
        match how {
            "kill" => assert!(
                std::process::Command::new("kill")
                    .args(["-KILL", &host_pid])
                    .status()
                    .unwrap()
                    .success()
            ),
            "term" => assert!(
                std::process::Command::new("kill")
                    .args(["-TERM", &host_pid])
                    .status()
                    .unwrap()
                    .success()
            ),
            _ => {}
        }
        if how == "drop" {
            // The clock starts when the host has dropped the session.
            assert!(lines.any(|line| line.is_ok_and(|l| l.contains("DROPPED"))));
        } else {
            let _ = host.0.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        let left = loop {
            std::thread::sleep(Duration::from_millis(100));
            let alive: Vec<_> = processes
                .iter()
                .filter(|(pid, _)| {
                    std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                        .is_ok_and(|c| !c.is_empty())
                })
                .cloned()
                .collect();
            let profile_left = std::path::Path::new(&profile).exists();
            if (alive.is_empty() && !profile_left) || Instant::now() > deadline {
                break (alive, profile_left);
            }
        };
        drop(host);
        assert!(
            left.0.is_empty(),
            "{how}: Chrome processes left after 2 s: {:?}",
            left.0
        );
        assert!(!left.1, "{how}: the profile {profile} is left after 2 s");
    }
}
