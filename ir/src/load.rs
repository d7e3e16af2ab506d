//! From a chain config to checked IR: find each element's source, parse it, and check it
//! against every method of the edge with its parameters bound.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::ast::ElementFile;
use crate::check::{CheckEnv, check};
use crate::config::{Config, ConfigError, Edge, ElementUse, EntryPart, Position};
use crate::diag::{ConfigCause, Diagnostic, SourceFile, has_errors, render_all};
use crate::enum_names;
use crate::ir::Element;
use crate::parser::parse;
use crate::schema::{MethodSchema, ProtoInput, Schema, SchemaError};
use crate::stdlib;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    // Not `source`: thiserror would make it the error's source as well, and a chain of
    // errors printed whole (`anyhow`'s `{:#}`) would say it twice.
    #[error("{file}: {error}")]
    Schema { file: String, error: SchemaError },
    #[error("{config}: edge `{edge}`, element `{element}`: {message}")]
    Element {
        config: String,
        edge: String,
        element: String,
        message: String,
    },
    /// Element sources with errors; `rendered` holds every diagnostic with its caret.
    #[error("{rendered}{count} error(s) in the elements of edge `{edge}`")]
    Diagnostics {
        edge: String,
        rendered: String,
        count: usize,
    },
}

/// One element of a loaded edge.
#[derive(Clone, Debug)]
pub struct LoadedElement {
    pub use_: ElementUse,
    pub position: Position,
    pub source: SourceFile,
    pub ast: ElementFile,
    /// The element checked against each method of the edge, by full method name.
    pub ir: BTreeMap<String, Arc<Element>>,
}

/// An edge ready to run: schema, methods and elements in chain order.
#[derive(Clone, Debug)]
pub struct LoadedEdge {
    pub edge: Edge,
    pub schema: Arc<Schema>,
    pub methods: Vec<MethodSchema>,
    pub elements: Vec<LoadedElement>,
    /// Rendered warnings from the element sources.
    pub warnings: String,
}

impl LoadedEdge {
    pub fn method(&self, name: &str) -> Option<&MethodSchema> {
        let wanted = name.trim_start_matches('/').replace('.', "/");
        self.methods.iter().find(|m| {
            m.full_name == name
                || m.full_name == name.trim_start_matches('/')
                || m.full_name.replace('.', "/") == wanted
                || m.full_name.rsplit('/').next() == Some(name)
        })
    }
}

pub fn load_schema(config: &Config) -> Result<Schema, LoadError> {
    load_schema_with_inputs(config).0
}

/// [`load_schema`], and every proto file the compile opened, whether it succeeded or not
/// ([`Schema::load_with_inputs`]).
pub fn load_schema_with_inputs(config: &Config) -> (Result<Schema, LoadError>, Vec<ProtoInput>) {
    if config.protos.is_empty() {
        return (
            Err(LoadError::Config(ConfigError::new(
                &config.file,
                "no `protos:` listed; Weft needs the services' .proto files to read messages",
                Some("add `protos: [path/to/service.proto]`".into()),
            ))),
            Vec::new(),
        );
    }
    let (schema, inputs) = Schema::load_with_inputs(&config.protos, &config.proto_include);
    let schema = schema.map_err(|error| match &error {
        // A listed file that is not there is a mistake in weft.yaml: point at the entry.
        SchemaError::Unreadable { path, why } => match config.protos.iter().position(|p| p == path)
        {
            Some(index) => LoadError::Config(config.protos_entry_error(index, why)),
            None => LoadError::Schema {
                file: config.file.clone(),
                error,
            },
        },
        _ => LoadError::Schema {
            file: config.file.clone(),
            error,
        },
    });
    (schema, inputs)
}

/// The methods an edge covers: one, or every method of a service for `pkg.Svc/*`.
pub fn edge_methods(
    config: &Config,
    schema: &Schema,
    edge: &Edge,
) -> Result<Vec<MethodSchema>, LoadError> {
    let r = match edge.method.strip_suffix("/*") {
        Some(service) => schema.service_methods(service),
        None => schema.method(&edge.method).map(|m| vec![m]),
    };
    r.map_err(|e| {
        // The caret is under the method: the message says what is wrong with it once, and
        // the hint what the schema has.
        let (message, hint) = match &e {
            SchemaError::UnknownMethod {
                name,
                suggestion,
                known,
            } => (
                format!("unknown gRPC method `{name}`"),
                Some(schema_hint(suggestion, known)),
            ),
            SchemaError::UnknownService {
                name,
                suggestion,
                known,
            } => (
                format!("unknown gRPC service `{}`", name.trim_end_matches("/*")),
                Some(schema_hint(suggestion, known)),
            ),
            e => (format!("method `{}`: {e}", edge.method), None),
        };
        // No element is at fault: naming one (as `-`) sent the reader looking for it.
        LoadError::Config(config.edge_error(
            &edge.name,
            "method",
            format!("edge `{}`: {message}", edge.name),
            hint,
        ))
    })
}

