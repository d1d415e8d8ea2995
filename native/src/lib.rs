//! Native landing scanner: validates raw turn event lines against the event contract, as
//! generated from the pydantic contract (`ctxdb/contract/events.py`) into `contract.json` by
//! `ctxdb/landing/native_contract.py`, and returns the accepted envelopes as Arrow column buffers.
//!
//! Written by hand because no library validates NDJSON against a pydantic contract line by line
//! at this speed and reports bad lines one by one: pyarrow's and polars' JSON readers fail the
//! whole block on one bad line, and per-line Python decoding costs ~10x a plain Delta append.
//!
//! The scanner accepts a subset of what the contract accepts (strict RFC 3339 timestamps, no type
//! coercion, no duplicate keys). Every line it rejects is returned to Python, which runs the
//! pydantic contract on it: that line then lands or is quarantined with its reason. So a line this
//! module accepts is valid, and a line it wrongly rejects only costs the slow path.
//! `tests/test_native_scan.py` and `tests/test_landing_differential.py` hold it to the contract.

mod contract;
mod timestamp;

use pyo3::exceptions::{PyImportError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use rayon::prelude::*;

use std::borrow::Cow;

use crate::contract::{contract, Accepted, Contract};

/// Bytes addressed by one data buffer. Views hold 32-bit offsets, so the input is exposed as
/// windows of this size; each window runs `max_bytes` past its end, so a string that starts in a
/// window (no string is longer than a line) lies wholly inside it.
const WINDOW: usize = 1 << 30;

/// One raw line: 1-based number and byte range in the input (trailing `\r` removed).
#[derive(Clone, Copy)]
struct Line {
    number: u64,
    start: usize,
    end: usize,
}

/// Accepted rows of one chunk of lines as Arrow string views (the envelope's string columns,
/// then the payload) and timestamp columns, plus the lines it rejected.
///
/// A string that appears verbatim in the input is a view into the input itself (no copy); one
/// that held JSON escapes is unescaped into `extra`, the chunk's own data buffer.
struct Chunk {
    buffer: u32,
    views: Vec<Vec<[u8; 16]>>,
    extra: Vec<u8>,
    micros: Vec<Vec<i64>>,
    line_number: Vec<i64>,
    rejected: Vec<Line>,
}

/// An Arrow string view: the length, then the string inline (up to 12 bytes) or its first four
/// bytes, data buffer index and offset.
fn view(s: &[u8], buffer: u32, offset: usize) -> [u8; 16] {
    let mut v = [0u8; 16];
    v[0..4].copy_from_slice(&(s.len() as u32).to_le_bytes());
    if s.len() <= 12 {
        v[4..4 + s.len()].copy_from_slice(s);
    } else {
        v[4..8].copy_from_slice(&s[0..4]);
        v[8..12].copy_from_slice(&buffer.to_le_bytes());
        v[12..16].copy_from_slice(&(offset as u32).to_le_bytes());
    }
    v
}

impl Chunk {
    /// An empty chunk of `views` string view columns (the payload last) and `timestamps`
    /// timestamp columns, with room for `rows` accepted rows (no regrowth while scanning).
    fn new(buffer: u32, rows: usize, views: usize, timestamps: usize) -> Self {
        Chunk {
            buffer,
            views: (0..views).map(|_| Vec::with_capacity(rows)).collect(),
            extra: Vec::new(),
            micros: (0..timestamps).map(|_| Vec::with_capacity(rows)).collect(),
            line_number: Vec::with_capacity(rows),
            rejected: Vec::new(),
        }
    }

    fn push(&mut self, data: &[u8], line: &Line, row: &Accepted) {
        for (column, field) in self.views.iter_mut().zip(&row.strings) {
            let v = match field {
                Cow::Borrowed(s) => input_view(data, s.as_bytes()),
                Cow::Owned(s) => {
                    let offset = self.extra.len();
                    self.extra.extend_from_slice(s.as_bytes());
                    view(s.as_bytes(), self.buffer, offset)
                }
            };
            column.push(v);
        }
        if let Some(payload) = self.views.last_mut() {
            payload.push(input_view(data, row.payload.as_bytes()));
        }
        for (column, at) in self.micros.iter_mut().zip(&row.micros) {
            column.push(*at);
        }
        self.line_number.push(line.number as i64);
    }
}

/// The view of `s`, a slice of `data`, addressed through the window it starts in.
fn input_view(data: &[u8], s: &[u8]) -> [u8; 16] {
    let start = s.as_ptr() as usize - data.as_ptr() as usize;
    view(s, (start / WINDOW) as u32, start % WINDOW)
}

fn is_blank(line: &[u8]) -> bool {
    // Python's bytes.strip() whitespace: space, \t, \n, \r, \v, \f.
    line.iter().all(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c))
}

