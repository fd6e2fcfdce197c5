//! `wecom_approval_list` and `wecom_approval_detail`: WeCom approval (审批)
//! records.

use std::fmt::Write as _;

use async_trait::async_trait;
use kinet_core::tool::CancellationToken;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::clock::{format_offset, format_time, parse_time};
use super::common::IntegrationError;
use super::wecom::{WECOM, WeComClient};

/// The longest time range one listing may cover (the API's limit).
const MAX_RANGE_SECONDS: i64 = 31 * 86_400;
/// Records asked for per page (the API's maximum).
const PAGE_SIZE: u32 = 100;

/// An approval's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// 审批中.
    Pending,
    /// 已通过.
    Approved,
    /// 已驳回.
    Rejected,
    /// 已撤销.
    Revoked,
    /// 通过后撤销.
    RevokedAfterApproval,
    /// 已删除.
    Deleted,
    /// 已支付.
    Paid,
}

impl ApprovalStatus {
    fn code(self) -> i64 {
        match self {
            Self::Pending => 1,
            Self::Approved => 2,
            Self::Rejected => 3,
            Self::Revoked => 4,
            Self::RevokedAfterApproval => 6,
            Self::Deleted => 7,
            Self::Paid => 10,
        }
    }
}

/// The words for an approval's `sp_status`.
fn approval_status_text(code: i64) -> String {
    match code {
        1 => "pending".into(),
        2 => "approved".into(),
        3 => "rejected".into(),
        4 => "revoked".into(),
        6 => "revoked after approval".into(),
        7 => "deleted".into(),
        10 => "paid".into(),
        other => format!("status {other}"),
    }
}

/// The words for one approver's `sp_status`.
fn step_status_text(code: i64) -> String {
    match code {
        1 => "pending".into(),
        2 => "approved".into(),
        3 => "rejected".into(),
        4 => "transferred".into(),
        11 => "sent back".into(),
        12 => "added an approver".into(),
        13 => "approved and added an approver".into(),
        14 => "handled".into(),
        15 => "transferred".into(),
        other => format!("status {other}"),
    }
}

/// A point in time: unix seconds, or a date in the configured time zone.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum TimeValue {
    /// Unix seconds.
    Seconds(i64),
    /// `YYYY-MM-DD`, `YYYY-MM-DD HH:MM` or `YYYY-MM-DD HH:MM:SS`.
    Text(String),
}

impl TimeValue {
    fn seconds(&self, field: &str, offset_minutes: i32) -> Result<i64, ToolError> {
        match self {
            Self::Seconds(seconds) => Ok(*seconds),
            Self::Text(text) => parse_time(text, offset_minutes).ok_or_else(|| {
                ToolError::invalid_arguments(format!(
                    "{field} {text:?} is not a date (YYYY-MM-DD or YYYY-MM-DD HH:MM) nor unix seconds"
                ))
            }),
        }
    }
}

/// Arguments of `wecom_approval_list`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WeComApprovalListArgs {
    /// Start of the submission time range: `YYYY-MM-DD[ HH:MM]` or unix
    /// seconds.
    pub start_time: TimeValue,
    /// End of the range (at most 31 days after the start). A bare date
    /// means the end of that day.
    pub end_time: TimeValue,
    /// Only records of this approval template.
    #[serde(default)]
    pub template_id: Option<String>,
    /// Only records in this state.
    #[serde(default)]
    pub status: Option<ApprovalStatus>,
}

/// Arguments of `wecom_approval_detail`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WeComApprovalDetailArgs {
    /// The approval number (`sp_no`), e.g. from `wecom_approval_list`.
    pub sp_no: String,
}

/// Lists WeCom approval numbers submitted in a time range, following the
/// cursor through every page (up to `max_records`). Read-only.
#[derive(Debug, Clone)]
pub struct WeComApprovalListTool {
    client: WeComClient,
    max_records: usize,
}

impl WeComApprovalListTool {
    /// A tool listing through `client`, at most 2,000 records per call.
    pub fn new(client: WeComClient) -> Self {
        Self {
            client,
            max_records: 2000,
        }
    }

    /// Sets the most records one call collects.
    pub fn max_records(mut self, max_records: usize) -> Self {
        self.max_records = max_records.max(1);
        self
    }
}

#[derive(Deserialize)]
struct ApprovalPage {
    #[serde(default)]
    sp_no_list: Vec<String>,
    #[serde(default)]
    new_next_cursor: String,
}

