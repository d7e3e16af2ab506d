//! Proto schemas: `.proto` files compiled in-process (protox, no `protoc`), gRPC method lookup,
//! and resolution of field paths such as `user.id` into the steps the wire codec follows.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use prost_reflect::{
    DescriptorPool, FieldDescriptor, Kind, MessageDescriptor, MethodDescriptor, ServiceDescriptor,
};
use protox::file::{
    ChainFileResolver, File, FileResolver, GoogleFileResolver, IncludeFileResolver,
};
use weft_hostcalls::Value;

use crate::types::Type;
use crate::wire;

/// A set of compiled proto files and everything they import.
#[derive(Clone, Debug)]
pub struct Schema {
    pool: DescriptorPool,
}

#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("no .proto files were given; a schema needs at least one")]
    NoFiles,
    /// protox reports a listed file that is not there as "not in any include path", which
    /// sends the operator to the include directories when the path itself is wrong.
    #[error("cannot read the proto file `{}`: {why}", path.display())]
    Unreadable { path: PathBuf, why: String },
    /// The text is protox's own, which starts with `file:line:col:` when it knows the place.
    #[error("cannot compile the proto schema: {0}")]
    Compile(String),
    #[error(
        "unknown gRPC method `{name}`{}; the schema defines: {}",
        did_you_mean(suggestion),
        list_or_none(known)
    )]
    UnknownMethod {
        name: String,
        suggestion: Option<String>,
        known: Vec<String>,
    },
    #[error(
        "unknown gRPC service `{name}`{}; the schema defines: {}",
        did_you_mean(suggestion),
        list_or_none(known)
    )]
    UnknownService {
        name: String,
        suggestion: Option<String>,
        known: Vec<String>,
    },
}

fn did_you_mean(suggestion: &Option<String>) -> String {
    suggestion
        .as_ref()
        .map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default()
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "nothing".to_owned()
    } else {
        items.join(", ")
    }
}

/// One gRPC method with its message types.
#[derive(Clone, Debug)]
pub struct MethodSchema {
    /// `pkg.Svc/Method`.
    pub full_name: String,
    pub request: MessageDescriptor,
    pub response: MessageDescriptor,
    pub client_streaming: bool,
    pub server_streaming: bool,
}

impl MethodSchema {
    /// The full name of a proto enum with a value called `name`, and that value's number:
    /// an element that writes `EXPRESS` where Weft wants the enum's number is told which.
    pub fn enum_value(&self, name: &str) -> Option<(String, i32)> {
        self.request.parent_pool().all_enums().find_map(|e| {
            e.get_value_by_name(name)
                .map(|v| (e.full_name().to_owned(), v.number()))
        })
    }

    fn new(method: &MethodDescriptor) -> Self {
        MethodSchema {
            full_name: format!("{}/{}", method.parent_service().full_name(), method.name()),
            request: method.input(),
            response: method.output(),
            client_streaming: method.is_client_streaming(),
            server_streaming: method.is_server_streaming(),
        }
    }
}

/// A proto file a compile opened by name (a listed file or one it imports, at any depth),
/// with every path it is looked for at, in search order (one per include directory). A
/// watcher needs the paths before the one found too: a file appearing there would shadow it.
/// Files protox ships (`google/protobuf/*.proto`) are looked for on disk first, so they are
/// inputs as well, with no path that exists.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProtoInput {
    /// The import name, relative to an include directory: the same on every machine.
    pub name: String,
    pub candidates: Vec<PathBuf>,
    /// The path the compile read it from and the text it compiled; `None` when no candidate
    /// exists, the file did not parse, or it is one protox ships.
    pub read: Option<(PathBuf, String)>,
}

/// protox's own resolver chain, noting the name of every file the compiler opens, whether
/// it is found, parses or not: after a failed compile the file to fix is among them.
struct Recording {
    inner: ChainFileResolver,
    opened: Arc<Mutex<Vec<Opened>>>,
}

/// A name the compiler opened, with the file's path and text when it was read from disk.
type Opened = (String, Option<(PathBuf, String)>);

impl FileResolver for Recording {
    fn resolve_path(&self, path: &Path) -> Option<String> {
        self.inner.resolve_path(path)
    }

    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        let file = self.inner.open_file(name);
        let read = file.as_ref().ok().and_then(|f| {
            let path = f.path()?.to_path_buf();
            Some((path, f.source()?.to_owned()))
        });
        self.opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((name.to_owned(), read));
        file
    }
}

/// Serves the one in-memory file of [`Schema::from_source`]; imports of other files fail as
/// "not found" so the chain falls through to the well-known Google files.
struct InMemoryFile {
    name: String,
    source: String,
}

