//! The browser tools against Debian's Chromium and pages served on loopback.
#![cfg(feature = "browser")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::time::Duration;

use kinet_core::tool::ToolErrorKind;

mod support;
use serde_json::json;
use support::{Reply, browser, call, ref_of, text};

const INDEX: &str = r#"<!doctype html>
<html><head><title>Kinet test page</title></head><body>
<h1>Widgets</h1>
<p id="status">Not clicked</p>
<button id="press" onclick="window.n = (window.n || 0) + 1; document.getElementById('status').textContent = 'Clicked ' + window.n + ' times'">Press me</button>
<form action="/search" method="get">
  <label for="q">Query</label> <input id="q" name="q" placeholder="search words">
  <button type="submit">Go</button>
</form>
<label>Color <select id="color" onchange="document.getElementById('chosen').textContent = 'Chosen: ' + this.value">
  <option value="r">Red</option><option value="g">Green</option><option value="b">Blue</option>
</select></label>
<p id="chosen">Chosen: r</p>
<a href="/other">Other page</a>
<div style="display:none"><button>Hidden button</button></div>
<div style="height: 3000px"></div>
<button id="far" onclick="this.textContent = 'Far clicked'">Far away</button>
</body></html>"#;

const LINKS: &str = r##"<!doctype html>
<html><head><title>Links</title></head><body>
<a href="/slow">Slow page</a>
<a href="#end">To the end</a>
<button onclick="setTimeout(() => { location.href = '/other' }, 0)">Go later</button>
<button onclick="this.textContent = 'Stayed'">Stay</button>
<button onclick="history.pushState({}, '', '/links/routed'); this.textContent = 'Routed'">Route</button>
<a href="/other" target="_blank">Other in a new tab</a>
<button onclick="document.getElementById('answer').textContent = confirm('Really delete?') ? 'Deleted' : 'Kept'">Delete</button>
<button onclick="alert('Hello from the page'); this.textContent = 'Greeted'">Greet</button>
<p id="answer">Undecided</p>
<div style="height: 3000px"></div><p id="end">The end</p>
</body></html>"##;

const PARTS: &str = r##"<!doctype html>
<html><head><title>Parts</title></head><body>
<div id="host"></div>
<script>
const root = document.getElementById('host').attachShadow({ mode: 'open' });
root.innerHTML = '<button id="sb">Shadow button</button>';
root.getElementById('sb').onclick = () => { root.getElementById('sb').textContent = 'Shadow pressed'; };
</script>
<div style="display: contents"><button onclick="this.textContent = 'Contents pressed'">In contents</button></div>
<div onclick="void 0"><span>A card</span> <button onclick="this.textContent = 'Inner pressed'">Inside card</button></div>
<label><input type="checkbox"> Agree</label>
</body></html>"##;

