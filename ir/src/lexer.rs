//! Tokens, with Python-style NEWLINE / INDENT / DEDENT.
//!
//! Blocks are by indentation; a tab is 4 columns. Inside parentheses line breaks are not
//! significant — except in a lambda body: a `:` that ends a line inside parentheses opens an
//! indented block there (AppNet's `foreach(v, lambda(x):` … `)` form). That block ends when a
//! line comes back to the indentation of the statement that holds the lambda, or at a `)`.

use unicode_width::UnicodeWidthChar;

use crate::diag::{Diagnostic, MAX_SOURCE_LEN, SourceFile, Span};

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    Name(String),
    /// An integer literal without sign (up to `u64::MAX`).
    Int(u64),
    Float(f64),
    Str(String),
    // keywords
    And,
    Or,
    Not,
    Match,
    If,
    Elif,
    Else,
    Pass,
    Return,
    Lambda,
    True,
    False,
    // punctuation
    LParen,
    RParen,
    Comma,
    Colon,
    Assign,
    FatArrow,
    EqEq,
    NotEq,
    Lt,
    Le,
    Gt,
    Ge,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    At,
    // layout
    Newline,
    Indent,
    Dedent,
    Eof,
}

impl Tok {
    /// How the token reads in an error message.
    pub fn describe(&self) -> String {
        match self {
            Tok::Name(n) => format!("`{n}`"),
            Tok::Int(i) => format!("`{i}`"),
            Tok::Float(f) => format!("`{f}`"),
            Tok::Str(_) => "a string".into(),
            Tok::Newline => "end of line".into(),
            Tok::Indent => "an indented block".into(),
            Tok::Dedent => "the end of the block".into(),
            Tok::Eof => "end of file".into(),
            other => format!("`{}`", other.text()),
        }
    }

    fn text(&self) -> &'static str {
        match self {
            Tok::And => "and",
            Tok::Or => "or",
            Tok::Not => "not",
            Tok::Match => "match",
            Tok::If => "if",
            Tok::Elif => "elif",
            Tok::Else => "else",
            Tok::Pass => "pass",
            Tok::Return => "return",
            Tok::Lambda => "lambda",
            Tok::True => "true",
            Tok::False => "false",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::Comma => ",",
            Tok::Colon => ":",
            Tok::Assign => "=",
            Tok::FatArrow => "=>",
            Tok::EqEq => "==",
            Tok::NotEq => "!=",
            Tok::Lt => "<",
            Tok::Le => "<=",
            Tok::Gt => ">",
            Tok::Ge => ">=",
            Tok::Plus => "+",
            Tok::Minus => "-",
            Tok::Star => "*",
            Tok::Slash => "/",
            Tok::Percent => "%",
            Tok::At => "@",
            _ => "",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub tok: Tok,
    pub span: Span,
}

fn keyword(name: &str) -> Option<Tok> {
    Some(match name {
        "and" => Tok::And,
        "or" => Tok::Or,
        "not" => Tok::Not,
        "match" => Tok::Match,
        "if" => Tok::If,
        "elif" => Tok::Elif,
        "else" => Tok::Else,
        "pass" => Tok::Pass,
        "return" => Tok::Return,
        "lambda" => Tok::Lambda,
        "true" => Tok::True,
        "false" => Tok::False,
        _ => return None,
    })
}

/// The width of a tab in columns.
pub const TAB_WIDTH: usize = 4;

/// Deepest nesting of blocks and parentheses accepted, so hostile input cannot exhaust the
/// parser's stack.
pub const MAX_NESTING: usize = 64;

/// Where line breaks are significant.
enum Context {
    /// Statements: indentation opens and closes blocks. `indents` starts with the base
    /// indentation (0 at top level, the holding statement's for a lambda body).
    Block { indents: Vec<usize> },
    /// Inside parentheses: line breaks are ignored.
    Parens { depth: usize },
}

pub fn lex(file: &SourceFile) -> (Vec<Token>, Vec<Diagnostic>) {
    let mut lx = Lexer {
        src: &file.text,
        pos: 0,
        tokens: Vec::new(),
        diags: Vec::new(),
        contexts: vec![Context::Block { indents: vec![0] }],
        at_line_start: true,
        paren_opens: Vec::new(),
        last_end: 0,
    };
    if file.text.len() >= MAX_SOURCE_LEN {
        lx.diags.push(Diagnostic::error(
            Span::new(0, 0),
            format!("source file is larger than {MAX_SOURCE_LEN} bytes"),
        ));
    }
    lx.run();
    (lx.tokens, lx.diags)
}

struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    tokens: Vec<Token>,
    diags: Vec<Diagnostic>,
    contexts: Vec<Context>,
    at_line_start: bool,
    /// Where each open `(` is, outermost first.
    paren_opens: Vec<usize>,
    /// End of the last real (non-layout) token.
    last_end: usize,
}

