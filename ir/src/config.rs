//! The chain configuration, `weft.yaml` (format documented in docs/config.md).
//!
//! Parsed by hand from the YAML tree rather than with derived deserialisers so every error
//! names the edge and element it is about, in words an operator can act on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_norway::Value as Yaml;
use weft_hostcalls::Value;

use crate::diag::{Excerpt, SourceFile, Span};
use crate::ir::Params;
use crate::yaml_places::{Places, Step, YamlPath};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct ConfigError {
    pub file: String,
    /// `:line:col` when the place is known, else empty.
    pub location: String,
    pub message: String,
    pub hint: Option<String>,
    /// The line at `location` with carets under what is wrong, as element diagnostics show
    /// theirs; `None` when the place is unknown (or the line is blank). Boxed: every config
    /// function returns this error, and most return no error.
    pub excerpt: Option<Box<Excerpt>>,
}

impl ConfigError {
    /// An error about the file as a whole, or about a place in it that is not known.
    pub fn new(file: impl Into<String>, message: impl Into<String>, hint: Option<String>) -> Self {
        ConfigError {
            file: file.into(),
            location: String::new(),
            message: message.into(),
            hint,
            excerpt: None,
        }
    }

    /// An error about `span` of the config's text.
    pub fn at(
        source: &SourceFile,
        span: Span,
        message: impl Into<String>,
        hint: Option<String>,
    ) -> Self {
        let (line, col) = source.line_col(span.start);
        ConfigError {
            file: source.path.clone(),
            location: format!(":{line}:{col}"),
            message: message.into(),
            hint,
            excerpt: excerpt(source, span),
        }
    }
}

impl ConfigError {
    /// The same report as a warning: place, line, carets and hint as an error shows them.
    pub fn as_warning(&self) -> impl std::fmt::Display + '_ {
        struct Warning<'e>(&'e ConfigError);
        impl std::fmt::Display for Warning<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.write(f, "warning")
            }
        }
        Warning(self)
    }

    fn write(&self, f: &mut std::fmt::Formatter<'_>, severity: &str) -> std::fmt::Result {
        write!(
            f,
            "{}{}: {severity}: {}",
            self.file, self.location, self.message
        )?;
        if let Some(excerpt) = &self.excerpt {
            write!(f, "\n{excerpt}")?;
        }
        if let Some(hint) = &self.hint {
            // Under the excerpt's gutter, as in element diagnostics.
            let gutter = self.excerpt.as_ref().map_or(1, |e| e.gutter());
            write!(f, "\n{:gutter$} = hint: {hint}", "")?;
        }
        Ok(())
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.write(f, "error")
    }
}

/// The excerpt of `span`, unless its line is blank (a place past the end of the text).
fn excerpt(source: &SourceFile, span: Span) -> Option<Box<Excerpt>> {
    let (line, _) = source.line_col(span.start);
    if source.line_text(line).trim().is_empty() {
        return None;
    }
    Some(Box::new(Excerpt::new(source, span)))
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
    /// The text it was parsed from and where its nodes are, so errors found after parsing
    /// (an unknown element, a parameter's value) point into it.
    text: Arc<SourceFile>,
    places: Arc<Places>,
    /// Where each element entry was written, by edge and instance name.
    entries: BTreeMap<(String, String), EntryPaths>,
}

/// Which of a node an error points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Key,
    Value,
}

/// Where the parts of one element entry are in the YAML tree.
#[derive(Clone, Debug, PartialEq)]
struct EntryPaths {
    /// The element's name: the entry itself (`- logging`), the key of
    /// `- logging: {…}`, or the value of `element:`.
    element: (YamlPath, Part),
    /// The parameters' mapping.
    params: YamlPath,
    /// The `state:` mapping.
    state: YamlPath,
}

impl EntryPaths {
    /// The path of the entry itself.
    fn entry(&self) -> YamlPath {
        let (path, part) = &self.element;
        let parent = || path.split_last().map_or_else(Vec::new, |(_, p)| p.to_vec());
        match part {
            // `logging:` inside the entry.
            Part::Key => parent(),
            // `element:` inside the entry.
            Part::Value if path.last() == Some(&Step::from("element")) => parent(),
            Part::Value => path.clone(),
        }
    }
}