impl FileResolver for InMemoryFile {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        if name == self.name {
            File::from_source(name, &self.source)
        } else {
            Err(protox::Error::file_not_found(name))
        }
    }
}

/// A listed file that cannot be opened, which protox reports as "not in any include path":
/// the operator should fix the path, not the include directories.
fn unreadable_listed_file<P: AsRef<Path>>(files: &[P]) -> Option<SchemaError> {
    files.iter().find_map(|f| {
        let e = std::fs::metadata(f.as_ref()).err()?;
        let why = if e.kind() == std::io::ErrorKind::NotFound {
            "no such file".to_owned()
        } else {
            e.to_string()
        };
        let path = f.as_ref().to_path_buf();
        Some(SchemaError::Unreadable { path, why })
    })
}

fn compile_error(e: protox::Error, includes: &[PathBuf]) -> SchemaError {
    // protox's Debug form carries `file:line:col:`; its Display form drops the location. At
    // the end of a file (a file cut short) it has no place to show, and names no file: the
    // file is then put in front, as the operator needs to know which one to fix.
    let mut text = format!("{e:?}");
    if let Some(file) = e.file()
        && !text.contains(file)
    {
        text = format!("{file}: {text}");
    }
    // An import is looked up in the include directories, not beside the importing file: the
    // fix is usually `proto_include:` (or `--proto` of the right directory), so say where.
    if e.is_file_not_found() && !includes.is_empty() {
        let dirs: Vec<String> = includes
            .iter()
            .map(|d| format!("`{}`", d.display()))
            .collect();
        text = format!(
            "{text} (looked in {}, and the well-known google/protobuf files)",
            dirs.join(", ")
        );
    }
    SchemaError::Compile(text)
}

impl Schema {
    /// The compiled files as a `FileDescriptorSet`'s bytes: equal for equal schemas, so two
    /// loads can be compared (a reload keeps element state only over an unchanged schema).
    pub fn encoded(&self) -> Vec<u8> {
        self.pool.encode_to_vec()
    }

    /// Compiles `files`. With no `include_dirs`, each file's own directory is an include
    /// directory, which suits the common case of self-contained protos next to each other.
    pub fn load<P: AsRef<Path>>(files: &[P], include_dirs: &[P]) -> Result<Schema, SchemaError> {
        Schema::load_with_inputs(files, include_dirs).0
    }

