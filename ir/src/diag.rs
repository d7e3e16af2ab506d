//! Source files, spans and diagnostics.
//!
//! Diagnostics print as `path:line:col: error: message` (the form compilers, editors and CI
//! log scanners already recognise), then the source line with a caret under the span and an
//! optional hint. The renderer is small and exact on purpose: the format is part of Weft's
//! interface and is pinned by snapshot tests.

use std::fmt::Write as _;

use unicode_width::UnicodeWidthChar;

/// A byte range in one source file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        // Source files are capped at u32::MAX bytes when loaded (see `SourceFile::new`).
        Span {
            start: start as u32,
            end: end.max(start) as u32,
        }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }

    pub fn len(self) -> usize {
        (self.end - self.start) as usize
    }

    pub fn is_empty(self) -> bool {
        self.start == self.end
    }
}

/// The text of one source file and where its lines start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFile {
    pub path: String,
    pub text: String,
    line_starts: Vec<usize>,
}

/// Largest source file accepted; spans are 32-bit.
pub const MAX_SOURCE_LEN: usize = 16 * 1024 * 1024;

impl SourceFile {
    pub fn new(path: impl Into<String>, text: impl Into<String>) -> SourceFile {
        let mut text = text.into();
        // A byte-order mark, as some editors save UTF-8, is not part of the program: without
        // it the first line is what the user sees, and columns count from its first letter.
        if text.starts_with('\u{feff}') {
            text.drain(..'\u{feff}'.len_utf8());
        }
        if text.len() > MAX_SOURCE_LEN {
            // Keep spans in range; the lexer reports the truncation as an error.
            let mut cut = MAX_SOURCE_LEN;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        SourceFile {
            path: path.into(),
            text,
            line_starts,
        }
    }

    /// The 1-based line of a byte offset, without counting the characters before it on its
    /// line (which [`SourceFile::line_col`] does).
    pub fn line_of(&self, offset: u32) -> usize {
        let offset = (offset as usize).min(self.text.len());
        match self.line_starts.binary_search(&offset) {
            Ok(l) => l + 1,
            Err(l) => l,
        }
    }

    /// 1-based line and 1-based column (in characters) of a byte offset.
    pub fn line_col(&self, offset: u32) -> (usize, usize) {
        let line = self.line_of(offset) - 1;
        let offset = (offset as usize).min(self.text.len());
        let start = self.line_starts[line];
        let col = self
            .text
            .get(start..offset)
            .map_or(0, |s| s.chars().count());
        (line + 1, col + 1)
    }

    /// The byte offset where a 1-based line starts; the end of the text past the last line.
    pub fn line_start(&self, line: usize) -> usize {
        self.line_starts
            .get(line.wrapping_sub(1))
            .copied()
            .unwrap_or(self.text.len())
    }

    /// The text of a 1-based line, without its line break.
    pub fn line_text(&self, line: usize) -> &str {
        let Some(&start) = self.line_starts.get(line.wrapping_sub(1)) else {
            return "";
        };
        let end = self
            .line_starts
            .get(line)
            .map_or(self.text.len(), |e| e - 1);
        let s = self.text.get(start..end).unwrap_or("");
        s.strip_suffix('\r').unwrap_or(s)
    }

    pub fn slice(&self, span: Span) -> &str {
        self.text
            .get(span.start as usize..span.end as usize)
            .unwrap_or("")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Warning,
    Error,
}

/// One problem found in a source file.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Diagnostic {
    pub severity: Severity,
    pub message: String,
    pub span: Span,
    pub hint: Option<String>,
    /// Set when the chain config's value is what is wrong, not the element's source: the
    /// loader then points at that value in the config.
    pub config: Option<ConfigCause>,
}

/// What of an element's entry in the chain config a diagnostic is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ConfigCause {
    /// The value the entry gives this parameter.
    ParamValue(String),
    /// A parameter the entry sets and the element does not declare.
    ParamName(String),
    /// A parameter the entry leaves out, which has no default.
    MissingParam(String),
    /// The value the entry gives this parameter, which the element reads as a field name
    /// and the method's message does not have.
    ParamField(String),
}

