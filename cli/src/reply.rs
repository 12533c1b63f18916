//! A reply as `redis-cli` prints it (its `cliFormatReplyTTY` and
//! `cliFormatReplyRaw`): on a terminal, typed and quoted (`(integer) 5`, `"text"`,
//! `(nil)`, numbered arrays); elsewhere raw, for scripts (`5`, `text`, an empty
//! line for nil, an array's elements one per line).

use std::io::Write as _;

use redis::Value;

/// `value` as redis-cli prints it on a terminal (`tty`) or to a pipe or file, with
/// its final newline.
pub fn format(value: &Value, tty: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if tty {
        typed(value, "", &mut out);
    } else {
        raw(value, &mut out);
        out.push(b'\n');
    }
    out
}

/// An error reply as redis-cli prints it on a terminal: `(error) ERR …`.
pub fn error(text: &str) -> String {
    format!("(error) {text}")
}

fn raw(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Nil => {}
        Value::Int(n) => {
            let _ = write!(out, "{n}");
        }
        Value::BulkString(bytes) => out.extend_from_slice(bytes),
        Value::SimpleString(text) => out.extend_from_slice(text.as_bytes()),
        Value::Okay => out.extend_from_slice(b"OK"),
        Value::Double(n) => {
            let _ = write!(out, "{n}");
        }
        Value::Boolean(yes) => out.extend_from_slice(if *yes { b"(true)" } else { b"(false)" }),
        Value::VerbatimString { text, .. } => out.extend_from_slice(text.as_bytes()),
        Value::Array(items) | Value::Set(items) | Value::Push { data: items, .. } => {
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b'\n');
                }
                raw(item, out);
            }
        }
        Value::Map(pairs) => {
            for (i, (key, value)) in pairs.iter().enumerate() {
                if i > 0 {
                    out.push(b'\n');
                }
                raw(key, out);
                out.push(b' ');
                raw(value, out);
            }
        }
        Value::Attribute { data, .. } => raw(data, out),
        Value::ServerError(error) => {
            let _ = write!(out, "{}", server_error(error));
        }
        other => {
            let _ = write!(out, "{other:?}");
        }
    }
}

fn typed(value: &Value, prefix: &str, out: &mut Vec<u8>) {
    match value {
        Value::Nil => out.extend_from_slice(b"(nil)\n"),
        Value::Int(n) => {
            let _ = writeln!(out, "(integer) {n}");
        }
        Value::BulkString(bytes) => {
            quoted(bytes, out);
            out.push(b'\n');
        }
        Value::SimpleString(text) => {
            let _ = writeln!(out, "{text}");
        }
        Value::Okay => out.extend_from_slice(b"OK\n"),
        Value::Double(n) => {
            let _ = writeln!(out, "(double) {n}");
        }
        Value::Boolean(yes) => out.extend_from_slice(if *yes { b"(true)\n" } else { b"(false)\n" }),
        Value::VerbatimString { text, .. } => {
            let _ = writeln!(out, "{text}");
        }
        Value::Array(items) => listed(items, ')', "(empty array)", prefix, out),
        Value::Set(items) => listed(items, '~', "(empty set)", prefix, out),
        Value::Push { data, .. } => listed(data, ')', "(empty push)", prefix, out),
        Value::Map(pairs) => mapped(pairs, prefix, out),
        Value::Attribute { data, .. } => typed(data, prefix, out),
        Value::ServerError(error) => {
            let _ = writeln!(out, "{}", self::error(&server_error(error)));
        }
        other => {
            let _ = writeln!(out, "{other:?}");
        }
    }
}

/// The width of the largest index of `count` elements, and the prefix of the lines
/// nested under them.
fn index_width(count: usize, prefix: &str) -> (usize, String) {
    let width = count.to_string().len();
    (width, format!("{prefix}{}", " ".repeat(width + 2)))
}

