//! Flag value parsers shared by the binaries, in the forms HAMi's Go flags take, so the
//! same chart values and command lines work for both. The flag groups built on them
//! are in [`crate::args`].

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// How a duration flag is written, for `--help` (see [`parse_go_duration`]).
pub const DURATION_HELP: &str = "DURATION values are Go durations: numbers each followed by a \
    unit (ns, us, ms, s, m, h), e.g. 300ms, 30s, 5m, 1h30m, 1.5s. Only 0 may be written \
    without a unit; a bare number such as 45 is refused (write 45s).";

/// Parses a Go duration (`time.ParseDuration`): a sequence of decimal numbers, each with
/// an optional fraction and a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), e.g. `300ms`,
/// `5m`, `1h30m`, `1.5s`. Surrounding whitespace is ignored.
///
/// Bare numbers: only `0` is accepted without a unit, as in Go. Any other bare number
/// (`5`, `45`) is refused with an error that suggests the seconds form, because its
/// meaning is ambiguous: HAMi's scheduler refuses it (`--node-lock-timeout` and
/// `HAMI_NODELOCK_EXPIRE` go through `time.ParseDuration`), Go's own `time.Duration(45)`
/// is 45 nanoseconds, and other tools read seconds. Every duration the Helm chart
/// renders carries a unit (its schema requires one), so the chart is unaffected.
///
/// Negative durations are refused: no flag here means anything by them.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    let err =
        |why: &str| format!("invalid duration {text:?}: {why} (examples: 300ms, 30s, 5m, 1h30m)");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(err("empty"));
    }
    if s.starts_with('-') {
        return Err(err("must not be negative"));
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') && s.parse::<f64>().is_ok() {
        return Err(err(&format!(
            "missing unit; only 0 may be written without one (for seconds write {s}s)"
        )));
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| err(&format!("missing unit after {rest:?}")))?;
        if num_len == 0 {
            return Err(err("expected a number"));
        }
        let number: f64 = rest[..num_len].parse().map_err(|_| err("bad number"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            other => {
                return Err(err(&format!(
                    "unknown unit {other:?} (use ns, us, ms, s, m or h)"
                )));
            }
        };
        total += number * scale;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| err("out of range"))
}

