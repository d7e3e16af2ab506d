//! Random well-typed element programs, for property tests and fuzzing.
//!
//! The generator builds an [`ast::ElementFile`](crate::ast::ElementFile) directly, choosing
//! every expression by the type it must have, so the program checks without errors against
//! [`TEST_PROTO`] (method [`TEST_METHOD`]). Any rejection by the checker is therefore a bug in
//! the generator or in the checker. [`exercise`] then pushes the program through the whole
//! front end and the reference interpreter and reports every broken property.
//!
//! All randomness comes from an [`Entropy`]: a seed (proptest) or fuzzer bytes (each small
//! decision reads one byte while they last, so libFuzzer's mutations change programs locally).
//!
//! What a program may contain: state of every scalar type, pairs, `Vec`, `Map` (with messages
//! as values), responses, channels, `@consistency` / `@combiner` / `@persistence` where the
//! checker allows them; `init` parameters with and without types and defaults, named like
//! state or not, bound from defaults or from the chain config (string parameters may name
//! message fields); locals, pair unpacking, `match` on literals / `Some` / `None` / `_`,
//! `if`/`elif`/`else`, `foreach` over vectors and maps (one or two lambda parameters,
//! assignments to outer locals, sends, bare `return`), `get(map, k, lambda)` read-modify-write
//! as a statement or inside any expression, state and local `set`/`delete`, message fields
//! (nested, repeated, map, oneof; also of responses kept in state), `meta_status`/`meta_code`,
//! headers, metadata, every built-in, every `send` form (lower-case `up`/`down` too), type
//! aliases (`i64`, `str`, …), and arithmetic whose operands may be zero or `None` at run time.
//!
//! What it leaves out, on purpose:
//! - Values that grow without bound: a string concatenation has one operand built only from
//!   literals and numbers; `encrypt` of a string, `compress` and bytes concatenation (which
//!   grow by a factor) take arbitrary operands only in a handler's top-level statements, once
//!   per program; and `foreach` bodies never insert into a collection (no `set` on
//!   collections, no read-modify-write). Without these rules a doubling inside a loop makes a
//!   correct interpreter run out of memory, which a fuzzer would report as a hang.
//! - Programs the checker must reject, duplicate names and shadowing (every name is fresh),
//!   `Option`s compared with `==`, messages inside collections other than `Map<_, Response>`,
//!   `Request` locals in `resp`, and collection-typed parameters.
//! - Surface syntax the printer never writes: tabs, `//` comments, `match(…)`, `*` patterns,
//!   `(A, B)` pair types, one-line blocks. The `frontend` fuzz target's seeds carry those.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use weft_hostcalls::state::{SharedState, StateError, StateStore, VarSpec};
use weft_hostcalls::{Code, Message, MsgKind, SeededRng, Value, VirtualClock};

use crate::ast::*;
use crate::check::{CheckEnv, check};
use crate::diag::{SourceFile, Span, has_errors, render_all};
use crate::eval::RuntimeError;
use crate::interp::{self, Host, Instance, RpcInfo, RpcScratch, Verdict};
use crate::ir::Params;
use crate::parser::parse;
use crate::printer::print_element;
use crate::schema::{FieldPath, MethodSchema, Schema, SchemaError, resolve_path};
use crate::types::Type;
use crate::wire;

/// File name of [`TEST_PROTO`] when compiled in memory.
pub const TEST_PROTO_FILE: &str = "weft_testgen.proto";

/// The schema generated programs are checked against: every scalar kind, nesting, lists, maps,
/// an optional and a oneof.
pub const TEST_PROTO: &str = r#"syntax = "proto3";
package weft.gen;

enum Mood {
  MOOD_UNSPECIFIED = 0;
  HAPPY = 1;
  SAD = -2;
}

message Inner {
  int32 x = 1;
  string y = 2;
  repeated sint64 zs = 3;
  Inner child = 4;
}

message Req {
  string user = 1;
  string body = 2;
  int64 priority = 3;
  uint32 count = 4;
  uint64 big = 5;
  double score = 6;
  float ratio = 7;
  bool flag = 8;
  bytes blob = 9;
  sint32 delta = 10;
  fixed64 stamp = 11;
  sfixed32 offset = 12;
  Mood mood = 13;
  repeated string tags = 14;
  repeated int64 nums = 15;
  repeated double weights = 16;
  map<string, int64> counters = 17;
  map<int32, string> names = 18;
  Inner inner = 19;
  optional string note = 20;
  oneof pick {
    int32 num = 21;
    string text = 22;
  }
}

message Resp {
  string body = 1;
  string served_by = 2;
  int64 code = 3;
  double latency = 4;
  bool cached = 5;
  bytes payload = 6;
  repeated string trail = 7;
  map<string, double> stats = 8;
  Inner inner = 9;
  uint64 hits = 10;
}

service Gen {
  rpc Call(Req) returns (Resp);
}
"#;

/// The method of [`TEST_PROTO`] generated programs are checked against.
pub const TEST_METHOD: &str = "weft.gen.Gen/Call";

/// Compiles [`TEST_PROTO`].
pub fn test_schema() -> Result<Schema, SchemaError> {
    Schema::from_source(TEST_PROTO_FILE, TEST_PROTO)
}

/// [`TEST_METHOD`] of [`test_schema`].
pub fn test_method() -> Result<MethodSchema, SchemaError> {
    test_schema()?.method(TEST_METHOD)
}

/// Field paths of the request that generated programs read and write, with their language
/// types (a unit test holds this table to the schema).
pub fn request_fields() -> Vec<(&'static str, Type)> {
    vec![
        ("user", Type::Str),
        ("body", Type::Str),
        ("priority", Type::Int),
        ("count", Type::Uint),
        ("big", Type::Uint),
        ("score", Type::Float),
        ("ratio", Type::Float),
        ("flag", Type::Bool),
        ("blob", Type::Bytes),
        ("delta", Type::Int),
        ("stamp", Type::Uint),
        ("offset", Type::Int),
        ("mood", Type::Int),
        ("tags", Type::vec(Type::Str)),
        ("nums", Type::vec(Type::Int)),
        ("weights", Type::vec(Type::Float)),
        ("counters", Type::map(Type::Str, Type::Int)),
        ("names", Type::map(Type::Int, Type::Str)),
        ("inner.x", Type::Int),
        ("inner.y", Type::Str),
        ("inner.zs", Type::vec(Type::Int)),
        ("inner.child.x", Type::Int),
        ("inner.child.y", Type::Str),
        ("note", Type::Str),
        ("num", Type::Int),
        ("text", Type::Str),
    ]
}

/// Field paths of the response, as [`request_fields`].
pub fn response_fields() -> Vec<(&'static str, Type)> {
    vec![
        ("body", Type::Str),
        ("served_by", Type::Str),
        ("code", Type::Int),
        ("latency", Type::Float),
        ("cached", Type::Bool),
        ("payload", Type::Bytes),
        ("trail", Type::vec(Type::Str)),
        ("stats", Type::map(Type::Str, Type::Float)),
        ("inner.x", Type::Int),
        ("inner.y", Type::Str),
        ("inner.zs", Type::vec(Type::Int)),
        ("hits", Type::Uint),
    ]
}

// ---------------------------------------------------------------------------------------------
// Entropy

/// The source of every choice: fuzzer bytes first (one byte per small choice, up to eight for
/// a number), then a splitmix64 stream seeded from the seed or from the bytes.
#[derive(Clone, Debug)]
pub struct Entropy {
    data: Vec<u8>,
    pos: usize,
    state: u64,
}

impl Entropy {
    pub fn seeded(seed: u64) -> Entropy {
        Entropy {
            data: Vec::new(),
            pos: 0,
            state: seed,
        }
    }

    pub fn from_bytes(data: &[u8]) -> Entropy {
        // FNV-1a of the input seeds the stream used once the bytes run out, so two inputs
        // that agree on their prefix still differ afterwards.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in data {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        Entropy {
            data: data.to_vec(),
            pos: 0,
            state: h,
        }
    }

    fn splitmix(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn next_u64(&mut self) -> u64 {
        if self.pos < self.data.len() {
            let end = (self.pos + 8).min(self.data.len());
            let mut buf = [0u8; 8];
            buf[..end - self.pos].copy_from_slice(&self.data[self.pos..end]);
            self.pos = end;
            return u64::from_le_bytes(buf);
        }
        self.splitmix()
    }

    /// A choice in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n <= 1 {
            return 0;
        }
        if n <= 256 && self.pos < self.data.len() {
            let b = self.data[self.pos];
            self.pos += 1;
            return usize::from(b) % n;
        }
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability about `num / den`.
    pub fn chance(&mut self, num: usize, den: usize) -> bool {
        self.below(den) < num
    }

    pub fn bytes(&mut self, max_len: usize) -> Vec<u8> {
        let n = self.below(max_len + 1);
        (0..n).map(|_| self.next_u64() as u8).collect()
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            return None;
        }
        items.get(self.below(items.len()))
    }
}

// ---------------------------------------------------------------------------------------------
// Generation

/// Size limits. The defaults keep nesting far below the parser's limit of 64
/// ([`crate::lexer::MAX_NESTING`]).
#[derive(Clone, Debug)]
pub struct GenConfig {
    /// Nesting of blocks (arms, branches, lambda bodies) below a handler's own block.
    pub max_block_depth: usize,
    /// Nesting of operators and calls in one expression.
    pub max_expr_depth: usize,
    /// Statements in a nested block.
    pub max_block_len: usize,
    /// Statements in a handler's (or `init`'s) own block, before its final `send`.
    pub max_top_len: usize,
    pub max_state: usize,
    pub max_params: usize,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            max_block_depth: 3,
            max_expr_depth: 3,
            max_block_len: 3,
            max_top_len: 6,
            max_state: 8,
            max_params: 4,
        }
    }
}

/// A generated element.
#[derive(Clone, Debug)]
pub struct Generated {
    pub file: ElementFile,
    /// `print_element(&file)`.
    pub source: String,
    /// The chain config's parameter values (parameters without defaults, and some overrides).
    pub params: Params,
}

/// Generates one element from a seed with the default limits.
pub fn generate(seed: u64) -> Generated {
    generate_with(&mut Entropy::seeded(seed), &GenConfig::default())
}

pub fn generate_with(e: &mut Entropy, cfg: &GenConfig) -> Generated {
    let mut g = Gen {
        e,
        cfg: cfg.clone(),
        state: Vec::new(),
        channels: Vec::new(),
        params: Vec::new(),
        metadata: Vec::new(),
        req_fields: request_fields(),
        resp_fields: response_fields(),
        counter: 0,
        growth_budget: 1,
        hk: Hk::Init,
        locals: Vec::new(),
        scopes: Vec::new(),
        defined: BTreeSet::new(),
        reachable: true,
        lambdas: Vec::new(),
        depth: 0,
        in_foreach: 0,
    };
    let mut config = Params::new();
    let state = g.gen_state();
    let init_params = g.gen_params(&mut config);
    let init_body = g.handler(Hk::Init, None);
    let req_param = g.msg_param_name();
    let req_body = g.handler(Hk::Req, Some(&req_param));
    let resp_param = g.msg_param_name();
    let resp_body = g.handler(Hk::Resp, Some(&resp_param));
    let file = ElementFile {
        state: Some(state),
        init: Some(InitSection {
            params: init_params,
            body: init_body,
            span: SP,
        }),
        req: Some(Handler {
            param: ident(&req_param),
            body: req_body,
            span: SP,
        }),
        resp: Some(Handler {
            param: ident(&resp_param),
            body: resp_body,
            span: SP,
        }),
    };
    let source = print_element(&file);
    Generated {
        file,
        source,
        params: config,
    }
}

const SP: Span = Span { start: 0, end: 0 };

fn ident(name: &str) -> Ident {
    Ident {
        name: name.to_owned(),
        span: SP,
    }
}

fn ex(kind: ExprKind) -> Expr {
    Expr { kind, span: SP }
}

fn name_e(n: &str) -> Expr {
    ex(ExprKind::Name(n.to_owned()))
}

fn call(f: &str, args: Vec<Expr>) -> Expr {
    ex(ExprKind::Call {
        func: ident(f),
        args,
    })
}