    /// [`Schema::load`], and every file the compile opened ([`ProtoInput`], sorted by name),
    /// whether it succeeded or not: what a version's digest covers and a watcher watches.
    pub fn load_with_inputs<P: AsRef<Path>>(
        files: &[P],
        include_dirs: &[P],
    ) -> (Result<Schema, SchemaError>, Vec<ProtoInput>) {
        if files.is_empty() {
            return (Err(SchemaError::NoFiles), Vec::new());
        }
        let mut includes: Vec<PathBuf> = Vec::new();
        if include_dirs.is_empty() {
            for f in files {
                let dir = match f.as_ref().parent() {
                    Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                if !includes.contains(&dir) {
                    includes.push(dir);
                }
            }
        } else {
            includes.extend(include_dirs.iter().map(|d| d.as_ref().to_path_buf()));
        }
        // The chain `protox::Compiler::new` builds, with the names it opens noted.
        let mut inner = ChainFileResolver::new();
        for dir in &includes {
            inner.add(IncludeFileResolver::new(dir.clone()));
        }
        inner.add(GoogleFileResolver::new());
        let opened = Arc::new(Mutex::new(Vec::new()));
        let mut compiler = protox::Compiler::with_file_resolver(Recording {
            inner,
            opened: Arc::clone(&opened),
        });
        compiler.include_imports(true);
        let compiled = compiler.open_files(files).map(|_| ()).map_err(|e| {
            unreadable_listed_file(files).unwrap_or_else(|| compile_error(e, &includes))
        });
        let mut opened =
            std::mem::take(&mut *opened.lock().unwrap_or_else(PoisonError::into_inner));
        opened.sort_by(|a, b| a.0.cmp(&b.0));
        opened.dedup_by(|a, b| a.0 == b.0);
        let inputs = opened
            .into_iter()
            .map(|(name, read)| ProtoInput {
                candidates: includes.iter().map(|dir| dir.join(&name)).collect(),
                name,
                read,
            })
            .collect();
        let schema = compiled.map(|()| Schema {
            pool: compiler.descriptor_pool(),
        });
        (schema, inputs)
    }

    /// Compiles one in-memory file (it may import the well-known `google/protobuf/*` files).
    pub fn from_source(file_name: &str, source: &str) -> Result<Schema, SchemaError> {
        let mut resolver = ChainFileResolver::new();
        resolver.add(InMemoryFile {
            name: file_name.to_owned(),
            source: source.to_owned(),
        });
        resolver.add(GoogleFileResolver::new());
        let mut compiler = protox::Compiler::with_file_resolver(resolver);
        compiler.include_imports(true);
        compiler
            .open_file(file_name)
            .map_err(|e| compile_error(e, &[]))?;
        Ok(Schema {
            pool: compiler.descriptor_pool(),
        })
    }

    pub fn pool(&self) -> &DescriptorPool {
        &self.pool
    }

    /// A message type by its full name, e.g. `pkg.User`.
    pub fn message(&self, full_name: &str) -> Option<MessageDescriptor> {
        self.pool
            .get_message_by_name(full_name.strip_prefix('.').unwrap_or(full_name))
    }

    /// Accepts `pkg.Svc/Method`, `/pkg.Svc/Method` (the HTTP/2 `:path`) and `pkg.Svc.Method`.
    pub fn method(&self, name: &str) -> Result<MethodSchema, SchemaError> {
        let trimmed = name.strip_prefix('/').unwrap_or(name);
        let split = trimmed
            .rsplit_once('/')
            .or_else(|| trimmed.rsplit_once('.'));
        if let Some((svc, m)) = split
            && let Some(service) = self.pool.get_service_by_name(svc)
            && let Some(method) = service.methods().find(|x| x.name() == m)
        {
            return Ok(MethodSchema::new(&method));
        }
        let known: Vec<String> = self.methods().into_iter().map(|m| m.full_name).collect();
        // Compare in the canonical `pkg.Svc/Method` spelling; a bare method name (`GetUsr`)
        // is compared with the bare method names.
        let canonical = match split {
            Some((svc, m)) => format!("{svc}/{m}"),
            None => trimmed.to_owned(),
        };
        // A service's name alone (`pkg.Svc`) means all of its methods: that form is
        // `pkg.Svc/*`, not the method whose name happens to be closest.
        let service_alone = trimmed.trim_end_matches('/');
        let suggestion = if self.pool.get_service_by_name(service_alone).is_some() {
            Some(format!("{service_alone}/*"))
        } else {
            closest_by(&canonical, &known, |k| {
                let short = k.rsplit_once('/').map_or(k.as_str(), |(_, m)| m);
                if canonical.contains('/') {
                    k.as_str()
                } else {
                    short
                }
            })
        };
        Err(SchemaError::UnknownMethod {
            name: name.to_owned(),
            suggestion,
            known,
        })
    }

    /// Every method of every service, sorted by full name.
    pub fn methods(&self) -> Vec<MethodSchema> {
        let mut all: Vec<MethodSchema> = self
            .pool
            .services()
            .flat_map(|s| {
                s.methods()
                    .map(|m| MethodSchema::new(&m))
                    .collect::<Vec<_>>()
            })
            .collect();
        all.sort_by(|a, b| a.full_name.cmp(&b.full_name));
        all
    }

    /// The methods of service `pkg.Svc`, sorted by full name (edges with method `*`).
    pub fn service_methods(&self, service: &str) -> Result<Vec<MethodSchema>, SchemaError> {
        let trimmed = service.strip_prefix('/').unwrap_or(service);
        let trimmed = trimmed.strip_suffix("/*").unwrap_or(trimmed);
        let Some(svc) = self.pool.get_service_by_name(trimmed) else {
            let mut known: Vec<String> = self
                .pool
                .services()
                .map(|s: ServiceDescriptor| s.full_name().to_owned())
                .collect();
            known.sort();
            let suggestion = closest_by(trimmed, &known, |k| k.as_str());
            return Err(SchemaError::UnknownService {
                name: service.to_owned(),
                suggestion,
                known,
            });
        };
        let mut methods: Vec<MethodSchema> = svc.methods().map(|m| MethodSchema::new(&m)).collect();
        methods.sort_by(|a, b| a.full_name.cmp(&b.full_name));
        Ok(methods)
    }
}

/// The candidate most similar to `input`, if any is similar enough to be worth suggesting.
pub fn closest<'a, I>(input: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let input = input.to_lowercase();
    let mut best: Option<(f64, &'a str)> = None;
    for c in candidates {
        let score = strsim::normalized_damerau_levenshtein(&input, &c.to_lowercase());
        if score >= 0.5 && best.is_none_or(|(s, _)| score > s) {
            best = Some((score, c));
        }
    }
    best.map(|(_, c)| c)
}

fn closest_by<T>(input: &str, candidates: &[T], key: impl Fn(&T) -> &str) -> Option<T>
where
    T: Clone,
{
    let keyed: Vec<&str> = candidates.iter().map(&key).collect();
    let hit = closest(input, keyed.iter().copied())?;
    candidates.iter().find(|c| key(c) == hit).cloned()
}

/// A resolved field path: the fields to step through, outermost first.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldPath {
    /// The path as written, e.g. `user.id`.
    pub text: String,
    /// All but the last are singular message fields.
    pub steps: Vec<FieldStep>,
    /// The language type of the value a read returns.
    pub ty: Type,
}