/// "did you mean `x`? the schema defines: a, b, …" for a method or service not in the
/// schema.
fn schema_hint(suggestion: &Option<String>, known: &[String]) -> String {
    let defined = if known.is_empty() {
        "nothing".to_owned()
    } else {
        crate::diag::some_of(known.iter().map(String::as_str), 12)
    };
    match suggestion {
        Some(s) => format!("did you mean `{s}`? the schema defines: {defined}"),
        None => format!("the schema defines: {defined}"),
    }
}

/// The files an element's source may come from, in search order: its explicit `path`, or
/// `<name>.weft` then `<name>.appnet` in each `element_paths` directory (the standard
/// library comes after them). A file appearing earlier in the list changes the source, so a
/// watcher watches every candidate up to the one found.
pub fn element_candidates(config: &Config, use_: &ElementUse) -> Vec<PathBuf> {
    if let Some(p) = &use_.path {
        return vec![config.dir.join(p)];
    }
    config
        .element_paths
        .iter()
        .flat_map(|dir| ["weft", "appnet"].map(|ext| dir.join(format!("{}.{ext}", use_.element))))
        .collect()
}

/// An element's source file that is there but cannot be read (not UTF-8, a directory, no
/// permission), or its explicit `path` when that cannot be read at all.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("cannot read its file `{}`: {why}", path.display())]
pub struct UnreadableSource {
    pub path: PathBuf,
    pub why: String,
}

/// Finds an element's source: the first of [`element_candidates`] that exists, then
/// (without an explicit `path`) the standard library; `Ok(None)` when there is none.
///
/// A candidate that exists but cannot be read is an error, not a reason to look further:
/// the file is the operator's element, and running the standard one of the same name in
/// its place would change the chain without a word.
pub fn element_source(
    config: &Config,
    use_: &ElementUse,
) -> Result<Option<SourceFile>, UnreadableSource> {
    for p in element_candidates(config, use_) {
        match std::fs::read_to_string(&p) {
            Ok(t) => return Ok(Some(SourceFile::new(p.display().to_string(), t))),
            // Absent (a dangling link is there, and broken): the next place to look.
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && use_.path.is_none()
                    && std::fs::symlink_metadata(&p).is_err() => {}
            Err(e) => {
                return Err(UnreadableSource {
                    path: p,
                    why: e.to_string(),
                });
            }
        }
    }
    Ok(stdlib::source(&use_.element)
        .map(|t| SourceFile::new(format!("<std>/{}.weft", use_.element), t)))
}

/// Loads and checks every element of an edge.
pub fn load_edge(config: &Config, edge_name: &str) -> Result<LoadedEdge, LoadError> {
    load_edge_with_schema(config, edge_name, Arc::new(load_schema(config)?))
}

