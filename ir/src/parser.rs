//! Recursive-descent parser with real operator precedence and error recovery.
//!
//! After an error the parser skips to the end of the statement and goes on, so one run
//! reports several mistakes. Precedence, lowest first: `or`, `and`, `not`, comparisons
//! (non-associative), `+ -`, `* / %`, unary `-`.

use std::collections::HashMap;

use crate::ast::*;
use crate::diag::{Diagnostic, SourceFile, Span};
use crate::lexer::{MAX_NESTING, Tok, Token, lex};

/// Parses an element file. The tree is returned even when there are errors, so the checker
/// can report more of them; callers must not run a file with error diagnostics.
pub fn parse(file: &SourceFile) -> (ElementFile, Vec<Diagnostic>) {
    let (tokens, mut diags) = lex(file);
    let mut p = Parser {
        tokens,
        pos: 0,
        diags: Vec::new(),
        depth: 0,
    };
    let element = p.element_file();
    let parsed = drop_follow_ons(file, &diags, p.diags);
    diags.extend(parsed);
    (element, diags)
}

/// Parses one expression (for tests and tools).
pub fn parse_expr(file: &SourceFile) -> (Expr, Vec<Diagnostic>) {
    let (tokens, mut diags) = lex(file);
    let mut p = Parser {
        tokens,
        pos: 0,
        diags: Vec::new(),
        depth: 0,
    };
    let e = p.expr();
    if !matches!(p.peek(), Tok::Newline | Tok::Eof) {
        p.error_here(format!(
            "unexpected {} after the expression",
            p.peek().describe()
        ));
    }
    let parsed = drop_follow_ons(file, &diags, p.diags);
    diags.extend(parsed);
    (e, diags)
}

/// A lexer error garbles the rest of its line (an unterminated string swallows the `:` after
/// it), so parser errors later on that line are its consequences, not new mistakes.
fn drop_follow_ons(
    file: &SourceFile,
    lexed: &[Diagnostic],
    parsed: Vec<Diagnostic>,
) -> Vec<Diagnostic> {
    // Per line, where its first lexer error starts. Lines by binary search, never by
    // counting characters: a long garbled line has an error per token.
    let mut garbled: HashMap<usize, u32> = HashMap::new();
    for d in lexed.iter().filter(|d| d.is_error()) {
        let first = garbled
            .entry(file.line_of(d.span.start))
            .or_insert(u32::MAX);
        *first = (*first).min(d.span.start);
    }
    parsed
        .into_iter()
        .filter(|d| {
            garbled
                .get(&file.line_of(d.span.start))
                .is_none_or(|&start| start > d.span.start)
        })
        .collect()
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    diags: Vec<Diagnostic>,
    depth: usize,
}

/// Marker error: the problem is already in `diags`; the caller recovers.
struct Reported;

type PResult<T> = Result<T, Reported>;

const SECTIONS: [&str; 4] = ["state", "init", "req", "resp"];

impl Parser {
    fn peek(&self) -> &Tok {
        &self.tokens[self.pos.min(self.tokens.len() - 1)].tok
    }

    fn peek_at(&self, n: usize) -> &Tok {
        &self.tokens[(self.pos + n).min(self.tokens.len() - 1)].tok
    }

    fn span(&self) -> Span {
        self.tokens[self.pos.min(self.tokens.len() - 1)].span
    }

    fn prev_span(&self) -> Span {
        self.tokens[self.pos.saturating_sub(1).min(self.tokens.len() - 1)].span
    }