fn listed(items: &[Value], separator: char, empty: &str, prefix: &str, out: &mut Vec<u8>) {
    if items.is_empty() {
        let _ = writeln!(out, "{empty}");
        return;
    }
    let (width, nested) = index_width(items.len(), prefix);
    for (i, item) in items.iter().enumerate() {
        let lead = if i == 0 { "" } else { prefix };
        let _ = write!(out, "{lead}{:>width$}{separator} ", i + 1);
        typed(item, &nested, out);
    }
}

/// A map: `1# "field" => "value"`, numbered per pair; as redis-cli, the index is as
/// wide as the count of keys and values together.
fn mapped(pairs: &[(Value, Value)], prefix: &str, out: &mut Vec<u8>) {
    if pairs.is_empty() {
        out.extend_from_slice(b"(empty hash)\n");
        return;
    }
    let (width, nested) = index_width(pairs.len() * 2, prefix);
    for (i, (key, value)) in pairs.iter().enumerate() {
        let lead = if i == 0 { "" } else { prefix };
        let _ = write!(out, "{lead}{:>width$}# ", i + 1);
        typed(key, &nested, out);
        out.pop(); // the key's newline
        out.extend_from_slice(b" => ");
        typed(value, &nested, out);
    }
}

/// A string as redis-cli quotes it (`sdscatrepr`): in double quotes, `\\`, `\"`,
/// `\n`, `\r`, `\t`, `\a`, `\b`, printable ASCII as it is, any other byte `\xNN`.
fn quoted(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &byte in bytes {
        match byte {
            b'\\' | b'"' => out.extend_from_slice(&[b'\\', byte]),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            b' '..=b'~' => out.push(byte),
            other => {
                let _ = write!(out, "\\x{other:02x}");
            }
        }
    }
    out.push(b'"');
}

fn server_error(error: &redis::ServerError) -> String {
    match error.details() {
        Some(details) => format!("{} {details}", error.code()),
        None => error.code().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn shown(value: &Value, tty: bool) -> String {
        String::from_utf8(format(value, tty)).unwrap()
    }

    #[test]
    fn on_a_terminal_replies_are_typed_and_quoted_as_redis_cli_does() {
        assert_eq!(shown(&Value::Okay, true), "OK\n");
        assert_eq!(shown(&Value::Int(5), true), "(integer) 5\n");
        assert_eq!(shown(&Value::Nil, true), "(nil)\n");
        assert_eq!(
            shown(&bulk("a \"b\"\n\u{e9}"), true),
            "\"a \\\"b\\\"\\n\\xc3\\xa9\"\n"
        );
        assert_eq!(shown(&Value::Array(vec![]), true), "(empty array)\n");
        let list = Value::Array((1..=10).map(|n| bulk(&n.to_string())).collect());
        let text = shown(&list, true);
        assert!(text.starts_with(" 1) \"1\"\n 2) \"2\"\n"), "{text}");
        assert!(text.ends_with("10) \"10\"\n"), "{text}");
        let nested = Value::Array(vec![
            bulk("a"),
            Value::Array(vec![Value::Int(1), Value::Nil]),
        ]);
        assert_eq!(
            shown(&nested, true),
            "1) \"a\"\n2) 1) (integer) 1\n   2) (nil)\n"
        );
        let map = Value::Map(vec![(bulk("f"), bulk("v")), (bulk("g"), Value::Int(2))]);
        assert_eq!(
            shown(&map, true),
            "1# \"f\" => \"v\"\n2# \"g\" => (integer) 2\n"
        );
    }

    #[test]
    fn elsewhere_replies_are_raw_one_value_a_line() {
        assert_eq!(shown(&Value::Okay, false), "OK\n");
        assert_eq!(shown(&Value::Int(5), false), "5\n");
        assert_eq!(shown(&Value::Nil, false), "\n");
        assert_eq!(
            format(&Value::BulkString(vec![0xff, b'\n']), false),
            [0xff, b'\n', b'\n']
        );
        let list = Value::Array(vec![bulk("y"), bulk("x")]);
        assert_eq!(shown(&list, false), "y\nx\n");
        let map = Value::Map(vec![(bulk("f"), bulk("v"))]);
        assert_eq!(shown(&map, false), "f v\n");
        assert_eq!(shown(&Value::Array(vec![]), false), "\n");
    }
}
