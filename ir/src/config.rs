//! The chain configuration, `weft.yaml` (format documented in docs/config.md).
//!
//! Parsed by hand from the YAML tree rather than with derived deserialisers so every error
//! names the edge and element it is about, in words an operator can act on.

use std::path::{Path, PathBuf};

use serde_norway::Value as Yaml;
use weft_hostcalls::Value;

use crate::ir::Params;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}{location}: error: {message}{}", hint.as_ref().map(|h| format!("\n  = hint: {h}")).unwrap_or_default())]
pub struct ConfigError {
    pub file: String,
    /// `:line:col` when the YAML parser knows it, else empty.
    pub location: String,
    pub message: String,
    pub hint: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The file it was read from (for messages).
    pub file: String,
    /// Directory relative paths are resolved against.
    pub dir: PathBuf,
    pub protos: Vec<PathBuf>,
    pub proto_include: Vec<PathBuf>,
    /// Directories searched for `<element>.weft` (then `.appnet`) before the standard library.
    pub element_paths: Vec<PathBuf>,
    pub sim: SimSettings,
    pub edges: Vec<Edge>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SimSettings {
    /// Virtual seconds between merges of weakly consistent state replicas.
    pub weak_sync_interval: f64,
}

impl Default for SimSettings {
    fn default() -> Self {
        SimSettings {
            weak_sync_interval: 1.0,
        }
    }
}

/// Observation consistency the planner must preserve (LANGUAGE.md §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observation {
    Strong,
    Weak,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Edge {
    pub name: String,
    /// Calling service.
    pub from: String,
    /// Called service.
    pub to: String,
    /// `pkg.Service/Method`, or `pkg.Service/*` for every method of the service.
    pub method: String,
    pub consistency: Observation,
    pub client: Vec<ElementUse>,
    pub any: Vec<ElementUse>,
    pub server: Vec<ElementUse>,
    pub pairs: Vec<(ElementUse, ElementUse)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    Client,
    Server,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Processor {
    /// In-process, linked into the service.
    Lib,
    /// The node agent.
    Agent,
    /// Wasm sandbox.
    Sandbox,
    /// SmartNIC cores.
    Nic,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Constraints {
    pub side: Option<Side>,
    pub processor: Option<Processor>,
    /// Must not run inside the application process.
    pub untrusted: bool,
    /// Must be replaceable without restarting the service.
    pub hot_upgrade: bool,
}

/// One element in a chain, as configured.
#[derive(Clone, Debug, PartialEq)]
pub struct ElementUse {
    /// The element's file name (without extension).
    pub element: String,
    /// Instance name, unique within the edge.
    pub name: String,
    /// Explicit source file, instead of searching by name.
    pub path: Option<PathBuf>,
    pub params: Params,
    pub constraints: Constraints,
    /// Control-plane state written after `init`: variable → value (maps and vectors whole).
    pub state: Vec<(String, Value)>,
    /// `max_iterations:` — the most `foreach` iterations one handler run may make, instead
    /// of [`crate::eval::MAX_ITERATIONS`] (docs/language.md, "The iteration limit").
    pub max_iterations: Option<u64>,
}

impl ElementUse {
    /// The iteration limit of this element's instances.
    pub fn iteration_limit(&self) -> u64 {
        self.max_iterations.unwrap_or(crate::eval::MAX_ITERATIONS)
    }
}

/// Where an element sits in the user's chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Position {
    Client,
    /// The first element of the pair with this index (runs on the client side).
    PairFirst(usize),
    Any,
    /// The second element of the pair with this index (runs on the server side).
    PairSecond(usize),
    Server,
}

impl Edge {
    /// The elements in the order a request meets them: client, pair firsts, any, pair
    /// seconds (in reverse, so pairs nest like parentheses), server.
    pub fn chain(&self) -> Vec<(Position, &ElementUse)> {
        let mut out: Vec<(Position, &ElementUse)> = Vec::new();
        out.extend(self.client.iter().map(|e| (Position::Client, e)));
        out.extend(
            self.pairs
                .iter()
                .enumerate()
                .map(|(i, p)| (Position::PairFirst(i), &p.0)),
        );
        out.extend(self.any.iter().map(|e| (Position::Any, e)));
        out.extend(
            self.pairs
                .iter()
                .enumerate()
                .rev()
                .map(|(i, p)| (Position::PairSecond(i), &p.1)),
        );
        out.extend(self.server.iter().map(|e| (Position::Server, e)));
        out
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.display().to_string(),
            location: String::new(),
            message: format!("cannot read the chain config: {e}"),
            hint: None,
        })?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Config::parse(&path.display().to_string(), &dir, &text)
    }