/// A loopback server: `/` the widgets page, `/other`, `/search?q=` echoing
/// the query, `/links` with navigations of each kind, `/slow` answering
/// after 400 ms.
async fn serve() -> String {
    support::serve(|path, params| match path {
        "/" => Reply::ok(INDEX),
        "/links" => Reply::ok(LINKS),
        "/parts" => Reply::ok(PARTS),
        "/slow" => Reply::ok("<title>Slow</title><h1>Slow page arrived</h1>")
            .after(Duration::from_millis(400)),
        "/other" => Reply::ok("<title>Other</title><h1>The other page</h1>"),
        "/search" => Reply::ok(format!(
            "<title>Results</title><p>You searched for {}</p>",
            params.get("q").cloned().unwrap_or_default()
        )),
        _ => Reply::ok("<h1>Not found</h1>").status("404 Not Found"),
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn navigate_snapshot_click_type_select_eval_screenshot_and_tabs() {
    let Some((tools, session)) = browser() else {
        return;
    };
    let site = serve().await;

    let page = text(
        &tools,
        "browser_navigate",
        json!({"url": format!("{site}/")}),
    )
    .await;
    assert!(
        page.starts_with(&format!(
            "Opened {site}/ (HTTP 200 OK).\n\nPage: Kinet test page\nURL: {site}/\n"
        )),
        "{page}"
    );
    assert!(page.contains("- heading \"Widgets\" [level=1]"), "{page}");
    assert!(page.contains("- text: Not clicked"), "{page}");
    assert!(page.contains("- textbox \"Query\" [ref="), "{page}");
    assert!(page.contains("- combobox \"Color\" [ref="), "{page}");
    assert!(
        page.contains(": Red (options: Red | Green | Blue)"),
        "{page}"
    );
    assert!(page.contains("- link \"Other page\" [ref="), "{page}");
    assert!(
        !page.contains("Hidden button"),
        "hidden elements are left out:\n{page}"
    );

    // Refs are stable across snapshots of the same page.
    let snapshot = text(&tools, "browser_snapshot", json!({})).await;
    let press = ref_of(&snapshot, "button \"Press me\"");
    assert_eq!(press, ref_of(&page, "button \"Press me\""));

    let after = text(&tools, "browser_click", json!({"ref": press})).await;
    assert!(after.contains("- text: Clicked 1 times"), "{after}");
    let after = text(&tools, "browser_click", json!({"ref": press})).await;
    assert!(after.contains("- text: Clicked 2 times"), "{after}");
    // An element far below the fold is scrolled into view and clicked.
    let far = ref_of(&snapshot, "button \"Far away\"");
    let after = text(&tools, "browser_click", json!({"ref": far})).await;
    assert!(after.contains("button \"Far clicked\""), "{after}");

    let color = ref_of(&snapshot, "combobox \"Color\"");
    let after = text(
        &tools,
        "browser_select",
        json!({"ref": color, "values": ["Green"]}),
    )
    .await;
    assert!(after.starts_with("Selected Green in"), "{after}");
    assert!(after.contains("- text: Chosen: g"), "{after}");
    let err = call(
        &tools,
        "browser_select",
        json!({"ref": color, "values": ["Purple"]}),
    )
    .await
    .unwrap_err();
    assert!(
        err.message().contains("no option \"Purple\""),
        "{}",
        err.message()
    );
    assert!(
        err.message()
            .contains("options: \"Red\", \"Green\", \"Blue\""),
        "{}",
        err.message()
    );

    let value = call(
        &tools,
        "browser_eval",
        json!({"expression": "document.title + ' / ' + window.n"}),
    )
    .await
    .unwrap();
    assert_eq!(value.structured, Some(json!("Kinet test page / 2")));
    let value = call(
        &tools,
        "browser_eval",
        json!({"expression": "new Promise(r => setTimeout(() => r({a: [1, 2]}), 50))"}),
    )
    .await
    .unwrap();
    assert_eq!(value.structured, Some(json!({"a": [1, 2]})));
    let err = call(
        &tools,
        "browser_eval",
        json!({"expression": "undefinedThing.x"}),
    )
    .await
    .unwrap_err();
    assert!(
        err.message().contains("undefinedThing"),
        "{}",
        err.message()
    );

    let shot = call(&tools, "browser_screenshot", json!({"full_page": true}))
        .await
        .unwrap();
    assert!(
        shot.text.starts_with(&format!("Screenshot of {site}/ (")),
        "{}",
        shot.text
    );
    let png = base64_decode(&shot.images[0].data);
    let image = image::load_from_memory(&png).unwrap();
    assert!(
        image.height() > 3000,
        "full page: {}x{}",
        image.width(),
        image.height()
    );
    let rgb = image.to_rgb8();
    assert!(
        rgb.pixels().any(|p| p.0 != [255, 255, 255]),
        "the page has non-white pixels"
    );

    // Typing with submit sends the form and waits for the result page.
    let query = ref_of(&snapshot, "textbox \"Query\"");
    let result = text(
        &tools,
        "browser_type",
        json!({"ref": query, "text": "kinet rocks", "submit": true}),
    )
    .await;
    assert!(result.starts_with("Typed 11 characters into"), "{result}");
    assert!(
        result.contains(&format!("URL: {site}/search?q=kinet+rocks")),
        "{result}"
    );
    assert!(
        result.contains("- text: You searched for kinet rocks"),
        "{result}"
    );
    // Refs of the old page are refused with a way forward.
    let err = call(&tools, "browser_click", json!({"ref": press}))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::InvalidArguments);
    assert!(
        err.message().contains("take a new browser_snapshot"),
        "{}",
        err.message()
    );

    // Tabs.
    let listed = text(
        &tools,
        "browser_tabs",
        json!({"action": "new", "url": format!("{site}/other")}),
    )
    .await;
    assert!(listed.contains("1: Other — "), "{listed}");
    assert!(listed.contains("/other (active)"), "{listed}");
    let page = text(&tools, "browser_snapshot", json!({})).await;
    assert!(page.contains("The other page"), "{page}");
    let listed = text(
        &tools,
        "browser_tabs",
        json!({"action": "select", "index": 0}),
    )
    .await;
    assert!(
        listed.contains("0: Results — ") && listed.contains("kinet+rocks (active)"),
        "{listed}"
    );
    let listed = text(
        &tools,
        "browser_tabs",
        json!({"action": "close", "index": 1}),
    )
    .await;
    assert!(!listed.contains("Other"), "{listed}");
    let err = call(
        &tools,
        "browser_tabs",
        json!({"action": "select", "index": 7}),
    )
    .await
    .unwrap_err();
    assert!(
        err.message()
            .contains("there is no tab 7; 1 tab(s) are open"),
        "{}",
        err.message()
    );
    let err = call(&tools, "browser_navigate", json!({"url": "example.com"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::InvalidArguments);

    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_wait_for_the_navigations_they_start_and_only_those() {
    let Some((tools, session)) = browser() else {
        return;
    };
    let site = serve().await;
    let links = format!("{site}/links");
    let page = text(&tools, "browser_navigate", json!({"url": links})).await;

    // A click that changes nothing but the page returns at once.
    let started = std::time::Instant::now();
    let after = text(
        &tools,
        "browser_click",
        json!({"ref": ref_of(&page, "button \"Stay\"")}),
    )
    .await;
    assert!(after.contains("button \"Stayed\""), "{after}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );

    // A fragment link navigates within the document: no wait for a load.
    let started = std::time::Instant::now();
    let after = text(
        &tools,
        "browser_click",
        json!({"ref": ref_of(&page, "link \"To the end\"")}),
    )
    .await;
    assert!(after.contains(&format!("URL: {links}#end")), "{after}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );

    // History API routing and a link opening a new tab: no wait either.
    for (button, expect) in [
        ("button \"Route\"", "button \"Routed\""),
        ("link \"Other in a new tab\"", "Page: Links"),
    ] {
        let started = std::time::Instant::now();
        let after = text(
            &tools,
            "browser_click",
            json!({"ref": ref_of(&page, button)}),
        )
        .await;
        assert!(after.contains(expect), "{after}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{button}: {:?}",
            started.elapsed()
        );
    }
    let tabs = text(&tools, "browser_tabs", json!({"action": "list"})).await;
    assert!(tabs.contains("1: Other"), "{tabs}");
    text(
        &tools,
        "browser_tabs",
        json!({"action": "close", "index": 1}),
    )
    .await;

    // Dialogs are answered at once and reported.
    let page = text(&tools, "browser_snapshot", json!({})).await;
    let after = text(
        &tools,
        "browser_click",
        json!({"ref": ref_of(&page, "button \"Delete\"")}),
    )
    .await;
    assert!(after.contains("- text: Deleted"), "{after}");
    assert!(
        after.contains("confirm dialog \"Really delete?\"; kinet accepted it"),
        "{after}"
    );
    let after = text(
        &tools,
        "browser_click",
        json!({"ref": ref_of(&page, "button \"Greet\"")}),
    )
    .await;
    assert!(after.contains("button \"Greeted\""), "{after}");
    assert!(
        after.contains("alert dialog \"Hello from the page\""),
        "{after}"
    );
    assert!(
        !after.contains("Really delete"),
        "notes are reported once: {after}"
    );
    let value = call(
        &tools,
        "browser_eval",
        json!({"expression": "confirm('From eval?')"}),
    )
    .await
    .unwrap();
    assert_eq!(value.structured, Some(json!(true)));
    assert!(
        value.text.contains("confirm dialog \"From eval?\""),
        "{}",
        value.text
    );

    // A full-page screenshot of a very tall page is cut to 8000 px.
    let viewport = call(&tools, "browser_eval", json!({"expression": "innerHeight"}))
        .await
        .unwrap()
        .structured;
    call(
        &tools,
        "browser_eval",
        json!({"expression": "document.body.style.height = '20000px'"}),
    )
    .await
    .unwrap();
    let shot = call(&tools, "browser_screenshot", json!({"full_page": true}))
        .await
        .unwrap();
    assert!(shot.text.contains("x8000)."), "{}", shot.text);
    assert!(
        shot.text.contains("this shows its top-left"),
        "{}",
        shot.text
    );
    let viewport_after = call(&tools, "browser_eval", json!({"expression": "innerHeight"}))
        .await
        .unwrap()
        .structured;
    assert_eq!(viewport_after, viewport, "the viewport is untouched");

    // A link to a page that answers slowly: the click waits for it.
    let after = text(
        &tools,
        "browser_click",
        json!({"ref": ref_of(&page, "link \"Slow page\"")}),
    )
    .await;
    assert!(after.contains("Slow page arrived"), "{after}");

    // A handler that navigates from a queued task.
    let page = text(&tools, "browser_navigate", json!({"url": links})).await;
    let after = text(
        &tools,
        "browser_click",
        json!({"ref": ref_of(&page, "button \"Go later\"")}),
    )
    .await;
    assert!(after.contains("The other page"), "{after}");
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_dom_display_contents_and_cards_are_usable_and_refs_stay_on_their_page() {
    let Some((tools, session)) = browser() else {
        return;
    };
    let site = serve().await;
    let page = text(
        &tools,
        "browser_navigate",
        json!({"url": format!("{site}/parts")}),
    )
    .await;
    for (button, pressed) in [
        ("Shadow button", "Shadow pressed"),
        ("In contents", "Contents pressed"),
        ("Inside card", "Inner pressed"),
    ] {
        let needle = format!("button \"{button}\"");
        let after = text(
            &tools,
            "browser_click",
            json!({"ref": ref_of(&page, &needle)}),
        )
        .await;
        assert!(after.contains(&format!("button \"{pressed}\"")), "{after}");
    }
    let agree = ref_of(&page, "checkbox \"Agree\"");
    let err = call(&tools, "browser_type", json!({"ref": agree, "text": "yes"}))
        .await
        .unwrap_err();
    assert!(
        err.message().contains("use browser_click"),
        "{}",
        err.message()
    );

    // Another page with as many elements: the old refs do not name its
    // elements.
    let other = text(
        &tools,
        "browser_navigate",
        json!({"url": format!("{site}/links")}),
    )
    .await;
    assert!(!other.contains(&format!("[ref={agree}]")), "{other}");
    let err = call(&tools, "browser_click", json!({"ref": agree}))
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        ToolErrorKind::InvalidArguments,
        "{}",
        err.message()
    );
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chrome_killed_mid_session_is_restarted_by_the_next_call() {
    let Some((tools, session)) = browser() else {
        return;
    };
    let site = serve().await;
    text(
        &tools,
        "browser_navigate",
        json!({"url": format!("{site}/other")}),
    )
    .await;
    let pid = session.pid().await.unwrap();
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    tokio::time::sleep(Duration::from_millis(300)).await;

    let page = text(
        &tools,
        "browser_navigate",
        json!({"url": format!("{site}/")}),
    )
    .await;
    assert!(page.contains("Page: Kinet test page"), "{page}");
    let new_pid = session.pid().await.unwrap();
    assert_ne!(pid, new_pid, "a new Chrome runs");
    session.shutdown().await;
    assert!(session.pid().await.is_none());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let alive = std::path::Path::new(&format!("/proc/{new_pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{new_pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ");
    assert!(!alive, "Chrome {new_pid} survived shutdown");
}

fn base64_decode(data: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tab_that_stops_answering_is_reopened() {
    use chromiumoxide::cdp::browser_protocol::page::CrashParams;
    let Some((tools, session)) = browser() else {
        return;
    };
    let site = serve().await;
    let links = format!("{site}/links");
    // A hung tab in the background does not stall the tab list.
    text(&tools, "browser_navigate", json!({"url": links})).await;
    let background = session.active_page().await.unwrap();
    let _ = tokio::time::timeout(
        Duration::from_millis(300),
        background.evaluate_expression("for (;;) {}"),
    )
    .await;
    text(
        &tools,
        "browser_tabs",
        json!({"action": "new", "url": links}),
    )
    .await;
    let started = std::time::Instant::now();
    let tabs = text(&tools, "browser_tabs", json!({"action": "list"})).await;
    assert!(tabs.contains("0: (not answering)"), "{tabs}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    text(
        &tools,
        "browser_tabs",
        json!({"action": "close", "index": 0}),
    )
    .await;

    for how in ["hung", "crashed"] {
        text(&tools, "browser_navigate", json!({"url": links})).await;
        let page = session.active_page().await.unwrap();
        // The page's main thread never comes back, or its renderer dies.
        let wait = Duration::from_millis(500);
        if how == "hung" {
            let _ = tokio::time::timeout(wait, page.evaluate_expression("for (;;) {}")).await;
        } else {
            let _ = tokio::time::timeout(wait, page.execute(CrashParams::default())).await;
        }
        let started = std::time::Instant::now();
        let after = text(&tools, "browser_snapshot", json!({})).await;
        assert!(after.contains("Page: Links"), "{how}: {after}");
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "{how}: {:?}",
            started.elapsed()
        );
        assert!(
            after.contains(&format!(
                "The tab's page stopped answering (crashed or hung); kinet closed it and \
opened {links} in a new tab."
            )),
            "{how}: {after}"
        );
        let tabs = text(&tools, "browser_tabs", json!({"action": "list"})).await;
        assert_eq!(tabs.lines().count(), 1, "{how}: {tabs}");
    }
    session.shutdown().await;
}