/// The non-blank lines of `data`, split on `\n` with a trailing `\r` dropped, numbered from 1.
fn split_lines(data: &[u8]) -> Vec<Line> {
    let mut lines = Vec::with_capacity(data.len() / 256 + 1);
    let mut start = 0usize;
    let mut number = 0u64;
    let mut ends = memchr::memchr_iter(b'\n', data).chain(std::iter::once(data.len()));
    while start < data.len() {
        let end = ends.next().unwrap_or(data.len());
        number += 1;
        let mut stop = end;
        if stop > start && data[stop - 1] == b'\r' {
            stop -= 1;
        }
        if !is_blank(&data[start..stop]) {
            lines.push(Line { number, start, end: stop });
        }
        start = end + 1;
    }
    lines
}

fn scan_chunk(c: &Contract, data: &[u8], lines: &[Line], max_bytes: usize, buffer: u32) -> Chunk {
    let (views, timestamps) = c.columns();
    let mut chunk = Chunk::new(buffer, lines.len(), views.len(), timestamps.len());
    let mut row = Accepted::default();
    for line in lines {
        // Every accepted field borrows from the line, which lies inside `data`.
        if c.check_line(&data[line.start..line.end], max_bytes, &mut row) {
            chunk.push(data, line, &row);
        } else {
            chunk.rejected.push(*line);
        }
    }
    chunk
}

/// The scan of one input: per string column the views of every accepted row, and the data
/// buffers they point into (input windows first, then each chunk's `extra`); per timestamp
/// column the microseconds of every accepted row.
struct Scan {
    windows: Vec<(usize, usize)>,
    views: Vec<Vec<[u8; 16]>>,
    extras: Vec<Vec<u8>>,
    micros: Vec<Vec<i64>>,
    line_number: Vec<i64>,
    rejected: Vec<Line>,
}

fn scan(c: &Contract, data: &[u8], max_bytes: usize) -> Result<Scan, String> {
    let windows: Vec<(usize, usize)> = (0..data.len().div_ceil(WINDOW))
        .map(|k| (k * WINDOW, data.len().min((k + 1) * WINDOW + max_bytes)))
        .collect();
    let lines = split_lines(data);
    // Several chunks per thread so one slow chunk does not hold the others up.
    let per_chunk = (lines.len() / (rayon::current_num_threads() * 4)).max(256);
    let chunks: Vec<Chunk> = lines
        .par_chunks(per_chunk)
        .enumerate()
        .map(|(i, part)| scan_chunk(c, data, part, max_bytes, (windows.len() + i) as u32))
        .collect();
    if chunks.iter().any(|c| c.extra.len() > i32::MAX as usize) {
        return Err("unescaped strings of one chunk exceed 2 GiB; split the file".into());
    }
    let rows: usize = chunks.iter().map(|c| c.line_number.len()).sum();
    let (views, timestamps) = c.columns();
    let mut out = Scan {
        windows,
        views: (0..views.len()).map(|_| Vec::with_capacity(rows)).collect(),
        extras: Vec::with_capacity(chunks.len()),
        micros: (0..timestamps.len()).map(|_| Vec::with_capacity(rows)).collect(),
        line_number: Vec::with_capacity(rows),
        rejected: Vec::new(),
    };
    for chunk in chunks {
        for (all, part) in out.views.iter_mut().zip(chunk.views) {
            all.extend_from_slice(&part);
        }
        for (all, part) in out.micros.iter_mut().zip(chunk.micros) {
            all.extend_from_slice(&part);
        }
        out.extras.push(chunk.extra);
        out.line_number.extend_from_slice(&chunk.line_number);
        out.rejected.extend_from_slice(&chunk.rejected);
    }
    Ok(out)
}

