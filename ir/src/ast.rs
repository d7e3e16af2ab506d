//! Syntax tree of an element file, with a span on every node.
//!
//! Built-ins (`send`, `get`, `foreach`, `err`, …) are ordinary calls here; the checker gives
//! them meaning. That keeps the parser small and lets one place report misuse.

use crate::diag::Span;

#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

/// An element file: four sections, in order. A missing section is `None` (and reported).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ElementFile {
    pub state: Option<StateSection>,
    pub init: Option<InitSection>,
    pub req: Option<Handler>,
    pub resp: Option<Handler>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct StateSection {
    pub decls: Vec<StateDecl>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct StateDecl {
    pub decorators: Vec<Decorator>,
    pub name: Ident,
    pub ty: TypeExpr,
    pub span: Span,
}

/// `@consistency(weak)`, `@combiner(sum)`, `@persistence(true)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Decorator {
    pub name: Ident,
    pub arg: Ident,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum TypeExpr {
    /// `int`, `string`, `Instant`, `Channel`, …
    Named(Ident),
    /// `Vec<T>`, `Map<K, V>`, `Option<T>`.
    Generic {
        name: Ident,
        args: Vec<TypeExpr>,
        span: Span,
    },
    /// `<A, B>` (also accepted as `(A, B)`).
    Pair(Box<TypeExpr>, Box<TypeExpr>, Span),
}

impl TypeExpr {
    pub fn span(&self) -> Span {
        match self {
            TypeExpr::Named(i) => i.span,
            TypeExpr::Generic { span, .. } | TypeExpr::Pair(_, _, span) => *span,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct InitSection {
    pub params: Vec<Param>,
    pub body: Block,
    /// The `init(…):` header.
    pub span: Span,
}

/// An element parameter, bound from the chain config: `capacity: int = 100`. AppNet files
/// write bare names (`init(max_concurrent_req):`).
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: Ident,
    pub ty: Option<TypeExpr>,
    pub default: Option<Expr>,
    pub span: Span,
}

/// `req(rpc):` or `resp(rpc):` and its body.
#[derive(Clone, Debug, PartialEq)]
pub struct Handler {
    pub param: Ident,
    pub body: Block,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind {
    /// `x = e` or `(a, b) = e`.
    Assign {
        target: AssignTarget,
        value: Expr,
    },
    /// A call evaluated for its effect: `send(…)`, `set(…)`, `foreach(…)`.
    Expr(Expr),
    Match {
        scrutinee: Expr,
        arms: Vec<Arm>,
    },
    /// `if` / `elif` / `else` (sugar for a match on bool).
    If {
        branches: Vec<(Expr, Block)>,
        otherwise: Option<Block>,
    },
    Return(Option<Expr>),
    Pass,
}

#[derive(Clone, Debug, PartialEq)]
pub enum AssignTarget {
    Name(Ident),
    Pair(Ident, Ident),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Arm {
    pub pattern: Pattern,
    pub body: Block,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Pattern {
    pub kind: PatternKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum PatternKind {
    /// `_` (or AppNet's `*`).
    Wildcard,
    Lit(Lit),
    /// `Some(x)`; `Some(_)` binds nothing.
    Some(Option<Ident>),
    None,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Lit {
    /// Integer literal, sign folded in: from `-(2^63)` up to `u64::MAX`.
    Int(i128),
    Float(f64),
    Str(String),
    Bool(bool),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Lit(Lit),
    Name(String),
    Call {
        func: Ident,
        args: Vec<Expr>,
    },
    Unary {
        op: UnOp,
        operand: Box<Expr>,
    },
    Binary {
        op: BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    Pair(Box<Expr>, Box<Expr>),
    Lambda(Lambda),
    /// Stands in for an expression that did not parse (already reported).
    Error,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Lambda {
    pub params: Vec<Ident>,
    pub body: Block,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Or => "or",
            BinOp::And => "and",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
        }
    }

    /// Binding strength; higher binds tighter (LANGUAGE.md §3).
    pub fn precedence(self) -> u8 {
        match self {
            BinOp::Or => 1,
            BinOp::And => 2,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 4,
            BinOp::Add | BinOp::Sub => 5,
            BinOp::Mul | BinOp::Div | BinOp::Rem => 6,
        }
    }

    pub fn is_comparison(self) -> bool {
        self.precedence() == 4
    }
}

/// Precedence of `not` (between `and` and comparisons).
pub const NOT_PRECEDENCE: u8 = 3;
/// Precedence of unary minus (tighter than `*`).
pub const NEG_PRECEDENCE: u8 = 7;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    Not,
    Neg,
}
