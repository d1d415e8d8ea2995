//! The event contract as the scanner holds it: `contract.json`, generated from the pydantic
//! contract (`ctxdb/contract/events.py`) by `ctxdb/landing/native_contract.py` and embedded when
//! this crate is compiled. Event types, field names, required and nullable fields, types,
//! lengths, counts, bounds, patterns, literals, the timestamp range and the payload depth are
//! that file's data; this module only applies them.
//!
//! Strings are borrowed from the input unless they hold escapes. A field with a default may be
//! absent but, unless the contract lets it be null, is never `null`, as in pydantic. Patterns
//! are compiled to DFAs by `regex-automata` (the engine of the `regex` crate pydantic uses for
//! them; a DFA needs no per-thread cache); one it cannot compile makes every value of its field
//! go to the contract.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::LazyLock;

use regex_automata::dfa::{dense, Automaton};
use regex_automata::Input;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::timestamp::parse_utc_micros;

/// The generated contract's JSON text.
pub const CONTRACT_JSON: &str = include_str!("contract.json");

/// Largest DFA a pattern may compile to; a larger one is left to the contract.
const PATTERN_DFA_BYTES: usize = 1 << 20;

/// A pattern compiled for matching; `None` when the engine cannot compile it (no value matches).
pub struct Pattern(Option<Box<dense::DFA<Vec<u32>>>>);

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let config = dense::Config::new()
            .dfa_size_limit(Some(PATTERN_DFA_BYTES))
            .determinize_size_limit(Some(PATTERN_DFA_BYTES));
        Ok(Pattern(dense::Builder::new().configure(config).build(&text).ok().map(Box::new)))
    }
}

impl Pattern {
    /// Whether the pattern matches somewhere in `s` (pydantic's `is_match`).
    fn is_match(&self, s: &str) -> bool {
        let input = Input::new(s).earliest(true);
        self.0.as_ref().is_some_and(|dfa| matches!(dfa.try_search_fwd(&input), Ok(Some(_))))
    }
}

/// A named check of the contract's (an `AfterValidator` there).
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// No leading `/`, no `\`, no empty, `.` or `..` segment.
    RelativePath,
}

impl Check {
    fn holds(&self, s: &str) -> bool {
        match self {
            Check::RelativePath => {
                !s.starts_with('/')
                    && !s.contains('\\')
                    && s.split('/').all(|p| !matches!(p, "" | "." | ".."))
            }
        }
    }
}

/// What a field holds, with its bounds.
#[derive(Deserialize)]
#[serde(tag = "value_type", rename_all = "lowercase")]
pub enum Kind {
    String {
        min_chars: usize,
        max_chars: Option<usize>,
        pattern: Option<Pattern>,
        one_of: Option<Vec<String>>,
        checks: Vec<Check>,
    },
    Integer {
        min: i64,
        max: i64,
    },
    Boolean,
    /// Any JSON object (`dict[str, Any]`), checked for syntax and skipped.
    Object,
    /// A strict RFC 3339 timestamp inside the contract's range.
    Timestamp,
    List {
        item: Box<Kind>,
        min_items: usize,
        max_items: Option<usize>,
    },
    /// The envelope's payload: kept as raw JSON, checked by the model its type chooses.
    Payload,
}

#[derive(Deserialize)]
pub struct Field {
    pub name: String,
    required: bool,
    nullable: bool,
    #[serde(flatten)]
    pub kind: Kind,
}

/// A model: its fields in order, whether unknown keys are refused, and why it is not mirrored
/// (then every line of its type goes to the contract).
#[derive(Deserialize)]
pub struct Model {
    #[serde(default)]
    closed: bool,
    #[serde(default)]
    pub fields: Vec<Field>,
    #[serde(default)]
    unmirrored: Option<String>,
}

#[derive(Deserialize)]
pub struct Contract {
    timestamp_range_micros: (i64, i64),
    payload_max_depth: usize,
    type_field: String,
    pub envelope: Model,
    payloads: HashMap<String, Model>,
}