/// What part of an element entry an error found after parsing is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryPart<'a> {
    /// The element's name.
    Element,
    /// The name of a parameter the entry sets.
    ParamName(&'a str),
    /// The value the entry gives a parameter.
    ParamValue(&'a str),
    /// One item of the list the entry gives a parameter.
    ParamListItem(&'a str, usize),
    /// The name of a state variable the entry's `state:` sets.
    StateName(&'a str),
    /// The value the entry's `state:` gives a variable.
    StateValue(&'a str),
    /// The key (`true`) or the value of one entry of the map the entry's `state:` gives a
    /// variable.
    StateMapEntry(&'a str, &'a str, bool),
    /// One item of the list the entry's `state:` gives a variable.
    StateListItem(&'a str, usize),
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
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(
                path.display().to_string(),
                format!("cannot read the chain config: {e}"),
                None,
            )
        })?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Config::parse(&path.display().to_string(), &dir, &text)
    }

    /// Parses config text; relative paths resolve against `dir`.
    pub fn parse(file: &str, dir: &Path, text: &str) -> Result<Config, ConfigError> {
        let source = SourceFile::new(file, text);
        let root: Yaml = serde_norway::from_str(text).map_err(|e| {
            let mut message = format!("not valid YAML: {e}");
            let Some(l) = e.location() else {
                return ConfigError::new(file, message, None);
            };
            // The place is already in front; the parser's own copy of it only repeats it.
            message = message.replacen(
                &format!(" at line {} column {}", l.line(), l.column()),
                "",
                1,
            );
            let start = source.line_start(l.line());
            let at = source
                .text
                .get(start..)
                .and_then(|rest| rest.char_indices().nth(l.column().saturating_sub(1)))
                .map_or(start, |(i, _)| start + i);
            // The parser says only that a tab "cannot start any token".
            let indent_has_tab = source.text.get(start..).is_some_and(|rest| {
                rest.chars()
                    .take_while(|c| *c == ' ' || *c == '\t')
                    .any(|c| c == '\t')
            });
            let hint = indent_has_tab.then(|| {
                format!(
                    "YAML indents with spaces only: line {} starts with a tab",
                    l.line()
                )
            });
            ConfigError {
                // As the parser says: past the last line, the file ended too soon.
                location: format!(":{}:{}", l.line(), l.column()),
                excerpt: (source.line_of(at as u32) == l.line())
                    .then(|| excerpt(&source, Span::new(at, at)))
                    .flatten(),
                ..ConfigError::new(file, message, hint)
            }
        })?;
        let places = Places::index(&source);
        let mut p = Parser {
            source: &source,
            places: &places,
            entries: BTreeMap::new(),
        };
        let Yaml::Mapping(root) = root else {
            return Err(p.err_at(
                &[],
                Part::Value,
                "the chain config must be a mapping with an `edges:` key",
                None,
            ));
        };
        p.known_keys(
            "the top level",
            &[],
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
                return Err(p.err_at(
                    &["sim".into()],
                    Part::Value,
                    "`sim` must be a mapping",
                    None,
                ));
            };
            p.known_keys("`sim`", &["sim".into()], s, &["weak_sync_interval"])?;
            if let Some(v) = s.get("weak_sync_interval") {
                sim.weak_sync_interval = v.as_f64().filter(|f| *f > 0.0).ok_or_else(|| {
                    p.err_at(
                        &["sim".into(), "weak_sync_interval".into()],
                        Part::Value,
                        "`sim.weak_sync_interval` must be a positive number of seconds",
                        None,
                    )
                })?;
            }
        }
        let Some(Yaml::Mapping(edges_yaml)) = root.get("edges") else {
            return Err(p.err_at(
                &["edges".into()],
                Part::Value,
                "the chain config has no `edges:` mapping",
                Some("add `edges:` with one entry per communication edge, e.g. `frontend->echo:`"),
            ));
        };
        let mut edges: Vec<Edge> = Vec::new();
        for (key, body) in edges_yaml {
            let name = yaml_key(key);
            let path: YamlPath = vec!["edges".into(), name.as_str().into()];
            // YAML tells `1:` from `"1":`; an edge name (`--edge 1`) does not.
            if edges.iter().any(|e| e.name == name) {
                return Err(p.err_at(
                    &path,
                    Part::Key,
                    format!("edge `{name}` is listed twice (as keys that differ only in YAML type, such as `1` and `\"1\"`)"),
                    Some("give each edge its own name"),
                ));
            }
            edges.push(p.edge(&name, &path, body)?);
        }
        let entries = p.entries;
        Ok(Config {
            file: file.to_owned(),
            dir: dir.to_path_buf(),
            protos,
            proto_include,
            element_paths,
            sim,
            edges,
            text: Arc::new(source),
            places: Arc::new(places),
            entries,
        })
    }

    /// An error about `part` of the entry of element `instance` on edge `edge`, pointing at
    /// where the config's text has it; `None` when that place is not known.
    pub fn entry_error(
        &self,
        edge: &str,
        instance: &str,
        part: EntryPart<'_>,
        message: impl Into<String>,
        hint: Option<String>,
    ) -> Option<ConfigError> {
        let paths = self.entries.get(&(edge.to_owned(), instance.to_owned()))?;
        let child = |of: &YamlPath, name: &str| {
            let mut path = of.clone();
            path.push(name.into());
            path
        };
        let (path, part) = match part {
            EntryPart::Element => paths.element.clone(),
            EntryPart::ParamName(name) => (child(&paths.params, name), Part::Key),
            EntryPart::ParamValue(name) => (child(&paths.params, name), Part::Value),
            EntryPart::ParamListItem(name, index) => {
                let mut path = child(&paths.params, name);
                path.push(index.into());
                (path, Part::Value)
            }
            EntryPart::StateName(name) => (child(&paths.state, name), Part::Key),
            EntryPart::StateValue(name) => (child(&paths.state, name), Part::Value),
            EntryPart::StateMapEntry(name, key, is_key) => {
                let mut path = child(&paths.state, name);
                path.push(key.into());
                (path, if is_key { Part::Key } else { Part::Value })
            }
            EntryPart::StateListItem(name, index) => {
                let mut path = child(&paths.state, name);
                path.push(index.into());
                (path, Part::Value)
            }
        };
        let span = place_span(&self.places, &path, part)?;
        Some(ConfigError::at(&self.text, span, message, hint))
    }

    /// An error about the value of `key` of edge `edge` (`method`, say), pointing at it
    /// where the config's text has it.
    pub fn edge_error(
        &self,
        edge: &str,
        key: &str,
        message: impl Into<String>,
        hint: Option<String>,
    ) -> ConfigError {
        let path: YamlPath = vec!["edges".into(), edge.into(), key.into()];
        match place_span(&self.places, &path, Part::Value) {
            Some(span) => ConfigError::at(&self.text, span, message, hint),
            None => ConfigError::new(&self.file, message, hint),
        }
    }

    /// A path of the config as written in it, and ` (where it led)` when it was relative
    /// (else empty), for errors about it.
    fn as_written(&self, path: &Path) -> (String, String) {
        match path.strip_prefix(&self.dir) {
            // Relative to the current directory: the entry is already where it led.
            Ok(entry) if self.dir.as_os_str().is_empty() => {
                (entry.display().to_string(), String::new())
            }
            Ok(entry) => (
                entry.display().to_string(),
                format!(" ({})", path.display()),
            ),
            Err(_) => (path.display().to_string(), String::new()),
        }
    }

    /// The error for `protos` entry `index`, a file that cannot be read (`why`), at the entry.
    pub fn protos_entry_error(&self, index: usize, why: &str) -> ConfigError {
        let (entry, resolved) = self.as_written(&self.protos[index]);
        let message = format!("cannot read the proto file `{entry}`{resolved}: {why}");
        // A config read as `weft.yaml` has no directory part: its files are relative to
        // the current directory.
        let here = if self.dir.as_os_str().is_empty() {
            "the current directory".to_string()
        } else {
            format!("`{}`", self.dir.display())
        };
        let mut hint =
            format!("a relative path is resolved against the config's directory, here {here}");
        if let Some(better) = similar_file(&self.protos[index], &entry) {
            hint = format!("{better} {hint}");
        }
        let hint = Some(hint);
        // A list's item, or the one string `protos: file.proto`.
        let span = place_span(&self.places, &["protos".into(), index.into()], Part::Value)
            .or_else(|| place_span(&self.places, &["protos".into()], Part::Value));
        match span {
            Some(span) => ConfigError::at(&self.text, span, message, hint),
            None => ConfigError::new(&self.file, message, hint),
        }
    }

    /// Every `element_paths` entry must be a directory. A misspelt or missing one would
    /// otherwise make each element it was meant to provide fall back to the standard
    /// library's element of the same name, without a word.
    pub fn check_element_paths(&self) -> Result<(), ConfigError> {
        for (index, path) in self.element_paths.iter().enumerate() {
            let problem = match std::fs::metadata(path) {
                Ok(m) if m.is_dir() => continue,
                Ok(_) => "is not a directory".to_owned(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => "does not exist".to_owned(),
                Err(e) => format!("cannot be read: {e}"),
            };
            let (entry, resolved) = self.as_written(path);
            let message = format!("`element_paths` entry `{entry}`{resolved} {problem}");
            let hint = Some(
                "each entry is a directory of <element>.weft files; a relative one is resolved against the config's directory".into(),
            );
            // A list's item, or the one string `element_paths: dir`.
            let span = place_span(
                &self.places,
                &["element_paths".into(), index.into()],
                Part::Value,
            )
            .or_else(|| place_span(&self.places, &["element_paths".into()], Part::Value));
            return Err(match span {
                Some(span) => ConfigError::at(&self.text, span, message, hint),
                None => ConfigError::new(&self.file, message, hint),
            });
        }
        Ok(())
    }

    pub fn edge(&self, name: &str) -> Result<&Edge, ConfigError> {
        self.edges.iter().find(|e| e.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.edges.iter().map(|e| e.name.as_str()).collect();
            ConfigError::new(
                &self.file,
                format!("no edge named `{name}`"),
                shell_cut_edge(name, &names)
                    .or_else(|| crate::diag::did_you_mean(name, names.iter().copied()))
                    .or_else(|| {
                        Some(format!(
                            "edges: {}",
                            crate::diag::some_of(names.iter().copied(), LISTED)
                        ))
                    }),
            )
        })
    }
}

/// How many names a hint lists before it says how many more there are.
pub const LISTED: usize = 12;

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

/// The span of `part` of the node at `path`; a sequence item or the root has no key, so
/// its value stands for it.
fn place_span(places: &Places, path: &[Step], part: Part) -> Option<Span> {
    let place = places.get(path)?;
    Some(match part {
        Part::Key => place.key.unwrap_or(place.value),
        Part::Value => place.value,
    })
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

struct Parser<'a> {
    source: &'a SourceFile,
    places: &'a Places,
    /// Where each element entry is, by edge and instance name, for [`Config::entries`].
    entries: BTreeMap<(String, String), EntryPaths>,
}

/// `path` and one step more.
fn child(path: &[Step], step: impl Into<Step>) -> YamlPath {
    let mut p = path.to_vec();
    p.push(step.into());
    p
}

impl Parser<'_> {
    /// An error pointing at `part` of the node at `path` where the text has it, else at the
    /// file.
    fn err_at(
        &self,
        path: &[Step],
        part: Part,
        message: impl Into<String>,
        hint: Option<&str>,
    ) -> ConfigError {
        let hint = hint.map(str::to_owned);
        match place_span(self.places, path, part) {
            Some(span) => ConfigError::at(self.source, span, message, hint),
            None => ConfigError::new(&self.source.path, message, hint),
        }
    }

    fn known_keys(
        &self,
        what: &str,
        path: &[Step],
        m: &serde_norway::Mapping,
        known: &[&str],
    ) -> Result<(), ConfigError> {
        for k in m.keys() {
            let k = yaml_key(k);
            if !known.contains(&k.as_str()) {
                let hint = crate::diag::did_you_mean(&k, known.iter().copied())
                    .unwrap_or_else(|| format!("known keys: {}", known.join(", ")));
                return Err(self.err_at(
                    &child(path, k.as_str()),
                    Part::Key,
                    format!("unknown key `{k}` in {what}"),
                    Some(&hint),
                ));
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
                .enumerate()
                .map(|(index, i)| {
                    i.as_str().map(str::to_owned).ok_or_else(|| {
                        self.err_at(
                            &[key.into(), index.into()],
                            Part::Value,
                            format!("`{key}` must list strings"),
                            None,
                        )
                    })
                })
                .collect(),
            Some(_) => Err(self.err_at(
                &[key.into()],
                Part::Value,
                format!("`{key}` must be a string or a list of strings"),
                None,
            )),
        }
    }

    fn edge(&mut self, name: &str, path: &[Step], body: &Yaml) -> Result<Edge, ConfigError> {
        let ctx = format!("edge `{name}`");
        let Yaml::Mapping(m) = body else {
            return Err(self.err_at(path, Part::Value, format!("{ctx} must be a mapping"), None));
        };
        self.known_keys(
            &ctx,
            path,
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
        let at = |key: &str| child(path, key);
        let text = |key: &str| -> Result<String, ConfigError> {
            match m.get(key) {
                Some(Yaml::String(s)) => Ok(s.clone()),
                Some(_) => Err(self.err_at(
                    &at(key),
                    Part::Value,
                    format!("{ctx}: `{key}` must be a string"),
                    None,
                )),
                // Nothing to point at but the edge that lacks it.
                None => Err(self.err_at(
                    path,
                    Part::Key,
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
                return Err(self.err_at(
                    &at("consistency"),
                    Part::Value,
                    format!("{ctx}: `consistency` is `strong` or `weak`"),
                    None,
                ));
            }
        };
        let list = |key: &str| -> Result<Vec<(ElementUse, EntryPaths)>, ConfigError> {
            match m.get(key) {
                None | Some(Yaml::Null) => Ok(Vec::new()),
                Some(Yaml::Sequence(items)) => items
                    .iter()
                    .enumerate()
                    .map(|(i, e)| self.element(&ctx, &child(&at(key), i), key, i, e))
                    .collect(),
                Some(v) => {
                    let hint = match v {
                        Yaml::String(name) => Some(format!("write `{key}: [{name}]`")),
                        _ => None,
                    };
                    Err(self.err_at(
                        &at(key),
                        Part::Value,
                        format!("{ctx}: `{key}` must be a list of elements"),
                        hint.as_deref(),
                    ))
                }
            }
        };
        let (client, client_paths): (Vec<_>, Vec<_>) = list("client")?.into_iter().unzip();
        let (any, any_paths): (Vec<_>, Vec<_>) = list("any")?.into_iter().unzip();
        let (server, server_paths): (Vec<_>, Vec<_>) = list("server")?.into_iter().unzip();
        let mut pairs = Vec::new();
        let mut pair_paths = Vec::new();
        match m.get("pair") {
            None | Some(Yaml::Null) => {}
            Some(Yaml::Sequence(items)) => {
                for (i, item) in items.iter().enumerate() {
                    let pair_at = child(&at("pair"), i);
                    let Yaml::Sequence(two) = item else {
                        return Err(self.err_at(
                            &pair_at,
                            Part::Value,
                            format!("{ctx}: pair #{} must be a list of two elements", i + 1),
                            Some("write `pair: [[encrypt, decrypt]]`"),
                        ));
                    };
                    if two.len() != 2 {
                        // Name what the pair holds, so the operator finds it.
                        let names: Vec<String> = two
                            .iter()
                            .enumerate()
                            .filter_map(|(j, y)| {
                                self.element(&ctx, &child(&pair_at, j), "pair", i, y).ok()
                            })
                            .map(|(u, _)| format!("`{}`", u.name))
                            .collect();
                        let what = match names.as_slice() {
                            [] => String::new(),
                            [one] => format!(", element {one}"),
                            many => format!(", elements {}", many.join(", ")),
                        };
                        return Err(self.err_at(
                            &pair_at,
                            Part::Value,
                            format!("{ctx}{what}: pair #{} has {} element(s); a pair is not closed until it has exactly two", i + 1, two.len()),
                            Some("the first runs on the client side, the second on the server side"),
                        ));
                    }
                    let (a, a_paths) =
                        self.element(&ctx, &child(&pair_at, 0), "pair", i, &two[0])?;
                    let (b, b_paths) =
                        self.element(&ctx, &child(&pair_at, 1), "pair", i, &two[1])?;
                    pairs.push((a, b));
                    pair_paths.push((a_paths, b_paths));
                }
            }
            Some(_) => {
                return Err(self.err_at(
                    &at("pair"),
                    Part::Value,
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
        // The entries' paths in the order of `Edge::chain`, to point at each entry below.
        let mut chain_paths: Vec<&EntryPaths> = Vec::new();
        chain_paths.extend(&client_paths);
        chain_paths.extend(pair_paths.iter().map(|p| &p.0));
        chain_paths.extend(&any_paths);
        chain_paths.extend(pair_paths.iter().rev().map(|p| &p.1));
        chain_paths.extend(&server_paths);
        let mut seen = std::collections::BTreeSet::new();
        // A request cannot come back to the client side: an `any` element pinned to the
        // client cannot follow one pinned to the server.
        let mut pinned_server: Option<&str> = None;
        for (e, paths) in edge.any.iter().zip(&any_paths) {
            match e.constraints.side {
                Some(Side::Server) => pinned_server = pinned_server.or(Some(e.name.as_str())),
                Some(Side::Client) => {
                    if let Some(s) = pinned_server {
                        return Err(self.err_at(
                            &child(&paths.entry(), "side"),
                            Part::Value,
                            format!("{ctx}, element `{}`: pinned to the client side, but it comes after `{s}`, which is pinned to the server side; a request meets every client-side element before any server-side one", e.name),
                            Some("list it before the server-pinned element, or pin one of them differently"),
                        ));
                    }
                }
                None => {}
            }
        }
        for ((pos, e), paths) in edge.chain().into_iter().zip(&chain_paths) {
            // The instance name as written: `name:`, else the element's name.
            let name_at = child(&paths.entry(), "name");
            let (name_path, name_part) = if self.places.get(&name_at).is_some() {
                (name_at, Part::Value)
            } else {
                paths.element.clone()
            };
            if e.name.contains('/') {
                // State is shared per `edge/instance`: with a `/` in the instance name, edge
                // `x` with `y/z` and edge `x/y` with `z` would share one element's state.
                return Err(self.err_at(
                    &name_path,
                    name_part,
                    format!("{ctx}: element name `{}` contains `/`", e.name),
                    Some("instance names are plain words (letters, digits, `-`, `_`)"),
                ));
            }
            if !seen.insert(e.name.clone()) {
                return Err(self.err_at(
                    &name_path,
                    name_part,
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
                    return Err(self.err_at(
                        &child(&paths.entry(), "side"),
                        Part::Value,
                        format!("{ctx}, element `{}`: pinned to the {} side but listed where it must run on the other side", e.name, side_name(side)),
                        Some("move it to `any:` or remove the `side:` pin"),
                    ));
                }
            }
            if e.constraints.untrusted && e.constraints.processor == Some(Processor::Lib) {
                return Err(self.err_at(
                    &child(&paths.entry(), "processor"),
                    Part::Value,
                    format!("{ctx}, element `{}`: `untrusted` excludes running in the app, but it is pinned to `processor: lib`", e.name),
                    Some("pin it to `agent` or `sandbox`, or drop `untrusted`"),
                ));
            }
        }
        for ((_, e), paths) in edge.chain().into_iter().zip(chain_paths) {
            self.entries
                .insert((edge.name.clone(), e.name.clone()), paths.clone());
        }
        Ok(edge)
    }

    /// One entry of an element list, at `entry` in the tree (the `index`th of `list`, for
    /// messages), and where its parts are.
    fn element(
        &self,
        ctx: &str,
        entry: &[Step],
        list: &str,
        index: usize,
        y: &Yaml,
    ) -> Result<(ElementUse, EntryPaths), ConfigError> {
        let at = format!("{ctx}, `{list}` #{}", index + 1);
        let here = |key: &str| child(entry, key);
        let (element, params_yaml, extra, paths): (
            String,
            Option<&Yaml>,
            Option<&serde_norway::Mapping>,
            EntryPaths,
        ) = match y {
            Yaml::String(s) => (
                s.clone(),
                None,
                None,
                EntryPaths {
                    element: (entry.to_vec(), Part::Value),
                    params: here("params"),
                    state: here("state"),
                },
            ),
            Yaml::Mapping(m) if m.contains_key("element") => {
                let Some(Yaml::String(e)) = m.get("element") else {
                    return Err(self.err_at(
                        &here("element"),
                        Part::Value,
                        format!("{at}: `element` must be a name"),
                        None,
                    ));
                };
                (
                    e.clone(),
                    m.get("params"),
                    Some(m),
                    EntryPaths {
                        element: (here("element"), Part::Value),
                        params: here("params"),
                        state: here("state"),
                    },
                )
            }
            Yaml::Mapping(m) if m.len() == 1 => match m.iter().next() {
                Some((k, v)) => {
                    let name = yaml_key(k);
                    let paths = EntryPaths {
                        element: (here(&name), Part::Key),
                        params: here(&name),
                        state: here("state"),
                    };
                    (name, Some(v), None, paths)
                }
                None => (
                    String::new(),
                    None,
                    None,
                    EntryPaths {
                        element: (entry.to_vec(), Part::Value),
                        params: here("params"),
                        state: here("state"),
                    },
                ),
            },
            _ => {
                // `- ratelimit:` with its parameters on the next lines at its own indentation:
                // YAML reads them as keys beside the element's name, with no parameters.
                let beside = match y {
                    Yaml::Mapping(m) => match m.iter().next() {
                        Some((k, Yaml::Null)) => {
                            let name = yaml_key(k);
                            let rest: Vec<String> = m
                                .iter()
                                .skip(1)
                                .map(|(k, _)| format!("`{}`", yaml_key(k)))
                                .collect();
                            let (first, them) = if rest.len() == 1 {
                                ("is", "it")
                            } else {
                                ("are", "them")
                            };
                            let listed = match rest.split_last() {
                                Some((last, init)) if !init.is_empty() => {
                                    format!("{} and {last}", init.join(", "))
                                }
                                _ => rest.join(""),
                            };
                            let one = rest.first().map_or("", |r| r.trim_matches('`'));
                            Some(format!(
                                "{listed} {first} beside `{name}`, not under it: indent {them} further than `{name}`, or write `- {name}: {{{one}: …}}`"
                            ))
                        }
                        _ => None,
                    },
                    _ => None,
                };
                return Err(self.err_at(
                    entry,
                    Part::Value,
                    format!("{at}: an element is a name, `name: {{params}}`, or a mapping with `element:`"),
                    Some(beside.as_deref().unwrap_or("e.g. `- ratelimit: {capacity: 100, rate: 10}`")),
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
                    let value = yaml_value(v).map_err(|m| {
                        self.err_at(
                            &child(&paths.params, k.as_str()),
                            Part::Value,
                            format!("{ctx_el}: parameter `{k}`: {m}"),
                            None,
                        )
                    })?;
                    params.insert(k, value);
                }
            }
            Some(_) => {
                return Err(self.err_at(
                    &paths.params,
                    Part::Value,
                    format!("{ctx_el}: parameters must be a mapping"),
                    None,
                ));
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
        let Some(m) = extra else {
            return Ok((use_, paths));
        };
        self.known_keys(
            &ctx_el,
            entry,
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
        let wrong = |key: &str, message: String, hint: Option<&str>| {
            self.err_at(&here(key), Part::Value, message, hint)
        };
        if let Some(n) = m.get("name") {
            use_.name = n
                .as_str()
                .ok_or_else(|| wrong("name", format!("{ctx_el}: `name` must be a string"), None))?
                .to_owned();
        }
        if let Some(p) = m.get("path") {
            let p = p
                .as_str()
                .ok_or_else(|| wrong("path", format!("{ctx_el}: `path` must be a string"), None))?;
            use_.path = Some(PathBuf::from(p));
        }
        if let Some(s) = m.get("side") {
            use_.constraints.side = Some(match s.as_str() {
                Some("client") => Side::Client,
                Some("server") => Side::Server,
                _ => {
                    return Err(wrong(
                        "side",
                        format!("{ctx_el}: `side` is `client` or `server`"),
                        None,
                    ));
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
                    return Err(wrong(
                        "processor",
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
                    wrong(key, format!("{ctx_el}: `{key}` is true or false"), None)
                })?;
            }
        }
        if let Some(v) = m.get("max_iterations") {
            let n = v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
                wrong(
                    "max_iterations",
                    format!("{ctx_el}: `max_iterations` is a whole number above 0"),
                    Some(
                        "the most `foreach` iterations one handler run may make (default 1000000)",
                    ),
                )
            })?;
            if n > crate::eval::MAX_ITERATIONS_CEILING {
                return Err(wrong(
                    "max_iterations",
                    format!(
                        "{ctx_el}: `max_iterations` is at most {}",
                        crate::eval::MAX_ITERATIONS_CEILING
                    ),
                    Some(
                        "a billion iterations hold a thread for about a minute; bound the element's collections instead",
                    ),
                ));
            }
            use_.max_iterations = Some(n);
        }
        if let Some(s) = m.get("state") {
            let Yaml::Mapping(sm) = s else {
                return Err(wrong(
                    "state",
                    format!("{ctx_el}: `state` must map state variables to values"),
                    None,
                ));
            };
            for (k, v) in sm {
                let k = yaml_key(k);
                let value = yaml_value(v).map_err(|m| {
                    self.err_at(
                        &child(&paths.state, k.as_str()),
                        Part::Value,
                        format!("{ctx_el}: state `{k}`: {m}"),
                        None,
                    )
                })?;
                use_.state.push((k, value));
            }
        }
        Ok((use_, paths))
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

/// "did you mean `dir/echo.proto`?" for a proto file `path` that is missing (written `entry`)
/// when its directory holds a `.proto` file of a similar name.
fn similar_file(path: &Path, entry: &str) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".proto"))
        .collect();
    let best = crate::diag::did_you_mean(name, names.iter().map(String::as_str))?;
    // `did you mean `x`?` for the file name, in the form the entry was written in.
    let prefix = &entry[..entry.len().saturating_sub(name.len())];
    Some(best.replacen('`', &format!("`{prefix}"), 1))
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

    /// A config of hundreds of edges: the hint lists a dozen names and counts the rest.
    #[test]
    fn an_unknown_edge_of_a_large_config_lists_a_dozen_names() {
        let edges: String = (0..500)
            .map(|i| format!("  e{i}: {{from: a{i}, to: b, method: echo.Echo/Say}}\n"))
            .collect();
        let text = format!("protos: [echo.proto]\nedges:\n{edges}");
        let c = Config::parse("weft.yaml", Path::new("."), &text).unwrap();
        let err = c.edge("zzzz").unwrap_err();
        assert_eq!(
            err.hint.as_deref(),
            Some("edges: e0, e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11 and 488 more")
        );
    }
}