impl FieldPath {
    /// The field the path reads or writes.
    pub fn leaf(&self) -> Option<&FieldStep> {
        self.steps.last()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct FieldStep {
    pub name: String,
    pub number: u32,
    /// For a map field this is `Message` (the entry type, as on the wire); the key and value
    /// kinds are in `card`.
    pub kind: ProtoKind,
    pub card: Cardinality,
    /// The numbers of the other members of this field's oneof (empty outside a oneof).
    pub oneof_siblings: Vec<u32>,
    /// Their names, in the same order: writing this field clears them, which the planner
    /// must count as writing them.
    pub oneof_sibling_names: Vec<String>,
    /// A proto3 singular scalar without `optional`: its default value is never emitted.
    pub implicit_presence: bool,
    /// What an absent field reads as: the proto2 `[default = ..]`, an enum's first value, or
    /// the zero value. Repeated fields default to an empty `Vec`, maps to an empty `Map`, and
    /// message-typed fields to empty `Bytes` (the wire codec handles messages as payloads).
    pub default: Value,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProtoKind {
    Double,
    Float,
    Int32,
    Int64,
    Uint32,
    Uint64,
    Sint32,
    Sint64,
    Fixed32,
    Fixed64,
    Sfixed32,
    Sfixed64,
    Bool,
    String,
    Bytes,
    Enum,
    Message,
}

impl ProtoKind {
    pub(crate) fn of(kind: &Kind) -> ProtoKind {
        match kind {
            Kind::Double => ProtoKind::Double,
            Kind::Float => ProtoKind::Float,
            Kind::Int32 => ProtoKind::Int32,
            Kind::Int64 => ProtoKind::Int64,
            Kind::Uint32 => ProtoKind::Uint32,
            Kind::Uint64 => ProtoKind::Uint64,
            Kind::Sint32 => ProtoKind::Sint32,
            Kind::Sint64 => ProtoKind::Sint64,
            Kind::Fixed32 => ProtoKind::Fixed32,
            Kind::Fixed64 => ProtoKind::Fixed64,
            Kind::Sfixed32 => ProtoKind::Sfixed32,
            Kind::Sfixed64 => ProtoKind::Sfixed64,
            Kind::Bool => ProtoKind::Bool,
            Kind::String => ProtoKind::String,
            Kind::Bytes => ProtoKind::Bytes,
            Kind::Enum(_) => ProtoKind::Enum,
            Kind::Message(_) => ProtoKind::Message,
        }
    }

    /// The wire type of one value of this kind outside a packed run.
    pub fn wire_type(self) -> u8 {
        match self {
            ProtoKind::Int32
            | ProtoKind::Int64
            | ProtoKind::Uint32
            | ProtoKind::Uint64
            | ProtoKind::Sint32
            | ProtoKind::Sint64
            | ProtoKind::Bool
            | ProtoKind::Enum => wire::VARINT,
            ProtoKind::Double | ProtoKind::Fixed64 | ProtoKind::Sfixed64 => wire::I64,
            ProtoKind::Float | ProtoKind::Fixed32 | ProtoKind::Sfixed32 => wire::I32,
            ProtoKind::String | ProtoKind::Bytes | ProtoKind::Message => wire::LEN,
        }
    }

    /// Whether repeated values of this kind may be packed (every numeric kind).
    pub fn is_packable(self) -> bool {
        self.wire_type() != wire::LEN
    }

    /// The language type of one value of this kind; messages travel as their payload bytes.
    pub fn language_type(self) -> Type {
        match self {
            ProtoKind::Int32
            | ProtoKind::Int64
            | ProtoKind::Sint32
            | ProtoKind::Sint64
            | ProtoKind::Sfixed32
            | ProtoKind::Sfixed64
            | ProtoKind::Enum => Type::Int,
            ProtoKind::Uint32 | ProtoKind::Uint64 | ProtoKind::Fixed32 | ProtoKind::Fixed64 => {
                Type::Uint
            }
            ProtoKind::Double | ProtoKind::Float => Type::Float,
            ProtoKind::Bool => Type::Bool,
            ProtoKind::String => Type::Str,
            ProtoKind::Bytes | ProtoKind::Message => Type::Bytes,
        }
    }

    /// The zero value of this kind (an absent map key or value reads as it).
    pub fn zero_value(self) -> Value {
        self.language_type().zero_value()
    }

    /// The proto spelling, for messages.
    pub fn proto_name(self) -> &'static str {
        match self {
            ProtoKind::Double => "double",
            ProtoKind::Float => "float",
            ProtoKind::Int32 => "int32",
            ProtoKind::Int64 => "int64",
            ProtoKind::Uint32 => "uint32",
            ProtoKind::Uint64 => "uint64",
            ProtoKind::Sint32 => "sint32",
            ProtoKind::Sint64 => "sint64",
            ProtoKind::Fixed32 => "fixed32",
            ProtoKind::Fixed64 => "fixed64",
            ProtoKind::Sfixed32 => "sfixed32",
            ProtoKind::Sfixed64 => "sfixed64",
            ProtoKind::Bool => "bool",
            ProtoKind::String => "string",
            ProtoKind::Bytes => "bytes",
            ProtoKind::Enum => "enum",
            ProtoKind::Message => "message",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cardinality {
    Single,
    /// `packed` is how a write encodes the list; reads accept both encodings.
    Repeated {
        packed: bool,
    },
    Map {
        key: ProtoKind,
        value: ProtoKind,
    },
}

/// A field path that does not name a readable field.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ResolveError {
    pub message: String,
    /// E.g. "did you mean `user`?" or "`a` is a message; name one of its fields: a.x, a.y".
    pub hint: Option<String>,
    /// Byte range of the offending segment inside the path text.
    pub segment: Range<usize>,
}

impl ResolveError {
    fn new(message: String, hint: Option<String>, segment: Range<usize>) -> Self {
        ResolveError {
            message,
            hint,
            segment,
        }
    }
}

/// Resolves `path` (`a.b.c`, proto field names) against `msg`. The leaf must be a scalar, a
/// list of scalars or a map with scalar values.
pub fn resolve_path(msg: &MessageDescriptor, path: &str) -> Result<FieldPath, ResolveError> {
    resolve(msg, path, false)
}

/// Like [`resolve_path`], but the leaf may also be message-typed (singular, repeated or map
/// values): such values read and write as their raw payload bytes. Meant for `byte_size` and
/// for forwarding sub-messages untouched.
pub fn resolve_payload_path(
    msg: &MessageDescriptor,
    path: &str,
) -> Result<FieldPath, ResolveError> {
    resolve(msg, path, true)
}

/// Splits `a.b` into segments with their byte ranges.
fn segments(text: &str) -> Vec<(Range<usize>, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    for part in text.split('.') {
        out.push((start..start + part.len(), part));
        start += part.len() + 1;
    }
    out
}

/// At most this many field names are listed in a hint; the rest are elided.
const HINT_LIST_MAX: usize = 12;

fn list_fields(msg: &MessageDescriptor, prefix: &str) -> String {
    let names: Vec<String> = msg
        .fields()
        .map(|f| format!("{prefix}{}", f.name()))
        .collect();
    if names.len() > HINT_LIST_MAX {
        format!("{}, …", names[..HINT_LIST_MAX].join(", "))
    } else {
        names.join(", ")
    }
}

fn resolve(msg: &MessageDescriptor, text: &str, payloads: bool) -> Result<FieldPath, ResolveError> {
    if text.is_empty() {
        return Err(ResolveError::new(
            "empty field path".to_owned(),
            Some(format!(
                "name a field of `{}`: {}",
                msg.full_name(),
                list_fields(msg, "")
            )),
            0..0,
        ));
    }
    let segs = segments(text);
    let mut current = msg.clone();
    let mut steps = Vec::with_capacity(segs.len());
    if let Some((range, _)) = segs.iter().find(|(_, name)| name.is_empty()) {
        return Err(ResolveError::new(
            format!("field path `{text}` has an empty segment"),
            Some("separate field names with single dots, e.g. `user.id`".to_owned()),
            range.clone(),
        ));
    }
    for (i, (range, name)) in segs.iter().enumerate() {
        let is_leaf = i + 1 == segs.len();
        let prefix = &text[..range.start];
        let Some(field) = current.get_field_by_name(name) else {
            return Err(unknown_field(&current, name, prefix, range.clone()));
        };
        if field.is_group() {
            return Err(ResolveError::new(
                format!("`{prefix}{name}` is a proto2 group, which Weft does not support"),
                Some("declare it as a nested message field instead of a group".to_owned()),
                range.clone(),
            ));
        }
        let step = step_of(&field, prefix, range.clone())?;
        if !is_leaf {
            let here = &text[..range.end];
            let next = &segs[i + 1].1;
            match (field.kind(), step.card) {
                (_, Cardinality::Map { .. }) => {
                    return Err(ResolveError::new(
                        format!("`{here}` is a map; a field path cannot step into its entries"),
                        Some(format!("read the whole map as `{here}`")),
                        range.clone(),
                    ));
                }
                (kind, Cardinality::Repeated { .. }) => {
                    // A repeated scalar is a `Vec` value, which `get(v, i)` indexes.
                    let hint = (!matches!(kind, Kind::Message(_))).then(|| {
                        format!(
                            "read the whole list, `get(rpc, '{here}')` (a `Vec`), and index that: `get(v, 0)`"
                        )
                    });
                    return Err(ResolveError::new(
                        format!(
                            "`{here}` is a repeated field; a field path cannot step into its \
                             elements"
                        ),
                        hint,
                        range.clone(),
                    ));
                }
                (Kind::Message(m), Cardinality::Single) => current = m,
                (_, Cardinality::Single) => {
                    return Err(ResolveError::new(
                        format!(
                            "`{here}` has type {}, not a message, so it has no field `{next}`",
                            step.kind.proto_name()
                        ),
                        Some(format!("end the path at `{here}`")),
                        segs[i + 1].0.clone(),
                    ));
                }
            }
        }
        steps.push(step);
    }
    let (Some(leaf), Some((leaf_range, _))) = (steps.last(), segs.last()) else {
        return Err(ResolveError::new("empty field path".to_owned(), None, 0..0));
    };
    let Some(ty) = leaf_type(leaf, payloads) else {
        return Err(not_a_value(&current, leaf, text, leaf_range.clone()));
    };
    Ok(FieldPath {
        text: text.to_owned(),
        steps,
        ty,
    })
}

/// The language type of the leaf, or `None` when it holds messages and `payloads` is off.
fn leaf_type(leaf: &FieldStep, payloads: bool) -> Option<Type> {
    let one =
        |kind: ProtoKind| (kind != ProtoKind::Message || payloads).then(|| kind.language_type());
    match leaf.card {
        Cardinality::Single => one(leaf.kind),
        Cardinality::Repeated { .. } => one(leaf.kind).map(Type::vec),
        Cardinality::Map { key, value } => one(value).map(|v| Type::map(key.language_type(), v)),
    }
}

fn not_a_value(
    parent: &MessageDescriptor,
    leaf: &FieldStep,
    text: &str,
    segment: Range<usize>,
) -> ResolveError {
    const READABLE: &str = "field paths read scalars, lists of scalars and maps with scalar values";
    match leaf.card {
        Cardinality::Single => {
            let hint = match parent.get_field_by_name(&leaf.name).map(|f| f.kind()) {
                Some(Kind::Message(m)) if m.fields().len() > 0 => Some(format!(
                    "`{text}` is a message; name one of its fields: {}",
                    list_fields(&m, &format!("{text}."))
                )),
                _ => None,
            };
            ResolveError::new(format!("`{text}` is a message, not a value"), hint, segment)
        }
        Cardinality::Repeated { .. } => ResolveError::new(
            format!("`{text}` is a list of messages; {READABLE}"),
            None,
            segment,
        ),
        Cardinality::Map { .. } => ResolveError::new(
            format!("`{text}` is a map with message values; {READABLE}"),
            None,
            segment,
        ),
    }
}

fn unknown_field(
    msg: &MessageDescriptor,
    name: &str,
    prefix: &str,
    segment: Range<usize>,
) -> ResolveError {
    let message = match prefix.strip_suffix('.') {
        Some(parent) => format!(
            "`{parent}` is a `{}`, which has no field `{name}`",
            msg.full_name()
        ),
        None => format!("`{}` has no field `{name}`", msg.full_name()),
    };
    // JSON names (`userId`) are a common slip; paths use proto names (`user_id`).
    let fields: Vec<FieldDescriptor> = msg.fields().collect();
    let hint = if let Some(f) = msg.get_field_by_json_name(name) {
        Some(format!(
            "did you mean `{prefix}{}`? field paths use proto field names",
            f.name()
        ))
    } else if let Some(c) = closest(name, fields.iter().map(|f| f.name())) {
        Some(format!("did you mean `{prefix}{c}`?"))
    } else if fields.is_empty() {
        Some(format!("`{}` has no fields", msg.full_name()))
    } else {
        Some(format!("its fields are: {}", list_fields(msg, prefix)))
    };
    ResolveError::new(message, hint, segment)
}

fn step_of(
    field: &FieldDescriptor,
    prefix: &str,
    segment: Range<usize>,
) -> Result<FieldStep, ResolveError> {
    let kind = ProtoKind::of(&field.kind());
    let card = if field.is_map() {
        let Kind::Message(entry) = field.kind() else {
            return Err(ResolveError::new(
                format!("map `{prefix}{}` has no entry message", field.name()),
                None,
                segment,
            ));
        };
        let value_field = entry.map_entry_value_field();
        // A missing value in a map entry reads as the value type's default. FieldStep has
        // room for only one default, so a closed enum whose first value is not 0 (proto2
        // only) cannot be represented; refuse it rather than read a wrong value.
        if let Kind::Enum(e) = value_field.kind()
            && e.default_value().number() != 0
        {
            return Err(ResolveError::new(
                format!(
                    "map `{prefix}{}` has values of enum `{}`, whose first value is not 0; \
                     Weft cannot read such maps",
                    field.name(),
                    e.full_name()
                ),
                Some("make the enum's first value 0".to_owned()),
                segment,
            ));
        }
        Cardinality::Map {
            key: ProtoKind::of(&entry.map_entry_key_field().kind()),
            value: ProtoKind::of(&value_field.kind()),
        }
    } else if field.is_list() {
        Cardinality::Repeated {
            packed: kind.is_packable() && is_packed(field),
        }
    } else {
        Cardinality::Single
    };
    let siblings: Vec<(u32, String)> = field
        .containing_oneof()
        .map(|o| {
            o.fields()
                .filter(|f| f.number() != field.number())
                .map(|f| (f.number(), f.name().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let (oneof_siblings, oneof_sibling_names) = siblings.into_iter().unzip();
    let implicit_presence =
        card == Cardinality::Single && kind != ProtoKind::Message && !field.supports_presence();
    let default = match card {
        Cardinality::Single if kind == ProtoKind::Message => Value::Bytes(Vec::new()),
        Cardinality::Single => reflect_to_value(&field.default_value()),
        Cardinality::Repeated { .. } => Value::Vec(Vec::new()),
        Cardinality::Map { .. } => Value::Map(Default::default()),
    };
    Ok(FieldStep {
        name: field.name().to_owned(),
        number: field.number(),
        kind,
        card,
        oneof_siblings,
        oneof_sibling_names,
        implicit_presence,
        default,
    })
}

/// Whether a list is written packed. prost-reflect computes `is_packed()` before it interprets
/// options, so with protox-compiled files it misses an explicit `[packed = ..]`; the option
/// itself is interpreted by the time the pool is built, and takes precedence over the syntax's
/// default (packed in proto3, unpacked in proto2).
fn is_packed(field: &FieldDescriptor) -> bool {
    let explicit = field
        .field_descriptor_proto()
        .options
        .as_ref()
        .and_then(|o| o.packed);
    explicit.unwrap_or_else(|| field.parent_file().syntax() == prost_reflect::Syntax::Proto3)
}

/// A scalar default from prost-reflect; only scalar kinds reach here.
fn reflect_to_value(v: &prost_reflect::Value) -> Value {
    use prost_reflect::Value as R;
    match v {
        R::Bool(b) => Value::Bool(*b),
        R::I32(i) => Value::Int(i64::from(*i)),
        R::I64(i) => Value::Int(*i),
        R::U32(u) => Value::Uint(u64::from(*u)),
        R::U64(u) => Value::Uint(*u),
        R::F32(f) => Value::Float(f64::from(*f)),
        R::F64(f) => Value::Float(*f),
        R::String(s) => Value::Str(s.clone()),
        R::Bytes(b) => Value::Bytes(b.to_vec()),
        R::EnumNumber(n) => Value::Int(i64::from(*n)),
        R::Message(_) => Value::Bytes(Vec::new()),
        R::List(_) => Value::Vec(Vec::new()),
        R::Map(_) => Value::Map(Default::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROTO: &str = r#"
        syntax = "proto3";
        package shop.v1;
        import "google/protobuf/empty.proto";
        message User { int32 id = 1; string user_name = 2; Address home = 3; }
        message Address { string city = 1; }
        service Users {
          rpc GetUser(User) returns (User);
          rpc ListUsers(google.protobuf.Empty) returns (stream User);
          rpc Upload(stream User) returns (google.protobuf.Empty);
        }
        service Admin { rpc Reset(google.protobuf.Empty) returns (google.protobuf.Empty); }
    "#;

    fn schema() -> Schema {
        Schema::from_source("shop.proto", PROTO).unwrap()
    }

    #[test]
    fn methods_resolve_in_every_spelling() {
        let s = schema();
        for name in [
            "shop.v1.Users/GetUser",
            "/shop.v1.Users/GetUser",
            "shop.v1.Users.GetUser",
        ] {
            let m = s.method(name).unwrap();
            assert_eq!(m.full_name, "shop.v1.Users/GetUser");
            assert_eq!(m.request.full_name(), "shop.v1.User");
            assert!(!m.client_streaming && !m.server_streaming);
        }
        let list = s.method("shop.v1.Users/ListUsers").unwrap();
        assert!(list.server_streaming && !list.client_streaming);
        assert_eq!(list.request.full_name(), "google.protobuf.Empty");
        assert!(s.method("shop.v1.Users/Upload").unwrap().client_streaming);
    }

    #[test]
    fn methods_are_listed_sorted() {
        let names: Vec<String> = schema()
            .methods()
            .into_iter()
            .map(|m| m.full_name)
            .collect();
        assert_eq!(
            names,
            [
                "shop.v1.Admin/Reset",
                "shop.v1.Users/GetUser",
                "shop.v1.Users/ListUsers",
                "shop.v1.Users/Upload"
            ]
        );
        let users: Vec<String> = schema()
            .service_methods("shop.v1.Users")
            .unwrap()
            .into_iter()
            .map(|m| m.full_name)
            .collect();
        assert_eq!(users.len(), 3);
        assert!(users.iter().all(|n| n.starts_with("shop.v1.Users/")));
    }

    #[test]
    fn unknown_names_suggest_the_closest() {
        let s = schema();
        let e = s.method("shop.v1.Users/GetUsr").unwrap_err();
        let SchemaError::UnknownMethod {
            suggestion, known, ..
        } = &e
        else {
            panic!("{e}")
        };
        assert_eq!(suggestion.as_deref(), Some("shop.v1.Users/GetUser"));
        assert_eq!(known.len(), 4);
        let text = e.to_string();
        assert!(
            text.contains("did you mean `shop.v1.Users/GetUser`?"),
            "{text}"
        );
        assert!(text.contains("shop.v1.Admin/Reset"), "{text}");

        // A bare method name is compared with method names.
        let SchemaError::UnknownMethod { suggestion, .. } = s.method("ListUser").unwrap_err()
        else {
            panic!()
        };
        assert_eq!(suggestion.as_deref(), Some("shop.v1.Users/ListUsers"));

        let e = s.service_methods("shop.v1.User").unwrap_err();
        let SchemaError::UnknownService { suggestion, .. } = &e else {
            panic!("{e}")
        };
        assert_eq!(suggestion.as_deref(), Some("shop.v1.Users"));

        let SchemaError::UnknownMethod { suggestion, .. } = s.method("zzz/qqq").unwrap_err() else {
            panic!()
        };
        assert_eq!(suggestion, None);
    }

    #[test]
    fn compile_errors_keep_the_location() {
        let e = Schema::from_source(
            "bad.proto",
            "syntax = \"proto3\";\nmessage M { int32 = 1; }\n",
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(text.contains("bad.proto:2:"), "{text}");
        let e = Schema::from_source(
            "bad.proto",
            "syntax = \"proto3\";\nmessage M { Nope n = 1; }\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("bad.proto:2:"), "{e}");
        assert!(e.to_string().contains("Nope"), "{e}");
        let no_files: [&str; 0] = [];
        assert!(matches!(
            Schema::load(&no_files, &[]),
            Err(SchemaError::NoFiles)
        ));
        let e = Schema::load(&["/nonexistent/x.proto"], &[]).unwrap_err();
        assert!(e.to_string().contains("x.proto"), "{e}");
    }

    #[test]
    fn a_listed_proto_that_is_not_there_is_named_as_missing() {
        // protox called it "not in any include path", about a file that does not exist.
        let e = Schema::load(&["/nonexistent/x.proto"], &[]).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("`/nonexistent/x.proto`"), "{text}");
        assert!(text.contains("no such file"), "{text}");
        assert!(!text.contains("include path"), "{text}");
    }

    #[test]
    fn a_missing_import_says_where_it_was_looked_for() {
        let dir = tempfile::tempdir().unwrap();
        let proto = dir.path().join("shop.proto");
        std::fs::write(
            &proto,
            "syntax = \"proto3\";\nimport \"commn.proto\";\nmessage M {}\n",
        )
        .unwrap();
        let text = Schema::load(&[&proto], &[]).unwrap_err().to_string();
        assert!(text.contains("import 'commn.proto' not found"), "{text}");
        assert!(
            text.contains(&format!("looked in `{}`", dir.path().display())),
            "{text}"
        );
    }

    #[test]
    fn closest_needs_real_similarity() {
        let c = ["user_name", "id", "home"];
        assert_eq!(closest("usr_name", c), Some("user_name"));
        assert_eq!(closest("ID", c), Some("id"));
        assert_eq!(closest("qqqq", c), None);
    }
}