/// A field's value as far as the scanner keeps it.
pub enum Value<'a> {
    Absent,
    Null,
    Str(Cow<'a, str>),
    Micros(i64),
    Raw(&'a str),
    Checked,
}

static CONTRACT: LazyLock<Result<Contract, String>> = LazyLock::new(|| {
    let contract: Contract = serde_json::from_str(CONTRACT_JSON).map_err(|e| e.to_string())?;
    let models = std::iter::once(&contract.envelope).chain(contract.payloads.values());
    if models.clone().any(|m| m.fields.len() > 64) {
        return Err("a model of the contract has more than 64 fields".into());
    }
    let envelope = &contract.envelope.fields;
    let kept = |f: &&Field| !matches!(f.kind, Kind::Integer { .. } | Kind::Boolean | Kind::Object);
    if envelope.iter().filter(kept).any(|f| !f.required || f.nullable) {
        return Err("an envelope column may be absent or null".into());
    }
    if !envelope
        .iter()
        .any(|f| f.name == contract.type_field && matches!(f.kind, Kind::String { .. }))
        || envelope.iter().filter(|f| matches!(f.kind, Kind::Payload)).count() != 1
    {
        return Err("the envelope needs one string type field and one payload field".into());
    }
    Ok(contract)
});

/// The embedded contract, or why it cannot be read.
pub fn contract() -> Result<&'static Contract, String> {
    CONTRACT.as_ref().map_err(Clone::clone)
}

/// A JSON string, borrowed from the line when it has no escapes.
pub struct Str<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrVisitor;
        impl<'de> Visitor<'de> for StrVisitor {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(StrVisitor)
    }
}

/// `min <= len(s) <= max` in characters (code points, as Python counts them).
fn chars_within(s: &str, min: usize, max: Option<usize>) -> bool {
    // Bytes bound characters from above, so the count is needed only near the bounds.
    let below = |n: usize| s.len() <= n || s.chars().count() <= n;
    (min == 0 || s.chars().count() >= min) && max.is_none_or(below)
}

fn string_ok(kind: &Kind, s: &str) -> bool {
    let Kind::String { min_chars, max_chars, pattern, one_of, checks } = kind else {
        return false;
    };
    chars_within(s, *min_chars, *max_chars)
        && one_of.as_ref().is_none_or(|values| values.iter().any(|v| v == s))
        && pattern.as_ref().is_none_or(|p| p.is_match(s))
        && checks.iter().all(|c| c.holds(s))
}

fn refuse<E: de::Error>(what: &str) -> E {
    E::custom(what)
}

/// Reads one value of `kind` (never null).
struct KindSeed<'c> {
    kind: &'c Kind,
    contract: &'c Contract,
}

impl<'de, 'c> DeserializeSeed<'de> for KindSeed<'c> {
    type Value = Value<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value<'de>, D::Error> {
        match self.kind {
            Kind::String { .. } => {
                let s = Str::deserialize(d)?;
                if !string_ok(self.kind, &s.0) {
                    return Err(refuse("string outside the contract"));
                }
                Ok(Value::Str(s.0))
            }
            Kind::Integer { min, max } => {
                let n = i64::deserialize(d)?;
                if n < *min || n > *max {
                    return Err(refuse("integer outside the contract"));
                }
                Ok(Value::Checked)
            }
            Kind::Boolean => bool::deserialize(d).map(|_| Value::Checked),
            Kind::Object => d.deserialize_map(ObjectVisitor),
            Kind::Timestamp => {
                let s = Str::deserialize(d)?;
                let (earliest, latest) = self.contract.timestamp_range_micros;
                match parse_utc_micros(&s.0) {
                    Some(at) if (earliest..latest).contains(&at) => Ok(Value::Micros(at)),
                    _ => Err(refuse("timestamp outside the contract")),
                }
            }
            Kind::List { item, min_items, max_items } => d.deserialize_seq(ListVisitor {
                item: KindSeed { kind: item, contract: self.contract },
                min_items: *min_items,
                max_items: *max_items,
            }),
            Kind::Payload => <&RawValue>::deserialize(d).map(|raw| Value::Raw(raw.get())),
        }
    }
}