impl Diagnostic {
    pub fn error(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            message: message.into(),
            span,
            hint: None,
            config: None,
        }
    }

    pub fn warning(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            message: message.into(),
            span,
            hint: None,
            config: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Diagnostic {
        self.hint = Some(hint.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// Renders the diagnostic against the file it refers to.
    pub fn render(&self, file: &SourceFile) -> String {
        let (line, col) = file.line_col(self.span.start);
        let severity = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let excerpt = Excerpt::new(file, self.span);
        let mut out = format!(
            "{}:{line}:{col}: {severity}: {}\n{excerpt}\n",
            file.path,
            capped(&self.message)
        );
        if let Some(hint) = &self.hint {
            let _ = writeln!(
                out,
                "{:gutter$} = hint: {}",
                "",
                capped(hint),
                gutter = excerpt.gutter()
            );
        }
        out
    }
}

/// The source line of a span with carets under it, as a diagnostic shows it below its
/// first line. The chain config's errors use it too, so both kinds of error look alike.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Excerpt {
    /// 1-based.
    pub line: usize,
    shown: String,
    caret_at: usize,
    caret_width: usize,
}

impl Excerpt {
    /// The line `span` starts on, with carets under the span's part of that line (one at
    /// least).
    pub fn new(file: &SourceFile, span: Span) -> Excerpt {
        let (line, col) = file.line_col(span.start);
        let text = file.line_text(line);
        let line_end = file
            .line_starts
            .get(line)
            .map_or(file.text.len(), |e| e - 1) as u32;
        let span_end = span.end.min(line_end).max(span.start);
        let span_width: usize = file
            .text
            .get(span.start as usize..span_end as usize)
            .map_or(0, |s| s.chars().map(display_width).sum());
        let (shown, caret_at, caret_width) = shown_line(text, col - 1, span_width.max(1));
        Excerpt {
            line,
            shown,
            caret_at,
            caret_width,
        }
    }

    /// Columns of the line-number gutter; a hint below the excerpt lines up with it.
    pub fn gutter(&self) -> usize {
        self.line.to_string().len()
    }
}

/// Two lines, without a final line break.
impl std::fmt::Display for Excerpt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (line, gutter) = (self.line, self.gutter());
        writeln!(f, "{line:>gutter$} | {}", self.shown)?;
        write!(
            f,
            "{:gutter$} | {}{}",
            "",
            " ".repeat(self.caret_at),
            "^".repeat(self.caret_width)
        )
    }
}

/// The columns a character takes on a terminal: a tab 4 (the language's tab width, as the
/// line is shown with tabs expanded), a control character 1 (it is shown as `\u{fffd}`), a
/// wide character (CJK, most emoji) 2, a combining mark 0, so carets stand under what they
/// point at.
fn display_width(c: char) -> usize {
    if c == '\t' {
        4
    } else if c.is_control() {
        1
    } else {
        UnicodeWidthChar::width(c).unwrap_or(0)
    }
}

/// What a character costs of a shown line's room: its width, and at least 1, so a run of
/// zero-width characters (combining marks, zero-width spaces) cannot make a line that looks
/// short arbitrarily long.
fn cells(c: char) -> usize {
    display_width(c).max(1)
}

/// How a character of a source line is shown: a tab as 4 spaces, a control character (which
/// a terminal would act on: an escape sequence, a carriage return) as `\u{fffd}`.
fn push_shown(out: &mut String, c: char) {
    match c {
        '\t' => out.push_str("    "),
        c if c.is_control() => out.push('\u{fffd}'),
        c => out.push(c),
    }
}

/// The longest message or hint shown, in characters; a longer one (it quotes a huge name
/// from the source) is cut with `...`.
pub const MAX_MESSAGE_CHARS: usize = 200;

/// Control characters in it (quoted from the source) are shown as `\u{fffd}`, as in lines.
fn capped(text: &str) -> std::borrow::Cow<'_, str> {
    let cut = text.char_indices().nth(MAX_MESSAGE_CHARS).map(|(at, _)| at);
    if cut.is_none() && !text.chars().any(char::is_control) {
        return text.into();
    }
    let mut out = String::new();
    for c in text[..cut.unwrap_or(text.len())].chars() {
        push_shown(&mut out, c);
    }
    if cut.is_some() {
        out.push_str(CUT);
    }
    out.into()
}