impl WeComClient {
    /// Approval numbers of records submitted between `start` and `end` (unix
    /// seconds), with optional template and status filters, following the
    /// cursor up to `limit` numbers. The flag says whether more remain.
    pub async fn approval_numbers(
        &self,
        start: i64,
        end: i64,
        template_id: Option<&str>,
        status: Option<ApprovalStatus>,
        limit: usize,
        cancel: &CancellationToken,
    ) -> Result<(Vec<String>, bool), IntegrationError> {
        let mut filters = Vec::new();
        if let Some(template) = template_id {
            filters.push(json!({ "key": "template_id", "value": template }));
        }
        if let Some(status) = status {
            filters.push(json!({ "key": "sp_status", "value": status.code().to_string() }));
        }
        let mut numbers = Vec::new();
        let mut cursor = String::new();
        loop {
            let body = json!({
                "starttime": start.to_string(),
                "endtime": end.to_string(),
                "new_cursor": cursor,
                "size": PAGE_SIZE,
                "filters": filters,
            });
            let page: ApprovalPage = self
                .inner()
                .post_json("/cgi-bin/oa/getapprovalinfo", &body, cancel)
                .await?;
            let more = !page.new_next_cursor.is_empty() && !page.sp_no_list.is_empty();
            numbers.extend(page.sp_no_list);
            if numbers.len() >= limit {
                let truncated = more || numbers.len() > limit;
                numbers.truncate(limit);
                return Ok((numbers, truncated));
            }
            if !more {
                return Ok((numbers, false));
            }
            cursor = page.new_next_cursor;
        }
    }

    /// The full record of one approval (the `info` object).
    pub async fn approval_detail(
        &self,
        sp_no: &str,
        cancel: &CancellationToken,
    ) -> Result<Value, IntegrationError> {
        const API: &str = "/cgi-bin/oa/getapprovaldetail";
        let mut body: Value = self
            .inner()
            .post_json(API, &json!({ "sp_no": sp_no }), cancel)
            .await?;
        match body.get_mut("info").map(Value::take) {
            Some(info) if info.is_object() => Ok(info),
            _ => Err(WECOM.decode_error(API, "no info object")),
        }
    }
}

#[async_trait]
impl Tool for WeComApprovalListTool {
    type Args = WeComApprovalListArgs;

    fn name(&self) -> &str {
        "wecom_approval_list"
    }

    fn description(&self) -> &str {
        "Lists WeCom (企业微信) approval numbers (sp_no) of records submitted in a time range \
of at most 31 days, optionally only one template or one status. Dates are in the company's \
time zone. Use wecom_approval_detail to read a record."
    }

    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }

    async fn call(
        &self,
        args: WeComApprovalListArgs,
        ctx: &ToolCtx,
    ) -> Result<ToolOutput, ToolError> {
        let offset = self.client.inner().config.utc_offset_minutes;
        let start = args.start_time.seconds("start_time", offset)?;
        let mut end = args.end_time.seconds("end_time", offset)?;
        // A bare end date means the whole day.
        if let TimeValue::Text(text) = &args.end_time
            && !text.trim().contains([' ', 'T', ':'])
            && !text.trim().bytes().all(|b| b.is_ascii_digit())
        {
            end += 86_399;
        }
        if end <= start {
            return Err(ToolError::invalid_arguments(
                "end_time must be after start_time",
            ));
        }
        if end - start > MAX_RANGE_SECONDS {
            return Err(ToolError::invalid_arguments(
                "the range is longer than 31 days, WeCom's limit for one listing; split it",
            ));
        }
        let (numbers, more) = self
            .client
            .approval_numbers(
                start,
                end,
                args.template_id.as_deref(),
                args.status,
                self.max_records,
                ctx.cancellation(),
            )
            .await?;
        let mut text = format!(
            "{} approval record(s) submitted {} to {} ({})",
            numbers.len(),
            format_time(start, offset),
            format_time(end, offset),
            format_offset(offset)
        );
        if let Some(status) = args.status {
            let _ = write!(text, ", {}", approval_status_text(status.code()));
        }
        if let Some(template) = &args.template_id {
            let _ = write!(text, ", template {template}");
        }
        text.push_str(if numbers.is_empty() { "." } else { ":\n" });
        text.push_str(&numbers.join("\n"));
        if more {
            let _ = write!(
                text,
                "\nMore records exist beyond these {}; narrow the range or filter.",
                numbers.len()
            );
        }
        Ok(ToolOutput::text(text).with_structured(json!({ "sp_no_list": numbers, "more": more })))
    }
}