/// Reads one field's value: `null` where the contract allows it, else a value of its kind.
struct FieldSeed<'c>(KindSeed<'c>, bool);

impl<'de, 'c> DeserializeSeed<'de> for FieldSeed<'c> {
    type Value = Value<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value<'de>, D::Error> {
        if self.1 {
            d.deserialize_option(self)
        } else {
            self.0.deserialize(d)
        }
    }
}

impl<'de, 'c> Visitor<'de> for FieldSeed<'c> {
    type Value = Value<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a value or null")
    }
    fn visit_none<E>(self) -> Result<Value<'de>, E> {
        Ok(Value::Null)
    }
    fn visit_unit<E>(self) -> Result<Value<'de>, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value<'de>, D::Error> {
        self.0.deserialize(d)
    }
}

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Value<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value<'de>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Value::Checked)
    }
}

struct ListVisitor<'c> {
    item: KindSeed<'c>,
    min_items: usize,
    max_items: Option<usize>,
}

impl<'de, 'c> Visitor<'de> for ListVisitor<'c> {
    type Value = Value<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value<'de>, A::Error> {
        let mut count = 0usize;
        let seed = || KindSeed { kind: self.item.kind, contract: self.item.contract };
        while seq.next_element_seed(seed())?.is_some() {
            count += 1;
            if self.max_items.is_some_and(|max| count > max) {
                return Err(refuse("too many items"));
            }
        }
        if count < self.min_items {
            return Err(refuse("too few items"));
        }
        Ok(Value::Checked)
    }
}

/// Reads one object of `model`: every known key once, each required key present, unknown keys
/// refused when the model is closed (else skipped). The values go to `values` when given.
struct ModelSeed<'c, 'v, 'a> {
    model: &'c Model,
    contract: &'c Contract,
    values: Option<&'v mut Vec<Value<'a>>>,
}

impl<'de: 'a, 'a, 'c, 'v> DeserializeSeed<'de> for ModelSeed<'c, 'v, 'a> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de: 'a, 'a, 'c, 'v> Visitor<'de> for ModelSeed<'c, 'v, 'a> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let fields = &self.model.fields;
        if let Some(values) = self.values.as_deref_mut() {
            values.clear();
            values.resize_with(fields.len(), || Value::Absent);
        }
        let (mut seen, mut next) = (0u64, 0usize);
        while let Some(key) = map.next_key::<Str>()? {
            // Keys mostly come in the model's order: look from the one after the last first.
            let at = |i: &usize| fields[*i].name == key.0;
            let Some(i) = (next..fields.len()).chain(0..next).find(at) else {
                if self.model.closed {
                    return Err(refuse("unknown field"));
                }
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            if seen & (1 << i) != 0 {
                return Err(refuse("repeated field"));
            }
            (seen, next) = (seen | 1 << i, i + 1);
            let kind = KindSeed { kind: &fields[i].kind, contract: self.contract };
            let value = map.next_value_seed(FieldSeed(kind, fields[i].nullable))?;
            if let Some(values) = self.values.as_deref_mut() {
                values[i] = value;
            }
        }
        if fields.iter().enumerate().any(|(i, f)| f.required && seen & (1 << i) == 0) {
            return Err(refuse("missing field"));
        }
        Ok(())
    }
}