fn bin(op: BinOp, l: Expr, r: Expr) -> Expr {
    ex(ExprKind::Binary {
        op,
        lhs: Box::new(l),
        rhs: Box::new(r),
    })
}

fn un(op: UnOp, x: Expr) -> Expr {
    ex(ExprKind::Unary {
        op,
        operand: Box::new(x),
    })
}

fn lit(l: Lit) -> Expr {
    ex(ExprKind::Lit(l))
}

fn lit_s(s: &str) -> Expr {
    lit(Lit::Str(s.to_owned()))
}

fn st(kind: StmtKind) -> Stmt {
    Stmt { kind, span: SP }
}

fn blk(stmts: Vec<Stmt>) -> Block {
    Block { stmts, span: SP }
}

fn lambda(params: &[String], body: Block) -> Expr {
    ex(ExprKind::Lambda(Lambda {
        params: params.iter().map(|p| ident(p)).collect(),
        body,
        span: SP,
    }))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hk {
    Init,
    Req,
    Resp,
}

#[derive(Clone, Debug)]
enum Cell {
    Scalar,
    Map(Type, Type),
    Vec(Type),
}

#[derive(Clone, Debug)]
struct StateVar {
    name: String,
    ty: Type,
    cell: Cell,
}

#[derive(Clone, Debug)]
struct ParamVar {
    name: String,
    ty: Type,
    /// A string parameter whose value is a field path of this message type.
    field: Option<(Type, String)>,
}

#[derive(Clone, Debug)]
struct Local {
    name: String,
    ty: Type,
    /// False for the handler's message, which cannot be reassigned.
    assignable: bool,
}

/// Mirrors the checker's scopes: assignments declare into the innermost function scope
/// (handler or lambda), match-arm bindings into their arm.
struct Scope {
    function: bool,
    names: Vec<usize>,
}

#[derive(Clone, Debug)]
enum LambdaKind {
    ForEach,
    /// A read-modify-write lambda; `Some(t)` when its value is used, so every path returns `t`.
    Rmw(Option<Type>),
}

struct Gen<'a> {
    e: &'a mut Entropy,
    cfg: GenConfig,
    state: Vec<StateVar>,
    channels: Vec<String>,
    params: Vec<ParamVar>,
    /// `set_metadata` keys in the order the checker meets them, with their types.
    metadata: Vec<(String, Type)>,
    req_fields: Vec<(&'static str, Type)>,
    resp_fields: Vec<(&'static str, Type)>,
    counter: usize,
    /// How many more base64-growing or doubling expressions may appear (see module docs).
    growth_budget: usize,
    // The body being generated: the checker's view of it.
    hk: Hk,
    locals: Vec<Local>,
    scopes: Vec<Scope>,
    defined: BTreeSet<usize>,
    reachable: bool,
    lambdas: Vec<LambdaKind>,
    depth: usize,
    in_foreach: usize,
}

const CODES: &[&str] = &[
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// Characters for string literals and values: quotes and backslashes (escaped by the
/// printer), comment starters, non-ASCII, control characters.
const CHARS: &[char] = &[
    'a',
    'b',
    'z',
    'A',
    '0',
    '7',
    ' ',
    '\'',
    '"',
    '\\',
    '\n',
    '\t',
    '\r',
    '\0',
    '#',
    '/',
    ':',
    '(',
    'é',
    '日',
    '\u{1F600}',
    '\u{7}',
    '-',
    '.',
    'e',
];

impl Gen<'_> {
    // ---- names, literals, types ----------------------------------------------------------

    fn fresh(&mut self, prefix: &str) -> String {
        self.counter += 1;
        let n = self.counter;
        match self.e.below(6) {
            0 => format!("_{prefix}{n}"),
            1 => format!("{prefix}_{n}"),
            2 => format!("{prefix}ä{n}"),
            _ => format!("{prefix}{n}"),
        }
    }

    fn msg_param_name(&mut self) -> String {
        if self.e.chance(3, 4) {
            "rpc".into()
        } else {
            self.fresh("m")
        }
    }

    fn int_value(&mut self) -> i64 {
        match self.e.below(9) {
            0 => 0,
            1 => 1,
            2 => -1,
            3 => i64::MIN,
            4 => i64::MAX,
            5 => self.e.below(200) as i64 - 100,
            6 => self.e.next_u64() as i64,
            _ => self.e.below(10) as i64,
        }
    }

    fn uint_value(&mut self) -> u64 {
        match self.e.below(7) {
            0 => 0,
            1 => 1,
            2 => u64::MAX,
            3 => i64::MAX as u64 + 1,
            4 => self.e.next_u64(),
            _ => self.e.below(10) as u64,
        }
    }

    fn float_value(&mut self) -> f64 {
        match self.e.below(9) {
            0 => 0.0,
            1 => -0.0,
            2 => 0.5,
            3 => -2.25,
            4 => 1e300,
            5 => -1e-300,
            6 => {
                let f = f64::from_bits(self.e.next_u64());
                if f.is_finite() { f } else { 1.5 }
            }
            _ => self.e.below(40) as f64 / 4.0 - 5.0,
        }
    }

    fn string_value(&mut self) -> String {
        let n = self.e.below(6);
        (0..n)
            .map(|_| *self.e.pick(CHARS).unwrap_or(&'a'))
            .collect()
    }

    fn int_lit(&mut self) -> Expr {
        let v = self.int_value();
        lit(Lit::Int(i128::from(v)))
    }

    /// A `uint` literal: plain where the checker passes the expected type down, else wrapped
    /// in `uint(…)`, since a bare `5` on its own is an `int`.
    fn uint_lit(&mut self, expect: bool) -> Expr {
        let v = self.uint_value();
        let l = lit(Lit::Int(i128::from(v)));
        if expect || v > i64::MAX as u64 {
            l
        } else {
            call("uint", vec![l])
        }
    }

    fn float_lit(&mut self) -> Expr {
        let v = self.float_value();
        lit(Lit::Float(v))
    }

    fn scalar_type(&mut self) -> Type {
        match self.e.below(7) {
            0 => Type::Int,
            1 => Type::Uint,
            2 => Type::Float,
            3 => Type::Bool,
            4 => Type::Str,
            5 => Type::Bytes,
            _ => Type::Instant,
        }
    }

    fn key_type(&mut self) -> Type {
        match self.e.below(9) {
            0 => Type::Uint,
            1 => Type::Bool,
            2 => Type::Instant,
            3 => Type::Float,
            4 => Type::Bytes,
            5 => Type::pair(Type::Int, Type::Str),
            6 | 7 => Type::Str,
            _ => Type::Int,
        }
    }

    fn value_type(&mut self) -> Type {
        match self.e.below(8) {
            0 => {
                let a = self.scalar_type();
                let b = self.scalar_type();
                Type::pair(a, b)
            }
            1 => Type::vec(self.scalar_type()),
            2 => Type::Response,
            _ => self.scalar_type(),
        }
    }

    fn type_expr(&mut self, t: &Type) -> TypeExpr {
        let named = |g: &mut Gen<'_>, names: &[&str]| {
            let n = g.e.pick(names).copied().unwrap_or("int");
            TypeExpr::Named(ident(n))
        };
        match t {
            Type::Int => named(self, &["int", "int", "int", "i64", "i32"]),
            Type::Uint => named(self, &["uint", "uint", "u64", "u32"]),
            Type::Float => named(self, &["float", "float", "f64", "double"]),
            Type::Bool => named(self, &["bool"]),
            Type::Str => named(self, &["string", "string", "str", "String"]),
            Type::Bytes => named(self, &["bytes"]),
            Type::Instant => named(self, &["Instant", "Instant", "instant"]),
            Type::Response => named(self, &["Response"]),
            Type::Request => named(self, &["Request"]),
            Type::Channel => named(self, &["Channel"]),
            Type::Pair(a, b) => {
                let a = self.type_expr(a);
                let b = self.type_expr(b);
                TypeExpr::Pair(Box::new(a), Box::new(b), SP)
            }
            Type::Vec(x) => {
                let x = self.type_expr(x);
                TypeExpr::Generic {
                    name: ident("Vec"),
                    args: vec![x],
                    span: SP,
                }
            }
            Type::Map(k, v) => {
                let k = self.type_expr(k);
                let v = self.type_expr(v);
                TypeExpr::Generic {
                    name: ident("Map"),
                    args: vec![k, v],
                    span: SP,
                }
            }
            Type::Option(x) => {
                let x = self.type_expr(x);
                TypeExpr::Generic {
                    name: ident("Option"),
                    args: vec![x],
                    span: SP,
                }
            }
            Type::Unit | Type::Dyn => named(self, &["int"]),
        }
    }

    // ---- declarations --------------------------------------------------------------------

    fn decorators(&mut self, value_ty: &Type) -> Vec<Decorator> {
        self.decorators_of(value_ty, false)
    }

    fn map_decorators(&mut self, value_ty: &Type) -> Vec<Decorator> {
        self.decorators_of(value_ty, true)
    }

    /// A map may also get `@capacity(n)`. It takes no draw of its own: the choices are read
    /// off draws made anyway, so the bytes of a recorded fuzz finding still generate the
    /// program they found.
    fn decorators_of(&mut self, value_ty: &Type, map: bool) -> Vec<Decorator> {
        let dec = |name: &str, arg: &str| Decorator {
            name: ident(name),
            arg: ident(arg),
            span: SP,
        };
        let mut out = Vec::new();
        let consistency = self.e.below(4);
        match consistency {
            0 => out.push(dec("consistency", "strong")),
            1 => out.push(dec("consistency", "weak")),
            _ => {}
        }
        // Sum adds numbers; max and min also order instants.
        let numeric = value_ty.is_numeric();
        let ordered = numeric || *value_ty == Type::Instant;
        let combiner = self.e.below(6);
        match combiner {
            0 => out.push(dec("combiner", "lww")),
            1 if numeric => out.push(dec("combiner", "sum")),
            2 if ordered => out.push(dec("combiner", "max")),
            3 if ordered => out.push(dec("combiner", "min")),
            _ => {}
        }
        match self.e.below(6) {
            0 => out.push(dec("persistence", "true")),
            1 => out.push(dec("persistence", "false")),
            // Weak maps take no capacity. Small ones, so generated runs fill them and evict.
            2 | 3 if map && consistency != 1 => {
                out.push(dec("capacity", &(1 + combiner % 3).to_string()))
            }
            _ => {}
        }
        if out.len() > 1 && self.e.chance(1, 2) {
            out.reverse();
        }
        out
    }

    fn gen_state(&mut self) -> StateSection {
        let n = self.e.below(self.cfg.max_state + 1);
        let mut decls = Vec::new();
        for _ in 0..n {
            let (name, ty, cell, decorators) = match self.e.below(10) {
                0..=3 => {
                    let ty = match self.e.below(10) {
                        0 => {
                            let a = self.scalar_type();
                            let b = self.scalar_type();
                            Type::pair(a, b)
                        }
                        1 => Type::Response,
                        _ => self.scalar_type(),
                    };
                    let d = self.decorators(&ty);
                    (self.fresh("s"), ty, Some(Cell::Scalar), d)
                }
                4..=6 => {
                    let k = self.key_type();
                    let v = self.value_type();
                    let d = self.map_decorators(&v);
                    let ty = Type::map(k.clone(), v.clone());
                    (self.fresh("s"), ty, Some(Cell::Map(k, v)), d)
                }
                7 | 8 => {
                    let t = if self.e.chance(1, 4) {
                        Type::pair(Type::Int, Type::Float)
                    } else {
                        self.scalar_type()
                    };
                    // Shared vectors are refused by the checker; persistence is fine.
                    let d = if self.e.chance(1, 4) {
                        vec![Decorator {
                            name: ident("persistence"),
                            arg: ident("true"),
                            span: SP,
                        }]
                    } else {
                        Vec::new()
                    };
                    (self.fresh("s"), Type::vec(t.clone()), Some(Cell::Vec(t)), d)
                }
                _ => (self.fresh("c"), Type::Channel, None, Vec::new()),
            };
            let ty_expr = if ty == Type::Channel && self.e.chance(1, 3) {
                TypeExpr::Generic {
                    name: ident("Channel"),
                    args: vec![TypeExpr::Named(ident("int"))],
                    span: SP,
                }
            } else {
                self.type_expr(&ty)
            };
            decls.push(StateDecl {
                decorators,
                name: ident(&name),
                ty: ty_expr,
                span: SP,
            });
            match cell {
                Some(cell) => self.state.push(StateVar { name, ty, cell }),
                None => self.channels.push(name),
            }
        }
        StateSection { decls, span: SP }
    }

    fn value_of(&mut self, t: &Type) -> Value {
        match t {
            Type::Int => Value::Int(self.int_value()),
            Type::Uint => Value::Uint(self.uint_value()),
            Type::Float => Value::Float(self.float_value()),
            Type::Bool => Value::Bool(self.e.chance(1, 2)),
            _ => Value::Str(self.string_value()),
        }
    }

    /// A constant expression for a parameter default, with its value. `typed` says whether the
    /// parameter declares its type (then plain literals take it; otherwise a `uint` needs
    /// `uint(…)`).
    fn const_expr(&mut self, t: &Type, v: &Value, typed: bool) -> Expr {
        let l = match v {
            Value::Int(i) => lit(Lit::Int(i128::from(*i))),
            Value::Uint(u) => {
                let l = lit(Lit::Int(i128::from(*u)));
                if typed || *u > i64::MAX as u64 {
                    l
                } else {
                    call("uint", vec![l])
                }
            }
            Value::Float(f) => lit(Lit::Float(*f)),
            Value::Bool(b) => lit(Lit::Bool(*b)),
            Value::Str(s) => lit_s(s),
            _ => lit(Lit::Int(0)),
        };
        // Constant arithmetic folds to the same kind of value; its result is not tracked, so
        // only where the value does not matter (not for field-name strings).
        match (t, self.e.below(4)) {
            (Type::Int, 0) => bin(BinOp::Add, l, self.int_lit()),
            (Type::Float, 0) => bin(BinOp::Mul, l, self.float_lit()),
            _ => l,
        }
    }

    fn gen_params(&mut self, config: &mut Params) -> Vec<Param> {
        let n = self.e.below(self.cfg.max_params + 1);
        let mut out = Vec::new();
        let mut used_state: Vec<usize> = Vec::new();
        for _ in 0..n {
            // AppNet's form: a parameter named like a scalar state variable initialises it.
            let state_named = self
                .state
                .iter()
                .enumerate()
                .filter(|(i, v)| {
                    matches!(v.cell, Cell::Scalar)
                        && matches!(
                            v.ty,
                            Type::Int | Type::Uint | Type::Float | Type::Bool | Type::Str
                        )
                        && !used_state.contains(i)
                })
                .map(|(i, _)| i)
                .collect::<Vec<_>>();
            let (name, ty, is_state) = match self.e.pick(&state_named).copied() {
                Some(i) if self.e.chance(1, 3) => {
                    used_state.push(i);
                    (self.state[i].name.clone(), self.state[i].ty.clone(), true)
                }
                _ => {
                    let ty = match self.e.below(5) {
                        0 => Type::Int,
                        1 => Type::Uint,
                        2 => Type::Float,
                        3 => Type::Bool,
                        _ => Type::Str,
                    };
                    (self.fresh("p"), ty, false)
                }
            };
            let mut field = None;
            let value = if ty == Type::Str && !is_state && self.e.chance(1, 2) {
                let (msg, path) = if self.e.chance(1, 2) {
                    let f = self.e.pick(&self.req_fields).map(|f| f.0).unwrap_or("user");
                    (Type::Request, f)
                } else {
                    let f = self
                        .e
                        .pick(&self.resp_fields)
                        .map(|f| f.0)
                        .unwrap_or("body");
                    (Type::Response, f)
                };
                field = Some((msg, path.to_owned()));
                Value::str(path)
            } else {
                self.value_of(&ty)
            };
            // How the value arrives: a default, the chain config, or both (config wins).
            let (typed, default, from_config) = match self.e.below(6) {
                0 => (true, false, true),
                1 => (false, true, false),
                2 => (true, true, true),
                3 if !is_state => (false, false, true),
                _ => (true, true, false),
            };
            let default_expr = if default {
                Some(self.default_for(&ty, &value, typed, field.is_some()))
            } else {
                None
            };
            if from_config {
                // A field-name parameter keeps its value, since fields are read through it;
                // any other gets a config value of its own, overriding a default.
                let v = if field.is_some() {
                    value.clone()
                } else {
                    self.value_of(&ty)
                };
                config.insert(name.clone(), v);
            }
            let ty_expr = if typed {
                Some(self.type_expr(&ty))
            } else {
                None
            };
            out.push(Param {
                name: ident(&name),
                ty: ty_expr,
                default: default_expr,
                span: SP,
            });
            if !is_state {
                self.params.push(ParamVar { name, ty, field });
            }
        }
        out
    }

    fn default_for(&mut self, t: &Type, v: &Value, typed: bool, exact: bool) -> Expr {
        if exact && let Value::Str(s) = v {
            return lit_s(s);
        }
        self.const_expr(t, v, typed)
    }

    // ---- bodies --------------------------------------------------------------------------

    fn handler(&mut self, hk: Hk, msg: Option<&str>) -> Block {
        self.hk = hk;
        self.locals.clear();
        self.scopes = vec![Scope {
            function: true,
            names: Vec::new(),
        }];
        self.defined.clear();
        self.reachable = true;
        self.lambdas.clear();
        self.depth = 0;
        self.in_foreach = 0;
        if let Some(m) = msg {
            let ty = if hk == Hk::Req {
                Type::Request
            } else {
                Type::Response
            };
            let id = self.declare_binder(m, ty, false);
            self.defined.insert(id);
        }
        let n = self.e.below(self.cfg.max_top_len + 1);
        let mut stmts = Vec::new();
        for _ in 0..n {
            if !self.reachable {
                break;
            }
            if let Some(s) = self.stmt() {
                stmts.push(s);
            }
        }
        if self.reachable
            && hk != Hk::Init
            && self.e.chance(7, 8)
            && let Some(s) = self.send_stmt()
        {
            stmts.push(s);
        }
        blk(stmts)
    }

    fn declare_hidden(&mut self, name: &str, ty: Type, assignable: bool) -> usize {
        self.locals.push(Local {
            name: name.to_owned(),
            ty,
            assignable,
        });
        self.locals.len() - 1
    }

    /// A local in the innermost scope (lambda parameters, arm bindings, the message).
    fn declare_binder(&mut self, name: &str, ty: Type, assignable: bool) -> usize {
        let id = self.declare_hidden(name, ty, assignable);
        if let Some(s) = self.scopes.last_mut() {
            s.names.push(id);
        }
        id
    }

    /// A local created by assignment: in the innermost function scope.
    fn declare(&mut self, name: &str, ty: Type) -> usize {
        let id = self.declare_hidden(name, ty, true);
        if let Some(s) = self.scopes.iter_mut().rev().find(|s| s.function) {
            s.names.push(id);
        }
        id
    }

    fn visible(&self) -> Vec<usize> {
        self.scopes
            .iter()
            .flat_map(|s| s.names.iter().copied())
            .collect()
    }

    fn usable(&self) -> Vec<usize> {
        self.visible()
            .into_iter()
            .filter(|id| self.defined.contains(id))
            .collect()
    }

    fn msg_locals(&self, ty: &Type) -> Vec<usize> {
        self.usable()
            .into_iter()
            .filter(|id| self.locals[*id].ty == *ty)
            .collect()
    }

    fn in_rmw(&self) -> bool {
        self.lambdas.iter().any(|l| matches!(l, LambdaKind::Rmw(_)))
    }

    fn can_nest(&self) -> bool {
        self.depth < self.cfg.max_block_depth
    }

    /// Whether a statement here runs at most once per handler call.
    fn top_level(&self) -> bool {
        self.depth == 0 && self.lambdas.is_empty() && self.hk != Hk::Init
    }

    fn take_growth(&mut self) -> bool {
        if self.top_level() && self.growth_budget > 0 && self.e.chance(1, 2) {
            self.growth_budget -= 1;
            true
        } else {
            false
        }
    }

    fn nested_block(&mut self) -> Block {
        self.depth += 1;
        let n = self.e.below(self.cfg.max_block_len + 1);
        let mut stmts = Vec::new();
        for _ in 0..n {
            if !self.reachable {
                break;
            }
            if let Some(s) = self.stmt() {
                stmts.push(s);
            }
        }
        self.depth -= 1;
        blk(stmts)
    }

    // ---- statements ----------------------------------------------------------------------

    fn stmt(&mut self) -> Option<Stmt> {
        for _ in 0..6 {
            let s = match self.e.below(24) {
                0..=2 => self.assign_new(),
                3 | 4 => self.assign_existing(),
                5 => self.assign_state(),
                6 => self.tuple_assign(),
                7 => self.state_collection_write(),
                8 => self.local_collection_write(),
                9 => self.set_field(),
                10 => self.set_header(),
                11 => self.set_metadata(),
                12 | 13 => self.if_stmt(),
                14 | 15 => self.match_stmt(),
                16 => self.foreach_stmt(),
                17 => self.rmw_stmt(),
                18 => self.channel_send(),
                19 => {
                    if self.e.chance(1, 3) {
                        self.send_stmt()
                    } else {
                        None
                    }
                }
                20 => self.return_stmt(),
                21 => Some(st(StmtKind::Pass)),
                _ => self.assign_new(),
            };
            if s.is_some() {
                return s;
            }
        }
        None
    }

    /// A type for a new local: anything the body can produce.
    fn local_type(&mut self) -> Type {
        for _ in 0..4 {
            let t = match self.e.below(12) {
                0 => {
                    let a = self.scalar_type();
                    let b = self.scalar_type();
                    Type::pair(a, b)
                }
                1 => Type::option(self.scalar_type()),
                2 | 3 => {
                    let ts = self.available_types();
                    match self.e.pick(&ts) {
                        Some(t) => t.clone(),
                        None => continue,
                    }
                }
                _ => self.scalar_type(),
            };
            if self.producible(&t) {
                return t;
            }
        }
        Type::Int
    }

    fn assign_new(&mut self) -> Option<Stmt> {
        let t = self.local_type();
        let d = self.cfg.max_expr_depth;
        let value = self.expr(&t, false, d);
        let name = self.fresh("l");
        let id = self.declare(&name, t);
        self.defined.insert(id);
        Some(st(StmtKind::Assign {
            target: AssignTarget::Name(ident(&name)),
            value,
        }))
    }

    fn assign_existing(&mut self) -> Option<Stmt> {
        let cands: Vec<usize> = self
            .visible()
            .into_iter()
            .filter(|id| self.locals[*id].assignable && self.producible(&self.locals[*id].ty))
            .collect();
        let id = *self.e.pick(&cands)?;
        let t = self.locals[id].ty.clone();
        let d = self.cfg.max_expr_depth;
        let scalar = matches!(
            t,
            Type::Int | Type::Uint | Type::Float | Type::Bool | Type::Str | Type::Instant
        );
        let value = if scalar && self.e.chance(1, 6) {
            // `Option<T>` where `T` is expected: unwrapped, `None` is a run-time error.
            self.expr(&Type::option(t.clone()), false, d)
        } else {
            self.expr(&t, true, d)
        };
        self.defined.insert(id);
        let name = self.locals[id].name.clone();
        Some(st(StmtKind::Assign {
            target: AssignTarget::Name(ident(&name)),
            value,
        }))
    }

    fn assign_state(&mut self) -> Option<Stmt> {
        let cands: Vec<usize> = (0..self.state.len())
            .filter(|i| matches!(self.state[*i].cell, Cell::Scalar))
            .filter(|i| self.producible(&self.state[*i].ty.clone()))
            .collect();
        let i = *self.e.pick(&cands)?;
        let v = self.state[i].clone();
        let value = self.expr(&v.ty, true, self.cfg.max_expr_depth);
        Some(if self.e.chance(1, 3) {
            st(StmtKind::Expr(call("set", vec![name_e(&v.name), value])))
        } else {
            st(StmtKind::Assign {
                target: AssignTarget::Name(ident(&v.name)),
                value,
            })
        })
    }

    fn tuple_assign(&mut self) -> Option<Stmt> {
        let a = self.scalar_type();
        let b = if self.e.chance(1, 4) {
            Type::option(Type::Int)
        } else {
            self.scalar_type()
        };
        let pt = Type::pair(a.clone(), b.clone());
        if !self.producible(&pt) {
            return None;
        }
        let value = self.expr(&pt, false, self.cfg.max_expr_depth);
        let mut targets = Vec::new();
        for t in [&a, &b] {
            let existing: Vec<usize> = self
                .visible()
                .into_iter()
                .filter(|id| {
                    self.locals[*id].assignable
                        && self.locals[*id].ty == *t
                        && !targets.contains(&Some(*id))
                })
                .collect();
            let pick = if self.e.chance(1, 2) {
                self.e.pick(&existing).copied()
            } else {
                None
            };
            targets.push(pick);
        }
        let mut names = Vec::new();
        for (target, t) in targets.into_iter().zip([a, b]) {
            let id = match target {
                Some(id) => id,
                None => {
                    let n = self.fresh("l");
                    self.declare(&n, t)
                }
            };
            self.defined.insert(id);
            names.push(self.locals[id].name.clone());
        }
        Some(st(StmtKind::Assign {
            target: AssignTarget::Pair(ident(&names[0]), ident(&names[1])),
            value,
        }))
    }

    fn state_collection_write(&mut self) -> Option<Stmt> {
        let cands: Vec<usize> = (0..self.state.len())
            .filter(|i| !matches!(self.state[*i].cell, Cell::Scalar))
            .collect();
        let i = *self.e.pick(&cands)?;
        let v = self.state[i].clone();
        let d = self.cfg.max_expr_depth;
        let (kt, vt) = match &v.cell {
            Cell::Map(k, t) => (k.clone(), t.clone()),
            Cell::Vec(t) => (Type::Int, t.clone()),
            Cell::Scalar => return None,
        };
        if !self.producible(&kt) {
            return None;
        }
        // Inserting inside a loop can grow a collection without bound; deleting cannot.
        let is_vec = matches!(v.cell, Cell::Vec(_));
        if self.in_foreach > 0 || !self.producible(&vt) || self.e.chance(1, 4) {
            let key = if is_vec {
                self.index(d)
            } else {
                self.expr(&kt, true, d)
            };
            return Some(st(StmtKind::Expr(call(
                "delete",
                vec![name_e(&v.name), key],
            ))));
        }
        let key = if is_vec && self.e.chance(3, 4) {
            // Appending.
            call("size", vec![name_e(&v.name)])
        } else if is_vec {
            self.index(d)
        } else {
            self.expr(&kt, true, d)
        };
        let value = self.expr(&vt, true, d);
        Some(st(StmtKind::Expr(call(
            "set",
            vec![name_e(&v.name), key, value],
        ))))
    }

    fn local_collection_write(&mut self) -> Option<Stmt> {
        let cands: Vec<usize> = self
            .usable()
            .into_iter()
            .filter(|id| matches!(self.locals[*id].ty, Type::Vec(_) | Type::Map(..)))
            .collect();
        let id = *self.e.pick(&cands)?;
        let l = self.locals[id].clone();
        let (kt, vt) = match &l.ty {
            Type::Vec(t) => (Type::Int, (**t).clone()),
            Type::Map(k, v) => ((**k).clone(), (**v).clone()),
            _ => return None,
        };
        if !self.producible(&kt) {
            return None;
        }
        let d = self.cfg.max_expr_depth;
        if self.in_foreach > 0 || !self.producible(&vt) || self.e.chance(1, 4) {
            let key = if matches!(l.ty, Type::Vec(_)) {
                self.index(d)
            } else {
                self.expr(&kt, true, d)
            };
            return Some(st(StmtKind::Expr(call(
                "delete",
                vec![name_e(&l.name), key],
            ))));
        }
        let key = if matches!(l.ty, Type::Vec(_)) && self.e.chance(1, 2) {
            call("size", vec![name_e(&l.name)])
        } else if matches!(l.ty, Type::Vec(_)) {
            self.index(d)
        } else {
            self.expr(&kt, true, d)
        };
        let value = self.expr(&vt, true, d);
        Some(st(StmtKind::Expr(call(
            "set",
            vec![name_e(&l.name), key, value],
        ))))
    }

    fn fields_of(&self, msg: &Type) -> Vec<(&'static str, Type)> {
        match msg {
            Type::Request => self.req_fields.clone(),
            Type::Response => self.resp_fields.clone(),
            _ => Vec::new(),
        }
    }

    fn any_msg_local(&mut self) -> Option<usize> {
        let cands: Vec<usize> = self
            .usable()
            .into_iter()
            .filter(|id| self.locals[*id].ty.is_message())
            .collect();
        self.e.pick(&cands).copied()
    }

    fn set_field(&mut self) -> Option<Stmt> {
        let id = self.any_msg_local()?;
        let m = self.locals[id].clone();
        let fields: Vec<(&'static str, Type)> = self
            .fields_of(&m.ty)
            .into_iter()
            .filter(|f| self.producible(&f.1))
            .collect();
        let (path, t) = self.e.pick(&fields)?.clone();
        let value = self.expr(&t, true, self.cfg.max_expr_depth);
        Some(st(StmtKind::Expr(call(
            "set",
            vec![name_e(&m.name), lit_s(path), value],
        ))))
    }

    /// A header name; computed from an expression of depth below `d` at most, so a name
    /// inside a string expression cannot nest without bound (the fuzzer drove
    /// `get_rpc_header(rpc, get_rpc_header(rpc, …))` past the parser's 64 levels).
    fn header_name(&mut self, d: usize) -> Expr {
        let mut name = match self.e.below(6) {
            0 | 1 => lit_s("dst"),
            2 => lit_s("x-gen"),
            // A `-bin` key reads as absent (a literal one is refused): computed, it runs.
            3 => bin(BinOp::Add, lit_s("x-gen"), lit_s("-bin")),
            4 if d > 0 => self.expr(&Type::Str, true, (d - 1).min(1)),
            _ => {
                let s = self.string_value();
                lit_s(&s)
            }
        };
        // The checker refuses name literals with upper-case letters (keys are lower-case),
        // and reads of `-bin` literals.
        if let ExprKind::Lit(Lit::Str(s)) = &mut name.kind {
            s.make_ascii_lowercase();
            if s.ends_with("-bin") {
                s.push('_');
            }
        }
        name
    }

    fn set_header(&mut self) -> Option<Stmt> {
        let id = self.any_msg_local()?;
        let m = self.locals[id].name.clone();
        let mut name = self.header_name(2);
        let mut value = self.expr(&Type::Str, true, self.cfg.max_expr_depth);
        // The checker refuses a literal name gRPC or Weft reserves or HTTP/2 cannot carry,
        // and a literal value that is not printable ASCII: keep literals writable.
        if let ExprKind::Lit(Lit::Str(s)) = &mut name.kind {
            *s = writable_header_name(s);
        }
        if let ExprKind::Lit(Lit::Str(s)) = &mut value.kind {
            s.retain(|c| (' '..='~').contains(&c));
        }
        // Computed ones that break the same rule fail the RPC at run time (in both executors
        // alike, which the comparison checks); most random strings would, so most computed
        // ones are made writable through `hash` (a non-negative int), and the statements
        // after the write run too. Wrapped, not replaced: an expression may hold a lambda
        // whose `set_metadata` the generator has counted on.
        if !matches!(name.kind, ExprKind::Lit(_)) && !self.e.chance(1, 4) {
            let n = call("str", vec![call("hash", vec![name])]);
            name = bin(BinOp::Add, lit_s("x-"), n);
        }
        if !matches!(value.kind, ExprKind::Lit(_)) && !self.e.chance(1, 4) {
            value = call("str", vec![call("hash", vec![value])]);
        }
        Some(st(StmtKind::Expr(call(
            "set_rpc_header",
            vec![name_e(&m), name, value],
        ))))
    }

    fn set_metadata(&mut self) -> Option<Stmt> {
        if self.hk == Hk::Init {
            return None;
        }
        let d = self.cfg.max_expr_depth;
        let existing = self.e.below(self.metadata.len() + 1);
        let (key, value) = match self.metadata.get(existing).cloned() {
            Some((key, t)) if self.producible(&t) => {
                let v = self.expr(&t, true, d);
                (key, v)
            }
            _ => {
                let t = self.local_type();
                let v = self.expr(&t, false, d);
                self.counter += 1;
                let key = format!("k{}", self.counter);
                self.metadata.push((key.clone(), t));
                (key, v)
            }
        };
        Some(st(StmtKind::Expr(call(
            "set_metadata",
            vec![lit_s(&key), value],
        ))))
    }

    /// Runs `arms` (each produces its block) as the checker does for the arms of a `match`,
    /// and updates definedness and reachability after it.
    fn arms_with_flow<T>(
        &mut self,
        arms: Vec<T>,
        exhaustive: bool,
        mut body: impl FnMut(&mut Self, T) -> Block,
    ) -> Vec<Block> {
        let before = self.defined.clone();
        let was_reachable = self.reachable;
        let mut after: Option<BTreeSet<usize>> = None;
        let mut out = Vec::new();
        for arm in arms {
            self.defined = before.clone();
            self.reachable = was_reachable;
            let b = body(self, arm);
            if self.reachable {
                after = Some(match after {
                    None => self.defined.clone(),
                    Some(a) => a.intersection(&self.defined).copied().collect(),
                });
            }
            out.push(b);
        }
        if !exhaustive {
            after = Some(match after {
                None => before.clone(),
                Some(a) => a.intersection(&before).copied().collect(),
            });
        }
        self.reachable = was_reachable && after.is_some();
        self.defined = after.unwrap_or(before);
        out
    }

    fn if_stmt(&mut self) -> Option<Stmt> {
        if !self.can_nest() {
            return None;
        }
        let n = 1 + self.e.below(3);
        let with_else = self.e.chance(1, 2);
        let d = self.cfg.max_expr_depth;
        // Each condition is checked where its branch starts (an `elif` sits in the `false`
        // arm of the `if` before it), so it is generated there too.
        let mut arms: Vec<Option<()>> = vec![Some(()); n];
        if with_else {
            arms.push(None);
        }
        let mut conds = Vec::new();
        let blocks = self.arms_with_flow(arms, with_else, |g, arm| {
            if arm.is_some() {
                let c = g.expr(&Type::Bool, true, d);
                conds.push(c);
            }
            g.nested_block()
        });
        let mut blocks = blocks.into_iter();
        let branches: Vec<(Expr, Block)> = conds
            .into_iter()
            .map(|c| (c, blocks.next().unwrap_or_else(|| blk(vec![]))))
            .collect();
        let otherwise = if with_else { blocks.next() } else { None };
        Some(st(StmtKind::If {
            branches,
            otherwise,
        }))
    }

    fn match_stmt(&mut self) -> Option<Stmt> {
        if !self.can_nest() {
            return None;
        }
        let d = self.cfg.max_expr_depth;
        let t = match self.e.below(9) {
            0 => Type::Int,
            1 => Type::Uint,
            2 => Type::Float,
            3 => Type::Str,
            4 => Type::Bool,
            _ => {
                let inner = self.option_inner_type();
                Type::option(inner)
            }
        };
        let scrutinee = self.expr(&t, false, d);
        let mut pats: Vec<PatternKind> = Vec::new();
        let exhaustive;
        match &t {
            Type::Option(_) => {
                let binder = |g: &mut Self| {
                    if g.e.chance(1, 4) {
                        None
                    } else {
                        Some(ident(&g.fresh("b")))
                    }
                };
                match self.e.below(6) {
                    0 => {
                        pats.push(PatternKind::None);
                        pats.push(PatternKind::Some(binder(self)));
                        exhaustive = true;
                    }
                    1 => {
                        pats.push(PatternKind::Some(binder(self)));
                        pats.push(PatternKind::Wildcard);
                        exhaustive = true;
                    }
                    2 => {
                        pats.push(PatternKind::Some(binder(self)));
                        exhaustive = false;
                    }
                    3 => {
                        pats.push(PatternKind::None);
                        exhaustive = false;
                    }
                    _ => {
                        pats.push(PatternKind::Some(binder(self)));
                        pats.push(PatternKind::None);
                        exhaustive = true;
                    }
                }
            }
            Type::Bool => match self.e.below(4) {
                0 => {
                    pats.push(PatternKind::Lit(Lit::Bool(true)));
                    exhaustive = false;
                }
                1 => {
                    pats.push(PatternKind::Lit(Lit::Bool(false)));
                    pats.push(PatternKind::Wildcard);
                    exhaustive = true;
                }
                _ => {
                    let first = self.e.chance(1, 2);
                    pats.push(PatternKind::Lit(Lit::Bool(first)));
                    pats.push(PatternKind::Lit(Lit::Bool(!first)));
                    exhaustive = true;
                }
            },
            _ => {
                let k = 1 + self.e.below(3);
                for _ in 0..k {
                    let l = match &t {
                        Type::Int => Lit::Int(i128::from(self.int_value())),
                        Type::Uint => Lit::Int(i128::from(self.uint_value())),
                        Type::Float => {
                            if self.e.chance(1, 4) {
                                Lit::Int(self.e.below(5) as i128 - 2)
                            } else {
                                Lit::Float(self.float_value())
                            }
                        }
                        _ => Lit::Str(self.string_value()),
                    };
                    pats.push(PatternKind::Lit(l));
                }
                exhaustive = self.e.chance(1, 2);
                if exhaustive {
                    pats.push(PatternKind::Wildcard);
                }
            }
        }
        let inner = match &t {
            Type::Option(x) => (**x).clone(),
            _ => Type::Unit,
        };
        let blocks = self.arms_with_flow(pats.clone(), exhaustive, |g, p| {
            g.scopes.push(Scope {
                function: false,
                names: Vec::new(),
            });
            if let PatternKind::Some(Some(b)) = &p {
                let id = g.declare_binder(&b.name, inner.clone(), true);
                g.defined.insert(id);
            }
            let body = g.nested_block();
            g.scopes.pop();
            body
        });
        let arms = pats
            .into_iter()
            .zip(blocks)
            .map(|(kind, body)| Arm {
                pattern: Pattern { kind, span: SP },
                body,
                span: SP,
            })
            .collect();
        Some(st(StmtKind::Match { scrutinee, arms }))
    }

    /// The `T` of an `Option<T>` worth matching on: usually one some source produces.
    fn option_inner_type(&mut self) -> Type {
        let mut cands: Vec<Type> = self
            .state
            .iter()
            .filter_map(|v| match &v.cell {
                Cell::Map(_, t) => Some(t.clone()),
                _ => None,
            })
            .collect();
        if self.hk != Hk::Init {
            cands.extend(self.metadata.iter().map(|m| m.1.clone()));
        }
        cands.retain(|t| self.producible(t));
        match self.e.pick(&cands) {
            Some(t) if self.e.chance(2, 3) => t.clone(),
            _ => match self.e.below(3) {
                0 => Type::Str,
                1 => Type::Float,
                _ => Type::Int,
            },
        }
    }

    fn foreach_stmt(&mut self) -> Option<Stmt> {
        if !self.can_nest() || self.in_foreach >= 2 {
            return None;
        }
        let d = self.cfg.max_expr_depth;
        // The collection: a state vector or map by name, or a collection value.
        let state_colls: Vec<usize> = (0..self.state.len())
            .filter(|i| !matches!(self.state[*i].cell, Cell::Scalar))
            .collect();
        let (coll, elem) = match self.e.pick(&state_colls).copied() {
            Some(i) if self.e.chance(1, 2) => {
                let v = self.state[i].clone();
                let elem = match &v.cell {
                    Cell::Map(k, t) => (k.clone(), Some(t.clone())),
                    Cell::Vec(t) => (t.clone(), None),
                    Cell::Scalar => return None,
                };
                (name_e(&v.name), elem)
            }
            _ => {
                let colls: Vec<Type> = self
                    .available_types()
                    .into_iter()
                    .filter(|t| matches!(t, Type::Vec(_) | Type::Map(..)))
                    .collect();
                let t = self.e.pick(&colls)?.clone();
                let c = self.expr(&t, false, d);
                let elem = match t {
                    Type::Vec(x) => (*x, None),
                    Type::Map(k, v) => (*k, Some(*v)),
                    _ => return None,
                };
                (c, elem)
            }
        };
        let binders: Vec<(String, Type)> = match elem {
            (t, None) => vec![(self.fresh("x"), t)],
            (k, Some(v)) => {
                if self.e.chance(1, 2) {
                    vec![(self.fresh("x"), k), (self.fresh("x"), v)]
                } else {
                    vec![(self.fresh("x"), Type::pair(k, v))]
                }
            }
        };
        let saved_defined = self.defined.clone();
        let saved_reachable = self.reachable;
        self.scopes.push(Scope {
            function: true,
            names: Vec::new(),
        });
        for (n, t) in &binders {
            let id = self.declare_binder(n, t.clone(), true);
            self.defined.insert(id);
        }
        self.lambdas.push(LambdaKind::ForEach);
        self.in_foreach += 1;
        let body = self.nested_block();
        self.in_foreach -= 1;
        self.lambdas.pop();
        self.scopes.pop();
        // The body may run zero times.
        self.defined = saved_defined;
        self.reachable = saved_reachable;
        let names: Vec<String> = binders.into_iter().map(|b| b.0).collect();
        Some(st(StmtKind::Expr(call(
            "foreach",
            vec![coll, lambda(&names, body)],
        ))))
    }

    fn rmw_stmt(&mut self) -> Option<Stmt> {
        let e = self.rmw(None)?;
        Some(st(StmtKind::Expr(e)))
    }

    /// `get(map, key, lambda(v): …)`; with `ret`, every path returns a `ret`.
    fn rmw(&mut self, ret: Option<&Type>) -> Option<Expr> {
        if !self.can_nest() || self.in_foreach > 0 {
            return None;
        }
        let maps: Vec<usize> = (0..self.state.len())
            .filter(|i| match &self.state[*i].cell {
                Cell::Map(k, _) => self.producible(&k.clone()),
                _ => false,
            })
            .collect();
        let i = *self.e.pick(&maps)?;
        let v = self.state[i].clone();
        let Cell::Map(kt, vt) = &v.cell else {
            return None;
        };
        // The key counts as a level of nesting: a key that is itself a read-modify-write
        // (of the same map, say) then stops at the block depth limit. Without it the fuzzer
        // drove the key to recurse past the parser's limit of 64 levels.
        self.depth += 1;
        let key = self.expr(kt, true, self.cfg.max_expr_depth.min(2));
        self.depth -= 1;
        let saved_defined = self.defined.clone();
        let saved_reachable = self.reachable;
        self.scopes.push(Scope {
            function: true,
            names: Vec::new(),
        });
        let binder = self.fresh("v");
        let id = self.declare_binder(&binder, vt.clone(), true);
        self.defined.insert(id);
        self.lambdas.push(LambdaKind::Rmw(ret.cloned()));
        self.depth += 1;
        let mut stmts = Vec::new();
        // The "modify" of the read-modify-write: the binder's final value is stored.
        if self.producible(vt) && self.e.chance(3, 4) {
            let value = self.expr(vt, true, 2);
            stmts.push(st(StmtKind::Assign {
                target: AssignTarget::Name(ident(&binder)),
                value,
            }));
        }
        let n = self.e.below(self.cfg.max_block_len);
        for _ in 0..n {
            if !self.reachable {
                break;
            }
            if let Some(s) = self.stmt() {
                stmts.push(s);
            }
        }
        if let Some(t) = ret
            && self.reachable
        {
            let value = self.expr(t, false, 2);
            stmts.push(st(StmtKind::Return(Some(value))));
        }
        self.depth -= 1;
        self.lambdas.pop();
        self.scopes.pop();
        self.defined = saved_defined;
        self.reachable = saved_reachable;
        Some(call(
            "get",
            vec![name_e(&v.name), key, lambda(&[binder], blk(stmts))],
        ))
    }

    fn channel_send(&mut self) -> Option<Stmt> {
        let c = self.e.pick(&self.channels)?.clone();
        let t = if self.e.chance(1, 5) {
            match self.any_msg_local() {
                Some(id) => self.locals[id].ty.clone(),
                None => self.local_type(),
            }
        } else {
            self.local_type()
        };
        let value = self.expr(&t, false, self.cfg.max_expr_depth);
        Some(st(StmtKind::Expr(call("send", vec![value, name_e(&c)]))))
    }

    fn direction(&mut self, up: bool) -> Expr {
        let lower = self.e.chance(1, 8);
        name_e(match (up, lower) {
            (true, false) => "Up",
            (true, true) => "up",
            (false, false) => "Down",
            (false, true) => "down",
        })
    }

    /// A send that ends the handler.
    fn send_stmt(&mut self) -> Option<Stmt> {
        if self.hk == Hk::Init || self.in_rmw() {
            return None;
        }
        let d = self.cfg.max_expr_depth;
        let choice = self.e.below(8);
        let s = if choice < 2 {
            // Reject.
            let msg = if self.e.chance(1, 5) {
                name_e(
                    self.e
                        .pick(&["denied", "too_many", "nope"])
                        .copied()
                        .unwrap_or("x"),
                )
            } else {
                self.expr(&Type::Str, true, 2)
            };
            let mut args = vec![msg];
            if self.e.chance(3, 4) {
                let code = self.e.pick(CODES).copied().unwrap_or("ABORTED");
                args.push(name_e(code));
            }
            let up = self.direction(true);
            call("send", vec![call("err", args), up])
        } else if self.hk == Hk::Req && choice < 6 {
            let reqs = self.msg_locals(&Type::Request);
            let id = *self.e.pick(&reqs)?;
            let m = self.locals[id].name.clone();
            let down = self.direction(false);
            call("send", vec![name_e(&m), down])
        } else {
            // A response up: the response in `resp`, a local reply in `req`.
            if !self.producible(&Type::Response) {
                return None;
            }
            let m = self.expr(&Type::Response, false, d);
            let up = self.direction(true);
            call("send", vec![m, up])
        };
        self.reachable = false;
        Some(st(StmtKind::Expr(s)))
    }

    fn return_stmt(&mut self) -> Option<Stmt> {
        let kind = self.lambdas.last()?.clone();
        let value = match kind {
            LambdaKind::Rmw(Some(t)) => Some(self.expr(&t, false, 2)),
            _ => None,
        };
        self.reachable = false;
        Some(st(StmtKind::Return(value)))
    }

    // ---- expressions ---------------------------------------------------------------------

    /// Types of every value a name or field here has (for picking collections and such).
    fn available_types(&self) -> Vec<Type> {
        let mut out: Vec<Type> = Vec::new();
        let mut add = |t: &Type| {
            if !out.contains(t) {
                out.push(t.clone());
            }
        };
        for id in self.usable() {
            add(&self.locals[id].ty);
        }
        for p in &self.params {
            add(&p.ty);
        }
        for v in &self.state {
            if !matches!(v.cell, Cell::Map(..)) {
                add(&v.ty);
            }
        }
        if self.hk != Hk::Init {
            for id in self.usable() {
                for f in self.fields_of(&self.locals[id].ty) {
                    add(&f.1);
                }
            }
        }
        out
    }

    /// Messages whose fields, headers and sizes can be read here: the handler's message and
    /// its copies, and responses kept in scalar state (in any handler, `init` included).
    fn readable_msgs(&self) -> Vec<(String, Type)> {
        let mut out = Vec::new();
        if self.hk != Hk::Init {
            for id in self.usable() {
                if self.locals[id].ty.is_message() {
                    out.push((self.locals[id].name.clone(), self.locals[id].ty.clone()));
                }
            }
        }
        for v in &self.state {
            if matches!(v.cell, Cell::Scalar) && v.ty.is_message() {
                out.push((v.name.clone(), v.ty.clone()));
            }
        }
        out
    }

    /// Names and field reads of type `t`.
    fn leaves(&self, t: &Type) -> Vec<Expr> {
        let mut out = Vec::new();
        for id in self.usable() {
            if self.locals[id].ty == *t {
                out.push(name_e(&self.locals[id].name));
            }
        }
        for p in &self.params {
            if p.ty == *t {
                out.push(name_e(&p.name));
            }
        }
        for v in &self.state {
            if v.ty == *t && !matches!(v.cell, Cell::Map(..)) {
                out.push(name_e(&v.name));
            }
        }
        for (m, mty) in self.readable_msgs() {
            let (m, mty) = (&m, &mty);
            {
                for (path, ft) in self.fields_of(mty) {
                    if ft == *t {
                        out.push(call("get", vec![name_e(m), lit_s(path)]));
                    }
                }
                for p in &self.params {
                    if let Some((pm, path)) = &p.field
                        && pm == mty
                        && self.fields_of(mty).iter().any(|f| f.0 == path && f.1 == *t)
                    {
                        out.push(call("get", vec![name_e(m), name_e(&p.name)]));
                    }
                }
                if *mty == Type::Response {
                    if *t == Type::Str {
                        out.push(call("get", vec![name_e(m), lit_s("meta_status")]));
                    }
                    if *t == Type::Int {
                        out.push(call("get", vec![name_e(m), lit_s("meta_code")]));
                    }
                }
            }
        }
        match t {
            Type::Int => out.push(name_e("inf")),
            Type::Float => out.push(name_e("inf_f")),
            _ => {}
        }
        out
    }

    fn producible(&self, t: &Type) -> bool {
        match t {
            Type::Int | Type::Uint | Type::Float | Type::Bool | Type::Str | Type::Instant => true,
            Type::Pair(a, b) => {
                (self.producible(a) && self.producible(b)) || !self.leaves(t).is_empty()
            }
            Type::Option(x) => self.producible(x),
            Type::Unit | Type::Channel | Type::Dyn => false,
            _ => !self.leaves(t).is_empty(),
        }
    }

    /// An expression of type `t`. With `expect` the checker passes `t` down as the expected
    /// type (so a plain literal can be a `uint`); without it the expression's own type must be
    /// exactly `t`.
    fn expr(&mut self, t: &Type, expect: bool, d: usize) -> Expr {
        if d > 0
            && !self.e.chance(1, 3)
            && let Some(x) = self.compound(t, expect, d - 1)
        {
            return x;
        }
        self.leaf(t, expect)
    }

    fn literal(&mut self, t: &Type, expect: bool) -> Option<Expr> {
        let rpc = self.hk != Hk::Init;
        Some(match t {
            Type::Int => self.int_lit(),
            Type::Uint => {
                if rpc && self.e.chance(1, 5) {
                    call("rpc_id", vec![])
                } else {
                    self.uint_lit(expect)
                }
            }
            Type::Float => self.float_lit(),
            Type::Bool => lit(Lit::Bool(self.e.chance(1, 2))),
            Type::Str => {
                if rpc && self.e.chance(1, 5) {
                    let f = self
                        .e
                        .pick(&["method", "src", "dst"])
                        .copied()
                        .unwrap_or("src");
                    call(f, vec![])
                } else {
                    let s = self.string_value();
                    lit_s(&s)
                }
            }
            Type::Instant => call("current_time", vec![]),
            Type::Pair(a, b) if self.producible(a) && self.producible(b) => {
                let a = self.leaf(a, expect);
                let b = self.leaf(b, expect);
                ex(ExprKind::Pair(Box::new(a), Box::new(b)))
            }
            Type::Option(_) if expect && self.e.chance(1, 3) => name_e("None"),
            Type::Option(x) if self.producible(x) => {
                let x = self.leaf(x, expect);
                call("Some", vec![x])
            }
            _ => return None,
        })
    }

    fn leaf(&mut self, t: &Type, expect: bool) -> Expr {
        let mut cands = self.leaves(t);
        let literal = if cands.is_empty() || self.e.chance(1, 2) {
            self.literal(t, expect)
        } else {
            None
        };
        if let Some(l) = literal {
            return l;
        }
        if cands.is_empty() {
            // Only reached when a caller skipped `producible`: the checker will say so.
            return lit(Lit::Int(0));
        }
        let i = self.e.below(cands.len());
        cands.swap_remove(i)
    }

    /// A string built only from literals and numbers, so it cannot carry a growing value.
    fn small_str(&mut self, d: usize) -> Expr {
        if d > 0 && self.e.chance(1, 3) {
            let t = match self.e.below(5) {
                0 => Type::Int,
                1 => Type::Uint,
                2 => Type::Float,
                3 => Type::Bool,
                _ => Type::Instant,
            };
            let x = self.expr(&t, false, d - 1);
            return call("str", vec![x]);
        }
        let s = self.string_value();
        lit_s(&s)
    }

    fn compound(&mut self, t: &Type, expect: bool, d: usize) -> Option<Expr> {
        match t {
            Type::Int => self.gen_int(expect, d),
            Type::Uint => self.gen_uint(expect, d),
            Type::Float => self.gen_float(expect, d),
            Type::Bool => self.gen_bool(d),
            Type::Str => self.gen_str(expect, d),
            Type::Bytes => self.gen_bytes(d),
            Type::Instant => match self.e.below(4) {
                0 => {
                    let f = if self.e.chance(1, 2) { "min" } else { "max" };
                    let a = self.expr(t, expect, d);
                    let b = self.expr(t, true, d);
                    Some(call(f, vec![a, b]))
                }
                1 => self.index_get(t, d),
                2 => self.pair_get(t, d),
                _ => self.rmw(Some(t)),
            },
            Type::Pair(a, b) => match self.e.below(4) {
                0 => self.index_get(t, d),
                1 => self.rmw(Some(t)),
                // A pair can be producible through a whole pair in scope while one of its
                // parts is not (a `<bytes, Instant>` state variable in `init`, where no bytes
                // are): then only that variable will do.
                _ if self.producible(a) && self.producible(b) => {
                    let a = self.expr(a, expect, d);
                    let b = self.expr(b, expect, d);
                    Some(ex(ExprKind::Pair(Box::new(a), Box::new(b))))
                }
                _ => None,
            },
            Type::Vec(_) => {
                if self.producible(t) && self.e.chance(1, 2) {
                    let v = self.expr(t, false, d);
                    let n = if self.e.chance(2, 3) {
                        lit(Lit::Int(1 + self.e.below(4) as i128))
                    } else {
                        self.expr(&Type::Int, true, d)
                    };
                    Some(call("random_choices", vec![v, n]))
                } else {
                    None
                }
            }
            Type::Option(x) => self.gen_option(x, expect, d),
            _ => None,
        }
    }

    fn arith(&mut self, t: &Type, expect: bool, d: usize, ops: &[BinOp]) -> Expr {
        let op = self.e.pick(ops).copied().unwrap_or(BinOp::Add);
        let l = self.expr(t, expect, d);
        let r = self.expr(t, true, d);
        bin(op, l, r)
    }

    /// `-x`, never on a literal: `-5` reads back as the literal `-5`, not as a negation.
    fn neg(&mut self, t: &Type, expect: bool, d: usize) -> Option<Expr> {
        let x = self.expr(t, expect, d);
        if matches!(x.kind, ExprKind::Lit(_)) {
            return Some(x);
        }
        Some(un(UnOp::Neg, x))
    }

    /// `opt op x` with an `Option` operand: unwrapped, a `None` is a run-time error.
    fn opt_arith(&mut self, t: &Type, d: usize) -> Option<Expr> {
        let o = self.gen_option_source(t, d)?;
        let op = *self.e.pick(&[BinOp::Add, BinOp::Sub, BinOp::Mul])?;
        // The right operand is checked expecting `Option<t>`, which literals ignore.
        let r = self.expr(t, false, d);
        Some(bin(op, o, r))
    }

    fn index_get(&mut self, t: &Type, d: usize) -> Option<Expr> {
        let vt = Type::vec(t.clone());
        if !self.producible(&vt) {
            return None;
        }
        let v = self.expr(&vt, false, d);
        let i = self.index(d);
        Some(call("get", vec![v, i]))
    }

    /// A vector index: mostly small, so reads of short vectors often succeed; sometimes any
    /// int (out of range is a run-time error).
    fn index(&mut self, d: usize) -> Expr {
        match self.e.below(5) {
            0 | 1 => lit(Lit::Int(0)),
            2 => lit(Lit::Int(self.e.below(3) as i128)),
            _ => self.expr(&Type::Int, true, d),
        }
    }

    fn pair_get(&mut self, t: &Type, d: usize) -> Option<Expr> {
        let first = self.e.chance(1, 2);
        let other = self.scalar_type();
        let pt = if first {
            Type::pair(t.clone(), other)
        } else {
            Type::pair(other, t.clone())
        };
        if !self.producible(&pt) {
            return None;
        }
        let p = self.expr(&pt, false, d);
        Some(call(
            "get",
            vec![p, lit(Lit::Int(if first { 0 } else { 1 }))],
        ))
    }

    fn conv(&mut self, f: &str, from: &[Type], d: usize) -> Option<Expr> {
        let t = self.e.pick(from)?.clone();
        let x = self.expr(&t, false, d);
        Some(call(f, vec![x]))
    }

    fn size_expr(&mut self, d: usize) -> Option<Expr> {
        let state_colls: Vec<String> = self
            .state
            .iter()
            .filter(|v| !matches!(v.cell, Cell::Scalar))
            .map(|v| v.name.clone())
            .collect();
        if !state_colls.is_empty() && self.e.chance(1, 3) {
            let n = self.e.pick(&state_colls)?.clone();
            return Some(call("size", vec![name_e(&n)]));
        }
        let mut types: Vec<Type> = self
            .available_types()
            .into_iter()
            .filter(|t| matches!(t, Type::Vec(_) | Type::Map(..) | Type::Bytes))
            .collect();
        types.push(Type::Str);
        let t = self.e.pick(&types)?.clone();
        let x = self.expr(&t, false, d);
        Some(call("size", vec![x]))
    }

    fn hash_expr(&mut self, d: usize) -> Option<Expr> {
        let mut types: Vec<Type> = self
            .available_types()
            .into_iter()
            .filter(Type::is_comparable)
            .collect();
        types.extend([Type::Int, Type::Str, Type::Float]);
        let t = self.e.pick(&types)?.clone();
        let x = self.expr(&t, false, d);
        Some(call("hash", vec![x]))
    }

    fn byte_size(&mut self) -> Option<Expr> {
        let msgs = self.readable_msgs();
        let (m, ty) = self.e.pick(&msgs)?.clone();
        if self.e.chance(1, 2) {
            return Some(call("byte_size", vec![name_e(&m)]));
        }
        let fields = self.fields_of(&ty);
        let (path, _) = self.e.pick(&fields)?;
        Some(call("byte_size", vec![name_e(&m), lit_s(path)]))
    }

    fn min_max(&mut self, t: &Type, expect: bool, d: usize) -> Expr {
        let f = if self.e.chance(1, 2) { "min" } else { "max" };
        let a = self.expr(t, expect, d);
        let b = self.expr(t, true, d);
        call(f, vec![a, b])
    }

    fn gen_int(&mut self, expect: bool, d: usize) -> Option<Expr> {
        let t = Type::Int;
        let all = [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div, BinOp::Rem];
        match self.e.below(16) {
            0..=2 => Some(self.arith(&t, expect, d, &all)),
            3 => self.opt_arith(&t, d),
            4 => self.neg(&t, expect, d),
            5 => self.size_expr(d),
            6 => self.hash_expr(d),
            7 => {
                // Mostly a valid range; an empty one is a run-time error.
                if self.e.chance(2, 3) {
                    let lo = self.e.below(20) as i128 - 10;
                    let hi = lo + 1 + self.e.below(10) as i128;
                    Some(call("randomi", vec![lit(Lit::Int(lo)), lit(Lit::Int(hi))]))
                } else {
                    let lo = self.expr(&t, true, d);
                    let hi = self.expr(&t, true, d);
                    Some(call("randomi", vec![lo, hi]))
                }
            }
            8 => self.conv(
                "int",
                &[Type::Float, Type::Uint, Type::Bool, Type::Instant],
                d,
            ),
            9 => {
                let x = self.expr(&t, expect, d);
                Some(call("abs", vec![x]))
            }
            10 => Some(self.min_max(&t, expect, d)),
            11 => self.byte_size(),
            12 => self.index_get(&t, d),
            13 => self.pair_get(&t, d),
            14 => self.rmw(Some(&t)),
            _ => {
                // `uint` and `float` widen or narrow explicitly.
                self.conv("int", &[Type::Uint, Type::Float], d)
            }
        }
    }

    fn gen_uint(&mut self, expect: bool, d: usize) -> Option<Expr> {
        let t = Type::Uint;
        let all = [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div, BinOp::Rem];
        match self.e.below(10) {
            0..=2 => Some(self.arith(&t, expect, d, &all)),
            3 => self.conv(
                "uint",
                &[Type::Int, Type::Float, Type::Bool, Type::Instant],
                d,
            ),
            4 => Some(self.min_max(&t, expect, d)),
            5 => self.index_get(&t, d),
            6 => self.pair_get(&t, d),
            7 => self.rmw(Some(&t)),
            8 => {
                let x = self.expr(&t, expect, d);
                Some(call("abs", vec![x]))
            }
            _ => self.opt_arith(&t, d),
        }
    }

    fn gen_float(&mut self, expect: bool, d: usize) -> Option<Expr> {
        let t = Type::Float;
        let all = [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div, BinOp::Rem];
        match self.e.below(17) {
            0 | 1 => Some(self.arith(&t, expect, d, &all)),
            2 => {
                // Mixed: the int side widens to float.
                let op = *self.e.pick(&all)?;
                if self.e.chance(1, 2) {
                    let l = self.expr(&Type::Int, expect, d);
                    let r = self.expr(&t, true, d);
                    Some(bin(op, l, r))
                } else {
                    let l = self.expr(&t, expect, d);
                    let r = self.expr(&Type::Int, true, d);
                    Some(bin(op, l, r))
                }
            }
            3 => self.neg(&t, expect, d),
            4 => self.conv(
                "float",
                &[Type::Int, Type::Uint, Type::Bool, Type::Instant],
                d,
            ),
            5 => {
                let lo = self.expr(&t, true, d);
                let hi = self.expr(&t, true, d);
                Some(call("randomf", vec![lo, hi]))
            }
            6 => {
                let a = self.expr(&Type::Instant, true, d);
                let b = self.expr(&Type::Instant, true, d);
                Some(call("time_diff", vec![a, b]))
            }
            7 => {
                let elems = [Type::Int, Type::Uint, Type::Float, Type::Instant];
                let cands: Vec<Type> = elems
                    .into_iter()
                    .map(Type::vec)
                    .filter(|v| self.producible(v))
                    .collect();
                let v = self.e.pick(&cands)?.clone();
                let v = self.expr(&v, false, d);
                let q = self.expr(&t, true, d);
                Some(call("quantile", vec![v, q]))
            }
            8 => {
                let x = self.expr(&t, expect, d);
                Some(call("abs", vec![x]))
            }
            9 => Some(self.min_max(&t, expect, d)),
            10 => self.index_get(&t, d),
            11 => self.pair_get(&t, d),
            12 => self.rmw(Some(&t)),
            13 => self.opt_arith(&t, d),
            _ => Some(self.arith(&t, expect, d, &all)),
        }
    }

    fn gen_bool(&mut self, d: usize) -> Option<Expr> {
        match self.e.below(10) {
            0..=3 => {
                let mut types = vec![
                    Type::Int,
                    Type::Uint,
                    Type::Float,
                    Type::Str,
                    Type::Instant,
                    Type::Bool,
                    Type::Bytes,
                    Type::pair(Type::Int, Type::Str),
                ];
                types.extend(
                    self.available_types()
                        .into_iter()
                        .filter(|t| matches!(t, Type::Vec(_) | Type::Map(..))),
                );
                types.retain(|t| self.producible(t) && t.is_comparable());
                let t = self.e.pick(&types)?.clone();
                let ordered = matches!(
                    t,
                    Type::Int | Type::Uint | Type::Float | Type::Str | Type::Bytes | Type::Instant
                );
                let ops: &[BinOp] = if ordered {
                    &[
                        BinOp::Eq,
                        BinOp::Ne,
                        BinOp::Lt,
                        BinOp::Le,
                        BinOp::Gt,
                        BinOp::Ge,
                    ]
                } else {
                    &[BinOp::Eq, BinOp::Ne]
                };
                let op = *self.e.pick(ops)?;
                let l = self.expr(&t, false, d);
                let r = self.expr(&t, true, d);
                Some(bin(op, l, r))
            }
            4 | 5 => {
                let op = if self.e.chance(1, 2) {
                    BinOp::And
                } else {
                    BinOp::Or
                };
                let l = self.expr(&Type::Bool, true, d);
                let r = self.expr(&Type::Bool, true, d);
                Some(bin(op, l, r))
            }
            6 => {
                let x = self.expr(&Type::Bool, true, d);
                Some(un(UnOp::Not, x))
            }
            7 => self.index_get(&Type::Bool, d),
            8 => self.pair_get(&Type::Bool, d),
            _ => self.rmw(Some(&Type::Bool)),
        }
    }

    fn gen_str(&mut self, expect: bool, d: usize) -> Option<Expr> {
        let t = Type::Str;
        match self.e.below(12) {
            0..=2 => {
                // One side carries data, the other is small: growth stays linear. Operands
                // are generated in text order, the order the checker meets metadata keys.
                if self.e.chance(1, 2) {
                    let big = self.expr(&t, expect, d);
                    let small = self.small_str(d);
                    Some(bin(BinOp::Add, big, small))
                } else {
                    let small = self.small_str(d);
                    let big = self.expr(&t, true, d);
                    Some(bin(BinOp::Add, small, big))
                }
            }
            3 => self.conv(
                "str",
                &[
                    Type::Int,
                    Type::Uint,
                    Type::Float,
                    Type::Bool,
                    Type::Instant,
                    Type::Str,
                ],
                d,
            ),
            4 => {
                let msgs = self.readable_msgs();
                let (m, _) = self.e.pick(&msgs)?.clone();
                let n = self.header_name(d);
                Some(call("get_rpc_header", vec![name_e(&m), n]))
            }
            5 => {
                let f = if self.e.chance(1, 2) {
                    "encrypt"
                } else {
                    "compress"
                };
                let x = if self.take_growth() {
                    self.expr(&t, false, d)
                } else {
                    self.small_str(d)
                };
                let mut args = vec![x];
                if f == "encrypt" {
                    args.push(self.expr(&t, true, d.min(1)));
                }
                Some(call(f, args))
            }
            6 => self.index_get(&t, d),
            7 => self.pair_get(&t, d),
            8 => self.rmw(Some(&t)),
            _ => self.conv("str", &[Type::Int, Type::Float], d),
        }
    }

    fn gen_bytes(&mut self, d: usize) -> Option<Expr> {
        let t = Type::Bytes;
        if !self.producible(&t) {
            return None;
        }
        match self.e.below(7) {
            0 => {
                if !self.take_growth() {
                    return None;
                }
                let a = self.expr(&t, false, d);
                let b = self.expr(&t, true, d);
                Some(bin(BinOp::Add, a, b))
            }
            1 => {
                // Sealing adds a fixed 40 bytes: linear growth, fine anywhere.
                let x = self.expr(&t, false, d);
                let k = self.expr(&Type::Str, true, d.min(1));
                Some(call("encrypt", vec![x, k]))
            }
            2 => {
                if !self.take_growth() {
                    return None;
                }
                let x = self.expr(&t, false, d);
                Some(call("compress", vec![x]))
            }
            3 => self.index_get(&t, d),
            4 => self.pair_get(&t, d),
            5 => self.rmw(Some(&t)),
            _ => None,
        }
    }

    /// An expression of type `Option<t>` that is not `Some(…)` / `None`.
    fn gen_option_source(&mut self, t: &Type, d: usize) -> Option<Expr> {
        for _ in 0..3 {
            let r = match self.e.below(6) {
                0 | 1 => {
                    let maps: Vec<StateVar> = self
                        .state
                        .iter()
                        .filter(|v| matches!(&v.cell, Cell::Map(_, vt) if vt == t))
                        .cloned()
                        .collect();
                    match self.e.pick(&maps) {
                        Some(v) => {
                            let Cell::Map(kt, _) = &v.cell else { continue };
                            if !self.producible(kt) {
                                continue;
                            }
                            let k = self.expr(kt, true, d);
                            Some(call("get", vec![name_e(&v.name), k]))
                        }
                        None => None,
                    }
                }
                2 => {
                    let maps: Vec<Type> = self
                        .available_types()
                        .into_iter()
                        .filter(|m| matches!(m, Type::Map(_, v) if **v == *t))
                        .collect();
                    match self.e.pick(&maps).cloned() {
                        Some(Type::Map(kt, vt)) if self.producible(&kt) => {
                            let m = self.expr(&Type::Map(kt.clone(), vt), false, d);
                            let k = self.expr(&kt, true, d);
                            Some(call("get", vec![m, k]))
                        }
                        _ => None,
                    }
                }
                3 => match t {
                    Type::Int | Type::Float => {
                        let f = if *t == Type::Int {
                            "parse_int"
                        } else {
                            "parse_float"
                        };
                        let s = self.expr(&Type::Str, true, d);
                        Some(call(f, vec![s]))
                    }
                    _ => None,
                },
                4 => match t {
                    Type::Str | Type::Bytes if self.producible(t) => {
                        let x = self.expr(t, false, d);
                        if self.e.chance(1, 2) {
                            let k = self.expr(&Type::Str, true, d.min(1));
                            Some(call("decrypt", vec![x, k]))
                        } else {
                            Some(call("decompress", vec![x]))
                        }
                    }
                    _ => None,
                },
                _ => {
                    if self.hk == Hk::Init {
                        None
                    } else {
                        let keys: Vec<String> = self
                            .metadata
                            .iter()
                            .filter(|m| m.1 == *t)
                            .map(|m| m.0.clone())
                            .collect();
                        self.e
                            .pick(&keys)
                            .map(|k| call("get_metadata", vec![lit_s(k)]))
                    }
                }
            };
            if r.is_some() {
                return r;
            }
        }
        // Options of locals.
        let opt = Type::option(t.clone());
        let leaves = self.leaves(&opt);
        self.e.pick(&leaves).cloned()
    }

    fn gen_option(&mut self, t: &Type, expect: bool, d: usize) -> Option<Expr> {
        if self.e.chance(1, 4) && self.producible(t) {
            let x = self.expr(t, expect, d);
            return Some(call("Some", vec![x]));
        }
        self.gen_option_source(t, d)
    }
}

// ---------------------------------------------------------------------------------------------
// Messages

fn random_value(e: &mut Entropy, t: &Type) -> Value {
    match t {
        Type::Int => Value::Int(match e.below(5) {
            0 => 0,
            1 => e.below(10) as i64 - 3,
            2 => i64::MIN,
            _ => e.next_u64() as i64,
        }),
        Type::Uint => Value::Uint(match e.below(4) {
            0 => 0,
            1 => e.below(10) as u64,
            _ => e.next_u64(),
        }),
        Type::Float => Value::Float(match e.below(6) {
            0 => 0.0,
            1 => f64::NAN,
            2 => f64::INFINITY,
            3 => -1.5,
            _ => f64::from_bits(e.next_u64()),
        }),
        Type::Bool => Value::Bool(e.chance(1, 2)),
        Type::Str => {
            let n = e.below(6);
            Value::Str((0..n).map(|_| *e.pick(CHARS).unwrap_or(&'a')).collect())
        }
        Type::Bytes => Value::Bytes(e.bytes(12)),
        Type::Vec(x) => {
            let n = if e.chance(1, 6) { 0 } else { 1 + e.below(4) };
            Value::Vec((0..n).map(|_| random_value(e, x)).collect())
        }
        Type::Map(k, v) => {
            let n = e.below(4);
            Value::Map(
                (0..n)
                    .map(|_| (random_value(e, k), random_value(e, v)))
                    .collect(),
            )
        }
        _ => Value::Unit,
    }
}

/// Random message bytes: each field of `fields` present or not, with a random value; now and
/// then plain garbage or a corrupted encoding, which must be rejected as malformed.
pub fn random_message_bytes(e: &mut Entropy, fields: &[(FieldPath, Type)]) -> Vec<u8> {
    if e.chance(1, 10) {
        return e.bytes(24);
    }
    let mut bytes = Vec::new();
    for (path, t) in fields {
        if e.chance(3, 4) {
            let v = random_value(e, t);
            if let Ok(b) = wire::write(&bytes, path, &v) {
                bytes = b;
            }
        }
    }
    if !bytes.is_empty() && e.chance(1, 12) {
        // Corrupt one byte or cut the tail.
        let i = e.below(bytes.len());
        if e.chance(1, 2) {
            bytes[i] = e.next_u64() as u8;
        } else {
            bytes.truncate(i);
        }
    }
    bytes
}

fn resolve_fields(
    desc: &prost_reflect::MessageDescriptor,
    table: &[(&'static str, Type)],
) -> Result<Vec<(FieldPath, Type)>, String> {
    table
        .iter()
        .map(|(p, t)| {
            resolve_path(desc, p)
                .map(|fp| (fp, t.clone()))
                .map_err(|e| format!("field `{p}` of the test schema: {e}"))
        })
        .collect()
}

fn random_headers(e: &mut Entropy, m: &mut Message) {
    for _ in 0..e.below(3) {
        let k = match e.below(5) {
            0 => "dst".to_owned(),
            1 => "x-gen".to_owned(),
            4 => "x-gen-bin".to_owned(),
            _ => format!("h{}", e.below(4)),
        };
        let v = match random_value(e, &Type::Str) {
            Value::Str(s) => s,
            _ => String::new(),
        };
        m.headers.insert(k, v);
    }
}

// ---------------------------------------------------------------------------------------------
// Running generated programs

/// What [`exercise`] saw, for statistics.
#[derive(Clone, Debug, Default)]
pub struct Exercised {
    pub init_failed: bool,
    pub forwarded: usize,
    pub replied: usize,
    pub rejected: usize,
    /// Requests and responses rejected by a run-time error (INTERNAL).
    pub runtime_errors: u64,
    /// Requests and responses rejected as malformed (INVALID_ARGUMENT).
    pub malformed: u64,
}

/// A state store that forwards to another and records every error the checker should have
/// ruled out. Only an index out of range is a legitimate run-time error of a store: the rest
/// (wrong key kinds, sum over non-numbers, shared vectors…) mean the checker accepted a
/// program the stores cannot run.
struct Watched<S> {
    inner: S,
    bad: Arc<Mutex<Vec<String>>>,
}

impl<S> Watched<S> {
    fn note<T>(&self, r: Result<T, StateError>) -> Result<T, StateError> {
        if let Err(e) = &r
            && !matches!(e, StateError::IndexOutOfRange { .. })
        {
            self.bad
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(e.to_string());
        }
        r
    }
}

impl<S: StateStore> StateStore for Watched<S> {
    fn get(&mut self, var: usize, key: &Value) -> Result<Option<Value>, StateError> {
        let r = self.inner.get(var, key);
        self.note(r)
    }
    fn set(&mut self, var: usize, key: Value, value: Value) -> Result<(), StateError> {
        let r = self.inner.set(var, key, value);
        self.note(r)
    }
    fn delete(&mut self, var: usize, key: &Value) -> Result<(), StateError> {
        let r = self.inner.delete(var, key);
        self.note(r)
    }
    fn len(&mut self, var: usize) -> Result<usize, StateError> {
        let r = self.inner.len(var);
        self.note(r)
    }
    fn entries(&mut self, var: usize) -> Result<Vec<(Value, Value)>, StateError> {
        let r = self.inner.entries(var);
        self.note(r)
    }
    fn entries_inserted(&mut self, var: usize) -> Result<Vec<(Value, Value)>, StateError> {
        let r = self.inner.entries_inserted(var);
        self.note(r)
    }
    fn snapshot(&mut self) -> Vec<(String, Value)> {
        self.inner.snapshot()
    }
}

fn is_type_error(text: &str) -> bool {
    text.contains("internal type error")
}

/// Runs a generated element through the whole pipeline and checks every property that must
/// hold for a well-typed program: it parses without diagnostics; printing the parse gives the
/// same text; it checks without errors against `method` with its config parameters; two
/// instances sharing state run `init` and then `rpcs` random requests (and their responses)
/// without internal type errors or store errors, every run-time error rejecting with INTERNAL
/// and every malformed message with INVALID_ARGUMENT; sends go in the right direction with the
/// right kind of message; and no per-RPC scratch outlives its RPC.
///
/// Returns the first broken property as text. Panics only if the code under test does.
pub fn exercise(
    g: &Generated,
    method: &MethodSchema,
    e: &mut Entropy,
    rpcs: usize,
) -> Result<Exercised, String> {
    let src = SourceFile::new("generated.weft", g.source.clone());
    let (ast, diags) = parse(&src);
    if !diags.is_empty() {
        return Err(format!(
            "the printed program does not parse cleanly:\n{}\n{}",
            render_all(&src, &diags),
            g.source
        ));
    }
    let reprinted = print_element(&ast);
    if reprinted != g.source {
        return Err(format!(
            "print → parse → print is not a fixed point:\n--- printed\n{}\n--- reprinted\n{}",
            g.source, reprinted
        ));
    }
    let env = CheckEnv {
        name: "gen".into(),
        method: Some(method),
        params: Some(&g.params),
    };
    let (element, diags) = check(&ast, &env);
    if has_errors(&diags) {
        return Err(format!(
            "the checker rejects a generated program:\n{}\n{}\nconfig: {:?}",
            render_all(&src, &diags),
            g.source,
            g.params
        ));
    }
    let Some(element) = element else {
        return Err(format!("the checker produced no IR:\n{}", g.source));
    };
    if !element.is_runnable() {
        return Err(format!(
            "unbound parameters {:?} in:\n{}",
            element.unbound_params, g.source
        ));
    }
    let req_fields = resolve_fields(&method.request, &request_fields())?;
    let resp_fields = resolve_fields(&method.response, &response_fields())?;

    let specs: Vec<VarSpec> = element
        .state
        .iter()
        .map(|v| VarSpec {
            name: v.name.clone(),
            kind: v.kind,
            consistency: v.consistency,
            combiner: v.combiner,
            zero: v.value_type().zero_value(),
            capacity: v.capacity,
        })
        .collect();
    let shared = SharedState::new();
    let bad = Arc::new(Mutex::new(Vec::new()));
    let seed = e.next_u64();
    let clock = VirtualClock::new(0.0);
    let mut channels = Vec::new();
    let mut out = Exercised::default();
    let mut instances: Vec<Instance> = ["a", "b"]
        .into_iter()
        .map(|r| {
            let store = Watched {
                inner: shared.instance_store("gen", r, &specs),
                bad: bad.clone(),
            };
            Instance::new(
                "gen",
                Box::new(store),
                Box::new(SeededRng::for_stream(seed, r)),
            )
        })
        .collect();
    let bad_state = |what: &str| -> Result<(), String> {
        let bad = bad.lock().unwrap_or_else(PoisonError::into_inner);
        match bad.first() {
            Some(b) => Err(format!(
                "{what}: the state store refused an access the checker allowed: {b}\n{}",
                g.source
            )),
            None => Ok(()),
        }
    };
    for inst in &mut instances {
        let mut host = Host::new(&clock, &mut channels);
        if let Err(err) = interp::run_init(inst, &element, &mut host) {
            if matches!(err, RuntimeError::Type(_)) {
                return Err(format!(
                    "`init` hit an internal type error: {err}\n{}",
                    g.source
                ));
            }
            out.init_failed = true;
        }
    }
    bad_state("init")?;
    for i in 0..rpcs {
        clock.advance(e.below(2000) as f64 / 1000.0);
        if e.chance(1, 4) {
            shared.sync();
        }
        let k = e.below(instances.len());
        let Some(inst) = instances.get_mut(k) else {
            continue;
        };
        let mut req = Message::request(random_message_bytes(e, &req_fields));
        random_headers(e, &mut req);
        let mut rpc = RpcInfo {
            id: i as u64 + 1,
            method: method.full_name.clone(),
            src: if k == 0 { "client-a" } else { "client-b" }.into(),
            service: "gen-svc".into(),
            routed: None,
        };
        let (errors, malformed) = (inst.errors, inst.malformed);
        let mut scratch = RpcScratch::default();
        let keys = scratch.slots(element.metadata.len());
        let verdict = {
            let mut host = Host::new(&clock, &mut channels);
            interp::on_request(inst, &element, req, &rpc, &mut host, keys)
        };
        let runtime_error = inst.errors > errors;
        let was_malformed = inst.malformed > malformed;
        match &verdict {
            Verdict::Forward(m) if m.kind != MsgKind::Request => {
                return Err(format!("`req` forwarded a response:\n{}", g.source));
            }
            Verdict::Reply(m) if m.kind != MsgKind::Response => {
                return Err(format!("`req` replied with a request:\n{}", g.source));
            }
            Verdict::Reject { code, message } => {
                if is_type_error(message) {
                    return Err(format!("`req`: {message}\n{}", g.source));
                }
                if runtime_error && *code != Code::Internal {
                    return Err(format!(
                        "a run-time error in `req` rejected with {code:?}, not INTERNAL: {message}"
                    ));
                }
                if was_malformed && *code != Code::InvalidArgument {
                    return Err(format!(
                        "a malformed request was rejected with {code:?}, not INVALID_ARGUMENT: {message}"
                    ));
                }
            }
            _ => {
                if runtime_error || was_malformed {
                    return Err(format!(
                        "an error was counted but the request was not rejected:\n{}",
                        g.source
                    ));
                }
            }
        }
        bad_state("req")?;
        let fwd = match verdict {
            Verdict::Forward(m) => m,
            Verdict::Reply(_) => {
                out.replied += 1;
                continue;
            }
            Verdict::Reject { .. } => {
                out.rejected += 1;
                continue;
            }
        };
        out.forwarded += 1;
        rpc.routed = fwd.headers.get("dst").cloned();
        let mut resp = if e.chance(1, 6) {
            let code = Code::from_number(1 + e.below(16) as u32).unwrap_or(Code::Unavailable);
            Message::error(code, "upstream failed")
        } else {
            Message::response(random_message_bytes(e, &resp_fields))
        };
        random_headers(e, &mut resp);
        let (errors, malformed) = (inst.errors, inst.malformed);
        let back = {
            let mut host = Host::new(&clock, &mut channels);
            interp::on_response(inst, &element, resp, &rpc, &mut host, keys)
        };
        if back.kind != MsgKind::Response {
            return Err(format!("`resp` sent a request up:\n{}", g.source));
        }
        if is_type_error(&back.status_message) {
            return Err(format!("`resp`: {}\n{}", back.status_message, g.source));
        }
        if inst.errors > errors && back.code != Code::Internal {
            return Err(format!(
                "a run-time error in `resp` gave {:?}, not INTERNAL: {}",
                back.code, back.status_message
            ));
        }
        if inst.malformed > malformed && back.code != Code::InvalidArgument {
            return Err(format!(
                "a malformed response gave {:?}, not INVALID_ARGUMENT: {}",
                back.code, back.status_message
            ));
        }
        bad_state("resp")?;
    }
    for inst in &instances {
        out.runtime_errors += inst.errors;
        out.malformed += inst.malformed;
    }
    Ok(out)
}

/// `s` made a header name an element may write: lower-case letters, digits, `-`, `_` and
/// `.`, and none of the names gRPC or Weft reserve.
fn writable_header_name(s: &str) -> String {
    let mut name: String = s
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '-',
        })
        .collect();
    // Left: an empty name or one gRPC or Weft reserves.
    if weft_hostcalls::text::writable_header(&name, None).is_err() {
        name.insert_str(0, "x-");
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_tables_match_the_test_schema() {
        let m = test_method().unwrap();
        for (desc, table) in [
            (&m.request, request_fields()),
            (&m.response, response_fields()),
        ] {
            for (path, ty) in table {
                let fp = resolve_path(desc, path).unwrap();
                assert_eq!(fp.ty, ty, "{path}");
            }
        }
    }

    #[test]
    fn generation_is_deterministic() {
        for seed in 0..20 {
            assert_eq!(generate(seed).source, generate(seed).source);
        }
        let a = generate_with(&mut Entropy::from_bytes(b"abc"), &GenConfig::default());
        let b = generate_with(&mut Entropy::from_bytes(b"abc"), &GenConfig::default());
        assert_eq!(a.source, b.source);
    }

    #[test]
    fn entropy_from_bytes_reads_the_bytes_first() {
        let mut e = Entropy::from_bytes(&[3, 200]);
        assert_eq!(e.below(10), 3);
        assert_eq!(e.below(256), 200);
        // Then the fallback stream, which never stalls.
        let _ = e.below(7);
    }
}
