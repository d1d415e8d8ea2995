//! The mirror of the event contract in `ctxdb/events.py`: same fields, limits and patterns.
//!
//! Strings are borrowed from the input unless they hold escapes. Non-nullable fields with a
//! default use `Given<T>`, which is absent or a `T`, never `null`, as in pydantic.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::timestamp::parse_utc_micros;

pub const SUMMARY_MAX_CHARS: usize = 24_000;
pub const SUMMARY_MAX_REFS: usize = 64;
pub const REF_MAX_CHARS: usize = 2_048;
pub const ANCHORS_MAX: usize = 32;
pub const ANCHOR_MAX_CHARS: usize = 256;
/// Levels of nesting a payload may hold, the payload object itself being level 1.
pub const PAYLOAD_MAX_DEPTH: usize = 64;

const ADAPTERS: [&str; 6] = ["minimal", "langgraph", "claude_code", "react", "codex", "gemini_cli"];

/// A JSON string, borrowed from the line when it has no escapes.
pub struct Str<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrVisitor<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for StrVisitor<'a> {
            type Value = Str<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Str<'a>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Str<'a>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Str<'a>, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(StrVisitor(PhantomData))
    }
}

/// A field that may be absent (its default applies) but, when present, is never `null`.
pub struct Given<T>(Option<T>);

impl<T> Default for Given<T> {
    fn default() -> Self {
        Given(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Given<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(|v| Given(Some(v)))
    }
}

/// Any JSON object (`dict[str, Any]`), checked for syntax and skipped.
pub struct AnyObject;

impl<'de> Deserialize<'de> for AnyObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor;
        impl<'de> Visitor<'de> for ObjectVisitor {
            type Value = AnyObject;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnyObject, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(AnyObject)
            }
        }
        deserializer.deserialize_map(ObjectVisitor)
    }
}

/// `min <= len(s) <= max` in characters (code points, as Python counts them).
fn chars(s: &Str, min: usize, max: usize) -> bool {
    let s = &s.0;
    if s.len() < min {
        return false;
    }
    s.len() <= max || s.chars().count() <= max
}

fn opt_chars(s: &Option<Str>, max: usize) -> bool {
    s.as_ref().is_none_or(|s| chars(s, 0, max))
}

fn given_chars(s: &Given<Str>, max: usize) -> bool {
    s.0.as_ref().is_none_or(|s| chars(s, 0, max))
}

fn one_of(s: &Str, allowed: &[&str]) -> bool {
    allowed.contains(&s.0.as_ref())
}

/// `^[A-Za-z0-9][A-Za-z0-9<extra>]{0,127}$`: the contract's RefId (extra `_-`) and Ident
/// (extra `_-@.:+`) patterns.
fn id_like(s: &str, extra: &[u8]) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && b[0].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || extra.contains(c))
}

fn ref_id(s: &str) -> bool {
    id_like(s, b"_-")
}

fn ident(s: &str) -> bool {
    id_like(s, b"_-@.:+")
}

fn opt_ref_id(s: &Option<Str>) -> bool {
    s.as_ref().is_none_or(|s| ref_id(&s.0))
}

fn relative_path(s: &str) -> bool {
    !s.starts_with('/') && !s.contains('\\') && s.split('/').all(|p| !matches!(p, "" | "." | ".."))
}

fn non_negative(n: &Option<i64>) -> bool {
    n.is_none_or(|n| n >= 0)
}

fn list_of(items: &Given<Vec<Str>>, max_items: usize, max_chars: usize) -> bool {
    items
        .0
        .as_ref()
        .is_none_or(|v| v.len() <= max_items && v.iter().all(|s| chars(s, 1, max_chars)))
}

#[derive(Deserialize)]
struct TurnStarted<'a> {
    #[serde(borrow, default)]
    project: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct TurnClosed<'a> {
    #[serde(borrow, default)]
    status: Given<Str<'a>>,
    #[serde(borrow, default)]
    #[allow(dead_code)]
    error_type: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct UserSubmission<'a> {
    #[serde(borrow)]
    text: Str<'a>,
    #[serde(borrow, default)]
    event_type: Given<Str<'a>>,
    #[serde(borrow, default)]
    batch_id: Option<Str<'a>>,
    #[serde(borrow, default)]
    arrived_at: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct UserContext<'a> {
    #[serde(borrow)]
    kind: Str<'a>,
    #[serde(borrow, default)]
    label: Given<Str<'a>>,
    #[serde(borrow, default, rename = "ref")]
    reference: Option<Str<'a>>,
    #[serde(borrow, default)]
    source: Option<Str<'a>>,
    #[serde(borrow, default)]
    batch_id: Option<Str<'a>>,
    #[serde(default)]
    #[allow(dead_code)]
    event: Given<AnyObject>,
}