    /// Parses config text; relative paths resolve against `dir`.
    pub fn parse(file: &str, dir: &Path, text: &str) -> Result<Config, ConfigError> {
        let p = Parser {
            file: file.to_owned(),
        };
        let root: Yaml = serde_norway::from_str(text).map_err(|e| {
            let mut message = format!("not valid YAML: {e}");
            let mut location = String::new();
            if let Some(l) = e.location() {
                location = format!(":{}:{}", l.line(), l.column());
                // The place is already in front; the parser's own copy of it only repeats it.
                message = message.replacen(
                    &format!(" at line {} column {}", l.line(), l.column()),
                    "",
                    1,
                );
                message.push_str(&yaml_snippet(text, l.line(), l.column()));
            }
            ConfigError {
                file: file.to_owned(),
                location,
                message,
                hint: None,
            }
        })?;
        let Yaml::Mapping(root) = root else {
            return Err(p.err(
                "the chain config must be a mapping with an `edges:` key",
                None,
            ));
        };
        p.known_keys(
            "the top level",
            &root,
            &["protos", "proto_include", "element_paths", "sim", "edges"],
        )?;
        let paths = |key: &str| -> Result<Vec<PathBuf>, ConfigError> {
            p.strings(key, root.get(key))?
                .into_iter()
                .map(|s| Ok(dir.join(s)))
                .collect()
        };
        let protos = paths("protos")?;
        let proto_include = paths("proto_include")?;
        let element_paths = paths("element_paths")?;
        let mut sim = SimSettings::default();
        if let Some(s) = root.get("sim") {
            let Yaml::Mapping(s) = s else {
                return Err(p.err("`sim` must be a mapping", None));
            };
            p.known_keys("`sim`", s, &["weak_sync_interval"])?;
            if let Some(v) = s.get("weak_sync_interval") {
                sim.weak_sync_interval = v.as_f64().filter(|f| *f > 0.0).ok_or_else(|| {
                    p.err(
                        "`sim.weak_sync_interval` must be a positive number of seconds",
                        None,
                    )
                })?;
            }
        }
        let Some(Yaml::Mapping(edges_yaml)) = root.get("edges") else {
            return Err(p.err(
                "the chain config has no `edges:` mapping",
                Some("add `edges:` with one entry per communication edge, e.g. `frontend->echo:`"),
            ));
        };
        let mut edges: Vec<Edge> = Vec::new();
        for (key, body) in edges_yaml {
            let name = yaml_key(key);
            // YAML tells `1:` from `"1":`; an edge name (`--edge 1`) does not.
            if edges.iter().any(|e| e.name == name) {
                return Err(p.err(
                    format!("edge `{name}` is listed twice (as keys that differ only in YAML type, such as `1` and `\"1\"`)"),
                    Some("give each edge its own name"),
                ));
            }
            edges.push(p.edge(&name, body)?);
        }
        Ok(Config {
            file: file.to_owned(),
            dir: dir.to_path_buf(),
            protos,
            proto_include,
            element_paths,
            sim,
            edges,
        })
    }