/// [`load_edge`] with the config's schema already compiled ([`load_schema`]), so the edges
/// of one config share one compile.
pub fn load_edge_with_schema(
    config: &Config,
    edge_name: &str,
    schema: Arc<Schema>,
) -> Result<LoadedEdge, LoadError> {
    let edge = config.edge(edge_name)?.clone();
    config.check_element_paths()?;
    let methods = edge_methods(config, &schema, &edge)?;
    let mut elements = Vec::new();
    let mut rendered = String::new();
    let mut warnings = String::new();
    let mut errors = 0;
    for (position, use_) in edge.chain() {
        let found = element_source(config, use_).map_err(|e| LoadError::Element {
            config: config.file.clone(),
            edge: edge.name.clone(),
            element: use_.name.clone(),
            message: e.to_string(),
        })?;
        let Some(source) = found else {
            let mut known: Vec<String> = stdlib::names().map(str::to_owned).collect();
            for dir in &config.element_paths {
                known.extend(list_elements(dir));
            }
            let hint = crate::diag::did_you_mean(&use_.element, known.iter().map(String::as_str))
                .unwrap_or_else(|| format!("known elements: {}", known.join(", ")));
            let message = format!("unknown element `{}`", use_.element);
            return Err(
                match config.entry_error(
                    &edge.name,
                    &use_.name,
                    EntryPart::Element,
                    format!("edge `{}`, element `{}`: {message}", edge.name, use_.name),
                    Some(hint.clone()),
                ) {
                    Some(e) => LoadError::Config(e),
                    None => LoadError::Element {
                        config: config.file.clone(),
                        edge: edge.name.clone(),
                        element: use_.name.clone(),
                        message: format!("{message}; {hint}"),
                    },
                },
            );
        };
        let (ast, mut diags) = parse(&source);
        let mut ir = BTreeMap::new();
        if !has_errors(&diags) {
            let mut seen: HashSet<Diagnostic> = diags.iter().cloned().collect();
            for m in &methods {
                let env = CheckEnv {
                    name: use_.name.clone(),
                    method: Some(m),
                    params: Some(&use_.params),
                };
                let (element, mut d) = check(&ast, &env);
                // The element is checked with this instance's parameters and the edge's
                // methods, so its errors are this entry's: name it, as the config's own errors
                // do (the caret points into a source other instances may share).
                for x in d.iter_mut().filter(|x| x.is_error()) {
                    x.message = format!(
                        "edge `{}`, element `{}`: {}",
                        edge.name, use_.name, x.message
                    );
                }
                push_unique(&mut diags, &mut seen, d);
                if let Some(e) = element {
                    ir.insert(m.full_name.clone(), Arc::new(e));
                }
            }
        }
        // State declarations do not depend on the method: any checked form will do.
        if let Some(checked) = ir.values().next() {
            check_config_state(checked, use_).map_err(|(message, hint, part)| {
                config
                    .entry_error(
                        &edge.name,
                        &use_.name,
                        part,
                        format!("edge `{}`, element `{}`: {message}", edge.name, use_.name),
                        hint.clone(),
                    )
                    .map_or_else(
                        || LoadError::Element {
                            config: config.file.clone(),
                            edge: edge.name.clone(),
                            element: use_.name.clone(),
                            message: match hint {
                                Some(hint) => format!("{message}; {hint}"),
                                None => message,
                            },
                        },
                        LoadError::Config,
                    )
            })?;
        }
        let checked = (methods.iter()).filter_map(|m| Some((m, &**ir.get(&m.full_name)?)));
        warnings.push_str(&enum_names::warnings(config, &edge.name, use_, checked));
        let (errs, warns): (Vec<Diagnostic>, Vec<Diagnostic>) =
            diags.into_iter().partition(Diagnostic::is_error);
        errors += errs.len();
        // What the config's values caused is shown where the config has them, before what
        // the element's source has.
        let mut in_source = Vec::new();
        for d in errs {
            match in_config(config, &edge.name, use_, &source, &d) {
                Some(e) => {
                    rendered.push_str(&e.to_string());
                    rendered.push('\n');
                }
                None => in_source.push(d),
            }
        }
        rendered.push_str(&render_all(&source, &in_source));
        warnings.push_str(&render_all(&source, &warns));
        elements.push(LoadedElement {
            use_: use_.clone(),
            position,
            source,
            ast,
            ir,
        });
    }
    if errors > 0 {
        return Err(LoadError::Diagnostics {
            edge: edge.name.clone(),
            rendered,
            count: errors,
        });
    }
    Ok(LoadedEdge {
        edge,
        schema,
        methods,
        elements,
        warnings,
    })
}

/// The error for an instance of `loaded` that did not start (`failure`, from
/// [`crate::sim::start_each_instance`]), pointing at the config's value of a parameter the
/// failing `require` reads; `None` when that is not known (its condition did not fold, or the
/// config's text does not place the value). The message is `edge `…`: ` and the failure.
pub fn refusal_in_config(
    config: &Config,
    loaded: &LoadedEdge,
    failure: &crate::sim::SimError,
) -> Option<ConfigError> {
    let crate::sim::SimError::Element { element, message } = failure else {
        return None;
    };
    // Only `init` refuses parameters; a config `state:` value that fails is another matter.
    if !message.starts_with("`init` failed") {
        return None;
    }
    let el = loaded.elements.iter().find(|e| &e.use_.name == element)?;
    let param = el.ir.values().next()?.refused_params.first()?;
    config.entry_error(
        &loaded.edge.name,
        element,
        EntryPart::ParamValue(param),
        format!("edge `{}`: {failure}", loaded.edge.name),
        None,
    )
}