fn as_bytes<T: Copy>(values: &[T]) -> &[u8] {
    // SAFETY: i64 and [u8; 16] have no padding or invalid bit patterns; read as plain bytes.
    unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    }
}

/// Validate every line of `data` (one JSON event per line).
///
/// Returns a dict: `rows` (accepted count); per string column (the envelope's string fields and
/// `payload`), `<name>` as the bytes of its Arrow string views; `windows`, the `(start, end)`
/// slices of `data` that are the views' first data buffers, and `extra`, the further data buffers
/// (bytes); per timestamp field (`occurred_at`, UTC microseconds) and `line_number`, int64
/// bytes; and `rejected`, a list of `(line_number, start, end)` byte ranges of non-blank lines
/// the scanner did not accept. `threads` validates in that many threads
/// (0: one per core). The GIL is released throughout.
#[pyfunction]
#[pyo3(signature = (data, max_event_bytes, threads = 0))]
fn scan_events<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyBytes>,
    max_event_bytes: usize,
    threads: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let buf = data.as_bytes();
    let c = contract().map_err(PyRuntimeError::new_err)?;
    let out = py.allow_threads(|| {
        if threads == 0 {
            return scan(c, buf, max_event_bytes);
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| format!("landing thread pool: {e}"))
            .and_then(|pool| pool.install(|| scan(c, buf, max_event_bytes)))
    });
    let out = out.map_err(PyRuntimeError::new_err)?;
    let result = PyDict::new(py);
    result.set_item("rows", out.line_number.len())?;
    let (views, timestamps) = c.columns();
    for (name, views) in views.iter().zip(&out.views) {
        result.set_item(*name, PyBytes::new(py, as_bytes(views)))?;
    }
    for (name, micros) in timestamps.iter().zip(&out.micros) {
        result.set_item(*name, PyBytes::new(py, as_bytes(micros)))?;
    }
    result.set_item("windows", out.windows)?;
    let extra = PyList::empty(py);
    for buffer in &out.extras {
        extra.append(PyBytes::new(py, buffer))?;
    }
    result.set_item("extra", extra)?;
    result.set_item("line_number", PyBytes::new(py, as_bytes(&out.line_number)))?;
    let rejected = PyList::empty(py);
    for line in &out.rejected {
        rejected.append((line.number, line.start, line.end))?;
    }
    result.set_item("rejected", rejected)?;
    Ok(result)
}

#[pymodule]
#[pyo3(name = "_native")]
fn ctxdb_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // A contract it cannot read makes the module unimportable: landing takes the Python scanner.
    contract().map_err(|e| PyImportError::new_err(format!("native contract.json: {e}")))?;
    m.add_function(wrap_pyfunction!(scan_events, m)?)?;
    m.add("CONTRACT_JSON", contract::CONTRACT_JSON)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_from_one_and_blank_lines_skipped() {
        let lines = split_lines(b"a\r\n\n  \nb\nc");
        let got: Vec<(u64, usize, usize)> =
            lines.iter().map(|l| (l.number, l.start, l.end)).collect();
        assert_eq!(got, vec![(1, 0, 1), (4, 7, 8), (5, 9, 10)]);
    }

    #[test]
    fn a_trailing_newline_adds_no_line() {
        assert_eq!(split_lines(b"a\nb\n").len(), 2);
        assert!(split_lines(b"").is_empty());
    }
}