    /// Every `element_paths` entry must be a directory. A misspelt or missing one would
    /// otherwise make each element it was meant to provide fall back to the standard
    /// library's element of the same name, without a word.
    pub fn check_element_paths(&self) -> Result<(), ConfigError> {
        for path in &self.element_paths {
            let problem = match std::fs::metadata(path) {
                Ok(m) if m.is_dir() => continue,
                Ok(_) => "is not a directory".to_owned(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => "does not exist".to_owned(),
                Err(e) => format!("cannot be read: {e}"),
            };
            // As written in the config, and where that led when it was relative.
            let entry = path.strip_prefix(&self.dir).unwrap_or(path);
            let resolved = if entry == path.as_path() {
                String::new()
            } else {
                format!(" ({})", path.display())
            };
            return Err(ConfigError {
                file: self.file.clone(),
                location: String::new(),
                message: format!(
                    "`element_paths` entry `{}`{resolved} {problem}",
                    entry.display()
                ),
                hint: Some(
                    "each entry is a directory of <element>.weft files; a relative one is resolved against the config's directory".into(),
                ),
            });
        }
        Ok(())
    }

    pub fn edge(&self, name: &str) -> Result<&Edge, ConfigError> {
        self.edges.iter().find(|e| e.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.edges.iter().map(|e| e.name.as_str()).collect();
            ConfigError {
                file: self.file.clone(),
                location: String::new(),
                message: format!("no edge named `{name}`"),
                hint: shell_cut_edge(name, &names)
                    .or_else(|| crate::diag::did_you_mean(name, names.iter().copied()))
                    .or_else(|| Some(format!("edges: {}", names.join(", ")))),
            }
        })
    }
}

/// Edge names are written `from->to`, and an unquoted `--edge web->cart` reaches Weft as
/// `web-`: the shell took `>cart` as a redirect (and wrote a file `cart`). Saying so beats a
/// near-miss suggestion, which would leave the operator retyping the same command.
fn shell_cut_edge(name: &str, names: &[&str]) -> Option<String> {
    if !name.ends_with('-') {
        return None;
    }
    let full = names.iter().find(|n| {
        n.strip_prefix(name)
            .is_some_and(|rest| rest.starts_with('>'))
    })?;
    let target = &full[name.len() + 1..];
    Some(format!(
        "quote the name, `--edge '{full}'`: unquoted, the shell takes `>{target}` as a redirect (and may have written a file `{target}`)"
    ))
}

/// The source line of a YAML error with a caret under its column, as element diagnostics
/// show theirs; empty when the place is past the last line (the file ended too soon).
fn yaml_snippet(text: &str, line: usize, column: usize) -> String {
    let Some(src) = text.lines().nth(line.saturating_sub(1)) else {
        return String::new();
    };
    if src.trim().is_empty() {
        return String::new();
    }
    let number = line.to_string();
    let pad = " ".repeat(number.len());
    let before: String = src
        .chars()
        .take(column.saturating_sub(1))
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    format!("\n{number} | {src}\n{pad} | {before}^")
}

fn yaml_key(k: &Yaml) -> String {
    match k {
        Yaml::String(s) => s.clone(),
        other => serde_norway::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_owned(),
    }
}

struct Parser {
    file: String,
}

impl Parser {
    fn err(&self, message: impl Into<String>, hint: Option<&str>) -> ConfigError {
        ConfigError {
            file: self.file.clone(),
            location: String::new(),
            message: message.into(),
            hint: hint.map(str::to_owned),
        }
    }

    fn known_keys(
        &self,
        what: &str,
        m: &serde_norway::Mapping,
        known: &[&str],
    ) -> Result<(), ConfigError> {
        for k in m.keys() {
            let k = yaml_key(k);
            if !known.contains(&k.as_str()) {
                let hint = crate::diag::did_you_mean(&k, known.iter().copied())
                    .unwrap_or_else(|| format!("known keys: {}", known.join(", ")));
                return Err(self.err(format!("unknown key `{k}` in {what}"), Some(&hint)));
            }
        }
        Ok(())
    }

