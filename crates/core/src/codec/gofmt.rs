//! Go formatting and parsing conventions that leak into HAMi's wire values and error texts.
//!
//! HAMi's writers are Go programs, so byte-exact output (JSON escaping) and recognisable error
//! texts (`strconv` messages, `%q` quoting) follow Go's rules rather than Rust's.

use std::fmt::Write as _;

use super::error::GoNumError;

/// Quotes `s` the way Go's `%q` / `strconv.Quote` does, so error texts read like HAMi's.
///
/// Printable characters are kept; control characters use Go's escapes. Go's exact notion of
/// "printable" (`unicode.IsPrint`) is approximated by Rust's `char::is_control`.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{07}' => out.push_str("\\a"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{0b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Appends `s` as a JSON string literal escaped exactly as Go's `encoding/json` does
/// (HTML-safe escaping of `<`, `>`, `&`, and of U+2028/U+2029), so our writers produce the same
/// bytes as HAMi's and "did the annotation change?" comparisons agree across implementations.
pub(crate) fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Parses a base-10 integer with Go's `strconv.ParseInt(s, 10, bits)` acceptance rules
/// (optional sign, digits only, no spaces) and reports failures with Go's wording.
///
/// `func` names the Go function the error should mention (`ParseInt` or `Atoi`).
pub(crate) fn parse_int(s: &str, bits: u32, func: &'static str) -> Result<i64, GoNumError> {
    let syntax = || GoNumError::syntax(func, s);
    let range = || GoNumError::range(func, s);
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(syntax());
    }
    let value: i64 = s.parse().map_err(|_| range())?;
    let (min, max) = if bits >= 64 {
        (i64::MIN, i64::MAX)
    } else {
        (-(1_i64 << (bits - 1)), (1_i64 << (bits - 1)) - 1)
    };
    if value < min || value > max {
        return Err(range());
    }
    Ok(value)
}

/// [`parse_int`] for 32-bit fields, typed.
pub(crate) fn parse_i32(s: &str, func: &'static str) -> Result<i32, GoNumError> {
    let value = parse_int(s, 32, func)?;
    i32::try_from(value).map_err(|_| GoNumError::range(func, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_escapes_like_go() {
        assert_eq!(quote("a\"b\\c\n\u{1b}\u{7f}é"), r#""a\"b\\c\n\x1b\x7fé""#);
    }

    #[test]
    fn json_string_is_html_safe_like_go() {
        let mut out = String::new();
        push_json_string(&mut out, "<a&b>\u{2028}\u{1}\u{8}\u{c}\"\\é");
        assert_eq!(out, r#""\u003ca\u0026b\u003e\u2028\u0001\b\f\"\\é""#);
    }

    #[test]
    fn parse_int_follows_go_rules() {
        assert_eq!(parse_int("+7", 32, "ParseInt"), Ok(7));
        assert_eq!(
            parse_int("-2147483648", 32, "ParseInt"),
            Ok(i64::from(i32::MIN))
        );
        assert_eq!(
            parse_int("2147483648", 32, "ParseInt")
                .map_err(|e| e.to_string())
                .unwrap_err(),
            r#"strconv.ParseInt: parsing "2147483648": value out of range"#
        );
        assert_eq!(
            parse_int(" 1", 64, "Atoi")
                .map_err(|e| e.to_string())
                .unwrap_err(),
            r#"strconv.Atoi: parsing " 1": invalid syntax"#
        );
        assert!(parse_int("", 64, "Atoi").is_err());
        assert!(parse_int("-", 64, "Atoi").is_err());
        assert!(parse_int("99999999999999999999", 64, "Atoi").is_err());
    }
}
