//! Kubernetes resource quantities (`100m`, `1.5Gi`, `2e3`) as integer milli-units,
//! enough for the resource-fit filter to compare requests with allocatable.

/// The quantity in thousandths (`"1"` → 1000, `"100m"` → 100, `"1Ki"` → 1_024_000),
/// rounded up as the API server rounds sub-milli values; None for malformed text.
pub fn milli(text: &str) -> Option<i128> {
    let t = text.trim();
    if t.is_empty() {
        return None;
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(split);
    // (multiplier numerator, power of ten) applied to the number, in milli-units.
    let (mul, exp10): (i128, i32) = match suffix {
        "" => (1, 3),
        "m" => (1, 0),
        "k" => (1, 6),
        "M" => (1, 9),
        "G" => (1, 12),
        "T" => (1, 15),
        "P" => (1, 18),
        "E" => (1, 21),
        "Ki" => (1 << 10, 3),
        "Mi" => (1 << 20, 3),
        "Gi" => (1 << 30, 3),
        "Ti" => (1 << 40, 3),
        "Pi" => (1 << 50, 3),
        "Ei" => (1 << 60, 3),
        s if s.starts_with(['e', 'E']) => (1, 3 + s[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    let (neg, digits) = match number.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, number.strip_prefix('+').unwrap_or(number)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty()
        || !int.chars().all(|c| c.is_ascii_digit())
        || !frac.chars().all(|c| c.is_ascii_digit())
        || int.len() + frac.len() > 30
    {
        return None;
    }
    let mantissa: i128 = format!("{int}{frac}").parse().unwrap_or(0);
    let exp = exp10 - i32::try_from(frac.len()).ok()?;
    let scaled = if exp >= 0 {
        mantissa
            .checked_mul(10i128.checked_pow(u32::try_from(exp).ok()?)?)?
            .checked_mul(mul)?
    } else {
        let div = 10i128.checked_pow(u32::try_from(-exp).ok()?)?;
        (mantissa.checked_mul(mul)? + div - 1) / div
    };
    Some(if neg { -scaled } else { scaled })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        for (text, want) in [
            ("1", 1000),
            ("100m", 100),
            ("0.5", 500),
            ("1.5Gi", 1536 * 1024 * 1024 * 1000),
            ("1Ki", 1_024_000),
            ("2k", 2_000_000),
            ("3e2", 300_000),
            ("1E", 1_000_000_000_000_000_000_000),
            ("0.0001", 1),
            ("+7", 7000),
            ("-2", -2000),
            ("110", 110_000),
        ] {
            assert_eq!(milli(text), Some(want), "{text}");
        }
        for bad in ["", "abc", "1x", "1.2.3", "--1", "1Qi", "."] {
            assert_eq!(milli(bad), None, "{bad}");
        }
    }
}