impl Lexer<'_> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn peek2(&self) -> Option<char> {
        let mut it = self.src[self.pos..].chars();
        it.next();
        it.next()
    }

    fn push(&mut self, tok: Tok, start: usize) {
        self.tokens.push(Token {
            tok,
            span: Span::new(start, self.pos),
        });
        self.last_end = self.pos;
    }

    fn push_at(&mut self, tok: Tok, at: usize) {
        self.tokens.push(Token {
            tok,
            span: Span::new(at, at),
        });
    }

    fn error(&mut self, start: usize, end: usize, msg: impl Into<String>) -> &mut Diagnostic {
        self.diags
            .push(Diagnostic::error(Span::new(start, end), msg));
        let last = self.diags.len() - 1;
        &mut self.diags[last]
    }

    fn in_parens(&self) -> bool {
        matches!(self.contexts.last(), Some(Context::Parens { .. }))
    }

    /// The newline token ends a logical line; never two in a row, never at the very start.
    fn push_newline(&mut self, at: usize) {
        match self.tokens.last().map(|t| &t.tok) {
            None | Some(Tok::Newline) | Some(Tok::Indent) | Some(Tok::Dedent) => {}
            _ => self.push_at(Tok::Newline, at),
        }
    }

    fn run(&mut self) {
        while self.pos < self.src.len() {
            if self.at_line_start {
                self.at_line_start = false;
                if self.contexts.len() > 1 && self.section_starts_here() {
                    self.close_unclosed_parens("close it before the next section starts");
                    self.line_start();
                    continue;
                }
                if !self.in_parens() {
                    self.line_start();
                    continue;
                }
            }
            let Some(c) = self.peek() else { break };
            let start = self.pos;
            match c {
                ' ' | '\t' | '\x0c' | '\r' => self.pos += 1,
                '\n' => {
                    self.pos += 1;
                    self.at_line_start = true;
                    if !self.in_parens() {
                        self.push_newline(start);
                    }
                }
                '\\' if self.rest_is_line_continuation() => {}
                '#' => self.skip_comment(),
                '/' if self.peek2() == Some('/') => self.skip_comment(),
                '\'' | '"' => self.string(c),
                '0'..='9' => self.number(),
                '.' if self.peek2().is_some_and(|d| d.is_ascii_digit()) => {
                    if self.follows_a_value() {
                        self.element_index();
                    } else {
                        self.number();
                    }
                }
                c if c.is_alphabetic() || c == '_' => self.name(),
                _ => self.punct(c),
            }
        }
        if !self.paren_opens.is_empty() {
            self.close_unclosed_parens("close it before the end of the file");
        }
        let end = self.src.len();
        while let Some(ctx) = self.contexts.pop() {
            if let Context::Block { indents } = ctx {
                self.push_newline(end);
                for _ in 1..indents.len() {
                    self.push_at(Tok::Dedent, end);
                }
            }
        }
        self.push_at(Tok::Eof, end);
    }

    fn rest_is_line_continuation(&mut self) -> bool {
        let rest = &self.src[self.pos + 1..];
        let trimmed = rest.trim_start_matches([' ', '\t', '\r']);
        if trimmed.starts_with('\n') || trimmed.is_empty() {
            let skip = rest.len() - trimmed.len() + 1 + usize::from(trimmed.starts_with('\n'));
            self.pos += skip;
            true
        } else {
            false
        }
    }

    fn skip_comment(&mut self) {
        let len = self.src[self.pos..]
            .find('\n')
            .unwrap_or(self.src.len() - self.pos);
        self.pos += len;
    }

    /// Measures indentation at the start of a line in a block context and emits INDENT /
    /// DEDENT / NEWLINE as needed. Blank and comment-only lines do not count.
    fn line_start(&mut self) {
        let line_start = self.pos;
        let mut width = 0usize;
        let mut ambiguous_tab = None;
        for (i, c) in self.src[self.pos..].char_indices() {
            match c {
                ' ' => width += 1,
                '\t' => {
                    if !width.is_multiple_of(TAB_WIDTH) && ambiguous_tab.is_none() {
                        ambiguous_tab = Some(self.pos + i);
                    }
                    width = (width / TAB_WIDTH + 1) * TAB_WIDTH;
                }
                '\x0c' => width = 0,
                _ => {
                    self.pos += i;
                    break;
                }
            }
            if self.pos + i + c.len_utf8() == self.src.len() {
                self.pos = self.src.len();
            }
        }
        let rest = &self.src[self.pos..];
        if rest.is_empty()
            || rest.starts_with('\n')
            || rest.starts_with("\r\n")
            || rest.starts_with('#')
            || rest.starts_with("//")
        {
            return;
        }
        if let Some(at) = ambiguous_tab {
            let spaces = self.src[line_start..at]
                .chars()
                .rev()
                .take_while(|c| *c == ' ')
                .count();
            self.error(
                at,
                at + 1,
                "a tab after spaces makes this line's indentation ambiguous",
            )
            .hint = Some(format!(
                "a tab is {TAB_WIDTH} columns; after {spaces} space(s) it may be read differently: indent with tabs only or spaces only"
            ));
        }
        self.indent_to(width, line_start);
    }

    fn indent_to(&mut self, width: usize, line_start: usize) {
        let at = self.pos;
        loop {
            let Some(Context::Block { indents }) = self.contexts.last_mut() else {
                return;
            };
            let top = *indents.last().unwrap_or(&0);
            if width > top {
                if indents.len() >= MAX_NESTING {
                    self.error(at, at, "blocks are nested too deeply");
                    return;
                }
                indents.push(width);
                self.push_at(Tok::Indent, at);
                return;
            }
            if width == top {
                return;
            }
            // Dedent.
            if indents.len() == 1 {
                // Below the base of a lambda body: the body ends; back inside the parentheses.
                if self.contexts.len() > 1 {
                    self.contexts.pop();
                    return;
                }
                return;
            }
            indents.pop();
            let new_top = *indents.last().unwrap_or(&0);
            let base_is_lambda = indents.len() == 1 && self.contexts.len() > 1;
            self.push_at(Tok::Dedent, at);
            if width > new_top {
                let Some(Context::Block { indents }) = self.contexts.last() else {
                    return;
                };
                let levels: Vec<String> = indents.iter().map(|w| w.to_string()).collect();
                self.error(
                    line_start,
                    at.max(line_start + 1),
                    "unindent does not match any outer indentation level",
                )
                .hint = Some(format!(
                    "this line is indented {width} column(s); the enclosing blocks are at column(s) {}",
                    levels.join(", ")
                ));
                return;
            }
            if base_is_lambda && width <= new_top {
                // The lambda body is closed; the rest of the line continues the call.
                self.contexts.pop();
                return;
            }
        }
    }

    fn string(&mut self, quote: char) {
        let start = self.pos;
        self.pos += 1;
        let mut value = String::new();
        loop {
            let Some(c) = self.peek() else {
                self.error(start, self.pos, "unterminated string").hint =
                    Some(format!("close it with {quote}"));
                break;
            };
            if c == '\n' {
                self.error(start, self.pos, "unterminated string").hint = Some(format!(
                    "strings end on the line they start; close it with {quote}"
                ));
                break;
            }
            self.pos += c.len_utf8();
            if c == quote {
                break;
            }
            if c == '\\' {
                self.escape(&mut value);
            } else {
                value.push(c);
            }
        }
        self.push(Tok::Str(value), start);
    }

    fn escape(&mut self, out: &mut String) {
        let at = self.pos - 1;
        let Some(c) = self.peek() else { return };
        self.pos += c.len_utf8();
        match c {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            '0' => out.push('\0'),
            '\\' | '\'' | '"' => out.push(c),
            'x' => {
                let hex = self.src.get(self.pos..self.pos + 2).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) if b < 0x80 => {
                        out.push(b as char);
                        self.pos += 2;
                    }
                    _ => {
                        self.error(at, self.pos, "invalid `\\x` escape").hint =
                            Some("write two hex digits of an ASCII character, e.g. `\\x41`".into());
                    }
                }
            }
            _ => {
                self.error(at, self.pos, format!("unknown escape `\\{c}`"))
                    .hint = Some("known escapes: \\n \\t \\r \\0 \\\\ \\' \\\" \\xHH".into());
            }
        }
    }

    /// Whether the character before the cursor ends a value (a name, a number, a string, a
    /// `)`): `.1` there is someone reading a pair's element, not the number 0.1.
    fn follows_a_value(&self) -> bool {
        self.src[..self.pos]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | ')' | '\'' | '"'))
    }

    /// `p.0`, `p.1`: pairs have no element access. Reported once and skipped, so the parser
    /// does not report the float `0.1` it would otherwise see after a value.
    fn element_index(&mut self) {
        let start = self.pos;
        self.pos += 1;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        let text = &self.src[start..self.pos];
        self.error(
            start,
            self.pos,
            format!("`{text}` does not read an element: pairs have no element access"),
        )
        .hint = Some("unpack the pair into locals: `(a, b) = p`".into());
    }

    fn number(&mut self) {
        let start = self.pos;
        let bytes = self.src.as_bytes();
        let digits = |pos: &mut usize| {
            while *pos < bytes.len() && (bytes[*pos].is_ascii_digit() || bytes[*pos] == b'_') {
                *pos += 1;
            }
        };
        let mut pos = self.pos;
        digits(&mut pos);
        let mut is_float = false;
        if pos < bytes.len() && bytes[pos] == b'.' {
            is_float = true;
            pos += 1;
            digits(&mut pos);
        }
        if pos < bytes.len() && (bytes[pos] == b'e' || bytes[pos] == b'E') {
            let mut p = pos + 1;
            if p < bytes.len() && (bytes[p] == b'+' || bytes[p] == b'-') {
                p += 1;
            }
            if p < bytes.len() && bytes[p].is_ascii_digit() {
                is_float = true;
                pos = p;
                digits(&mut pos);
            }
        }
        self.pos = pos;
        let text: String = self.src[start..pos].chars().filter(|c| *c != '_').collect();
        if is_float {
            match text.parse::<f64>() {
                Ok(f) => self.push(Tok::Float(f), start),
                Err(_) => {
                    self.error(start, pos, "malformed number");
                    self.push(Tok::Float(0.0), start);
                }
            }
        } else {
            match text.parse::<u64>() {
                Ok(i) => self.push(Tok::Int(i), start),
                Err(_) => {
                    self.error(start, pos, "integer literal is too large").hint =
                        Some(format!("integers are 64-bit: at most {}", u64::MAX));
                    self.push(Tok::Int(0), start);
                }
            }
        }
        if self.peek().is_some_and(|c| c.is_alphabetic() || c == '_') {
            while self.peek().is_some_and(|c| c.is_alphanumeric() || c == '_') {
                self.pos += self.peek().map_or(1, char::len_utf8);
            }
            self.error(start, self.pos, "a name cannot start with a digit");
        }
    }

    fn name(&mut self) {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c.is_alphanumeric() || c == '_' {
                self.pos += c.len_utf8();
            } else {
                break;
            }
        }
        let text = &self.src[start..self.pos];
        let tok = keyword(text).unwrap_or_else(|| Tok::Name(text.to_owned()));
        self.push(tok, start);
    }

    fn punct(&mut self, c: char) {
        let start = self.pos;
        let two = self.src.get(self.pos..self.pos + 2).unwrap_or("");
        let (tok, len) = match two {
            "==" => (Some(Tok::EqEq), 2),
            "!=" => (Some(Tok::NotEq), 2),
            "<=" => (Some(Tok::Le), 2),
            ">=" => (Some(Tok::Ge), 2),
            "=>" => (Some(Tok::FatArrow), 2),
            "&&" | "||" => {
                let (word, tok) = if two == "&&" {
                    ("and", Tok::And)
                } else {
                    ("or", Tok::Or)
                };
                self.pos += 2;
                self.error(start, self.pos, format!("`{two}` is not an operator"))
                    .hint = Some(format!("write `{word}`"));
                // Read it as meant, so the parser does not report the rest of the line too.
                self.push(tok, start);
                return;
            }
            _ => match c {
                '(' => (Some(Tok::LParen), 1),
                ')' => (Some(Tok::RParen), 1),
                ',' => (Some(Tok::Comma), 1),
                ':' => (Some(Tok::Colon), 1),
                '=' => (Some(Tok::Assign), 1),
                '<' => (Some(Tok::Lt), 1),
                '>' => (Some(Tok::Gt), 1),
                '+' => (Some(Tok::Plus), 1),
                '-' => (Some(Tok::Minus), 1),
                '*' => (Some(Tok::Star), 1),
                '/' => (Some(Tok::Slash), 1),
                '%' => (Some(Tok::Percent), 1),
                '@' => (Some(Tok::At), 1),
                _ => (None, c.len_utf8()),
            },
        };
        self.pos += len;
        let Some(tok) = tok else {
            let hint = match c {
                '!' => Some("write `not` for negation"),
                // Met both as `v[i]` and as a list literal (a default, a `quantile` argument).
                '[' | ']' => Some(
                    "there are no list literals or brackets: read with `get(v, i)`, write with \
                     `set(v, i, x)`; a `Vec` parameter takes its list from the chain config \
                     (`deny: [a, b]`) and has no default",
                ),
                '{' | '}' | ';' => Some("blocks are by indentation: end the line with `:`"),
                _ => None,
            };
            // A run of the same character (a paste of invisible ones, say) is one mistake.
            let mut run = 1;
            while self.peek() == Some(c) {
                self.pos += c.len_utf8();
                run += 1;
            }
            // A character that shows as nothing (or that a terminal would act on) is named
            // by its code point.
            let shown = if c.is_control() || UnicodeWidthChar::width(c).unwrap_or(0) == 0 {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            };
            let message = match run {
                1 => format!("unexpected character `{shown}`"),
                n => format!("unexpected character `{shown}` ({n} in a row)"),
            };
            let d = self.error(start, self.pos, message);
            d.hint = hint.map(str::to_owned);
            return;
        };
        match tok {
            Tok::LParen => self.open_paren(start),
            Tok::RParen => self.close_paren(start),
            Tok::Colon => {
                self.push(Tok::Colon, start);
                if self.in_parens() && self.rest_of_line_is_blank() {
                    self.open_lambda_block();
                }
                return;
            }
            _ => {}
        }
        self.push(tok, start);
    }

    /// Whether the line starting here is a section header at column 1 (`req(…):`, `state:`).
    /// No continuation line of an expression looks like that.
    fn section_starts_here(&self) -> bool {
        let rest = &self.src[self.pos..];
        ["state", "init", "req", "resp"].iter().any(|kw| {
            rest.strip_prefix(kw)
                .is_some_and(|r| r.trim_start_matches(' ').starts_with(['(', ':']))
        })
    }

    /// A section header inside parentheses, or the end of the file: the outermost `(` was
    /// never closed. Report it and close everything, so the rest of the file lexes as it was
    /// written instead of as one long expression.
    fn close_unclosed_parens(&mut self, hint: &str) {
        if let Some(&at) = self.paren_opens.first() {
            self.error(at, at + 1, "this `(` is never closed").hint = Some(hint.into());
        }
        self.paren_opens.clear();
        // The line break goes where the unfinished statement ends, so the parser's own
        // complaint about it stays on that line.
        // The missing `)`s are supplied, so the parser sees the statement complete and does not
        // report the same mistake again.
        let end = self.last_end;
        while self.contexts.len() > 1 {
            match self.contexts.pop() {
                Some(Context::Block { indents }) => {
                    self.push_newline(end);
                    for _ in 1..indents.len() {
                        self.push_at(Tok::Dedent, end);
                    }
                }
                Some(Context::Parens { depth }) => {
                    for _ in 0..depth {
                        self.push_at(Tok::RParen, end);
                    }
                }
                None => {}
            }
        }
        self.push_newline(end);
    }

    fn open_paren(&mut self, at: usize) {
        self.paren_opens.push(at);
        match self.contexts.last_mut() {
            Some(Context::Parens { depth }) => *depth += 1,
            _ => {
                if self.contexts.len() >= MAX_NESTING {
                    // Too deep to be a program: stop treating newlines specially but keep going.
                    return;
                }
                self.contexts.push(Context::Parens { depth: 1 })
            }
        }
    }

    fn close_paren(&mut self, at: usize) {
        self.paren_opens.pop();
        // A `)` that ends a lambda body on the body's own last line closes the body first.
        while let Some(Context::Block { indents }) = self.contexts.last() {
            if self.contexts.len() == 1 {
                break;
            }
            let levels = indents.len();
            self.push_newline(at);
            for _ in 1..levels {
                self.push_at(Tok::Dedent, at);
            }
            self.contexts.pop();
        }
        if let Some(Context::Parens { depth }) = self.contexts.last_mut() {
            *depth -= 1;
            if *depth == 0 {
                self.contexts.pop();
            }
        }
    }

    fn rest_of_line_is_blank(&self) -> bool {
        let rest = &self.src[self.pos..];
        let line = rest.split('\n').next().unwrap_or("");
        let t = line.trim_start_matches([' ', '\t', '\r']);
        t.is_empty() || t.starts_with('#') || t.starts_with("//")
    }

    /// A lambda header ended the line inside parentheses: its body is an indented block,
    /// based at the indentation of the statement that holds it.
    fn open_lambda_block(&mut self) {
        let base = self
            .contexts
            .iter()
            .rev()
            .find_map(|c| match c {
                Context::Block { indents } => indents.last().copied(),
                Context::Parens { .. } => None,
            })
            .unwrap_or(0);
        if self.contexts.len() >= MAX_NESTING {
            return;
        }
        self.contexts.push(Context::Block {
            indents: vec![base],
        });
        self.push_at(Tok::Newline, self.pos);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(src: &str) -> Vec<Tok> {
        let (t, d) = lex(&SourceFile::new("t", src));
        assert!(d.is_empty(), "unexpected diagnostics: {d:?}");
        t.into_iter().map(|t| t.tok).collect()
    }

    fn name(s: &str) -> Tok {
        Tok::Name(s.into())
    }

    /// A file saved with a UTF-8 byte-order mark lexes as the same file without it, with the
    /// same spans (so carets and columns point where the user looks).
    #[test]
    fn a_byte_order_mark_is_not_part_of_the_program() {
        let src = "a:\n    b = $\n";
        let (with, with_diags) = lex(&SourceFile::new("t", format!("\u{feff}{src}")));
        let (without, without_diags) = lex(&SourceFile::new("t", src));
        assert!(!without_diags.is_empty(), "`$` is an error in both");
        assert_eq!(with_diags, without_diags);
        let spans = |t: &[Token]| {
            t.iter()
                .map(|t| (t.tok.clone(), t.span))
                .collect::<Vec<_>>()
        };
        assert_eq!(spans(&with), spans(&without));
    }

    #[test]
    fn indentation_produces_indent_and_dedent() {
        use Tok::*;
        assert_eq!(
            toks("a:\n    b\n    c\nd\n"),
            vec![
                name("a"),
                Colon,
                Newline,
                Indent,
                name("b"),
                Newline,
                name("c"),
                Newline,
                Dedent,
                name("d"),
                Newline,
                Eof
            ]
        );
    }

    #[test]
    fn a_tab_is_four_columns_so_appnet_mixed_files_agree() {
        // AppNet files mix a tab and four spaces at the same level.
        let t = toks("state:\n\tx: int\n    y: int\n");
        assert_eq!(t.iter().filter(|t| **t == Tok::Indent).count(), 1);
        assert_eq!(t.iter().filter(|t| **t == Tok::Dedent).count(), 1);
    }

    #[test]
    fn ambiguous_tab_after_spaces_is_an_error() {
        let (_, d) = lex(&SourceFile::new("t", "a:\n  \tb\n"));
        assert_eq!(d.len(), 1);
        assert!(d[0].message.contains("ambiguous"));
    }

    #[test]
    fn bad_dedent_is_reported_with_levels() {
        let (_, d) = lex(&SourceFile::new("t", "a:\n    b\n  c\n"));
        assert_eq!(d.len(), 1);
        assert!(d[0].hint.as_deref().unwrap().contains("column(s) 0"));
    }

    #[test]
    fn newlines_inside_parentheses_are_ignored() {
        use Tok::*;
        assert_eq!(
            toks("f(a,\n      b)\n"),
            vec![
                name("f"),
                LParen,
                name("a"),
                Comma,
                name("b"),
                RParen,
                Newline,
                Eof
            ]
        );
    }

    #[test]
    fn lambda_body_inside_parentheses_is_a_block() {
        use Tok::*;
        let src = "    foreach(v, lambda(x):\n        pass\n    )\n";
        assert_eq!(
            toks(src),
            vec![
                Indent,
                name("foreach"),
                LParen,
                name("v"),
                Comma,
                Lambda,
                LParen,
                name("x"),
                RParen,
                Colon,
                Newline,
                Indent,
                Pass,
                Newline,
                Dedent,
                RParen,
                Newline,
                Dedent,
                Eof
            ]
        );
    }

    #[test]
    fn numbers_strings_and_comments() {
        use Tok::*;
        assert_eq!(
            toks("x = 1_000 + 0.5 + 1e3 + .25 # c\ny = 'a\\'b' // old comment\n"),
            vec![
                name("x"),
                Assign,
                Int(1000),
                Plus,
                Float(0.5),
                Plus,
                Float(1000.0),
                Plus,
                Float(0.25),
                Newline,
                name("y"),
                Assign,
                Str("a'b".into()),
                Newline,
                Eof
            ]
        );
    }

    #[test]
    fn operators_and_helpful_errors() {
        use Tok::*;
        assert_eq!(
            toks("a <= b => c != d"),
            vec![
                name("a"),
                Le,
                name("b"),
                FatArrow,
                name("c"),
                NotEq,
                name("d"),
                Newline,
                Eof
            ]
        );
        let (_, d) = lex(&SourceFile::new("t", "a && b\n"));
        assert_eq!(d[0].hint.as_deref(), Some("write `and`"));
    }

    #[test]
    fn a_section_header_closes_parentheses_left_open() {
        // The outermost `(` is reported, and the next section lexes as a section: every block
        // opened before its header is closed before it.
        for (src, open_at) in [
            ("init():\n    x = f(a,\n  b\nreq(rpc):\n    pass\n", 17),
            (
                "req(rpc):\n    foreach(v, lambda(x):\n        pass\nresp(rpc):\n    pass\n",
                21,
            ),
        ] {
            let (t, d) = lex(&SourceFile::new("t", src));
            assert_eq!(d.len(), 1, "{src:?}: {d:?}");
            assert_eq!(d[0].message, "this `(` is never closed");
            assert_eq!(d[0].span, Span::new(open_at, open_at + 1), "{src:?}");
            let header = t
                .iter()
                .rposition(|t| matches!(&t.tok, Tok::Name(n) if n == "req" || n == "resp"))
                .unwrap();
            let before = &t[..header];
            let count = |k: Tok| before.iter().filter(|t| t.tok == k).count();
            assert_eq!(count(Tok::Indent), count(Tok::Dedent), "{src:?}: {t:?}");
            assert_eq!(count(Tok::LParen), count(Tok::RParen), "{src:?}: {t:?}");
            assert_eq!(before.last().map(|t| &t.tok), Some(&Tok::Dedent));
        }
    }

    #[test]
    fn unterminated_string_is_reported() {
        let (_, d) = lex(&SourceFile::new("t", "x = 'abc\ny = 1\n"));
        assert_eq!(d.len(), 1);
        assert!(d[0].message.contains("unterminated"));
    }
}