/// A diagnostic the config's parameters caused, as an error pointing at them in the config;
/// `None` when it is the element's own, or the config's text does not place it.
fn in_config(
    config: &Config,
    edge: &str,
    use_: &ElementUse,
    source: &SourceFile,
    d: &Diagnostic,
) -> Option<ConfigError> {
    let (line, col) = source.line_col(d.span.start);
    let declared = format!("{}:{line}:{col}", source.path);
    let (part, message) = match d.config.as_ref()? {
        // Where the element declares it says what it expects.
        ConfigCause::ParamValue(name) => (
            EntryPart::ParamValue(name),
            format!("{} at {declared}", d.message),
        ),
        ConfigCause::ParamName(name) => (EntryPart::ParamName(name), d.message.clone()),
        ConfigCause::ParamField(name) => (
            EntryPart::ParamValue(name),
            format!(
                "{}; the element reads parameter `{name}` as a field name at {declared}",
                d.message
            ),
        ),
        ConfigCause::MissingParam(_) => (
            EntryPart::Element,
            format!("{} (declared at {declared})", d.message),
        ),
    };
    // The checker already named the edge and the instance.
    config.entry_error(edge, &use_.name, part, message, d.hint.clone())
}

/// The config's `state:` values name variables the element declares, with values of their
/// types: checked here, with the parameters, so `plan`, `equiv` and `bench` refuse what
/// would otherwise fail only when an instance starts. An error is a message, a hint and what
/// in the entry is wrong.
fn check_config_state<'a>(
    ir: &Element,
    use_: &'a ElementUse,
) -> Result<(), (String, Option<String>, EntryPart<'a>)> {
    for (var, value) in &use_.state {
        let Some(v) = ir.var(var) else {
            let names: Vec<&str> = ir.state.iter().map(|v| v.name.as_str()).collect();
            let hint = crate::diag::did_you_mean(var, names.iter().copied()).unwrap_or_else(|| {
                if names.is_empty() {
                    "it declares no state".into()
                } else {
                    format!("its state variables: {}", names.join(", "))
                }
            });
            return Err((
                format!("`state` sets `{var}`, which the element does not declare"),
                Some(hint),
                EntryPart::StateName(var),
            ));
        };
        let ty = &ir.state[v].ty;
        if let Err(found) = crate::check::coerce_value(value.clone(), ty) {
            return Err((
                format!(
                    "`state` gives `{var}` {}, but it is declared `{ty}`",
                    crate::check::a_or_an(&found)
                ),
                None,
                state_culprit(var, value, ty).unwrap_or(EntryPart::StateValue(var)),
            ));
        }
    }
    Ok(())
}

/// The entry or item of a config `state:` collection that does not fit `ty`, when the
/// config's text can name it (a map's string key, a list's index).
fn state_culprit<'a>(
    var: &'a str,
    value: &'a weft_hostcalls::Value,
    ty: &crate::types::Type,
) -> Option<EntryPart<'a>> {
    use crate::check::coerce_value;
    use crate::types::Type;
    use weft_hostcalls::Value;
    match (value, ty) {
        (Value::Map(m), Type::Map(kt, vt)) => m.iter().find_map(|(k, v)| {
            let Value::Str(key) = k else { return None };
            if coerce_value(k.clone(), kt).is_err() {
                Some(EntryPart::StateMapEntry(var, key, true))
            } else if coerce_value(v.clone(), vt).is_err() {
                Some(EntryPart::StateMapEntry(var, key, false))
            } else {
                None
            }
        }),
        (Value::Vec(items), Type::Vec(t)) => items
            .iter()
            .position(|i| coerce_value(i.clone(), t).is_err())
            .map(|i| EntryPart::StateListItem(var, i)),
        _ => None,
    }
}

/// Checking against several methods repeats method-independent diagnostics; keep one each.
/// `seen` is a set, not a search of `into`, so many diagnostics times several methods is
/// not quadratic.
fn push_unique(into: &mut Vec<Diagnostic>, seen: &mut HashSet<Diagnostic>, more: Vec<Diagnostic>) {
    for d in more {
        if seen.insert(d.clone()) {
            into.push(d);
        }
    }
}

fn list_elements(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| {
            let p = e.path();
            let ext = p.extension()?.to_str()?;
            (ext == "weft" || ext == "appnet")
                .then(|| p.file_stem()?.to_str().map(str::to_owned))?
        })
        .collect()
}