/// Reads one WeCom approval record: a readable summary (applicant, status,
/// form fields, approval steps, comments) followed by the record's JSON.
/// Read-only.
#[derive(Debug, Clone)]
pub struct WeComApprovalDetailTool {
    client: WeComClient,
}

impl WeComApprovalDetailTool {
    /// A tool reading through `client`.
    pub fn new(client: WeComClient) -> Self {
        Self { client }
    }
}

#[async_trait]
impl Tool for WeComApprovalDetailTool {
    type Args = WeComApprovalDetailArgs;

    fn name(&self) -> &str {
        "wecom_approval_detail"
    }

    fn description(&self) -> &str {
        "Reads one WeCom (企业微信) approval record by its number (sp_no): applicant, status, \
form fields, approval steps and comments, followed by the full record as JSON."
    }

    fn annotations(&self) -> kinet_core::ToolAnnotations {
        // Form fields and comments are written by other people.
        kinet_core::ToolAnnotations::read_only().open_world(true)
    }

    async fn call(
        &self,
        args: WeComApprovalDetailArgs,
        ctx: &ToolCtx,
    ) -> Result<ToolOutput, ToolError> {
        let sp_no = args.sp_no.trim();
        if sp_no.is_empty() {
            return Err(ToolError::invalid_arguments("sp_no is empty"));
        }
        let info = self
            .client
            .approval_detail(sp_no, ctx.cancellation())
            .await?;
        let offset = self.client.inner().config.utc_offset_minutes;
        let mut text = summarize_approval(&info, offset);
        text.push_str("\nJSON:\n");
        text.push_str(&info.to_string());
        Ok(ToolOutput::text(text).with_structured(info))
    }
}

fn str_of<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// A number WeCom may send as a number or a string.
fn int_of(value: &Value, key: &str) -> Option<i64> {
    match value.get(key)? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// The Chinese text of a `[{text, lang}]` list, else the first.
fn localized(list: Option<&Value>) -> String {
    let items = list
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    items
        .iter()
        .find(|item| str_of(item, "lang") == "zh_CN")
        .or_else(|| items.first())
        .map(|item| str_of(item, "text").to_owned())
        .unwrap_or_default()
}

/// A readable rendering of an approval `info` object.
pub(crate) fn summarize_approval(info: &Value, offset: i32) -> String {
    let mut out = String::new();
    let status = int_of(info, "sp_status")
        .map(approval_status_text)
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "Approval {} \"{}\": {status}",
        str_of(info, "sp_no"),
        str_of(info, "sp_name")
    );
    let _ = writeln!(out, "Template: {}", str_of(info, "template_id"));
    if let Some(applicant) = info.get("applyer") {
        let _ = write!(out, "Applicant: {}", str_of(applicant, "userid"));
        let party = applicant
            .get("partyid")
            .map(|p| p.to_string().trim_matches('"').to_owned());
        if let Some(party) = party.filter(|p| !p.is_empty()) {
            let _ = write!(out, " (department {party})");
        }
        out.push('\n');
    }
    if let Some(time) = int_of(info, "apply_time") {
        let _ = writeln!(
            out,
            "Submitted: {} ({})",
            format_time(time, offset),
            format_offset(offset)
        );
    }
    let contents = info
        .pointer("/apply_data/contents")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if !contents.is_empty() {
        out.push_str("Form:\n");
        for control in contents {
            let value = control_value(control, offset);
            if !value.is_empty() {
                let _ = writeln!(out, "  - {}: {value}", localized(control.get("title")));
            }
        }
    }
    let records = info
        .get("sp_record")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if !records.is_empty() {
        out.push_str("Approval steps:\n");
        for (index, record) in records.iter().enumerate() {
            let step = int_of(record, "sp_status")
                .map(step_status_text)
                .unwrap_or_default();
            let _ = writeln!(out, "  {}. {step}", index + 1);
            let details = record
                .get("details")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            for detail in details {
                let who = detail
                    .pointer("/approver/userid")
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                let what = int_of(detail, "sp_status")
                    .map(step_status_text)
                    .unwrap_or_default();
                let _ = write!(out, "     {who}: {what}");
                if let Some(time) = int_of(detail, "sptime").filter(|t| *t > 0) {
                    let _ = write!(out, " at {}", format_time(time, offset));
                }
                let speech = str_of(detail, "speech");
                if !speech.is_empty() {
                    let _ = write!(out, ", \"{speech}\"");
                }
                out.push('\n');
            }
        }
    }
    let notified: Vec<&str> = info
        .get("notifyer")
        .and_then(Value::as_array)
        .map(|list| list.iter().map(|n| str_of(n, "userid")).collect())
        .unwrap_or_default();
    if !notified.is_empty() {
        let _ = writeln!(out, "Notified: {}", notified.join(", "));
    }
    let comments = info
        .get("comments")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if !comments.is_empty() {
        out.push_str("Comments:\n");
        for comment in comments {
            let who = comment
                .pointer("/commentUserInfo/userid")
                .and_then(Value::as_str)
                .unwrap_or("?");
            let when = int_of(comment, "commenttime")
                .map(|t| format_time(t, offset))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  - {who} at {when}: \"{}\"",
                str_of(comment, "commentcontent")
            );
        }
    }
    out
}