/// Whether `text` reads as one object of `model` (its values kept in `values` when given).
fn read<'a>(
    contract: &Contract,
    model: &Model,
    text: &'a [u8],
    values: Option<&mut Vec<Value<'a>>>,
) -> bool {
    if model.unmirrored.is_some() {
        return false;
    }
    let mut de = serde_json::Deserializer::from_slice(text);
    let seed = ModelSeed { model, contract, values };
    seed.deserialize(&mut de).is_ok() && de.end().is_ok()
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
/// included: every number fits (`number_fits`) and nesting is at most `max_depth` (the
/// contract's `payload_problem`). One pass over the bytes; strings are skipped whole.
pub fn storable(payload: &str, max_depth: usize) -> bool {
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
                if depth > max_depth {
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

/// An accepted event: the envelope's string columns and timestamps (UTC microseconds) in the
/// contract's field order, and the payload's JSON text; `values` is room for reading a line.
#[derive(Default)]
pub struct Accepted<'a> {
    pub strings: Vec<Cow<'a, str>>,
    pub micros: Vec<i64>,
    pub payload: &'a str,
    values: Vec<Value<'a>>,
}

impl Contract {
    /// Names of the envelope's string columns and of its payload (the string view columns, the
    /// payload last), then of its timestamp columns, in field order.
    pub fn columns(&self) -> (Vec<&str>, Vec<&str>) {
        let named = |want: fn(&Kind) -> bool| {
            self.envelope.fields.iter().filter(move |f| want(&f.kind)).map(|f| f.name.as_str())
        };
        let payload = named(|k| matches!(k, Kind::Payload));
        let views = named(|k| matches!(k, Kind::String { .. })).chain(payload).collect();
        (views, named(|k| matches!(k, Kind::Timestamp)).collect())
    }

    /// Whether the contract surely accepts the event on `line`, which is then in `row`; false
    /// sends the line to the pydantic contract. `row` is reused from line to line.
    pub fn check_line<'a>(&self, line: &'a [u8], max_bytes: usize, row: &mut Accepted<'a>) -> bool {
        if line.len() > max_bytes || !read(self, &self.envelope, line, Some(&mut row.values)) {
            return false;
        }
        row.strings.clear();
        row.micros.clear();
        let mut kind = None;
        for (field, value) in self.envelope.fields.iter().zip(row.values.drain(..)) {
            match value {
                Value::Str(s) => {
                    if field.name == self.type_field {
                        kind = self.payloads.get(s.as_ref());
                    }
                    row.strings.push(s);
                }
                Value::Micros(at) => row.micros.push(at),
                Value::Raw(payload) => row.payload = payload,
                _ => {}
            }
        }
        kind.is_some_and(|model| read(self, model, row.payload.as_bytes(), None))
            && storable(row.payload, self.payload_max_depth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"event_id":"e1","schema_version":1,"type":"user.submission","occurred_at":"2026-11-30T10:00:00Z","tenant":"t","app":"a","agent":"g","adapter":"minimal","user_id":"u@x.io","conversation_id":"c1","turn_id":"t1","payload":{"text":"hi \"there\"","event_type":"prompt"}}"#;

    fn check(line: &str) -> Option<Accepted<'_>> {
        let mut row = Accepted::default();
        contract().unwrap().check_line(line.as_bytes(), 1 << 18, &mut row).then_some(row)
    }

    #[test]
    fn a_valid_line_is_accepted_with_its_raw_payload() {
        let row = check(LINE).unwrap();
        assert_eq!(row.strings[0], "e1");
        assert_eq!(row.strings[1], "user.submission");
        assert_eq!(row.payload, r#"{"text":"hi \"there\"","event_type":"prompt"}"#);
        assert_eq!(row.micros, vec![1_796_032_800_000_000]);
        let (views, timestamps) = contract().unwrap().columns();
        assert_eq!(views[..2], ["event_id", "type"]);
        assert_eq!(views.last(), Some(&"payload"));
        assert_eq!(timestamps, ["occurred_at"]);
    }

    #[test]
    fn lines_the_contract_would_judge_are_left_to_it() {
        for bad in [
            LINE.replace("\"c1\"", "\"c.1\""),
            LINE.replace("\"prompt\"", "\"shout\""),
            LINE.replace("\"prompt\"", "null"),
            LINE.replace("\"minimal\"", "\"other\""),
            LINE.replace("\"schema_version\":1", "\"schema_version\":2"),
            LINE.replace("\"schema_version\":1", "\"schema_version\":1.0"),
            LINE.replace("\"turn_id\"", "\"extra\":1,\"turn_id\""),
            LINE.replace("\"turn_id\"", "\"event_id\":\"e2\",\"turn_id\""),
            LINE.replace("{\"text\"", "{\"event_type\":\"steer\",\"text\""),
            LINE.replace("{\"text\":\"hi \\\"there\\\"\",", "{"),
            LINE.replace("user.submission", "user.unknown"),
            LINE.replace("10:00:00Z", "10:00:00"),
            LINE.replace("2026-11-30T10:00:00Z", "2200-01-01T00:00:00Z"),
            LINE.replace("{\"text\"", "[{\"text\"").replace("}}", "}]}"),
            format!("[{LINE}]"),
            format!("{LINE} x"),
            "not json".to_string(),
        ] {
            assert!(check(&bad).is_none(), "{bad}");
        }
        assert!(!contract().unwrap().check_line(LINE.as_bytes(), 100, &mut Accepted::default()));
    }

    #[test]
    fn unknown_payload_keys_are_skipped_but_must_be_storable() {
        let extra = LINE.replace("{\"text\"", "{\"note\":[1,{\"a\":null}],\"text\"");
        assert!(check(&extra).is_some());
        assert!(check(&extra.replace("[1,", "[1e400,")).is_none());
    }

    #[test]
    fn a_payload_holds_only_numbers_and_nesting_the_tables_hold() {
        for ok in [
            r#"{"n":9223372036854775807,"m":-9223372036854775808,"f":1.5e308,"g":1e-400}"#,
            r#"{"s":"12345678901234567890 \" 1e999 [[[","a":[{"b":[0.5,-0,2E+2]}]}"#,
        ] {
            assert!(storable(ok, 64), "{ok}");
        }
        for bad in [
            r#"{"n":9223372036854775808}"#,
            r#"{"n":-9223372036854775809}"#,
            r#"{"x":{"unknown":1e400}}"#,
            r#"{"n":-1E+309}"#,
        ] {
            assert!(!storable(bad, 64), "{bad}");
        }
        let nested = |levels: usize| {
            format!("{{\"a\":{}{}}}", "[".repeat(levels - 1), "]".repeat(levels - 1))
        };
        assert!(storable(&nested(8), 8));
        assert!(!storable(&nested(9), 8));
    }

    #[test]
    fn counts_beyond_i64_or_in_unknown_keys_are_left_to_the_contract() {
        let completion = LINE
            .replace("user.submission", "assistant.completion")
            .replace(r#""hi \"there\"","event_type":"prompt"}"#, r#""x","tokens_out":7}"#);
        assert!(check(&completion).is_some());
        for bad in [
            completion.replace(":7}", &format!(":{}}}", "9".repeat(400))),
            completion.replace(":7}", ":9223372036854775808}"),
            completion.replace(":7}", ":-1}"),
            completion.replace(":7}", ":7.0}"),
            completion.replace(":7}", r#":7,"junk":[1e400]}"#),
        ] {
            assert!(check(&bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn lengths_are_counted_in_characters() {
        assert!(chars_within("éé", 2, Some(2)));
        assert!(!chars_within("ééé", 0, Some(2)));
        assert!(!chars_within("é", 2, None));
        assert!(chars_within("", 0, None));
    }

    #[test]
    fn a_type_the_generator_could_not_mirror_is_left_to_the_contract() {
        let mut generated: serde_json::Value = serde_json::from_str(CONTRACT_JSON).unwrap();
        generated["payloads"]["user.submission"] = serde_json::json!({"unmirrored": "a test"});
        let contract: Contract = serde_json::from_value(generated).unwrap();
        assert!(!contract.check_line(LINE.as_bytes(), 1 << 18, &mut Accepted::default()));
        assert!(check(LINE).is_some());
    }

    #[test]
    fn a_pattern_the_engine_cannot_compile_matches_nothing() {
        let kind: Kind = serde_json::from_str(
            r#"{"value_type":"string","min_chars":0,"max_chars":null,"pattern":"^(?=a)a$","one_of":null,"checks":[]}"#,
        )
        .unwrap();
        assert!(!string_ok(&kind, "a"));
    }
}