    fn strings(&self, key: &str, v: Option<&Yaml>) -> Result<Vec<String>, ConfigError> {
        match v {
            None | Some(Yaml::Null) => Ok(Vec::new()),
            Some(Yaml::String(s)) => Ok(vec![s.clone()]),
            Some(Yaml::Sequence(items)) => items
                .iter()
                .map(|i| {
                    i.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| self.err(format!("`{key}` must list strings"), None))
                })
                .collect(),
            Some(_) => Err(self.err(
                format!("`{key}` must be a string or a list of strings"),
                None,
            )),
        }
    }

    fn edge(&self, name: &str, body: &Yaml) -> Result<Edge, ConfigError> {
        let ctx = format!("edge `{name}`");
        let Yaml::Mapping(m) = body else {
            return Err(self.err(format!("{ctx} must be a mapping"), None));
        };
        self.known_keys(
            &ctx,
            m,
            &[
                "from",
                "to",
                "method",
                "consistency",
                "client",
                "any",
                "server",
                "pair",
            ],
        )?;
        let text = |key: &str| -> Result<String, ConfigError> {
            match m.get(key) {
                Some(Yaml::String(s)) => Ok(s.clone()),
                Some(_) => Err(self.err(format!("{ctx}: `{key}` must be a string"), None)),
                None => Err(self.err(
                    format!("{ctx}: `{key}` is missing"),
                    Some(match key {
                        "method" => {
                            "name the RPC method, e.g. `method: echo.Echo/Say` or `echo.Echo/*`"
                        }
                        _ => "name the calling (`from`) and called (`to`) services",
                    }),
                )),
            }
        };
        let from = text("from")?;
        let to = text("to")?;
        let method = text("method")?;
        let consistency = match m.get("consistency") {
            None => Observation::Strong,
            Some(Yaml::String(s)) if s == "strong" => Observation::Strong,
            Some(Yaml::String(s)) if s == "weak" => Observation::Weak,
            Some(_) => {
                return Err(self.err(format!("{ctx}: `consistency` is `strong` or `weak`"), None));
            }
        };
        let list = |key: &str| -> Result<Vec<ElementUse>, ConfigError> {
            match m.get(key) {
                None | Some(Yaml::Null) => Ok(Vec::new()),
                Some(Yaml::Sequence(items)) => items
                    .iter()
                    .enumerate()
                    .map(|(i, e)| self.element(&ctx, key, i, e))
                    .collect(),
                Some(_) => {
                    Err(self.err(format!("{ctx}: `{key}` must be a list of elements"), None))
                }
            }
        };
        let client = list("client")?;
        let any = list("any")?;
        let server = list("server")?;
        let mut pairs = Vec::new();
        match m.get("pair") {
            None | Some(Yaml::Null) => {}
            Some(Yaml::Sequence(items)) => {
                for (i, item) in items.iter().enumerate() {
                    let Yaml::Sequence(two) = item else {
                        return Err(self.err(
                            format!("{ctx}: pair #{} must be a list of two elements", i + 1),
                            Some("write `pair: [[encrypt, decrypt]]`"),
                        ));
                    };
                    if two.len() != 2 {
                        // Name what the pair holds, so the operator finds it.
                        let names: Vec<String> = two
                            .iter()
                            .enumerate()
                            .filter_map(|(j, y)| self.element(&ctx, "pair", j, y).ok())
                            .map(|u| format!("`{}`", u.name))
                            .collect();
                        let what = match names.as_slice() {
                            [] => String::new(),
                            [one] => format!(", element {one}"),
                            many => format!(", elements {}", many.join(", ")),
                        };
                        return Err(self.err(
                            format!("{ctx}{what}: pair #{} has {} element(s); a pair is not closed until it has exactly two", i + 1, two.len()),
                            Some("the first runs on the client side, the second on the server side"),
                        ));
                    }
                    let a = self.element(&ctx, "pair", i, &two[0])?;
                    let b = self.element(&ctx, "pair", i, &two[1])?;
                    pairs.push((a, b));
                }
            }
            Some(_) => {
                return Err(self.err(
                    format!("{ctx}: `pair` must be a list of two-element lists"),
                    None,
                ));
            }
        }
        let edge = Edge {
            name: name.to_owned(),
            from,
            to,
            method,
            consistency,
            client,
            any,
            server,
            pairs,
        };
        let mut seen = std::collections::BTreeSet::new();
        // A request cannot come back to the client side: an `any` element pinned to the
        // client cannot follow one pinned to the server.
        let mut pinned_server: Option<&str> = None;
        for e in &edge.any {
            match e.constraints.side {
                Some(Side::Server) => pinned_server = pinned_server.or(Some(e.name.as_str())),
                Some(Side::Client) => {
                    if let Some(s) = pinned_server {
                        return Err(self.err(
                            format!("{ctx}, element `{}`: pinned to the client side, but it comes after `{s}`, which is pinned to the server side; a request meets every client-side element before any server-side one", e.name),
                            Some("list it before the server-pinned element, or pin one of them differently"),
                        ));
                    }
                }
                None => {}
            }
        }
        for (pos, e) in edge.chain() {
            if e.name.contains('/') {
                // State is shared per `edge/instance`: with a `/` in the instance name, edge
                // `x` with `y/z` and edge `x/y` with `z` would share one element's state.
                return Err(self.err(
                    format!("{ctx}: element name `{}` contains `/`", e.name),
                    Some("instance names are plain words (letters, digits, `-`, `_`)"),
                ));
            }
            if !seen.insert(e.name.clone()) {
                return Err(self.err(
                    format!("{ctx}: element name `{}` is used twice", e.name),
                    Some("give one of them another instance name with `name:`"),
                ));
            }
            if let Some(side) = e.constraints.side {
                let fixed = match pos {
                    Position::Client | Position::PairFirst(_) => Some(Side::Client),
                    Position::Server | Position::PairSecond(_) => Some(Side::Server),
                    Position::Any => None,
                };
                if fixed.is_some_and(|f| f != side) {
                    return Err(self.err(
                        format!("{ctx}, element `{}`: pinned to the {} side but listed where it must run on the other side", e.name, side_name(side)),
                        Some("move it to `any:` or remove the `side:` pin"),
                    ));
                }
            }
            if e.constraints.untrusted && e.constraints.processor == Some(Processor::Lib) {
                return Err(self.err(
                    format!("{ctx}, element `{}`: `untrusted` excludes running in the app, but it is pinned to `processor: lib`", e.name),
                    Some("pin it to `agent` or `sandbox`, or drop `untrusted`"),
                ));
            }
        }
        Ok(edge)
    }

    fn element(
        &self,
        ctx: &str,
        list: &str,
        index: usize,
        y: &Yaml,
    ) -> Result<ElementUse, ConfigError> {
        let at = format!("{ctx}, `{list}` #{}", index + 1);
        let (element, params_yaml, extra): (String, Option<&Yaml>, Option<&serde_norway::Mapping>) =
            match y {
                Yaml::String(s) => (s.clone(), None, None),
                Yaml::Mapping(m) if m.contains_key("element") => {
                    let Some(Yaml::String(e)) = m.get("element") else {
                        return Err(self.err(format!("{at}: `element` must be a name"), None));
                    };
                    (e.clone(), m.get("params"), Some(m))
                }
                Yaml::Mapping(m) if m.len() == 1 => match m.iter().next() {
                    Some((k, v)) => (yaml_key(k), Some(v), None),
                    None => (String::new(), None, None),
                },
                _ => {
                    return Err(self.err(
                    format!("{at}: an element is a name, `name: {{params}}`, or a mapping with `element:`"),
                    Some("e.g. `- ratelimit: {capacity: 100, rate: 10}`"),
                ));
                }
            };
        let ctx_el = format!("{ctx}, element `{element}`");
        let mut params = Params::new();
        match params_yaml {
            None | Some(Yaml::Null) => {}
            Some(Yaml::Mapping(pm)) => {
                for (k, v) in pm {
                    let k = yaml_key(k);
                    let value = yaml_value(v)
                        .map_err(|m| self.err(format!("{ctx_el}: parameter `{k}`: {m}"), None))?;
                    params.insert(k, value);
                }
            }
            Some(_) => {
                return Err(self.err(format!("{ctx_el}: parameters must be a mapping"), None));
            }
        }
        let mut use_ = ElementUse {
            name: element.clone(),
            element,
            path: None,
            params,
            constraints: Constraints::default(),
            state: Vec::new(),
            max_iterations: None,
        };
        if let Some(m) = extra {
            self.known_keys(
                &ctx_el,
                m,
                &[
                    "element",
                    "name",
                    "path",
                    "params",
                    "side",
                    "processor",
                    "untrusted",
                    "hot_upgrade",
                    "state",
                    "max_iterations",
                ],
            )?;
            if let Some(n) = m.get("name") {
                use_.name = n
                    .as_str()
                    .ok_or_else(|| self.err(format!("{ctx_el}: `name` must be a string"), None))?
                    .to_owned();
            }
            if let Some(p) = m.get("path") {
                let p = p
                    .as_str()
                    .ok_or_else(|| self.err(format!("{ctx_el}: `path` must be a string"), None))?;
                use_.path = Some(PathBuf::from(p));
            }
            if let Some(s) = m.get("side") {
                use_.constraints.side = Some(match s.as_str() {
                    Some("client") => Side::Client,
                    Some("server") => Side::Server,
                    _ => {
                        return Err(
                            self.err(format!("{ctx_el}: `side` is `client` or `server`"), None)
                        );
                    }
                });
            }
            if let Some(s) = m.get("processor") {
                use_.constraints.processor = Some(match s.as_str() {
                    Some("lib") => Processor::Lib,
                    Some("agent") => Processor::Agent,
                    Some("sandbox") => Processor::Sandbox,
                    Some("nic") => Processor::Nic,
                    _ => {
                        return Err(self.err(
                            format!("{ctx_el}: `processor` is one of lib, agent, sandbox, nic"),
                            None,
                        ));
                    }
                });
            }
            for (key, slot) in [
                ("untrusted", &mut use_.constraints.untrusted),
                ("hot_upgrade", &mut use_.constraints.hot_upgrade),
            ] {
                if let Some(v) = m.get(key) {
                    *slot = v.as_bool().ok_or_else(|| {
                        self.err(format!("{ctx_el}: `{key}` is true or false"), None)
                    })?;
                }
            }
            if let Some(v) = m.get("max_iterations") {
                let n = v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
                    self.err(
                        format!("{ctx_el}: `max_iterations` is a whole number above 0"),
                        Some("the most `foreach` iterations one handler run may make (default 1000000)"),
                    )
                })?;
                if n > crate::eval::MAX_ITERATIONS_CEILING {
                    return Err(self.err(
                        format!(
                            "{ctx_el}: `max_iterations` is at most {}",
                            crate::eval::MAX_ITERATIONS_CEILING
                        ),
                        Some("a billion iterations hold a thread for about a minute; bound the element's collections instead"),
                    ));
                }
                use_.max_iterations = Some(n);
            }
            if let Some(s) = m.get("state") {
                let Yaml::Mapping(sm) = s else {
                    return Err(self.err(
                        format!("{ctx_el}: `state` must map state variables to values"),
                        None,
                    ));
                };
                for (k, v) in sm {
                    let k = yaml_key(k);
                    let value = yaml_value(v)
                        .map_err(|m| self.err(format!("{ctx_el}: state `{k}`: {m}"), None))?;
                    use_.state.push((k, value));
                }
            }
        }
        Ok(use_)
    }
}