/// The value of one form control as text.
fn control_value(control: &Value, offset: i32) -> String {
    let Some(value) = control.get("value") else {
        return String::new();
    };
    match str_of(control, "control") {
        "Text" | "Textarea" => str_of(value, "text").to_owned(),
        "Number" => str_of(value, "new_number").to_owned(),
        "Money" => str_of(value, "new_money").to_owned(),
        "Date" => value
            .get("date")
            .map(|date| date_text(date, offset))
            .unwrap_or_default(),
        "DateRange" => value
            .get("date_range")
            .map(|range| range_text(range, offset))
            .unwrap_or_default(),
        "Selector" => value
            .get("selector")
            .map(selected_options)
            .unwrap_or_default(),
        "Contact" => contact_names(value),
        "File" => format!("{} file(s)", array_len(value, "files")),
        "Table" => format!("{} row(s)", array_len(value, "children")),
        "Vacation" => {
            let kind = value
                .pointer("/vacation/selector")
                .map(selected_options)
                .unwrap_or_default();
            let span = value
                .pointer("/vacation/attendance/date_range")
                .map(|range| range_text(range, offset))
                .unwrap_or_default();
            format!("{kind}, {span}")
        }
        "Attendance" => value
            .pointer("/attendance/date_range")
            .map(|range| range_text(range, offset))
            .unwrap_or_default(),
        "Location" => location_text(value),
        "Formula" => value
            .pointer("/formula/value")
            .map(|v| v.to_string().trim_matches('"').to_owned())
            .unwrap_or_default(),
        "RelatedApproval" => value
            .get("related_approval")
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .map(|a| str_of(a, "sp_no"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default(),
        "Tips" => String::new(),
        _ => raw_value_text(value),
    }
}

/// A date control's value (`s_timestamp`) as local time.
fn date_text(date: &Value, offset: i32) -> String {
    int_of(date, "s_timestamp")
        .map(|t| format_time(t, offset))
        .unwrap_or_default()
}

/// A date range's begin and end as local time, with its length in hours
/// when given.
fn range_text(range: &Value, offset: i32) -> String {
    let begin = int_of(range, "new_begin")
        .map(|t| format_time(t, offset))
        .unwrap_or_default();
    let end = int_of(range, "new_end")
        .map(|t| format_time(t, offset))
        .unwrap_or_default();
    let mut text = format!("{begin} to {end}");
    if let Some(seconds) = int_of(range, "new_duration") {
        let _ = write!(text, " ({:.1} h)", seconds as f64 / 3600.0);
    }
    text
}

/// The options chosen in a selector, comma-separated.
fn selected_options(selector: &Value) -> String {
    selector
        .get("options")
        .and_then(Value::as_array)
        .map(|options| {
            options
                .iter()
                .map(|o| localized(o.get("value")))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// The members and departments of a contact control, by name (or user ID
/// when a member has no name).
fn contact_names(value: &Value) -> String {
    let members = value
        .get("members")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    let departments = value
        .get("departments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    members
        .chain(departments)
        .map(|m| {
            let name = str_of(m, "name");
            if name.is_empty() {
                str_of(m, "userid")
            } else {
                name
            }
            .to_owned()
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// How many items the array under `key` holds (0 when there is none).
fn array_len(value: &Value, key: &str) -> usize {
    value.get(key).and_then(Value::as_array).map_or(0, Vec::len)
}

/// A location control's title and address.
fn location_text(value: &Value) -> String {
    let location = value.get("location").unwrap_or(&Value::Null);
    format!(
        "{} {}",
        str_of(location, "title"),
        str_of(location, "address")
    )
    .trim()
    .to_owned()
}

/// The value of a control kind not known here, as JSON cut to about 200
/// bytes.
fn raw_value_text(value: &Value) -> String {
    let mut text = value.to_string();
    if text.len() > 200 {
        let cut = (0..=200)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text.truncate(cut);
        text.push('…');
    }
    text
}