/// The widest a source line is shown. A longer one (minified or garbled text, a huge
/// literal) is cut to a window around the span, with `...` where it was cut, so each
/// diagnostic stays a few short lines whatever the line's length.
pub const MAX_LINE_WIDTH: usize = 100;
/// Display columns of the line shown before the span when the line is cut.
const CONTEXT_BEFORE: usize = 30;
const CUT: &str = "...";

/// The line as shown (see [`push_shown`]), where the caret starts in it and how wide it is,
/// for a span starting at character column `col` and `span_width` display columns wide: the
/// whole line when it takes at most [`MAX_LINE_WIDTH`] [`cells`], else a window around the
/// span start.
fn shown_line(text: &str, col: usize, span_width: usize) -> (String, usize, usize) {
    let total: usize = text.chars().map(cells).sum();
    if total <= MAX_LINE_WIDTH {
        let (shown, caret_at) = expand_tabs(text, col);
        return (shown, caret_at, span_width);
    }
    let room = MAX_LINE_WIDTH - 2 * CUT.len();
    let span_at: usize = text.chars().take(col).map(cells).sum();
    // Near the end of the line, what the rest does not fill goes to more context before.
    let before = CONTEXT_BEFORE.max(room.saturating_sub(total - span_at));
    let from = span_at.saturating_sub(before);
    let mut window = String::new();
    // Cells of the line before the window; display columns of the window, in all and
    // before the span.
    let mut first = None;
    let (mut width, mut caret_at) = (0, 0);
    let mut at = 0;
    let mut cut_after = false;
    for (i, c) in text.chars().enumerate() {
        if at >= from {
            if first.is_none() && from > 0 && i < col && display_width(c) == 0 {
                // A combining mark whose base was cut off would attach to the `...`.
                at += cells(c);
                continue;
            }
            let first = *first.get_or_insert(at);
            if at + cells(c) - first > room {
                cut_after = true;
                break;
            }
            push_shown(&mut window, c);
            if i < col {
                caret_at += display_width(c);
            }
            width += display_width(c);
        }
        at += cells(c);
    }
    let prefix = if first != Some(0) { CUT } else { "" };
    let suffix = if cut_after { CUT } else { "" };
    let caret_width = span_width.min(width - caret_at).max(1);
    (
        format!("{prefix}{window}{suffix}"),
        prefix.len() + caret_at,
        caret_width,
    )
}

/// Replaces tabs by 4 spaces and maps a character column to the display column of the
/// expanded text.
fn expand_tabs(text: &str, col: usize) -> (String, usize) {
    let mut shown = String::with_capacity(text.len());
    let mut width = 0;
    let mut caret_at = None;
    for (i, c) in text.chars().enumerate() {
        if i == col {
            caret_at = Some(width);
        }
        push_shown(&mut shown, c);
        width += display_width(c);
    }
    (shown, caret_at.unwrap_or(width))
}

/// The most diagnostics [`render_all`] shows for one file; a last line counts the others.
/// Garbled input can make one per token, and a screenful of the first ones is what helps.
pub const MAX_RENDERED: usize = 50;

/// Renders the diagnostics of a file, errors and warnings in source order: all of them, or,
/// past [`MAX_RENDERED`], that many (errors before warnings, so no error is left out for a
/// warning) and a line that counts the rest.
pub fn render_all(file: &SourceFile, diags: &[Diagnostic]) -> String {
    let mut shown: Vec<&Diagnostic> = diags.iter().collect();
    let mut left_out = (0, 0);
    if shown.len() > MAX_RENDERED {
        // Errors first, each kind from the top of the file; the first ones are kept.
        shown.sort_by_key(|d| (std::cmp::Reverse(d.severity), d.span.start));
        for d in shown.drain(MAX_RENDERED..) {
            if d.is_error() {
                left_out.0 += 1;
            } else {
                left_out.1 += 1;
            }
        }
    }
    shown.sort_by_key(|d| (d.span.start, std::cmp::Reverse(d.severity)));
    let mut out: String = shown.iter().map(|d| d.render(file)).collect();
    if left_out != (0, 0) {
        let (errors, warnings) = left_out;
        let kinds: Vec<String> = [(errors, "error"), (warnings, "warning")]
            .into_iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| counted(n, what))
            .collect();
        let _ = writeln!(
            out,
            "{}: {} more not shown ({})",
            file.path,
            errors + warnings,
            kinds.join(", ")
        );
    }
    out
}

