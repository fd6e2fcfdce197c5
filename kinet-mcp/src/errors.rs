//! Failures in the user's terms: the transport's own words and causes,
//! without the SDK's type names.

/// A request's failure in the user's terms (the transport's own words,
/// without the SDK's type names).
pub(crate) fn service_error(error: &rmcp::ServiceError) -> String {
    use rmcp::ServiceError as E;
    match error {
        E::TransportSend(error) => error_chain(&*error.error),
        E::TransportClosed => "the connection closed".to_owned(),
        E::McpError(error) => format!("{} (code {})", error.message, error.code.0),
        E::Timeout { timeout } => format!("no answer within {:.1} s", timeout.as_secs_f64()),
        other => other.to_string(),
    }
}

/// An error and its causes, joined with `: ` (what reqwest and hyper put
/// in the chain is what the user needs: "connection refused").
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