#[derive(Deserialize)]
struct AttachmentUploaded<'a> {
    #[serde(borrow)]
    name: Str<'a>,
    #[serde(borrow)]
    mime: Str<'a>,
    size: i64,
    #[serde(borrow)]
    storage_ref: Str<'a>,
    #[serde(borrow, default)]
    extracted_text: Option<Str<'a>>,
    #[serde(borrow, default)]
    batch_id: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct ProgressStep<'a> {
    #[serde(borrow)]
    step: Str<'a>,
    #[serde(borrow)]
    phase: Str<'a>,
    #[serde(borrow, default)]
    tool: Option<Str<'a>>,
    #[serde(borrow, default)]
    status: Option<Str<'a>>,
    #[serde(borrow, default)]
    title: Option<Str<'a>>,
    #[serde(borrow, default)]
    input: Option<Str<'a>>,
    #[serde(borrow, default)]
    output: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct FileHosted<'a> {
    #[serde(borrow)]
    path: Str<'a>,
    #[serde(borrow)]
    mime: Str<'a>,
    size: i64,
    #[serde(borrow)]
    sha256: Str<'a>,
}

#[derive(Deserialize)]
struct AssistantCompletion<'a> {
    #[serde(borrow, default)]
    text: Given<Str<'a>>,
    #[serde(default)]
    #[allow(dead_code)]
    error: Given<bool>,
    #[serde(borrow, default)]
    error_type: Option<Str<'a>>,
    #[serde(default)]
    tokens_in: Option<i64>,
    #[serde(default)]
    tokens_out: Option<i64>,
    #[serde(borrow, default)]
    model: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct WorkingSummary<'a> {
    #[serde(borrow)]
    text: Str<'a>,
    #[serde(borrow, default)]
    refs: Given<Vec<Str<'a>>>,
    #[serde(borrow, default)]
    scope: Given<Str<'a>>,
}

#[derive(Deserialize)]
struct RetrievalAnchors<'a> {
    #[serde(borrow, default)]
    phrases: Given<Vec<Str<'a>>>,
    #[serde(borrow, default)]
    entities: Given<Vec<Str<'a>>>,
}

#[derive(Deserialize)]
struct InternalNote<'a> {
    #[serde(borrow)]
    text: Str<'a>,
}

#[derive(Deserialize)]
struct RichBlock<'a> {
    #[serde(borrow)]
    block_type: Str<'a>,
    #[serde(borrow, default)]
    call_id: Option<Str<'a>>,
    #[serde(borrow, default)]
    tool: Option<Str<'a>>,
    #[serde(borrow, default)]
    text: Given<Str<'a>>,
    #[serde(default)]
    #[allow(dead_code)]
    meta: Given<AnyObject>,
}

#[derive(Deserialize)]
struct Feedback<'a> {
    #[serde(borrow, default)]
    reaction: Option<Str<'a>>,
    #[serde(borrow, default)]
    text: Option<Str<'a>>,
    #[serde(borrow, default)]
    origin: Given<Str<'a>>,
}

#[derive(Deserialize)]
struct CommunicatorEvent<'a> {
    #[serde(borrow)]
    name: Str<'a>,
    #[serde(default)]
    #[allow(dead_code)]
    data: Given<AnyObject>,
}

#[derive(Deserialize)]
struct StreamAggregate<'a> {
    #[serde(borrow)]
    marker: Str<'a>,
    #[serde(borrow)]
    name: Str<'a>,
    #[serde(borrow, default)]
    #[allow(dead_code)]
    chunks: Option<Vec<Str<'a>>>,
    #[serde(default)]
    chunks_num: Option<i64>,
    #[serde(borrow, default)]
    text: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct ConversationTitle<'a> {
    #[serde(borrow)]
    title: Str<'a>,
}