/// "1 error", "3 errors".
fn counted(n: usize, what: &str) -> String {
    match n {
        1 => format!("1 {what}"),
        _ => format!("{n} {what}s"),
    }
}

pub fn has_errors(diags: &[Diagnostic]) -> bool {
    diags.iter().any(Diagnostic::is_error)
}

/// `names` joined with `, `, at most `shown` of them and then how many more: a hint that
/// lists every edge of a 500-edge config is a 3 000-character line nobody reads.
pub fn some_of<'a>(names: impl IntoIterator<Item = &'a str>, shown: usize) -> String {
    let mut out = String::new();
    let mut more = 0usize;
    for (i, name) in names.into_iter().enumerate() {
        if i < shown {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(name);
        } else {
            more += 1;
        }
    }
    if more > 0 {
        out.push_str(&format!(" and {more} more"));
    }
    out
}

/// "did you mean `x`?" for the closest candidate, if any is close enough.
pub fn did_you_mean<'a>(
    wrong: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let best = candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(wrong, c), c))
        .filter(|(d, c)| *d > 0 && *d <= (wrong.len().max(c.len()) / 3).max(1))
        .min_by_key(|(d, _)| *d)?;
    Some(format!("did you mean `{}`?", best.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_are_one_based() {
        let f = SourceFile::new("a.weft", "ab\ncd\n");
        assert_eq!(f.line_col(0), (1, 1));
        assert_eq!(f.line_col(4), (2, 2));
        assert_eq!(f.line_text(2), "cd");
        assert_eq!(f.line_text(9), "");
    }

    #[test]
    fn render_points_a_caret_under_the_span_with_tabs_expanded() {
        let f = SourceFile::new("x.weft", "req(rpc):\n\tv = get(rpc, 'usr')\n");
        let start = f.text.find("'usr'").unwrap();
        let d = Diagnostic::error(Span::new(start, start + 5), "unknown field `usr`")
            .with_hint("did you mean `user`?");
        let out = d.render(&f);
        let expected = "x.weft:2:15: error: unknown field `usr`\n\
                        2 |     v = get(rpc, 'usr')\n\
                        \x20 |                  ^^^^^\n\
                        \x20 = hint: did you mean `user`?\n";
        assert_eq!(out, expected);
    }

    /// Wide characters take two columns on a terminal: the caret counts them so.
    #[test]
    fn render_counts_wide_characters_twice() {
        let f = SourceFile::new("w.weft", "req(rpc):\n    x = '日本\\q語'\n");
        let start = f.text.find("\\q").unwrap();
        let out = Diagnostic::error(Span::new(start, start + 2), "unknown escape `\\q`").render(&f);
        let expected = "w.weft:2:12: error: unknown escape `\\q`\n\
                        2 |     x = '日本\\q語'\n\
                        \x20 |              ^^\n";
        assert_eq!(out, expected);
    }

    /// The display column where `needle` starts in `shown` (which has no tabs).
    fn display_col(shown: &str, needle: &str) -> usize {
        let at = shown.find(needle).unwrap();
        shown[..at].chars().map(display_width).sum()
    }

    /// The shown line and the caret line of a rendered one-line-file diagnostic.
    fn shown_and_caret(out: &str) -> (String, String) {
        let lines: Vec<&str> = out.lines().collect();
        let strip = |l: &str| l.split_once(" | ").unwrap().1.to_owned();
        (strip(lines[1]), strip(lines[2]))
    }

    #[test]
    fn a_long_line_is_cut_to_a_window_around_the_span() {
        let text = format!("{}oops{}\n", "x = 1 ".repeat(40), " + 2".repeat(60));
        let f = SourceFile::new("long.weft", text.clone());
        let start = text.find("oops").unwrap();
        let out = Diagnostic::error(Span::new(start, start + 4), "unknown name `oops`").render(&f);
        assert!(
            out.starts_with("long.weft:1:241: error: unknown name `oops`\n"),
            "{out}"
        );
        let (shown, caret) = shown_and_caret(&out);
        assert!(
            shown.starts_with("...") && shown.ends_with("..."),
            "{shown}"
        );
        assert!(shown.chars().count() <= MAX_LINE_WIDTH, "{}", shown.len());
        // The caret stands under the span, its whole width.
        assert_eq!(
            caret,
            format!("{}^^^^", " ".repeat(display_col(&shown, "oops")))
        );
        assert_eq!(display_col(&shown, "oops"), CUT.len() + CONTEXT_BEFORE);
    }

    #[test]
    fn a_cut_line_keeps_the_caret_under_wide_characters_and_tabs() {
        let text = format!("{}\t'\\q'{}\n", "日本\t".repeat(30), "語".repeat(80));
        let f = SourceFile::new("w.weft", text.clone());
        let start = text.find("\\q").unwrap();
        let out = Diagnostic::error(Span::new(start, start + 2), "unknown escape").render(&f);
        let (shown, caret) = shown_and_caret(&out);
        let width: usize = shown.chars().map(display_width).sum();
        assert!(width <= MAX_LINE_WIDTH, "{width}: {shown}");
        assert!(!shown.contains('\t'), "{shown}");
        assert_eq!(
            caret,
            format!("{}^^", " ".repeat(display_col(&shown, "\\q")))
        );
    }

    #[test]
    fn a_span_at_the_end_of_a_long_line_shows_the_end() {
        let text = format!("{}\n", "a + ".repeat(100));
        let f = SourceFile::new("e.weft", text.clone());
        let end = text.len() - 1;
        let out = Diagnostic::error(Span::new(end, end), "expected an expression").render(&f);
        let (shown, caret) = shown_and_caret(&out);
        assert!(
            shown.starts_with("...") && !shown.ends_with("..."),
            "{shown}"
        );
        let width: usize = shown.chars().map(display_width).sum();
        assert_eq!(caret, format!("{}^", " ".repeat(width)));
        // The room the line's end leaves goes to what comes before the span.
        assert_eq!(width, MAX_LINE_WIDTH - CUT.len(), "{shown}");
    }

    /// Zero-width characters take no columns but cost a cell each, so a line of them is cut
    /// like any long line rather than shown whole.
    #[test]
    fn zero_width_characters_count_against_the_room() {
        let text = format!("x = {}oops\n", "\u{200b}".repeat(10_000));
        let f = SourceFile::new("z.weft", text.clone());
        let start = text.find("oops").unwrap();
        let out = Diagnostic::error(Span::new(start, start + 4), "unknown name").render(&f);
        let (shown, caret) = shown_and_caret(&out);
        assert!(
            shown.chars().count() <= MAX_LINE_WIDTH,
            "{}",
            shown.chars().count()
        );
        assert!(
            shown.starts_with("...") && shown.ends_with("oops"),
            "{shown}"
        );
        assert_eq!(
            caret,
            format!("{}^^^^", " ".repeat(display_col(&shown, "oops")))
        );
    }

    /// A combining mark whose base fell before the window is left out, not put on the `...`.
    #[test]
    fn a_cut_does_not_start_with_an_orphaned_combining_mark() {
        // The window starts 30 cells before the span: at the first of the three marks.
        let text = format!(
            "{}e\u{301}\u{301}\u{301}{}\n",
            "a".repeat(99),
            "b".repeat(200)
        );
        let f = SourceFile::new("m.weft", text.clone());
        let start = text.char_indices().nth(130).unwrap().0;
        let out = Diagnostic::error(Span::new(start, start + 1), "here").render(&f);
        let (shown, caret) = shown_and_caret(&out);
        assert!(shown.starts_with("...b"), "{shown:?}");
        assert!(!shown.contains('\u{301}'), "{shown:?}");
        let col = CUT.len() + 27; // the span is the 28th `b`
        assert_eq!(caret, format!("{}^", " ".repeat(col)), "{shown:?}");
    }

    /// A terminal would act on control characters (an escape sequence, a carriage return):
    /// they are shown as U+FFFD, one column each, and the caret counts them so.
    #[test]
    fn control_characters_are_shown_as_replacement_characters() {
        let text = "x = '\u{1b}[2J\u{7}' + oops\n";
        let f = SourceFile::new("c.weft", text);
        let start = text.find("oops").unwrap();
        let out = Diagnostic::error(Span::new(start, start + 4), "unknown name").render(&f);
        let (shown, caret) = shown_and_caret(&out);
        assert_eq!(shown, "x = '\u{fffd}[2J\u{fffd}' + oops");
        assert_eq!(
            caret,
            format!("{}^^^^", " ".repeat(display_col(&shown, "oops")))
        );
    }

    #[test]
    fn messages_show_control_characters_as_replacement_characters() {
        let f = SourceFile::new("m.weft", "x\n");
        let out = Diagnostic::error(Span::new(0, 1), "bad `\u{1b}[2J`").render(&f);
        assert!(
            out.starts_with("m.weft:1:1: error: bad `\u{fffd}[2J`\n"),
            "{out}"
        );
    }

    #[test]
    fn long_messages_and_hints_are_cut() {
        let f = SourceFile::new("m.weft", "x\n");
        let name = "n".repeat(10_000);
        let out = Diagnostic::error(Span::new(0, 1), format!("unknown name `{name}`"))
            .with_hint(format!("did you mean `{name}`?"))
            .render(&f);
        for line in out.lines() {
            assert!(line.chars().count() <= MAX_MESSAGE_CHARS + 40, "{line}");
        }
        assert!(out.lines().next().unwrap().ends_with("nnn..."), "{out}");
    }

    #[test]
    fn a_line_that_fits_is_shown_whole() {
        let text = format!("{}bad\n", "y".repeat(MAX_LINE_WIDTH - 3));
        let f = SourceFile::new("f.weft", text.clone());
        let start = text.find("bad").unwrap();
        let out = Diagnostic::error(Span::new(start, start + 3), "bad").render(&f);
        let (shown, caret) = shown_and_caret(&out);
        assert_eq!(shown, text.trim_end());
        assert_eq!(caret, format!("{}^^^", " ".repeat(MAX_LINE_WIDTH - 3)));
    }

    #[test]
    fn render_all_shows_the_first_errors_and_counts_the_rest() {
        let text = "x\n".repeat(200);
        let f = SourceFile::new("many.weft", text);
        let at = |line: usize| Span::new(2 * line, 2 * line + 1);
        // Warnings on the first lines, errors after them: the errors are kept.
        let mut diags: Vec<Diagnostic> = (0..10)
            .map(|l| Diagnostic::warning(at(l), format!("warning {l}")))
            .collect();
        diags.extend((10..130).map(|l| Diagnostic::error(at(l), format!("error {l}"))));
        diags.reverse();
        let out = render_all(&f, &diags);
        let headers: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("many.weft:"))
            .collect();
        assert_eq!(headers.len(), MAX_RENDERED + 1);
        // The first errors of the file, in source order.
        for (i, h) in headers[..MAX_RENDERED].iter().enumerate() {
            let line = 11 + i;
            assert_eq!(
                *h,
                format!("many.weft:{line}:1: error: error {}", line - 1),
                "{out}"
            );
        }
        assert_eq!(
            headers[MAX_RENDERED],
            "many.weft: 80 more not shown (70 errors, 10 warnings)"
        );
        // Up to the limit, everything is shown and nothing is counted.
        let out = render_all(&f, &diags[..MAX_RENDERED]);
        assert!(!out.contains("more not shown"), "{out}");
        assert_eq!(out.matches(": error: ").count(), MAX_RENDERED);
    }

    #[test]
    fn did_you_mean_picks_close_names_only() {
        assert_eq!(
            did_you_mean("usr", ["user", "body"]).as_deref(),
            Some("did you mean `user`?")
        );
        assert_eq!(did_you_mean("zzzzz", ["user", "body"]), None);
    }
}