/// Writes a duration as Go's `time.Duration.String` does (`5m0s`, `1h30m0s`, `1.5s`,
/// `300ms`, `0s`): how HAMi's messages show durations, so texts operators grep for match.
pub fn format_go_duration(d: Duration) -> String {
    const SECOND: u128 = 1_000_000_000;
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < SECOND {
        let (unit, scale) = match nanos {
            n if n < 1_000 => ("ns", 1),
            n if n < 1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{}{unit}", decimal(nanos, scale));
    }
    let whole = nanos / SECOND;
    let (h, m) = (whole / 3600, (whole % 3600) / 60);
    let secs = decimal((whole % 60) * SECOND + nanos % SECOND, SECOND);
    match (h, m) {
        (0, 0) => format!("{secs}s"),
        (0, m) => format!("{m}m{secs}s"),
        (h, m) => format!("{h}h{m}m{secs}s"),
    }
}

/// `value / scale` with the fraction's trailing zeros dropped, as Go prints durations.
fn decimal(value: u128, scale: u128) -> String {
    let (int, frac) = (value / scale, value % scale);
    if frac == 0 {
        return int.to_string();
    }
    let width = scale.to_string().len() - 1;
    let digits = format!("{frac:0width$}");
    format!("{int}.{}", digits.trim_end_matches('0'))
}

/// Parses a listen address as Go's `net.Listen` takes it: `host:port`, `:port` (all
/// interfaces), or `[v6]:port`; host names are resolved.
pub fn parse_listen_addr(text: &str) -> Result<SocketAddr, String> {
    let s = text.trim();
    let full = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_string()
    };
    if let Ok(a) = full.parse::<SocketAddr>() {
        return Ok(a);
    }
    full.to_socket_addrs()
        .ok()
        .and_then(|mut it| it.next())
        .ok_or_else(|| {
            format!("invalid listen address {text:?} (examples: :9395, 127.0.0.1:8080, [::]:443)")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's `time.Duration.String` outputs.
    #[test]
    fn durations_print_as_go_prints_them() {
        for (d, want) in [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(300), "5m0s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(5400), "1h30m0s"),
            (Duration::from_secs(7200), "2h0m0s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(300), "300ms"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_nanos(2500), "2.5µs"),
            (Duration::from_nanos(7), "7ns"),
            (Duration::from_secs(28), "28s"),
        ] {
            assert_eq!(format_go_duration(d), want, "{d:?}");
            if d >= Duration::from_secs(1) {
                assert_eq!(parse_go_duration(want), Ok(d), "{want}");
            }
        }
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_go_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_go_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("2us"), Ok(Duration::from_micros(2)));
        for bad in ["", "5", "m", "5x", "-1s", "1..5s", "s5"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_go_duration("5").unwrap_err().contains("missing unit"));
    }

    #[test]
    fn every_go_form_the_binaries_and_the_chart_use() {
        let ok = [
            ("10s", Duration::from_secs(10)),
            ("60s", Duration::from_secs(60)),
            ("30s", Duration::from_secs(30)),
            ("2m", Duration::from_secs(120)),
            ("15s", Duration::from_secs(15)),
            ("20s", Duration::from_secs(20)),
            ("1m30s", Duration::from_secs(90)),
            ("250ms", Duration::from_millis(250)),
            ("1.5h", Duration::from_secs(5400)),
            (".5s", Duration::from_millis(500)),
            ("5.s", Duration::from_secs(5)),
            ("+5s", Duration::from_secs(5)),
            (" 5m ", Duration::from_secs(300)),
            ("1h2m3s4ms", Duration::from_millis(3_723_004)),
            ("7ns", Duration::from_nanos(7)),
            ("3µs", Duration::from_micros(3)),
            ("3μs", Duration::from_micros(3)),
        ];
        for (text, want) in ok {
            assert_eq!(parse_go_duration(text), Ok(want), "{text:?}");
        }
    }

    #[test]
    fn refusals_say_what_is_wrong() {
        let cases = [
            (
                "45",
                "missing unit; only 0 may be written without one (for seconds write 45s)",
            ),
            ("1.5", "for seconds write 1.5s"),
            ("5m3", "missing unit after \"3\""),
            ("3d", "unknown unit \"d\" (use ns, us, ms, s, m or h)"),
            ("", "empty"),
            ("  ", "empty"),
            ("-1s", "must not be negative"),
            ("-0", "must not be negative"),
            ("s", "expected a number"),
            (".s", "bad number"),
            ("1..2s", "bad number"),
            ("1e3s", "unknown unit \"e\""),
        ];
        for (text, why) in cases {
            let e = parse_go_duration(text).unwrap_err();
            assert!(
                e.starts_with(&format!("invalid duration {text:?}: ")),
                "{e}"
            );
            assert!(e.contains(why), "{text:?}: {e}");
            assert!(e.ends_with("(examples: 300ms, 30s, 5m, 1h30m)"), "{e}");
        }
        assert!(
            parse_go_duration("99999999999999999h")
                .unwrap_err()
                .contains("out of range")
        );
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen_addr(":9395").unwrap(),
            "0.0.0.0:9395".parse().unwrap()
        );
        assert_eq!(
            parse_listen_addr("127.0.0.1:8080").unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );
        assert_eq!(
            parse_listen_addr("[::]:443").unwrap(),
            "[::]:443".parse().unwrap()
        );
        assert_eq!(parse_listen_addr("localhost:1").unwrap().port(), 1);
        assert!(parse_listen_addr("nope").is_err());
        assert!(parse_listen_addr(":notaport").is_err());
    }
}