fn side_name(s: Side) -> &'static str {
    match s {
        Side::Client => "client",
        Side::Server => "server",
    }
}

/// Converts a YAML value to a language value: numbers keep their YAML kind (the checker
/// converts them to the declared parameter type), sequences become vectors, mappings maps.
pub fn yaml_value(v: &Yaml) -> Result<Value, String> {
    Ok(match v {
        Yaml::Bool(b) => Value::Bool(*b),
        Yaml::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::Int(i)
            } else if let Some(u) = n.as_u64() {
                Value::Uint(u)
            } else {
                Value::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Yaml::String(s) => Value::Str(s.clone()),
        Yaml::Sequence(items) => {
            Value::Vec(items.iter().map(yaml_value).collect::<Result<_, _>>()?)
        }
        Yaml::Mapping(m) => Value::Map(
            m.iter()
                .map(|(k, v)| Ok((yaml_value(k)?, yaml_value(v)?)))
                .collect::<Result<_, String>>()?,
        ),
        Yaml::Null => return Err("has no value (null)".into()),
        Yaml::Tagged(t) => yaml_value(&t.value)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
protos: [echo.proto]
edges:
  frontend->echo:
    from: frontend
    to: echo
    method: echo.Echo/Say
    consistency: weak
    client:
      - logging
      - loadbalance: {policy: round_robin}
    any:
      - element: firewall
        name: acl
        params: {field: user, deny: [mallory, eve]}
        side: server
        state: {seen: {a: 1}}
    server: [metrics]
    pair:
      - [encrypt: {field: body, key: k}, decrypt: {field: body, key: k}]
      - [compress_body, decompress_body]
"#;

    #[test]
    fn parses_every_form_and_orders_the_chain() {
        let c = Config::parse("weft.yaml", Path::new("/cfg"), SAMPLE).unwrap();
        assert_eq!(c.protos, vec![PathBuf::from("/cfg/echo.proto")]);
        let e = c.edge("frontend->echo").unwrap();
        assert_eq!(e.consistency, Observation::Weak);
        let names: Vec<&str> = e.chain().iter().map(|(_, u)| u.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "logging",
                "loadbalance",
                "encrypt",
                "compress_body",
                "acl",
                "decompress_body",
                "decrypt",
                "metrics"
            ]
        );
        let acl = &e.any[0];
        assert_eq!(acl.element, "firewall");
        assert_eq!(
            acl.params["deny"],
            Value::Vec(vec![Value::str("mallory"), Value::str("eve")])
        );
        assert_eq!(acl.constraints.side, Some(Side::Server));
        assert_eq!(acl.state.len(), 1);
        assert_eq!(e.client[1].params["policy"], Value::str("round_robin"));
    }

    #[test]
    fn errors_name_the_edge_and_element() {
        let bad = SAMPLE.replace("side: server", "side: serverside");
        let err = Config::parse("weft.yaml", Path::new("."), &bad).unwrap_err();
        assert!(
            err.message
                .contains("edge `frontend->echo`, element `firewall`"),
            "{err}"
        );

        let bad = SAMPLE.replace("[compress_body, decompress_body]", "[compress_body]");
        let err = Config::parse("weft.yaml", Path::new("."), &bad).unwrap_err();
        assert!(err.message.contains("not closed"), "{err}");

        let bad = SAMPLE.replace("server: [metrics]", "server: [metrics]\n    srever: []");
        let err = Config::parse("weft.yaml", Path::new("."), &bad).unwrap_err();
        assert_eq!(err.hint.as_deref(), Some("did you mean `server`?"));

        let bad = SAMPLE.replace(
            "      - logging\n",
            "      - element: logging\n        side: server\n",
        );
        let err = Config::parse("weft.yaml", Path::new("."), &bad).unwrap_err();
        assert!(err.message.contains("pinned to the server side"), "{err}");

        let err = Config::parse("weft.yaml", Path::new("."), "edges: [1, 2\n").unwrap_err();
        assert!(err.location.starts_with(":"), "{err}");
    }

    #[test]
    fn unknown_edge_suggests_a_name() {
        let c = Config::parse("weft.yaml", Path::new("."), SAMPLE).unwrap();
        let err = c.edge("frontend->ecoh").unwrap_err();
        assert_eq!(err.hint.as_deref(), Some("did you mean `frontend->echo`?"));
    }
}
