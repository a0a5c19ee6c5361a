//! Text output as kubectl prints it: aligned columns (elastic tabstops, like kubectl's
//! tabwriter) and colours only when stdout is a terminal that wants them (`NO_COLOR`,
//! `CLICOLOR`, `CLICOLOR_FORCE` and `TERM=dumb` are honoured).

use std::io::Write as _;

use anstyle::{AnsiColor, Style as Ansi};

/// Whether to colour text output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Style {
    pub color: bool,
}

/// What a piece of text says, for its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Good,
    Warn,
    Bad,
    Strong,
    Faint,
}

impl Style {
    /// Plain text.
    pub const PLAIN: Style = Style { color: false };

    /// Colours when stdout is a terminal that wants them.
    pub fn for_stdout() -> Self {
        let choice = anstream::AutoStream::choice(&std::io::stdout());
        Style {
            color: choice != anstream::ColorChoice::Never,
        }
    }

    /// `text` in `tone`'s colour, or as it is without colours.
    pub fn paint(&self, tone: Tone, text: &str) -> String {
        if !self.color {
            return text.to_string();
        }
        let style = match tone {
            Tone::Good => Ansi::new().fg_color(Some(AnsiColor::Green.into())),
            Tone::Warn => Ansi::new().fg_color(Some(AnsiColor::Yellow.into())),
            Tone::Bad => Ansi::new().fg_color(Some(AnsiColor::Red.into())),
            Tone::Strong => Ansi::new().bold(),
            Tone::Faint => Ansi::new().dimmed(),
        };
        format!("{style}{text}{style:#}")
    }

    /// The tone of a `used` of `total` share: warn from 80 %, bad from 100 %.
    pub fn load_tone(used: u64, total: u64) -> Option<Tone> {
        if total == 0 || used >= total {
            Some(Tone::Bad)
        } else if u128::from(used) * 5 >= u128::from(total) * 4 {
            Some(Tone::Warn)
        } else {
            None
        }
    }
}

/// Rows aligned in columns three spaces apart (as kubectl's); colour codes do not count as width.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut tw = tabwriter::TabWriter::new(Vec::new()).padding(3).ansi(true);
    let mut line = |cells: &[String]| {
        let _ = writeln!(tw, "{}", cells.join("\t"));
    };
    line(&header.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    for r in rows {
        line(r);
    }
    let bytes = tw.into_inner().unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_whatever_the_colours() {
        let colored = Style { color: true };
        let rows = vec![
            vec!["a".to_string(), colored.paint(Tone::Bad, "no")],
            vec!["longer-name".to_string(), "fits".to_string()],
        ];
        let out = table(&["NODE", "RESULT"], &rows);
        let plain: Vec<String> = out
            .lines()
            .map(|l| {
                // Strip the escape sequences to measure what the eye sees.
                let mut s = String::new();
                let mut esc = false;
                for c in l.chars() {
                    match (esc, c) {
                        (false, '\u{1b}') => esc = true,
                        (true, 'm') => esc = false,
                        (true, _) => {}
                        (false, c) => s.push(c),
                    }
                }
                s
            })
            .collect();
        assert_eq!(plain[0], "NODE          RESULT");
        assert_eq!(plain[1], "a             no");
        assert_eq!(plain[2], "longer-name   fits");
        assert!(out.contains('\u{1b}'));
        assert_eq!(Style::PLAIN.paint(Tone::Bad, "no"), "no");
    }

    #[test]
    fn load_tones() {
        assert_eq!(Style::load_tone(10, 100), None);
        assert_eq!(Style::load_tone(80, 100), Some(Tone::Warn));
        assert_eq!(Style::load_tone(100, 100), Some(Tone::Bad));
        assert_eq!(Style::load_tone(0, 0), Some(Tone::Bad));
    }
}
