//! HTML to markdown: readability-style main-content extraction, then
//! conversion, all local.

/// A converted page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The title (may be empty).
    pub title: String,
    /// The main content as markdown.
    pub markdown: String,
}

/// Tags never worth converting.
const SKIPPED: &[&str] = &[
    "script", "style", "noscript", "nav", "svg", "iframe", "form", "button", "template", "head",
];

/// Converts a page: the readability algorithm picks the main content (the
/// whole body, minus navigation and chrome, when it finds none), which is
/// then converted to markdown.
pub fn html_to_markdown(html: &str, url: &str) -> Page {
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(SKIPPED.to_vec())
        .build();
    let article = dom_smoothie::Readability::new(html, Some(url), None)
        .or_else(|_| dom_smoothie::Readability::new(html, None, None))
        .ok()
        .and_then(|mut readability| readability.parse().ok());
    let (title, content) = match article {
        Some(article) if article.text_content.trim().chars().count() >= 100 => {
            (article.title.to_string(), article.content.to_string())
        }
        Some(article) => (article.title.to_string(), without_chrome(html)),
        None => (String::new(), without_chrome(html)),
    };
    let markdown = converter.convert(&content).unwrap_or_default();
    Page {
        title: title.trim().to_owned(),
        markdown: tidy(&markdown),
    }
}

/// The body with header, footer and aside elements removed (navigation and
/// scripts are skipped by the converter).
fn without_chrome(html: &str) -> String {
    let document = scraper::Html::parse_document(html);
    let Ok(body) = scraper::Selector::parse("body") else {
        return html.to_owned();
    };
    let Some(body) = document.select(&body).next() else {
        return html.to_owned();
    };
    let mut out = body.html();
    for tag in ["header", "footer", "aside"] {
        if let Ok(selector) = scraper::Selector::parse(tag) {
            for element in body.select(&selector) {
                out = out.replace(&element.html(), "");
            }
        }
    }
    out
}

/// Trims trailing spaces and collapses runs of blank lines.
fn tidy(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    let mut blank = 0;
    for line in markdown.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim().to_owned()
}