    fn bump(&mut self) -> Token {
        let t = self.tokens[self.pos.min(self.tokens.len() - 1)].clone();
        if self.pos < self.tokens.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn at(&self, t: &Tok) -> bool {
        self.peek() == t
    }

    fn eat(&mut self, t: &Tok) -> bool {
        if self.at(t) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn error_here(&mut self, msg: impl Into<String>) -> &mut Diagnostic {
        let span = self.span();
        self.diags.push(Diagnostic::error(span, msg));
        let last = self.diags.len() - 1;
        &mut self.diags[last]
    }

    fn expect(&mut self, t: &Tok, what: &str) -> PResult<Span> {
        if self.at(t) {
            return Ok(self.bump().span);
        }
        let found = self.peek().describe();
        self.error_here(format!("expected {what}, found {found}"));
        Err(Reported)
    }

    /// The `:` that ends an `if`/`elif` condition. A `=` there is an assignment written for
    /// a comparison, which the expression grammar stops at.
    fn expect_condition_colon(&mut self) -> PResult<Span> {
        if self.at(&Tok::Assign) {
            self.error_here("expected `:` after the condition, found `=`")
                .hint = Some("compare with `==`; `=` assigns, as a statement of its own".into());
            return Err(Reported);
        }
        self.expect(&Tok::Colon, "`:` after the condition")
    }

    fn ident(&mut self, what: &str) -> PResult<Ident> {
        if let Tok::Name(n) = self.peek() {
            let name = n.clone();
            let span = self.bump().span;
            return Ok(Ident { name, span });
        }
        let found = self.peek().describe();
        let d = self.error_here(format!("expected {what}, found {found}"));
        if is_keyword(&found) {
            d.hint = Some(format!("{found} is a keyword and cannot be used as a name"));
        }
        Err(Reported)
    }

    /// Skips to the end of the current statement (after its NEWLINE), stepping over any
    /// nested block, without crossing the end of the enclosing block.
    fn recover_statement(&mut self) {
        let mut nested = 0usize;
        loop {
            match self.peek() {
                Tok::Eof => return,
                Tok::Indent => nested += 1,
                Tok::Dedent => {
                    if nested == 0 {
                        return;
                    }
                    nested -= 1;
                    if nested == 0 {
                        self.bump();
                        return;
                    }
                }
                Tok::Newline if nested == 0 => {
                    self.bump();
                    if !self.at(&Tok::Indent) {
                        return;
                    }
                    continue;
                }
                _ => {}
            }
            self.bump();
        }
    }

    fn skip_newlines(&mut self) {
        while self.eat(&Tok::Newline) {}
    }

    // ---- sections ------------------------------------------------------------------

    fn element_file(&mut self) -> ElementFile {
        let mut file = ElementFile::default();
        let mut next = 0usize; // index into SECTIONS of the section expected next
        // Sections whose header was misspelt (and reported with a suggestion) or did not parse:
        // not "missing".
        let mut misspelt: Vec<&str> = Vec::new();
        loop {
            self.skip_newlines();
            while self.at(&Tok::Indent) || self.at(&Tok::Dedent) {
                if self.at(&Tok::Indent) {
                    self.error_here("unexpected indentation").hint =
                        Some("sections (`state:`, `init(…):`, `req(rpc):`, `resp(rpc):`) start at column 1".into());
                    self.bump();
                    self.recover_statement();
                } else {
                    self.bump();
                }
                self.skip_newlines();
            }
            if self.at(&Tok::Eof) {
                break;
            }
            let section = match self.peek() {
                Tok::Name(n) => SECTIONS.iter().position(|s| s == n),
                _ => None,
            };
            let Some(idx) = section else {
                let found = self.peek().describe();
                let suggestion = match self.peek() {
                    Tok::Name(n) => crate::diag::did_you_mean(n, SECTIONS),
                    _ => None,
                };
                if let Some(s) = &suggestion {
                    misspelt.extend(
                        SECTIONS
                            .iter()
                            .filter(|n| *s == format!("did you mean `{n}`?")),
                    );
                }
                let hint = suggestion.unwrap_or_else(|| {
                    "an element has four sections, in order: `state:`, `init(…):`, `req(rpc):`, `resp(rpc):`".into()
                });
                self.error_here(format!("expected a section, found {found}"))
                    .hint = Some(hint);
                self.bump();
                self.recover_statement();
                continue;
            };
            let already = match idx {
                0 => file.state.is_some(),
                1 => file.init.is_some(),
                2 => file.req.is_some(),
                _ => file.resp.is_some(),
            };
            if already {
                self.error_here(format!("section `{}` appears twice", SECTIONS[idx]))
                    .hint = Some("merge the two into one section".into());
            } else if idx < next {
                self.error_here(format!(
                    "section `{}` must come before `{}`",
                    SECTIONS[idx],
                    SECTIONS[next - 1]
                ))
                .hint = Some("the sections are, in order: state, init, req, resp".into());
            }
            next = next.max(idx + 1);
            let parsed = match idx {
                0 => self.state_section().map(|s| file.state = Some(s)),
                1 => self.init_section().map(|s| file.init = Some(s)),
                2 => self.handler("req").map(|h| file.req = Some(h)),
                _ => self.handler("resp").map(|h| file.resp = Some(h)),
            };
            if parsed.is_err() {
                // Reported where its header went wrong; "missing section" would be false.
                misspelt.push(SECTIONS[idx]);
                self.recover_statement();
            }
        }
        let eof = self.span();
        let none_at_all = file.state.is_none()
            && file.init.is_none()
            && file.req.is_none()
            && file.resp.is_none()
            && misspelt.is_empty()
            && self.diags.is_empty();
        if none_at_all {
            // A new, empty file: one error with the whole skeleton, not four at one caret.
            self.diags.push(
                Diagnostic::error(
                    eof,
                    "no sections: an element has the sections state, init, req and resp, in that order",
                )
                .with_hint(
                    "start from `state: pass`, `init(): pass`, `req(rpc): send(rpc, Down)`, `resp(rpc): send(rpc, Up)`, each header on its own line with its body indented under it",
                ),
            );
            return file;
        }
        for (i, name) in SECTIONS.iter().enumerate() {
            let missing = match i {
                0 => file.state.is_none(),
                1 => file.init.is_none(),
                2 => file.req.is_none(),
                _ => file.resp.is_none(),
            };
            if missing && !misspelt.contains(name) {
                let example = match i {
                    0 => "state:\n    pass",
                    1 => "init():\n    pass",
                    2 => "req(rpc):\n    send(rpc, Down)",
                    _ => "resp(rpc):\n    send(rpc, Up)",
                };
                self.diags.push(
                    Diagnostic::error(eof, format!("missing section `{name}`")).with_hint(
                        format!(
                            "every element has the sections state, init, req and resp, in that order; for example `{}`",
                            example.replace('\n', " ").replace("    ", "")
                        ),
                    ),
                );
            }
        }
        file
    }

    fn state_section(&mut self) -> PResult<StateSection> {
        let start = self.bump().span;
        self.expect(&Tok::Colon, "`:` after `state`")?;
        self.expect(&Tok::Newline, "a new line after `state:`")?;
        let mut decls = Vec::new();
        if !self.eat(&Tok::Indent) {
            let found = self.peek().describe();
            self.error_here(format!(
                "expected the indented state declarations, found {found}"
            ))
            .hint = Some("declare state indented under `state:`, or write `pass`".into());
            return Err(Reported);
        }
        let mut pending: Vec<Decorator> = Vec::new();
        while !self.at(&Tok::Dedent) && !self.at(&Tok::Eof) {
            if self.eat(&Tok::Newline) {
                continue;
            }
            if self.eat(&Tok::Pass) {
                let _ = self.expect(&Tok::Newline, "end of line after `pass`");
                continue;
            }
            match self.state_line(&mut pending) {
                Ok(Some(d)) => decls.push(d),
                Ok(None) => {}
                Err(Reported) => self.recover_statement(),
            }
        }
        if let Some(d) = pending.first() {
            self.diags.push(
                Diagnostic::error(d.span, "decorator is not followed by a state declaration")
                    .with_hint("put the declaration it applies to on the next line"),
            );
        }
        let end = self.prev_span();
        self.eat(&Tok::Dedent);
        Ok(StateSection {
            decls,
            span: start.to(end),
        })
    }

    /// One line in `state:` — decorators, a declaration, or both.
    fn state_line(&mut self, pending: &mut Vec<Decorator>) -> PResult<Option<StateDecl>> {
        while self.at(&Tok::At) {
            let at = self.bump().span;
            let name = self.ident("a decorator name")?;
            self.expect(&Tok::LParen, "`(`")?;
            let arg = match self.peek().clone() {
                Tok::Name(n) => Ident {
                    name: n,
                    span: self.bump().span,
                },
                Tok::True => Ident {
                    name: "true".into(),
                    span: self.bump().span,
                },
                Tok::False => Ident {
                    name: "false".into(),
                    span: self.bump().span,
                },
                // `@capacity(1000)`: kept as its digits, as the printer writes it back.
                Tok::Int(n) => Ident {
                    name: n.to_string(),
                    span: self.bump().span,
                },
                other => {
                    self.error_here(format!(
                        "expected a decorator argument, found {}",
                        other.describe()
                    ));
                    return Err(Reported);
                }
            };
            let end = self.expect(&Tok::RParen, "`)`")?;
            pending.push(Decorator {
                name,
                arg,
                span: at.to(end),
            });
        }
        if self.eat(&Tok::Newline) {
            return Ok(None);
        }
        let name = self.ident("a state variable name")?;
        if !self.at(&Tok::Colon) {
            let found = self.peek().describe();
            self.error_here(format!(
                "expected `:` and a type after `{}`, found {found}",
                name.name
            ))
            .hint = Some(format!(
                "declare state as `{}: int` (AppNet's `shared` is written `@consistency(strong)`)",
                name.name
            ));
            return Err(Reported);
        }
        self.bump();
        let ty = self.type_expr()?;
        let span = name.span.to(ty.span());
        self.expect(&Tok::Newline, "end of line after the declaration")?;
        Ok(Some(StateDecl {
            decorators: std::mem::take(pending),
            name,
            ty,
            span,
        }))
    }

    fn type_expr(&mut self) -> PResult<TypeExpr> {
        self.nest()?;
        let r = self.type_expr_inner();
        self.depth -= 1;
        r
    }

    fn type_expr_inner(&mut self) -> PResult<TypeExpr> {
        if self.at(&Tok::Lt) || self.at(&Tok::LParen) {
            let open = self.bump();
            let close = if open.tok == Tok::Lt {
                Tok::Gt
            } else {
                Tok::RParen
            };
            let a = self.type_expr()?;
            self.expect(&Tok::Comma, "`,` between the two types of a pair")?;
            let b = self.type_expr()?;
            let end = self.expect(&close, if close == Tok::Gt { "`>`" } else { "`)`" })?;
            return Ok(TypeExpr::Pair(Box::new(a), Box::new(b), open.span.to(end)));
        }
        let name = self.ident("a type")?;
        if !self.eat(&Tok::Lt) {
            return Ok(TypeExpr::Named(name));
        }
        let mut args = vec![self.type_expr()?];
        while self.eat(&Tok::Comma) {
            args.push(self.type_expr()?);
        }
        let end = self.expect(&Tok::Gt, "`>` to close the type arguments")?;
        let span = name.span.to(end);
        Ok(TypeExpr::Generic { name, args, span })
    }

    fn init_section(&mut self) -> PResult<InitSection> {
        let start = self.bump().span;
        let mut params = Vec::new();
        if self.eat(&Tok::LParen) {
            while !self.at(&Tok::RParen) {
                let name = self.ident("a parameter name")?;
                let ty = if self.eat(&Tok::Colon) {
                    Some(self.type_expr()?)
                } else {
                    None
                };
                let default = if self.eat(&Tok::Assign) {
                    Some(self.expr_checked()?)
                } else {
                    None
                };
                let end = self.prev_span();
                params.push(Param {
                    span: name.span.to(end),
                    name,
                    ty,
                    default,
                });
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
            self.expect(&Tok::RParen, "`)` after the parameters")?;
        }
        let header = start.to(self.prev_span());
        self.expect(&Tok::Colon, "`:` after `init(…)`")?;
        let body = self.block()?;
        Ok(InitSection {
            params,
            body,
            span: header,
        })
    }

    fn handler(&mut self, which: &str) -> PResult<Handler> {
        let start = self.bump().span;
        let param = if self.eat(&Tok::LParen) {
            let p = self.ident("the message parameter name")?;
            self.expect(&Tok::RParen, "`)`")?;
            p
        } else {
            self.error_here(format!("expected `(rpc)` after `{which}`"))
                .hint = Some(format!(
                "write `{which}(rpc):`; `rpc` names the message in the handler"
            ));
            return Err(Reported);
        };
        let header = start.to(self.prev_span());
        self.expect(&Tok::Colon, &format!("`:` after `{which}(…)`"))?;
        let body = self.block()?;
        Ok(Handler {
            param,
            body,
            span: header,
        })
    }

    // ---- statements ----------------------------------------------------------------

    fn nest(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            self.depth -= 1;
            self.error_here("nested too deeply").hint = Some(format!(
                "at most {MAX_NESTING} levels of blocks and expressions"
            ));
            return Err(Reported);
        }
        Ok(())
    }

    /// After a `:` or `=>`: an indented block on the following lines, or one simple
    /// statement on the same line.
    fn block(&mut self) -> PResult<Block> {
        self.nest()?;
        let r = self.block_inner();
        self.depth -= 1;
        r
    }

    fn block_inner(&mut self) -> PResult<Block> {
        if !self.at(&Tok::Newline) {
            let stmt = self.simple_statement()?;
            let span = stmt.span;
            if !matches!(self.peek(), Tok::RParen | Tok::Comma) {
                self.expect(&Tok::Newline, "end of line")?;
            }
            return Ok(Block {
                stmts: vec![stmt],
                span,
            });
        }
        self.bump();
        if !self.eat(&Tok::Indent) {
            let found = self.peek().describe();
            self.error_here(format!("expected an indented block, found {found}"))
                .hint =
                Some("indent the lines of the block further than the line that opens it".into());
            return Err(Reported);
        }
        let start = self.span();
        let mut stmts = Vec::new();
        while !self.at(&Tok::Dedent) && !self.at(&Tok::Eof) {
            if self.eat(&Tok::Newline) {
                continue;
            }
            match self.statement() {
                Ok(s) => stmts.push(s),
                Err(Reported) => self.recover_statement(),
            }
        }
        let end = self.prev_span();
        self.eat(&Tok::Dedent);
        Ok(Block {
            stmts,
            span: start.to(end),
        })
    }

    fn statement(&mut self) -> PResult<Stmt> {
        match self.peek() {
            Tok::Match => self.match_statement(),
            // Python's "unexpected indent": the expression parser would otherwise report an
            // expression it expected, which says nothing about the spaces that are wrong.
            Tok::Indent => {
                self.error_here("unexpected indentation: the line before does not open a block")
                    .hint = Some(
                    "indent this line as the one before it, or end that line with `:` to open a block under it".into(),
                );
                Err(Reported)
            }
            Tok::If => self.if_statement(),
            Tok::Elif | Tok::Else => {
                let kw = self.peek().describe();
                self.error_here(format!("{kw} without a preceding `if`"))
                    .hint =
                    Some("`elif`/`else` must follow an `if` block at the same indentation".into());
                Err(Reported)
            }
            _ => {
                let s = self.simple_statement()?;
                self.expect(&Tok::Newline, "end of line")?;
                Ok(s)
            }
        }
    }

    fn simple_statement(&mut self) -> PResult<Stmt> {
        let start = self.span();
        match self.peek() {
            Tok::Pass => {
                self.bump();
                return Ok(Stmt {
                    kind: StmtKind::Pass,
                    span: start,
                });
            }
            Tok::Return => {
                self.bump();
                let value = if matches!(self.peek(), Tok::Newline | Tok::RParen | Tok::Comma) {
                    None
                } else {
                    Some(self.expr_checked()?)
                };
                let span = start.to(self.prev_span());
                return Ok(Stmt {
                    kind: StmtKind::Return(value),
                    span,
                });
            }
            Tok::Match | Tok::If => {
                self.error_here("`match` and `if` need their own indented block here")
                    .hint =
                    Some("put the `match`/`if` on its own line inside an indented block".into());
                return Err(Reported);
            }
            _ => {}
        }
        let e = self.expr_checked()?;
        if !self.eat(&Tok::Assign) {
            let span = e.span;
            return Ok(Stmt {
                kind: StmtKind::Expr(e),
                span,
            });
        }
        let target = match e.kind {
            ExprKind::Name(name) => AssignTarget::Name(Ident { name, span: e.span }),
            ExprKind::Pair(a, b) => match (a.kind, b.kind) {
                (ExprKind::Name(x), ExprKind::Name(y)) => AssignTarget::Pair(
                    Ident {
                        name: x,
                        span: a.span,
                    },
                    Ident {
                        name: y,
                        span: b.span,
                    },
                ),
                _ => {
                    self.diags.push(
                        Diagnostic::error(e.span, "only names can be assigned in a pair")
                            .with_hint("write `(a, b) = pair`"),
                    );
                    return Err(Reported);
                }
            },
            ExprKind::Call { func, .. } if func.name == "get" => {
                self.diags.push(
                    Diagnostic::error(e.span, "cannot assign to `get(…)`").with_hint(
                        "write with `set(map, key, value)` or `set(rpc, 'field', value)`",
                    ),
                );
                return Err(Reported);
            }
            _ => {
                self.diags.push(
                    Diagnostic::error(e.span, "cannot assign to this expression")
                        .with_hint("the left of `=` is a name or a pair of names `(a, b)`"),
                );
                return Err(Reported);
            }
        };
        let value = self.expr_checked()?;
        let span = start.to(value.span);
        Ok(Stmt {
            kind: StmtKind::Assign { target, value },
            span,
        })
    }

    fn match_statement(&mut self) -> PResult<Stmt> {
        let start = self.bump().span;
        let scrutinee = self.expr_checked()?;
        self.expect(&Tok::Colon, "`:` after the matched expression")?;
        self.expect(&Tok::Newline, "a new line after `match …:`")?;
        if !self.eat(&Tok::Indent) {
            let found = self.peek().describe();
            self.error_here(format!("expected indented match arms, found {found}"))
                .hint = Some("write arms like `true =>` indented under the `match`".into());
            return Err(Reported);
        }
        self.nest()?;
        let mut arms = Vec::new();
        while !self.at(&Tok::Dedent) && !self.at(&Tok::Eof) {
            if self.eat(&Tok::Newline) {
                continue;
            }
            match self.arm() {
                Ok(a) => arms.push(a),
                Err(Reported) => self.recover_statement(),
            }
        }
        self.depth -= 1;
        let end = self.prev_span();
        self.eat(&Tok::Dedent);
        Ok(Stmt {
            kind: StmtKind::Match { scrutinee, arms },
            span: start.to(end),
        })
    }

    fn arm(&mut self) -> PResult<Arm> {
        let pattern = self.pattern()?;
        if !self.eat(&Tok::FatArrow) {
            let found = self.peek().describe();
            let colon = self.at(&Tok::Colon);
            let d = self.error_here(format!("expected `=>` after the pattern, found {found}"));
            if colon {
                d.hint = Some("match arms are written `pattern =>`".into());
            }
            return Err(Reported);
        }
        let body = self.block()?;
        let span = pattern.span.to(body.span);
        Ok(Arm {
            pattern,
            body,
            span,
        })
    }

    fn pattern(&mut self) -> PResult<Pattern> {
        let start = self.span();
        let kind = match self.peek().clone() {
            Tok::Star => {
                self.bump();
                PatternKind::Wildcard
            }
            Tok::Name(n) if n == "_" => {
                self.bump();
                PatternKind::Wildcard
            }
            Tok::Name(n) if n == "None" => {
                self.bump();
                PatternKind::None
            }
            Tok::Name(n) if n == "Some" => {
                self.bump();
                self.expect(&Tok::LParen, "`(` after `Some`")?;
                let binding = self.ident("a name to bind")?;
                self.expect(&Tok::RParen, "`)`")?;
                PatternKind::Some((binding.name != "_").then_some(binding))
            }
            Tok::True => {
                self.bump();
                PatternKind::Lit(Lit::Bool(true))
            }
            Tok::False => {
                self.bump();
                PatternKind::Lit(Lit::Bool(false))
            }
            Tok::Str(s) => {
                self.bump();
                PatternKind::Lit(Lit::Str(s))
            }
            Tok::Int(i) => {
                self.bump();
                PatternKind::Lit(Lit::Int(i as i128))
            }
            Tok::Float(f) => {
                self.bump();
                PatternKind::Lit(Lit::Float(f))
            }
            Tok::Minus => {
                self.bump();
                match self.peek().clone() {
                    Tok::Int(i) => {
                        self.bump();
                        PatternKind::Lit(Lit::Int(-(i as i128)))
                    }
                    Tok::Float(f) => {
                        self.bump();
                        PatternKind::Lit(Lit::Float(-f))
                    }
                    other => {
                        self.error_here(format!(
                            "expected a number after `-`, found {}",
                            other.describe()
                        ));
                        return Err(Reported);
                    }
                }
            }
            other => {
                let d = self.error_here(format!("expected a pattern, found {}", other.describe()));
                d.hint = Some(match other {
                    Tok::Name(_) => "patterns are literals, `Some(x)`, `None` or `_`; to compare with a variable, match on `x == y`".into(),
                    _ => "patterns are literals (`true`, `'text'`, `3`), `Some(x)`, `None` or `_`".into(),
                });
                return Err(Reported);
            }
        };
        Ok(Pattern {
            kind,
            span: start.to(self.prev_span()),
        })
    }

    fn if_statement(&mut self) -> PResult<Stmt> {
        let start = self.bump().span;
        let mut branches = Vec::new();
        let cond = self.condition();
        self.expect_condition_colon()?;
        branches.push((cond, self.block()?));
        let mut otherwise = None;
        loop {
            // `elif`/`else` continue the statement only at the same indentation, i.e. right
            // after the block's DEDENT-free end.
            if self.at(&Tok::Elif) {
                // The checker turns each `elif` into an `else` holding an `if`: one level more.
                if self.depth + branches.len() >= MAX_NESTING {
                    self.error_here("too many `elif` branches").hint = Some(format!(
                        "at most {MAX_NESTING} levels of blocks and expressions; use `match`"
                    ));
                    return Err(Reported);
                }
                self.bump();
                let cond = self.condition();
                self.expect_condition_colon()?;
                branches.push((cond, self.block()?));
            } else if self.at(&Tok::Else) {
                self.bump();
                if self.at(&Tok::If) {
                    self.error_here("expected `:` after `else`, found `if`")
                        .hint = Some("write `elif` for another condition".into());
                    return Err(Reported);
                }
                self.expect(&Tok::Colon, "`:` after `else`")?;
                otherwise = Some(self.block()?);
                break;
            } else {
                break;
            }
        }
        let end = self.prev_span();
        Ok(Stmt {
            kind: StmtKind::If {
                branches,
                otherwise,
            },
            span: start.to(end),
        })
    }

    /// An `if`/`elif` condition. A malformed one (already reported) becomes an error node
    /// but does not abandon the statement: skipping it would leave its `elif`/`else` behind,
    /// to be reported again as "without a preceding `if`".
    fn condition(&mut self) -> Expr {
        let before = self.diags.len();
        let e = self.expr();
        if self.diags.len() > before {
            return Expr {
                kind: ExprKind::Error,
                span: e.span,
            };
        }
        e
    }

    // ---- expressions ---------------------------------------------------------------

    fn expr_checked(&mut self) -> PResult<Expr> {
        let before = self.diags.len();
        let e = self.expr();
        if self.diags.len() > before {
            Err(Reported)
        } else {
            Ok(e)
        }
    }

    fn expr(&mut self) -> Expr {
        self.binary(1)
    }

    /// Precedence climbing over binary operators at or above `min`.
    fn binary(&mut self, min: u8) -> Expr {
        if self.nest().is_err() {
            return Expr {
                kind: ExprKind::Error,
                span: self.span(),
            };
        }
        let mut lhs = if min <= crate::ast::NOT_PRECEDENCE && self.at(&Tok::Not) {
            let start = self.bump().span;
            let operand = self.binary(crate::ast::NOT_PRECEDENCE);
            let span = start.to(operand.span);
            Expr {
                kind: ExprKind::Unary {
                    op: UnOp::Not,
                    operand: Box::new(operand),
                },
                span,
            }
        } else {
            self.unary()
        };
        // Each operator of a chain (`a + b + c …`) adds a level to the tree every later pass
        // walks recursively, as a parenthesis does: a chain counts towards the same limit.
        let mut chain = 0;
        while let Some(op) = binop(self.peek()) {
            let prec = op.precedence();
            if prec < min {
                break;
            }
            chain += 1;
            if self.depth + chain > MAX_NESTING {
                self.error_here("too many operators in a row").hint = Some(format!(
                    "at most {MAX_NESTING} levels of blocks and expressions; compute parts into locals"
                ));
                self.depth -= 1;
                return Expr {
                    kind: ExprKind::Error,
                    span: lhs.span,
                };
            }
            let op_span = self.bump().span;
            let rhs = self.binary(prec + 1);
            if op.is_comparison()
                && let Some(next) = binop(self.peek())
                && next.is_comparison()
            {
                let span = self.span();
                self.diags.push(
                    Diagnostic::error(
                        span,
                        format!(
                            "comparisons cannot be chained: `{}` after `{}`",
                            next.symbol(),
                            op.symbol()
                        ),
                    )
                    .with_hint("write `a < b and b < c`"),
                );
            }
            let span = lhs.span.to(rhs.span);
            let _ = op_span;
            lhs = Expr {
                kind: ExprKind::Binary {
                    op,
                    lhs: Box::new(lhs),
                    rhs: Box::new(rhs),
                },
                span,
            };
        }
        self.depth -= 1;
        lhs
    }

    fn unary(&mut self) -> Expr {
        if self.at(&Tok::Minus) {
            let start = self.bump().span;
            // Fold the sign into a literal so `-9223372036854775808` is representable.
            match self.peek().clone() {
                Tok::Int(i) if !matches!(self.peek_at(1), Tok::Name(_) | Tok::LParen) => {
                    let end = self.bump().span;
                    return Expr {
                        kind: ExprKind::Lit(Lit::Int(-(i as i128))),
                        span: start.to(end),
                    };
                }
                Tok::Float(f) => {
                    let end = self.bump().span;
                    return Expr {
                        kind: ExprKind::Lit(Lit::Float(-f)),
                        span: start.to(end),
                    };
                }
                _ => {}
            }
            if self.nest().is_err() {
                return Expr {
                    kind: ExprKind::Error,
                    span: start,
                };
            }
            let operand = self.unary();
            self.depth -= 1;
            let span = start.to(operand.span);
            return Expr {
                kind: ExprKind::Unary {
                    op: UnOp::Neg,
                    operand: Box::new(operand),
                },
                span,
            };
        }
        self.primary()
    }

    fn primary(&mut self) -> Expr {
        let start = self.span();
        let kind = match self.peek().clone() {
            Tok::Int(i) => {
                self.bump();
                ExprKind::Lit(Lit::Int(i as i128))
            }
            Tok::Float(f) => {
                self.bump();
                ExprKind::Lit(Lit::Float(f))
            }
            Tok::Str(s) => {
                self.bump();
                ExprKind::Lit(Lit::Str(s))
            }
            Tok::True => {
                self.bump();
                ExprKind::Lit(Lit::Bool(true))
            }
            Tok::False => {
                self.bump();
                ExprKind::Lit(Lit::Bool(false))
            }
            Tok::Name(n) => {
                let name = Ident {
                    name: n,
                    span: self.bump().span,
                };
                if self.at(&Tok::LParen) {
                    return self.call(name);
                }
                ExprKind::Name(name.name)
            }
            Tok::LParen => {
                self.bump();
                let first = self.expr();
                if matches!(first.kind, ExprKind::Error) && !self.at(&Tok::RParen) {
                    // The inside was already reported; a missing `)` here is its echo (70
                    // nested parentheses gave 49 of them after "nested too deeply").
                    return Expr {
                        kind: ExprKind::Error,
                        span: start,
                    };
                }
                if self.eat(&Tok::Comma) {
                    let second = self.expr();
                    if self.at(&Tok::Comma) {
                        self.error_here("tuples have exactly two elements").hint =
                            Some("nest pairs: `(a, (b, c))`".into());
                        // The rest of the tuple is read, so its `)` is not reported too.
                        while self.eat(&Tok::Comma) {
                            self.expr();
                        }
                        let _ = self.expect(&Tok::RParen, "`)` to close the tuple");
                        return Expr {
                            kind: ExprKind::Error,
                            span: start,
                        };
                    }
                    if self.expect(&Tok::RParen, "`)` to close the pair").is_err() {
                        return Expr {
                            kind: ExprKind::Error,
                            span: start,
                        };
                    }
                    ExprKind::Pair(Box::new(first), Box::new(second))
                } else {
                    if self.expect(&Tok::RParen, "`)`").is_err() {
                        return Expr {
                            kind: ExprKind::Error,
                            span: start,
                        };
                    }
                    // Parentheses only group; keep the inner node with the wider span.
                    return Expr {
                        kind: first.kind,
                        span: start.to(self.prev_span()),
                    };
                }
            }
            Tok::Lambda => return self.lambda(),
            other => {
                let d = self.error_here(format!(
                    "expected an expression, found {}",
                    other.describe()
                ));
                if matches!(other, Tok::Newline) {
                    d.hint = Some("the expression is missing".into());
                }
                return Expr {
                    kind: ExprKind::Error,
                    span: start,
                };
            }
        };
        Expr {
            kind,
            span: start.to(self.prev_span()),
        }
    }

    fn call(&mut self, func: Ident) -> Expr {
        self.bump(); // (
        let mut args = Vec::new();
        while !self.at(&Tok::RParen) && !self.at(&Tok::Eof) && !self.at(&Tok::Newline) {
            args.push(self.expr());
            if !self.eat(&Tok::Comma) {
                break;
            }
        }
        let starts_expr = matches!(
            self.peek(),
            Tok::Name(_)
                | Tok::Int(_)
                | Tok::Float(_)
                | Tok::Str(_)
                | Tok::True
                | Tok::False
                | Tok::LParen
                | Tok::Lambda
                | Tok::Not
        );
        if !args.is_empty() && starts_expr {
            // `f(a b)`: another argument follows, so the comma is what is missing.
            let found = self.peek().describe();
            self.error_here(format!(
                "expected `,` or `)` after an argument, found {found}"
            ))
            .hint = Some("separate the arguments with `,`".into());
            return Expr {
                kind: ExprKind::Error,
                span: func.span,
            };
        }
        if self.expect(&Tok::RParen, "`)` to close the call").is_err() {
            return Expr {
                kind: ExprKind::Error,
                span: func.span,
            };
        }
        let span = func.span.to(self.prev_span());
        Expr {
            kind: ExprKind::Call { func, args },
            span,
        }
    }

    fn lambda(&mut self) -> Expr {
        let start = self.bump().span;
        let r = (|| -> PResult<Lambda> {
            self.expect(&Tok::LParen, "`(` after `lambda`")?;
            let mut params = Vec::new();
            while !self.at(&Tok::RParen) {
                params.push(self.ident("a lambda parameter")?);
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
            self.expect(&Tok::RParen, "`)` after the lambda parameters")?;
            if !self.eat(&Tok::Colon) {
                let found = self.peek().describe();
                let arrow = self.at(&Tok::FatArrow);
                let d = self.error_here(format!("expected `:` after `lambda(…)`, found {found}"));
                if arrow {
                    d.hint = Some("write `lambda(x):` followed by the body".into());
                }
                return Err(Reported);
            }
            let body = self.block()?;
            Ok(Lambda {
                params,
                span: start.to(body.span),
                body,
            })
        })();
        match r {
            Ok(l) => Expr {
                span: l.span,
                kind: ExprKind::Lambda(l),
            },
            Err(Reported) => Expr {
                kind: ExprKind::Error,
                span: start,
            },
        }
    }
}

fn binop(t: &Tok) -> Option<BinOp> {
    Some(match t {
        Tok::Or => BinOp::Or,
        Tok::And => BinOp::And,
        Tok::EqEq => BinOp::Eq,
        Tok::NotEq => BinOp::Ne,
        Tok::Lt => BinOp::Lt,
        Tok::Le => BinOp::Le,
        Tok::Gt => BinOp::Gt,
        Tok::Ge => BinOp::Ge,
        Tok::Plus => BinOp::Add,
        Tok::Minus => BinOp::Sub,
        Tok::Star => BinOp::Mul,
        Tok::Slash => BinOp::Div,
        Tok::Percent => BinOp::Rem,
        _ => return None,
    })
}

fn is_keyword(described: &str) -> bool {
    [
        "`and`", "`or`", "`not`", "`match`", "`if`", "`elif`", "`else`", "`pass`", "`return`",
        "`lambda`", "`true`", "`false`",
    ]
    .contains(&described)
}
