//! Flag value parsers shared by the binaries, in the forms HAMi's Go flags take, so the
//! same chart values and command lines work for both.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// Parses a Go duration (`time.ParseDuration`): a sequence of decimal numbers, each with
/// an optional fraction and a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), e.g. `300ms`,
/// `5m`, `1h30m`, `1.5s`; `0` alone is allowed. Negative durations are refused: no flag
/// here means anything by them.
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
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| err("missing unit"))?;
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
            other => return Err(err(&format!("unknown unit {other:?}"))),
        };
        total += number * scale;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| err("out of range"))
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
