//! `weft`: check elements, print their properties, simulate a chain over a trace, plan
//! where a chain's elements run and check that a reordering is equivalent.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};
use weft_ir::check::{CheckEnv, check};
use weft_ir::config::{Config, ConfigError, Observation};
use weft_ir::diag::{ConfigCause, Diagnostic, SourceFile, has_errors, render_all};
use weft_ir::ir::Params;
use weft_ir::load::{LoadError, LoadedEdge, load_edge, load_edge_with_schema};
use weft_ir::parser::parse;
use weft_ir::schema::{MethodSchema, Schema};
use weft_ir::sim::{SimError, SimOptions, parse_trace, simulate_with, start_instance};
use weft_jit::rig::{Rig, RunOutcome, ns_per_rpc, time_batches};
use weft_jit::{Fusion, Jit};

#[derive(Parser)]
#[command(
    name = "weft",
    version,
    about = "Weft: service-mesh policy without sidecars"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Parse and type-check element files, or with `--config` every edge of a config (its
    /// elements checked and each one started, so parameters an element refuses are found
    /// before deployment, and the edge placed as the runtime places it); exit 1 if any has
    /// an error.
    Check {
        /// .proto files with the services' messages (fields are checked against them); they
        /// must define a service method. Without any, fields are not checked.
        #[arg(long = "proto")]
        protos: Vec<PathBuf>,
        /// Check against this method (`pkg.Service/Method`) of the protos; default: every
        /// method in the protos, reporting for the one the element fits best.
        #[arg(long)]
        method: Option<String>,
        /// A config (weft.yaml) to check whole: each edge loads, each element starts with its
        /// parameters and `state:` (on a virtual clock; nothing is contacted), and each edge
        /// is placed in-process as the runtime places it.
        #[arg(long, conflicts_with_all = ["protos", "method"])]
        config: Option<PathBuf>,
        /// Only this edge of the config.
        #[arg(long, requires = "config")]
        edge: Option<String>,
        #[arg(required_unless_present = "config")]
        files: Vec<PathBuf>,
    },
    /// Print an element's property record (fields, state, drops, channels, scopes) as JSON.
    Props {
        #[arg(long = "proto")]
        protos: Vec<PathBuf>,
        #[arg(long)]
        method: Option<String>,
        /// Bind a parameter: `--param field=user`. Values are YAML (`deny=[a, b]`).
        #[arg(long = "param", value_name = "NAME=VALUE")]
        params: Vec<String>,
        file: PathBuf,
    },
    /// Run an edge's chain over a trace of RPCs in virtual time; one JSON line per RPC.
    Sim {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        edge: String,
        /// JSON lines: {"id", "t", "method", "src", "headers", "req", "resp", "status", "t_resp"}.
        #[arg(long)]
        trace: PathBuf,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Write every element instance's final state here (JSON).
        #[arg(long)]
        dump_state: Option<PathBuf>,
        /// Write channel records here (JSON lines).
        #[arg(long)]
        channels: Option<PathBuf>,
        /// `json`: one JSON object per RPC; `text`: one readable line per RPC.
        #[arg(long, value_enum, default_value_t = Format::Json)]
        format: Format,
        /// Run handlers with the Cranelift JIT (fused segments) or the reference interpreter.
        #[arg(long, value_enum, default_value_t = ExecutorKind::Jit)]
        executor: ExecutorKind,
    },
    /// Run an edge's chain over N pre-encoded copies of a request (and its response) in one
    /// process and print nanoseconds per RPC for each executor: of the chain alone (copies
    /// made before each timed batch), and with the copying and draining counted too.
    /// Instances start as in `sim`: `init` held to `max_iterations`, then the `state:` values.
    Bench {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        edge: String,
        #[arg(long, value_enum, default_value_t = BenchExecutor::Both)]
        executor: BenchExecutor,
        #[arg(long, default_value_t = 100_000)]
        n: u64,
        /// The request as JSON (default `{}`), encoded once with the method's schema; repeat
        /// it for several, which the RPCs take in turn (a per-user limit then sees several
        /// users).
        #[arg(long)]
        message: Vec<String>,
        /// A request header (gRPC metadata) every timed RPC carries; repeat for more.
        #[arg(long = "header", value_name = "NAME=VALUE")]
        headers: Vec<String>,
    },
    /// Plan where each element runs: the cheapest order, sides and processors equivalent to
    /// the configured chain, with the segments that get fused and the reasons.
    Plan {
        #[arg(long)]
        config: PathBuf,
        /// Plan one edge (default: every edge).
        #[arg(long)]
        edge: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Observation consistency to keep (default: the edge's `consistency`).
        #[arg(long, value_enum)]
        consistency: Option<Consistency>,
        /// Time budget per edge, milliseconds.
        #[arg(long, default_value_t = 5000)]
        budget_ms: u64,
    },
    /// Is this order of an edge's elements (each on its configured side) equivalent to the
    /// configured chain? Prints the reason; exit 0 if equivalent, 3 if not.
    Equiv {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        edge: String,
        /// Every element of the edge, by instance name, in the order a request meets them.
        #[arg(long, value_delimiter = ',', required = true)]
        order: Vec<String>,
        /// Observation consistency (default: the edge's `consistency`).
        #[arg(long, value_enum)]
        consistency: Option<Consistency>,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ExecutorKind {
    Interp,
    Jit,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BenchExecutor {
    Interp,
    Jit,
    Both,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Consistency {
    Strong,
    Weak,
}

impl From<Consistency> for Observation {
    fn from(c: Consistency) -> Observation {
        match c {
            Consistency::Strong => Observation::Strong,
            Consistency::Weak => Observation::Weak,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Json,
    Text,
}

// `println!` and `eprintln!` panic when the reader has gone (`weft check … 2>&1 | head -1`
// exited 101). These return the error instead: `main` ends quietly on a closed pipe, as a
// command-line tool in a pipe does, and says any other failure to write (a full disk must
// not pass silently).
macro_rules! outln { ($($t:tt)*) => { writeln!(std::io::stdout(), $($t)*)? } }
macro_rules! errln { ($($t:tt)*) => { writeln!(std::io::stderr(), $($t)*)? } }
macro_rules! err { ($($t:tt)*) => { write!(std::io::stderr(), $($t)*)? } }

/// The exit status of a program a closed pipe stopped (128 + SIGPIPE, as shells report it).
const CLOSED_PIPE: u8 = 141;

/// Whether `e` is a write to a reader that has gone: not worth a message.
fn closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check {
            protos,
            method,
            config,
            edge,
            files,
        } => match config {
            Some(config) if files.is_empty() => cmd_check_config(&config, edge.as_deref()),
            Some(_) => Err(anyhow::anyhow!(
                "give element files or --config, not both (a config names its own elements)"
            )),
            None => cmd_check(&protos, method.as_deref(), &files),
        },
        Command::Props {
            protos,
            method,
            params,
            file,
        } => cmd_props(&protos, method.as_deref(), &params, &file),
        Command::Sim {
            config,
            edge,
            trace,
            seed,
            dump_state,
            channels,
            format,
            executor,
        } => {
            let outputs = SimOutputs {
                dump_state: dump_state.as_deref(),
                channels: channels.as_deref(),
                format,
                executor,
            };
            cmd_sim(&config, &edge, &trace, seed, &outputs)
        }
        Command::Bench {
            config,
            edge,
            executor,
            n,
            message,
            headers,
        } => cmd_bench(&config, &edge, executor, n, &message, &headers),
        Command::Plan {
            config,
            edge,
            json,
            consistency,
            budget_ms,
        } => cmd_plan(
            &config,
            edge.as_deref(),
            json,
            consistency.map(Into::into),
            budget_ms,
        ),
        Command::Equiv {
            config,
            edge,
            order,
            consistency,
        } => cmd_equiv(&config, &edge, &order, consistency.map(Into::into)),
    };
    match result {
        Ok(code) => code,
        Err(e) if closed_pipe(&e) => ExitCode::from(CLOSED_PIPE),
        Err(e) => {
            // An error about a place in the config starts with that place, as element
            // diagnostics do, for editors and CI problem matchers that look for it there.
            let located = e.downcast_ref::<ConfigError>().is_some()
                || matches!(e.downcast_ref::<LoadError>(), Some(LoadError::Config(_)));
            // Nothing more can be said if stderr itself is gone.
            let _ = if located {
                writeln!(std::io::stderr(), "{e:#}")
            } else {
                writeln!(std::io::stderr(), "weft: {e:#}")
            };
            ExitCode::from(2)
        }
    }
}

fn load_schema(protos: &[PathBuf]) -> Result<Option<Schema>> {
    if protos.is_empty() {
        return Ok(None);
    }
    let none: [PathBuf; 0] = [];
    Ok(Some(Schema::load(protos, &none)?))
}

/// The methods to check against: `method`, or every method of the protos; none without
/// protos (fields are then not checked). A method without protos, or protos without a
/// method, would check nothing the user asked for, so both are refused.
fn methods_of(
    protos: &[PathBuf],
    schema: &Option<Schema>,
    method: Option<&str>,
) -> Result<Vec<MethodSchema>> {
    let Some(schema) = schema else {
        if let Some(m) = method {
            bail!("--method {m} needs the proto that defines it: pass it with --proto");
        }
        return Ok(Vec::new());
    };
    let methods = match method {
        Some(m) => vec![schema.method(m)?],
        None => schema.methods(),
    };
    if methods.is_empty() {
        let names: Vec<String> = protos.iter().map(|p| p.display().to_string()).collect();
        let (names, verb) = match names.as_slice() {
            [one] => (one.clone(), "defines"),
            _ => (names.join(", "), "define"),
        };
        bail!(
            "{names} {verb} no service method to check against; pass --method or a proto with a service"
        );
    }
    Ok(methods)
}

fn read_source(path: &Path) -> Result<SourceFile> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(SourceFile::new(path.display().to_string(), text))
}

fn cmd_check(protos: &[PathBuf], method: Option<&str>, files: &[PathBuf]) -> Result<ExitCode> {
    let schema = load_schema(protos)?;
    let methods = methods_of(protos, &schema, method)?;
    let mut failed = 0;
    let stderr = std::io::stderr();
    let mut err = stderr.lock();
    for path in files {
        // One file that cannot be read is one file with an error: the others are still
        // checked and counted.
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                writeln!(err, "{}: error: cannot read it: {e}", path.display())?;
                failed += 1;
                continue;
            }
        };
        let src = SourceFile::new(path.display().to_string(), text);
        let (ast, mut diags) = parse(&src);
        if !has_errors(&diags) {
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("element")
                .to_owned();
            let (more, fitted) = check_best(&ast, &name, &methods);
            diags.extend(more);
            if !diags.is_empty()
                && let Some(m) = fitted.filter(|_| methods.len() > 1)
            {
                writeln!(
                    err,
                    "{}: checked against {m}, the method it fits best",
                    src.path
                )?;
            }
        }
        write!(err, "{}", render_all(&src, &diags))?;
        if has_errors(&diags) {
            failed += 1;
        }
    }
    if failed > 0 {
        writeln!(err, "weft: {failed} of {} file(s) have errors", files.len())?;
        return Ok(ExitCode::from(1));
    }
    writeln!(err, "weft: {} file(s) checked, no errors", files.len())?;
    Ok(ExitCode::SUCCESS)
}

/// `weft check --config`: every edge (or one) loads, every element of it starts, and the
/// edge can be placed in-process as the runtime places it. All failures are reported, not
/// only the first.
fn cmd_check_config(config: &Path, edge: Option<&str>) -> Result<ExitCode> {
    // What is checked does not load: an error found by the check (exit 1), as a broken
    // element or proto is.
    let cfg = match Config::load(config) {
        Ok(cfg) => cfg,
        Err(e) => {
            errln!("{e}");
            errln!("weft: the config does not load, so no edge was checked");
            return Ok(ExitCode::from(1));
        }
    };
    let edges: Vec<String> = match edge {
        Some(e) => vec![cfg.edge(e)?.name.clone()],
        None => cfg.edges.iter().map(|e| e.name.clone()).collect(),
    };
    // Compiled once for every edge, as the runtime does: per edge, a mesh's protos were
    // compiled once per edge (45 ms each for 51 protos), and a broken proto was reported
    // once per edge.
    let schema = match weft_ir::load::load_schema(&cfg) {
        Ok(schema) => Arc::new(schema),
        Err(e) => {
            errln!("{e}");
            errln!("weft: the protos do not compile, so no edge was checked");
            return Ok(ExitCode::from(1));
        }
    };
    let mut failed = 0;
    // (service, side, method) → the edge that covers it: a runtime refuses a second
    // (`EngineError::OverlappingEdges`), which the check says.
    // (service, side, method, caller): a server tells edges from different callers apart by
    // the service a Weft client names in its stamp; a client has only the method to go by.
    type Covered = (String, &'static str, String, String);
    let mut covered: BTreeMap<Covered, String> = BTreeMap::new();
    // Services warned of already: a name that cannot ride in a stamp is said once.
    let mut misnamed: BTreeSet<String> = BTreeSet::new();
    for name in &edges {
        let loaded = match load_edge_with_schema(&cfg, name, Arc::clone(&schema)) {
            Ok(l) => l,
            Err(LoadError::Diagnostics { rendered, .. }) => {
                err!("{rendered}");
                errln!("edge `{name}`: does not load (errors above)");
                failed += 1;
                continue;
            }
            // A config error shows its line and carets from the start of a line.
            Err(e @ LoadError::Config(_)) => {
                errln!("{e}");
                errln!("edge `{name}`: does not load (error above)");
                failed += 1;
                continue;
            }
            Err(e) => {
                errln!("edge `{name}`: does not load: {e}");
                failed += 1;
                continue;
            }
        };
        err!("{}", loaded.warnings);
        let mut refused: Vec<String> = weft_ir::sim::start_each_instance(&loaded)
            .iter()
            .map(
                |e| match weft_ir::load::refusal_in_config(&cfg, &loaded, e) {
                    Some(at) => at.to_string(),
                    None => format!("edge `{name}`: {e}"),
                },
            )
            .collect();
        // Where this runtime would run each element (in-process, on `lib`), as it places
        // them when it loads the config: an element it cannot place stops that load.
        // With the default bound on the exact search, as a runtime with default options.
        let steps = weft_runtime::EngineOptions::default().plan_steps;
        if let Err(e) = weft_runtime::placement::in_process_layout(&loaded, steps) {
            refused.push(e.to_string());
        }
        // A warning, not an error: a config of alternatives for one method (the planner's
        // examples, a simulation) is checked and planned whole, and only a runtime that is
        // an end of both refuses it.
        let from = loaded.edge.from.as_str();
        if !weft_runtime::engine::fits_a_stamp(from) && misnamed.insert(from.to_owned()) {
            errln!(
                "warning: {}, so a runtime of `{}` refuses this config",
                weft_runtime::EngineError::ServiceName {
                    service: from.to_owned()
                },
                from.escape_debug()
            );
        }
        let sides = [
            (&loaded.edge.from, "client", String::new()),
            (&loaded.edge.to, "server", loaded.edge.from.clone()),
        ];
        for (service, side, caller) in sides {
            for method in &loaded.methods {
                let key = (
                    service.clone(),
                    side,
                    method.full_name.clone(),
                    caller.clone(),
                );
                match covered.get(&key) {
                    Some(first) => errln!(
                        "warning: {}, so a runtime of `{service}` refuses this config\n  = hint: \
                         {}: give the method one edge, or give each edge its own methods",
                        weft_runtime::EngineError::OverlappingEdges {
                            first: first.clone(),
                            second: name.clone(),
                            side,
                            method: method.full_name.clone(),
                            service: service.clone(),
                        },
                        if side == "client" {
                            "a client finds an RPC's edge by its method alone"
                        } else {
                            "a server finds an RPC's edge by its method and the service calling"
                        }
                    ),
                    None => {
                        covered.insert(key, name.clone());
                    }
                }
            }
        }
        for e in &refused {
            errln!("{e}");
        }
        if refused.is_empty() {
            errln!(
                "edge `{name}`: {} element(s) checked, started and placed",
                loaded.elements.len()
            );
        } else {
            failed += 1;
        }
    }
    if failed > 0 {
        errln!("weft: {failed} of {} edge(s) have errors", edges.len());
        return Ok(ExitCode::from(1));
    }
    errln!("weft: {} edge(s) checked, no errors", edges.len());
    Ok(ExitCode::SUCCESS)
}

/// Checks against each method and keeps the diagnostics of the method the element fits
/// best (fewest errors); without methods, checks without a schema.
fn check_best(
    ast: &weft_ir::ast::ElementFile,
    name: &str,
    methods: &[MethodSchema],
) -> (Vec<Diagnostic>, Option<String>) {
    if methods.is_empty() {
        let (_, d) = check(
            ast,
            &CheckEnv {
                name: name.into(),
                ..Default::default()
            },
        );
        return (d, None);
    }
    let mut best: Option<(usize, Vec<Diagnostic>, String)> = None;
    for m in methods {
        let (_, d) = check(
            ast,
            &CheckEnv {
                name: name.into(),
                method: Some(m),
                params: None,
            },
        );
        let errors = d.iter().filter(|x| x.is_error()).count();
        if best.as_ref().is_none_or(|(e, _, _)| errors < *e) {
            best = Some((errors, d, m.full_name.clone()));
        }
    }
    best.map(|(_, d, m)| (d, Some(m))).unwrap_or_default()
}

fn parse_params(params: &[String]) -> Result<Params> {
    let mut out = Params::new();
    for p in params {
        let Some((k, v)) = p.split_once('=') else {
            bail!("--param `{p}`: write NAME=VALUE")
        };
        let yaml: serde_norway::Value =
            serde_norway::from_str(v).with_context(|| format!("--param {k}"))?;
        let value =
            weft_ir::config::yaml_value(&yaml).map_err(|m| anyhow::anyhow!("--param {k}: {m}"))?;
        out.insert(k.to_owned(), value);
    }
    Ok(out)
}

/// The checker words a wrong parameter value as the chain config's; `props` takes its
/// values from `--param`, so its answer names that instead.
fn from_command_line(mut d: Diagnostic) -> Diagnostic {
    match &d.config {
        Some(ConfigCause::ParamValue(name)) => {
            d.hint = Some(format!("the value comes from `--param {name}=…`"));
        }
        Some(ConfigCause::ParamName(name)) => {
            d.message = format!("`--param {name}` names a parameter `init` does not declare");
        }
        // The caret is on the element's read of it; its hint names a field that exists.
        Some(ConfigCause::ParamField(name)) => {
            d.message = format!("{} (from `--param {name}`)", d.message);
        }
        Some(ConfigCause::MissingParam(name)) => {
            d.hint = Some(format!(
                "give it with `--param {name}=VALUE`, or give it a default"
            ));
        }
        None => {}
    }
    d
}

fn cmd_props(
    protos: &[PathBuf],
    method: Option<&str>,
    params: &[String],
    file: &Path,
) -> Result<ExitCode> {
    let schema = load_schema(protos)?;
    let methods = methods_of(protos, &schema, method)?;
    if methods.len() > 1 {
        let names: Vec<&str> = methods.iter().map(|m| m.full_name.as_str()).collect();
        bail!(
            "the protos define {} methods; choose one with --method ({})",
            names.len(),
            weft_ir::diag::some_of(names.iter().copied(), weft_ir::config::LISTED)
        );
    }
    let params = parse_params(params)?;
    let src = read_source(file)?;
    let (ast, mut diags) = parse(&src);
    let name = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("element")
        .to_owned();
    let mut element = None;
    if !has_errors(&diags) {
        let bound = (!params.is_empty()).then_some(&params);
        let (e, d) = check(
            &ast,
            &CheckEnv {
                name,
                method: methods.first(),
                params: bound,
            },
        );
        diags.extend(d.into_iter().map(from_command_line));
        element = e;
    }
    err!("{}", render_all(&src, &diags));
    let Some(element) = element else {
        return Ok(ExitCode::from(1));
    };
    let props = weft_ir::props::analyse(&element);
    outln!("{}", serde_json::to_string_pretty(&props)?);
    Ok(ExitCode::SUCCESS)
}

struct SimOutputs<'a> {
    dump_state: Option<&'a Path>,
    channels: Option<&'a Path>,
    format: Format,
    executor: ExecutorKind,
}

fn cmd_sim(
    config: &Path,
    edge: &str,
    trace: &Path,
    seed: u64,
    outputs: &SimOutputs<'_>,
) -> Result<ExitCode> {
    let (dump_state, channels) = (outputs.dump_state, outputs.channels);
    let cfg = Config::load(config)?;
    let loaded = match load_edge(&cfg, edge) {
        Ok(l) => l,
        Err(LoadError::Diagnostics {
            rendered,
            count,
            edge,
        }) => {
            err!("{rendered}");
            errln!("weft: {count} error(s) in the elements of edge `{edge}`");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    };
    err!("{}", loaded.warnings);
    let text = std::fs::read_to_string(trace)
        .with_context(|| format!("cannot read {}", trace.display()))?;
    let lines = parse_trace(&text).map_err(|e| trace_error(trace, e))?;
    if !lines
        .iter()
        .any(|l| matches!(l, weft_ir::sim::TraceLine::Rpc(_)))
    {
        // Otherwise nothing at all is printed, which reads like output gone missing.
        errln!("weft: {} holds no RPCs; nothing ran", trace.display());
    }
    let jit = Jit::new(Fusion::Fused);
    let executor: &dyn weft_ir::sim::Executor = match outputs.executor {
        ExecutorKind::Jit => &jit,
        ExecutorKind::Interp => &weft_ir::sim::Interp,
    };
    let report = simulate_with(
        &loaded,
        &lines,
        SimOptions { seed },
        cfg.sim.weak_sync_interval,
        executor,
    )
    .map_err(|e| trace_error(trace, e))?;
    if let (n, Some(e)) = jit.failures()
        && n > 0
    {
        errln!("weft: {n} segment(s) ran in the interpreter: the JIT could not compile them: {e}");
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for r in &report.results {
        match outputs.format {
            Format::Json => writeln!(out, "{}", r.to_json())?,
            Format::Text => writeln!(out, "{}", describe(r))?,
        }
    }
    let render = |m: &weft_hostcalls::Message| weft_ir::sim::message_json(&loaded, m);
    if let Some(path) = channels {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| path.display().to_string())?,
        );
        for c in &report.channels {
            let line = serde_json::json!({
                "element": &*c.element, "channel": &*c.channel, "rpc_id": c.rpc_id, "t": c.time,
                "value": weft_ir::json::to_json(&c.value, &render),
            });
            writeln!(f, "{line}")?;
        }
    }
    if let Some(path) = dump_state {
        let mut state = serde_json::Map::new();
        for (instance, vars) in &report.state {
            let vars: serde_json::Map<String, serde_json::Value> = vars
                .iter()
                .map(|(k, v)| (k.clone(), weft_ir::json::to_json(v, &render)))
                .collect();
            state.insert(instance.clone(), serde_json::Value::Object(vars));
        }
        let errors: serde_json::Map<String, serde_json::Value> = report
            .errors
            .iter()
            .map(|(k, (e, m))| {
                (
                    k.clone(),
                    serde_json::json!({"runtime_errors": e, "malformed": m}),
                )
            })
            .collect();
        let doc = serde_json::json!({"state": state, "counters": errors});
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| path.display().to_string())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A trace error as `path:line: what`, whether reading the trace or running it found it.
fn trace_error(trace: &Path, e: SimError) -> anyhow::Error {
    match e {
        SimError::Trace { line, message } => {
            anyhow::anyhow!("{}:{line}: {message}", trace.display())
        }
        e => e.into(),
    }
}

/// Loads an edge; element source errors are printed with their carets (exit 1).
fn load_or_report(
    cfg: &Config,
    edge: &str,
    schema: Option<&Arc<Schema>>,
) -> Result<Result<LoadedEdge, ExitCode>> {
    let loaded = match schema {
        Some(schema) => load_edge_with_schema(cfg, edge, Arc::clone(schema)),
        None => load_edge(cfg, edge),
    };
    match loaded {
        Ok(l) => {
            err!("{}", l.warnings);
            Ok(Ok(l))
        }
        Err(LoadError::Diagnostics {
            rendered,
            count,
            edge,
        }) => {
            err!("{rendered}");
            errln!("weft: {count} error(s) in the elements of edge `{edge}`");
            Ok(Err(ExitCode::from(1)))
        }
        Err(e) => Err(e.into()),
    }
}

fn cmd_plan(
    config: &Path,
    edge: Option<&str>,
    json: bool,
    consistency: Option<Observation>,
    budget_ms: u64,
) -> Result<ExitCode> {
    let cfg = Config::load(config)?;
    let edges: Vec<String> = match edge {
        Some(e) => vec![cfg.edge(e)?.name.clone()],
        None => cfg.edges.iter().map(|e| e.name.clone()).collect(),
    };
    let opts = weft_ir::plan::PlanOptions {
        time_budget: std::time::Duration::from_millis(budget_ms),
        consistency,
        ..Default::default()
    };
    let table = weft_ir::cost::CostTable::paper();
    let mut plans = Vec::new();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    // Once for every edge (see `cmd_check_config`).
    let schema = Arc::new(weft_ir::load::load_schema(&cfg)?);
    for name in &edges {
        let loaded = match load_or_report(&cfg, name, Some(&schema))? {
            Ok(l) => l,
            Err(code) => return Ok(code),
        };
        let plan = weft_ir::plan::plan_edge(&loaded, &table, &opts)?;
        if json {
            plans.push(plan.to_json());
        } else {
            write!(out, "{}", plan.render_text())?;
        }
    }
    if json {
        let doc = if plans.len() == 1 {
            plans.remove(0)
        } else {
            serde_json::Value::Array(plans)
        };
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_equiv(
    config: &Path,
    edge: &str,
    order: &[String],
    consistency: Option<Observation>,
) -> Result<ExitCode> {
    let cfg = Config::load(config)?;
    let loaded = match load_or_report(&cfg, edge, None)? {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    let mut checker = weft_ir::equiv::Checker::new(&loaded)?;
    let names = checker.names().to_vec();
    let mut idx = Vec::with_capacity(order.len());
    for name in order {
        let Some(k) = names.iter().position(|n| n == name.trim()) else {
            let hint = weft_ir::diag::did_you_mean(name.trim(), names.iter().map(String::as_str))
                .unwrap_or_else(|| format!("its elements: {}", names.join(", ")));
            bail!("edge `{edge}` has no element `{}`; {hint}", name.trim());
        };
        if idx.contains(&k) {
            bail!("--order names `{}` twice", names[k]);
        }
        idx.push(k);
    }
    if idx.len() != names.len() {
        let missing: Vec<&str> = (0..names.len())
            .filter(|k| !idx.contains(k))
            .map(|k| names[k].as_str())
            .collect();
        bail!(
            "--order must list every element of edge `{edge}`; missing: {}",
            missing.join(", ")
        );
    }
    let layout = weft_ir::layout::Layout {
        order: idx,
        sides: checker.canonical().sides.clone(),
    };
    let obs = consistency.unwrap_or(loaded.edge.consistency);
    let verdict = checker.check(&layout, obs);
    outln!("{}", verdict.reason);
    Ok(if verdict.equivalent {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}

/// One readable line per RPC, for people (`make demo`).
fn cmd_bench(
    config: &Path,
    edge: &str,
    executor: BenchExecutor,
    n: u64,
    messages: &[String],
    headers: &[String],
) -> Result<ExitCode> {
    if n == 0 {
        bail!("--n is the number of RPCs to time: at least 1");
    }
    let cfg = Config::load(config)?;
    let loaded = match load_or_report(&cfg, edge, None)? {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    if loaded.elements.is_empty() {
        // The JIT compiles no empty segment; the interpreter's figure alone would only time
        // the harness.
        bail!("edge `{edge}` has no elements to bench");
    }
    let method = loaded
        .methods
        .first()
        .context("the edge has no methods")?
        .clone();
    let default = ["{}".to_owned()];
    let messages = if messages.is_empty() {
        &default[..]
    } else {
        messages
    };
    let mut requests = Vec::with_capacity(messages.len());
    for (k, message) in messages.iter().enumerate() {
        let json: serde_json::Value = serde_json::from_str(message)
            .with_context(|| format!("--message {} is not JSON", k + 1))?;
        let req = weft_ir::wire::json_to_bytes(&method.request, &json)
            .with_context(|| format!("--message {}", k + 1))?;
        let mut request = weft_hostcalls::Message::request(req);
        for h in headers {
            let Some((name, value)) = h.split_once('=') else {
                bail!("--header `{h}`: write NAME=VALUE");
            };
            // As gRPC delivers them: metadata keys are lower-case.
            request
                .headers
                .insert(name.to_ascii_lowercase(), value.to_owned());
        }
        requests.push(request);
    }
    let request = requests.remove(0);
    let resp = weft_ir::wire::json_to_bytes(&method.response, &serde_json::json!({}))?;
    let response = weft_hostcalls::Message::response(resp);
    let elements: Vec<_> = loaded
        .elements
        .iter()
        .map(|e| {
            e.ir.get(&method.full_name)
                .cloned()
                .with_context(|| format!("{} is not checked for {}", e.use_.name, method.full_name))
        })
        .collect::<Result<_>>()?;
    let kinds: &[(&str, Option<Fusion>)] = match executor {
        BenchExecutor::Interp => &[("interp", None)],
        BenchExecutor::Jit => &[("jit", Some(Fusion::Fused))],
        BenchExecutor::Both => &[("interp", None), ("jit", Some(Fusion::Fused))],
    };
    outln!(
        "edge {edge}: {} element(s), method {}, {n} RPCs",
        elements.len(),
        method.full_name
    );
    if cfg!(debug_assertions) {
        // `cargo run` gives a debug build, whose times are many times a release build's
        // and whose interpreter/JIT ratio is not the deployed one.
        errln!(
            "weft bench: this weft is a debug build, so these times are not what a service \
             sees; build it with `cargo build --release -p weft-runtime --bin weft`"
        );
    }
    let mut results = Vec::new();
    for (name, fusion) in kinds {
        let mut rig = Rig::with_start(
            &elements,
            *fusion,
            request.clone(),
            response.clone(),
            |k, inst, host| -> Result<()> {
                start_instance(inst, &elements[k], &loaded.elements[k].use_, true, host)?;
                Ok(())
            },
        )?;
        rig.add_requests(requests.iter().cloned());
        // Warm up (compiles nothing more; fills caches and allocator pools).
        for _ in 0..n.min(1000) {
            rig.run();
        }
        // The chain alone: each batch's copies made before it is timed, its records and
        // messages dropped after, as a service's transport and channel reader do.
        let mut tally = OutcomeTally::new(elements.len());
        let chain = ns_per_rpc(time_batches(&mut rig, n, |o| tally.count(o)), n);
        let start = Instant::now();
        for _ in 0..n {
            rig.run();
        }
        let whole = ns_per_rpc(start.elapsed(), n);
        outln!(
            "{name:>7}: {chain:10.1} ns/RPC in the chain, {whole:10.1} with the copies  \
             ({} of {n} reached the server)",
            tally.forwarded
        );
        // The others took another path, which is what was timed for them: say whose.
        let names: Vec<&str> = loaded
            .elements
            .iter()
            .map(|e| e.use_.name.as_str())
            .collect();
        if let Some(others) = tally.describe(&names) {
            outln!("{:>7}  {others}", "");
        }
        results.push((chain, whole));
    }
    if let [(interp, interp_whole), (jit, jit_whole)] = results[..] {
        outln!(
            "speed-up: {:.1}x in the chain, {:.1}x with the copies",
            interp / jit,
            interp_whole / jit_whole
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// How the timed RPCs of `weft bench` ended: forwarded to the server, or stopped by which
/// element.
struct OutcomeTally {
    forwarded: u64,
    /// Per element: (rejected, answered).
    stopped: Vec<(u64, u64)>,
    /// Stopped by an element the chain does not have (a bug), so the totals stay whole.
    unattributed: u64,
}

impl OutcomeTally {
    fn new(elements: usize) -> Self {
        OutcomeTally {
            forwarded: 0,
            stopped: vec![(0, 0); elements],
            unattributed: 0,
        }
    }

    fn count(&mut self, outcome: &RunOutcome) {
        let (k, rejected) = match *outcome {
            RunOutcome::Forwarded => {
                self.forwarded += 1;
                return;
            }
            RunOutcome::Rejected(k) => (k, true),
            RunOutcome::Replied(k) => (k, false),
        };
        match self.stopped.get_mut(k) {
            Some(s) if rejected => s.0 += 1,
            Some(s) => s.1 += 1,
            None => self.unattributed += 1,
        }
    }

    /// "ratelimit rejected 190; cache answered 10" for the chain's element `names`, or
    /// `None` when every RPC reached the server.
    fn describe(&self, names: &[&str]) -> Option<String> {
        let mut parts: Vec<String> = (self.stopped.iter().zip(names))
            .flat_map(|(&(rejected, answered), name)| {
                [
                    (rejected > 0).then(|| format!("{name} rejected {rejected}")),
                    (answered > 0).then(|| format!("{name} answered {answered}")),
                ]
            })
            .flatten()
            .collect();
        if self.unattributed > 0 {
            parts.push(format!("{} stopped by no known element", self.unattributed));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

fn describe(r: &weft_ir::sim::RpcResult) -> String {
    use weft_ir::sim::Outcome;
    let id = match &r.id {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let what = match r.outcome {
        Outcome::Ok => {
            let routed = r
                .dst
                .as_ref()
                .map(|d| format!(" (routed to {d})"))
                .unwrap_or_default();
            let saw = r
                .server_saw
                .as_ref()
                .map(|j| j.to_string())
                .unwrap_or_default();
            format!("reached the server{routed}, which saw {saw}")
        }
        Outcome::Rejected => format!("rejected by {}", r.by.as_deref().unwrap_or("the chain")),
        Outcome::Replied => format!(
            "answered by {} without reaching the server",
            r.by.as_deref().unwrap_or("the chain")
        ),
    };
    let answer = match &r.client_got {
        Some(j) => format!("client got {} {j}", r.status.name()),
        None => format!("client got {} \"{}\"", r.status.name(), r.message),
    };
    format!("rpc {id:>3}: {what}; {answer}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bench_tally_names_the_element_that_stopped_each_rpc() {
        let names = ["logging", "ratelimit", "cache"];
        let mut tally = OutcomeTally::new(names.len());
        assert_eq!(tally.describe(&names), None);
        for o in [
            RunOutcome::Forwarded,
            RunOutcome::Rejected(1),
            RunOutcome::Rejected(1),
            RunOutcome::Replied(2),
            RunOutcome::Forwarded,
        ] {
            tally.count(&o);
        }
        assert_eq!(tally.forwarded, 2);
        assert_eq!(
            tally.describe(&names).as_deref(),
            Some("ratelimit rejected 2; cache answered 1")
        );
        tally.count(&RunOutcome::Rejected(7));
        assert_eq!(
            tally.describe(&names).as_deref(),
            Some("ratelimit rejected 2; cache answered 1; 1 stopped by no known element")
        );
    }
}
