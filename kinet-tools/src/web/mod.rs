//! `web_fetch` and `web_search`.

mod fetch;
mod markdown;
mod search;

pub use fetch::{ReaderBackend, WebFetchArgs, WebFetchConfig, WebFetchTool};
pub use markdown::{Page, html_to_markdown};
pub use search::{
    BingHtml, DuckDuckGoHtml, JsonApi, JsonApiKind, SearchBackend, SearchError, SearchResult,
    WebSearchArgs, WebSearchTool, parse_bing, parse_duckduckgo,
};