/// Whether a JSON number token fits the tables: an integer (no `.` or exponent) within i64, or
/// a float that is finite as f64 (`1e400` parses to infinity).
fn number_fits(token: &str) -> bool {
    if token.bytes().any(|c| matches!(c, b'.' | b'e' | b'E')) {
        token.parse::<f64>().is_ok_and(f64::is_finite)
    } else {
        token.parse::<i64>().is_ok()
    }
}

/// Whether the payload's JSON text (valid JSON) holds only what the tables hold, unknown keys
/// included: every number fits (`number_fits`) and nesting is at most `PAYLOAD_MAX_DEPTH`
/// (the contract's `payload_problem`). One pass over the bytes; strings are skipped whole.
pub fn storable(payload: &str) -> bool {
    let b = payload.as_bytes();
    let (mut i, mut depth) = (0usize, 0usize);
    while i < b.len() {
        match b[i] {
            b'"' => loop {
                i += 1;
                match memchr::memchr2(b'"', b'\\', &b[i..]) {
                    Some(k) if b[i + k] == b'\\' => i += k + 1,
                    Some(k) => {
                        i += k + 1;
                        break;
                    }
                    None => return false,
                }
            },
            b'{' | b'[' => {
                depth += 1;
                if depth > PAYLOAD_MAX_DEPTH {
                    return false;
                }
                i += 1;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                i += b[i..]
                    .iter()
                    .position(|c| !matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                    .unwrap_or(b.len() - i);
                if !number_fits(&payload[start..i]) {
                    return false;
                }
            }
            _ => i += 1,
        }
    }
    true
}

fn decode<'a, T: Deserialize<'a>>(payload: &'a str) -> Option<T> {
    serde_json::from_str(payload).ok()
}

/// Whether `payload` (the raw JSON text) is a valid payload of event type `kind`.
fn payload_ok(kind: &str, payload: &str) -> bool {
    // serde also reads a struct from a JSON array; the contract wants an object.
    if !payload.starts_with('{') {
        return false;
    }
    match kind {
        "turn.started" => decode::<TurnStarted>(payload)
            .is_some_and(|p| p.project.as_ref().is_none_or(|s| chars(s, 1, 4096))),
        "turn.closed" => decode::<TurnClosed>(payload).is_some_and(|p| {
            p.status.0.as_ref().is_none_or(|s| one_of(s, &["ok", "error", "cancelled"]))
        }),
        "user.submission" => decode::<UserSubmission>(payload).is_some_and(|p| {
            chars(&p.text, 0, 100_000)
                && p.event_type.0.as_ref().is_none_or(|s| one_of(s, &["prompt", "followup", "steer"]))
                && opt_ref_id(&p.batch_id)
                && p.arrived_at.as_ref().is_none_or(|s| parse_utc_micros(&s.0).is_some())
        }),
        "user.context" => decode::<UserContext>(payload).is_some_and(|p| {
            chars(&p.kind, 1, 128)
                && given_chars(&p.label, 1024)
                && opt_chars(&p.reference, REF_MAX_CHARS)
                && opt_chars(&p.source, 1024)
                && opt_ref_id(&p.batch_id)
        }),
        "user.attachment" => decode::<AttachmentUploaded>(payload).is_some_and(|p| {
            chars(&p.name, 1, 255)
                && !p.name.0.contains('/')
                && relative_path(&p.name.0)
                && chars(&p.mime, 1, 255)
                && p.size >= 0
                && chars(&p.storage_ref, 1, REF_MAX_CHARS)
                && opt_chars(&p.extracted_text, 100_000)
                && opt_ref_id(&p.batch_id)
        }),
        "chat.step" => decode::<ProgressStep>(payload).is_some_and(|p| {
            chars(&p.step, 1, 128)
                && one_of(&p.phase, &["start", "complete", "error"])
                && opt_chars(&p.tool, 128)
                && opt_chars(&p.status, 1024)
                && opt_chars(&p.title, 1024)
                && opt_chars(&p.input, 2048)
                && opt_chars(&p.output, 32_000)
        }),
        "file.hosted" => decode::<FileHosted>(payload).is_some_and(|p| {
            chars(&p.path, 1, 1024)
                && relative_path(&p.path.0)
                && chars(&p.mime, 1, 255)
                && p.size >= 0
                && p.sha256.0.len() == 64
                && p.sha256.0.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
        }),
        "assistant.completion" => decode::<AssistantCompletion>(payload).is_some_and(|p| {
            given_chars(&p.text, 200_000)
                && opt_chars(&p.error_type, 256)
                && non_negative(&p.tokens_in)
                && non_negative(&p.tokens_out)
                && opt_chars(&p.model, 256)
        }),
        "react.summary" => decode::<WorkingSummary>(payload).is_some_and(|p| {
            chars(&p.text, 0, SUMMARY_MAX_CHARS)
                && list_of(&p.refs, SUMMARY_MAX_REFS, REF_MAX_CHARS)
                && given_chars(&p.scope, 64)
        }),
        "react.anchors" => decode::<RetrievalAnchors>(payload).is_some_and(|p| {
            list_of(&p.phrases, ANCHORS_MAX, ANCHOR_MAX_CHARS)
                && list_of(&p.entities, ANCHORS_MAX, ANCHOR_MAX_CHARS)
        }),
        "react.note" => {
            decode::<InternalNote>(payload).is_some_and(|p| chars(&p.text, 1, SUMMARY_MAX_CHARS))
        }
        "react.block" => decode::<RichBlock>(payload).is_some_and(|p| {
            one_of(
                &p.block_type,
                &["react.tool.call", "react.tool.result", "react.thinking", "stage.suggested_followups"],
            ) && opt_ref_id(&p.call_id)
                && opt_chars(&p.tool, 128)
                && given_chars(&p.text, 100_000)
        }),
        "feedback" => decode::<Feedback>(payload).is_some_and(|p| {
            p.reaction.as_ref().is_none_or(|s| one_of(s, &["up", "down", "neutral"]))
                && opt_chars(&p.text, 10_000)
                && given_chars(&p.origin, 64)
        }),
        "communicator.event" => decode::<CommunicatorEvent>(payload).is_some_and(|p| {
            one_of(
                &p.name,
                &["chat.step", "chat.citations", "chat.followups", "accounting.usage", "chat.turn.summary"],
            )
        }),
        "stream.aggregate" => decode::<StreamAggregate>(payload).is_some_and(|p| {
            one_of(&p.marker, &["canvas", "tool", "subsystem"])
                && chars(&p.name, 1, 256)
                && non_negative(&p.chunks_num)
                && opt_chars(&p.text, 100_000)
        }),
        "conversation.title" => {
            decode::<ConversationTitle>(payload).is_some_and(|p| chars(&p.title, 1, 512))
        }
        _ => false,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    #[serde(borrow)]
    event_id: Str<'a>,
    schema_version: u8,
    #[serde(borrow, rename = "type")]
    kind: Str<'a>,
    #[serde(borrow)]
    occurred_at: Str<'a>,
    #[serde(borrow)]
    tenant: Str<'a>,
    #[serde(borrow)]
    app: Str<'a>,
    #[serde(borrow)]
    agent: Str<'a>,
    #[serde(borrow)]
    adapter: Str<'a>,
    #[serde(borrow)]
    user_id: Str<'a>,
    #[serde(borrow)]
    conversation_id: Str<'a>,
    #[serde(borrow)]
    turn_id: Str<'a>,
    #[serde(borrow)]
    payload: &'a RawValue,
}

/// An accepted event: envelope columns, UTC microseconds and the payload's JSON text.
pub struct Accepted<'a> {
    pub event_id: Cow<'a, str>,
    pub kind: Cow<'a, str>,
    pub occurred_at: i64,
    pub tenant: Cow<'a, str>,
    pub app: Cow<'a, str>,
    pub agent: Cow<'a, str>,
    pub adapter: Cow<'a, str>,
    pub user_id: Cow<'a, str>,
    pub conversation_id: Cow<'a, str>,
    pub turn_id: Cow<'a, str>,
    pub payload: &'a str,
}

/// The event on `line` when the mirror accepts it; None sends the line to the contract.
pub fn check_line(line: &[u8], max_bytes: usize) -> Option<Accepted<'_>> {
    if line.len() > max_bytes {
        return None;
    }
    // serde also reads a struct from a JSON array; the contract wants one object per line.
    if line.iter().find(|c| !matches!(c, b' ' | b'\t' | b'\r' | b'\n')) != Some(&b'{') {
        return None;
    }
    let env: Envelope = serde_json::from_slice(line).ok()?;
    let ids_ok = ref_id(&env.event_id.0)
        && ref_id(&env.conversation_id.0)
        && ref_id(&env.turn_id.0)
        && ident(&env.tenant.0)
        && ident(&env.app.0)
        && ident(&env.agent.0)
        && ident(&env.user_id.0);
    if env.schema_version != 1 || !ids_ok || !one_of(&env.adapter, &ADAPTERS) {
        return None;
    }
    let occurred_at = parse_utc_micros(&env.occurred_at.0)?;
    let payload = env.payload.get();
    if !payload_ok(&env.kind.0, payload) || !storable(payload) {
        return None;
    }
    Some(Accepted {
        event_id: env.event_id.0,
        kind: env.kind.0,
        occurred_at,
        tenant: env.tenant.0,
        app: env.app.0,
        agent: env.agent.0,
        adapter: env.adapter.0,
        user_id: env.user_id.0,
        conversation_id: env.conversation_id.0,
        turn_id: env.turn_id.0,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"event_id":"e1","schema_version":1,"type":"user.submission","occurred_at":"2026-11-30T10:00:00Z","tenant":"t","app":"a","agent":"g","adapter":"minimal","user_id":"u@x.io","conversation_id":"c1","turn_id":"t1","payload":{"text":"hi \"there\"","event_type":"prompt"}}"#;

    #[test]
    fn a_valid_line_is_accepted_with_its_raw_payload() {
        let row = check_line(LINE.as_bytes(), 1 << 18).unwrap();
        assert_eq!(row.event_id, "e1");
        assert_eq!(row.payload, r#"{"text":"hi \"there\"","event_type":"prompt"}"#);
        assert_eq!(row.occurred_at, 1_796_032_800_000_000);
    }

    #[test]
    fn lines_the_contract_would_judge_are_left_to_it() {
        for bad in [
            LINE.replace("\"c1\"", "\"c.1\""),
            LINE.replace("\"prompt\"", "\"shout\""),
            LINE.replace("\"minimal\"", "\"other\""),
            LINE.replace("\"schema_version\":1", "\"schema_version\":2"),
            LINE.replace("\"turn_id\"", "\"extra\":1,\"turn_id\""),
            LINE.replace("{\"text\"", "{\"event_type\":\"steer\",\"text\""),
            LINE.replace("user.submission", "user.unknown"),
            LINE.replace("10:00:00Z", "10:00:00"),
            format!("[{LINE}]"),
            "not json".to_string(),
        ] {
            assert!(check_line(bad.as_bytes(), 1 << 18).is_none(), "{bad}");
        }
        assert!(check_line(LINE.as_bytes(), 100).is_none());
    }

    #[test]
    fn a_payload_holds_only_numbers_and_nesting_the_tables_hold() {
        for ok in [
            r#"{"n":9223372036854775807,"m":-9223372036854775808,"f":1.5e308,"g":1e-400}"#,
            r#"{"s":"12345678901234567890 \" 1e999 [[[","a":[{"b":[0.5,-0,2E+2]}]}"#,
        ] {
            assert!(storable(ok), "{ok}");
        }
        for bad in [
            r#"{"n":9223372036854775808}"#,
            r#"{"n":-9223372036854775809}"#,
            r#"{"x":{"unknown":1e400}}"#,
            r#"{"n":-1E+309}"#,
        ] {
            assert!(!storable(bad), "{bad}");
        }
        let nested = |levels: usize| {
            format!("{{\"a\":{}{}}}", "[".repeat(levels - 1), "]".repeat(levels - 1))
        };
        assert!(storable(&nested(PAYLOAD_MAX_DEPTH)));
        assert!(!storable(&nested(PAYLOAD_MAX_DEPTH + 1)));
    }

    #[test]
    fn counts_beyond_i64_or_in_unknown_keys_are_left_to_the_contract() {
        let completion = LINE
            .replace("user.submission", "assistant.completion")
            .replace(r#""hi \"there\"","event_type":"prompt"}"#, r#""x","tokens_out":7}"#);
        assert!(check_line(completion.as_bytes(), 1 << 18).is_some());
        for bad in [
            completion.replace(":7}", &format!(":{}}}", "9".repeat(400))),
            completion.replace(":7}", ":9223372036854775808}"),
            completion.replace(":7}", r#":7,"junk":[1e400]}"#),
        ] {
            assert!(check_line(bad.as_bytes(), 1 << 18).is_none(), "{bad}");
        }
    }
}
