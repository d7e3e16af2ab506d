//! The engine on real chains: verdicts, malformed input, config errors, reloads that fail,
//! stamped versions, and the config watcher.

// Helpers outside #[test] functions are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Seen, echo_edge, eventually, examples, options, round_trip, two_strings};
use weft_hostcalls::Code;
use weft_runtime::{Engine, EngineOptions, Metadata, Reloaded, ServerResponse, Side, Verdict};

fn echo(req: &[u8]) -> ServerResponse {
    // The request's body (field 2) comes back as the reply's body (field 1).
    let mut message = req.to_vec();
    if let Some(b) = message.iter_mut().find(|b| **b == 0x12) {
        *b = 0x0a;
    }
    ServerResponse::Ok {
        message,
        metadata: Metadata::new(),
    }
}

fn echo_engines(config: &Path) -> (Engine, Engine) {
    (
        Engine::open(config, "frontend", options()).unwrap(),
        Engine::open(config, "echo", options()).unwrap(),
    )
}

/// A copy of examples/echo in a temporary directory, with the firewall's source beside it
/// (so a test can break it).
fn echo_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = examples().join("echo");
    for f in ["echo.proto", "weft.yaml"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let yaml = std::fs::read_to_string(dir.path().join("weft.yaml")).unwrap();
    std::fs::write(
        dir.path().join("weft.yaml"),
        yaml.replace(
            "protos: [echo.proto]",
            "protos: [echo.proto]\nelement_paths: [elements]",
        ),
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("elements")).unwrap();
    let firewall = Path::new(env!("CARGO_MANIFEST_DIR")).join("../elements/firewall.weft");
    std::fs::copy(firewall, dir.path().join("elements/firewall.weft")).unwrap();
    dir
}

/// Request metadata carrying a `weft-version` stamp.
fn stamped(digest: &str) -> Metadata {
    let mut m = Metadata::new();
    m.insert("weft-version".into(), digest.into());
    m
}

/// Starts an RPC of the server's current version, stamped with it, that stays in flight (the
/// server-side metrics waits for its response) and so keeps that version alive.
fn hold_an_rpc(server: &Engine) -> weft_runtime::Rpc {
    let held = server
        .process_request(
            Side::Server,
            "/echo.Echo/Say",
            stamped(&server.digest()),
            two_strings("a", "b"),
        )
        .unwrap();
    let rpc = held.rpc.expect("metrics runs on the server side");
    assert_eq!(rpc.version(), server.version());
    rpc
}

fn error_code(seen: &Seen) -> Option<Code> {
    match seen {
        Seen::Error { code, .. } => Some(*code),
        Seen::Answer { .. } => None,
    }
}

#[test]
fn echo_chain_verdicts() {
    let (client, server) = echo_engines(&examples().join("echo/weft.yaml"));
    let first = round_trip(
        &client,
        &server,
        Metadata::new(),
        two_strings("alice", "hi"),
        echo,
    );
    match &first {
        Seen::Answer { bytes, reached, .. } => {
            assert!(reached);
            assert_eq!(bytes[0], 0x0a, "the echoed body: {bytes:?}");
        }
        other => panic!("alice: {other:?}"),
    }
    // The cache answers the same body without the server.
    let again = round_trip(
        &client,
        &server,
        Metadata::new(),
        two_strings("bob", "hi"),
        |_| panic!("a cached request reached the server"),
    );
    assert!(
        matches!(again, Seen::Answer { reached: false, .. }),
        "{again:?}"
    );
    let denied = round_trip(
        &client,
        &server,
        Metadata::new(),
        two_strings("mallory", "x"),
        echo,
    );
    assert_eq!(
        error_code(&denied),
        Some(Code::PermissionDenied),
        "{denied:?}"
    );
    // A server error travels up as the caller's status.
    let failed = round_trip(
        &client,
        &server,
        Metadata::new(),
        two_strings("carol", "y"),
        |_| ServerResponse::Error {
            code: Code::Unavailable,
            message: "echo is restarting".into(),
            metadata: Metadata::new(),
        },
    );
    match failed {
        Seen::Error {
            code,
            message,
            reached,
        } => {
            assert!(reached);
            assert_eq!(code, Code::Unavailable);
            assert_eq!(message, "echo is restarting");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn corrupt_payload_is_invalid_argument() {
    let (client, server) = echo_engines(&examples().join("echo/weft.yaml"));
    // Field 1 claims 80 bytes and has 1: the firewall's read of `user` cannot parse it.
    let seen = round_trip(
        &client,
        &server,
        Metadata::new(),
        vec![0x0a, 0x50, b'x'],
        echo,
    );
    match seen {
        Seen::Error {
            code,
            reached,
            message,
        } => {
            assert_eq!(code, Code::InvalidArgument, "{message}");
            assert!(!reached, "a corrupt request must not reach the server");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_method_is_no_edge() {
    let client = Engine::open(examples().join("echo/weft.yaml"), "frontend", options()).unwrap();
    let err = client
        .process_request(
            Side::Client,
            "/echo.Echo/SayStream",
            Metadata::new(),
            vec![],
        )
        .err()
        .unwrap();
    assert!(
        matches!(err, weft_runtime::EngineError::NoEdge { .. }),
        "{err}"
    );
    // This service is never the server of the edge.
    assert!(
        client
            .process_request(Side::Server, "/echo.Echo/Say", Metadata::new(), vec![])
            .is_err()
    );
}

#[test]
fn config_errors_name_the_problem() {
    let e = Engine::open("/nonexistent/dir/weft.yaml", "frontend", options())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("/nonexistent/dir/weft.yaml") && e.contains("cannot read"),
        "{e}"
    );

    let e = Engine::open_yaml("edges: [unclosed", ".", "frontend", options())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("weft.yaml") && e.contains("error"), "{e}");

    let e = Engine::open(examples().join("echo/weft.yaml"), "frontedn", options())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("`frontedn`") && e.contains("echo, frontend"),
        "{e}"
    );
    // A misspelt service is suggested, as a misspelt element or edge is.
    assert!(e.contains("did you mean `frontend`?"), "{e}");

    let yaml = std::fs::read_to_string(examples().join("echo/weft.yaml"))
        .unwrap()
        .replace("firewall:", "firewal:");
    let e = Engine::open_yaml(&yaml, examples().join("echo"), "frontend", options())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("unknown element `firewal`") && e.contains("firewall"),
        "{e}"
    );

    // An element given by `path` that cannot be read: the path and the reason, not a guess.
    let yaml = echo_edge(
        &["element: firewall\n        path: elements/nope.weft"],
        &[],
    );
    let e = Engine::open_yaml(&yaml, examples().join("echo"), "frontend", options())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("nope.weft") && e.contains("No such file") && !e.contains("unknown element"),
        "{e}"
    );
}

#[test]
fn reload_with_a_broken_element_keeps_the_old_version() {
    let dir = echo_copy();
    let config = dir.path().join("weft.yaml");
    let (client, server) = echo_engines(&config);
    let before = (client.version(), client.digest());
    std::fs::write(
        dir.path().join("elements/firewall.weft"),
        "state:\n    denied: Map<string, bool>\n\nreq(rpc):\n    send(rpc, Sideways)\n",
    )
    .unwrap();
    let e = client
        .reload()
        .expect_err("a broken element must not install")
        .to_string();
    assert!(
        e.contains("firewall.weft:"),
        "the diagnostic names the file: {e}"
    );
    assert!(e.contains("error"), "{e}");
    assert_eq!((client.version(), client.digest()), before);
    // The old chain still runs: mallory is still refused, alice still served.
    let denied = round_trip(
        &client,
        &server,
        Metadata::new(),
        two_strings("mallory", "z"),
        echo,
    );
    assert_eq!(
        error_code(&denied),
        Some(Code::PermissionDenied),
        "{denied:?}"
    );
    let ok = round_trip(
        &client,
        &server,
        Metadata::new(),
        two_strings("alice", "z"),
        echo,
    );
    assert!(matches!(ok, Seen::Answer { reached: true, .. }), "{ok:?}");
    assert_eq!(client.stats().installed, 1);
}

#[test]
fn reload_of_unchanged_files_installs_nothing() {
    let client = Engine::open(examples().join("echo/weft.yaml"), "frontend", options()).unwrap();
    assert_eq!(client.reload().unwrap(), Reloaded::Unchanged(1));
    assert_eq!(client.version(), 1);
}

#[test]
fn stamped_requests_run_their_version_while_it_lives() {
    let dir = echo_copy();
    let config = dir.path().join("weft.yaml");
    let server = Engine::open(&config, "echo", options()).unwrap();
    let old_digest = server.digest();
    let held_rpc = hold_an_rpc(&server);
    let yaml = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, yaml.replace("capacity: 5", "capacity: 6")).unwrap();
    assert_eq!(server.reload().unwrap(), Reloaded::Installed(2));
    assert_ne!(server.digest(), old_digest);
    let run = |m: Metadata| {
        server
            .process_request(Side::Server, "/echo.Echo/Say", m, two_strings("a", "c"))
            .unwrap()
            .version
    };
    assert_eq!(
        run(stamped(&old_digest)),
        1,
        "a stamped request runs its version"
    );
    assert_eq!(
        run(Metadata::new()),
        2,
        "an unstamped request runs the current version"
    );
    assert_eq!(
        run(stamped("0123456789abcdef")),
        2,
        "an unknown stamp runs the current one"
    );
    assert_eq!(server.stats().draining, 1);
    assert_eq!(server.stats().freed, 0, "version 1 has an RPC in flight");
    let answer = server
        .process_response(
            held_rpc,
            ServerResponse::Ok {
                message: vec![],
                metadata: Metadata::new(),
            },
        )
        .unwrap();
    assert_eq!(
        answer.version, 1,
        "the response runs in its request's version"
    );
    assert!(matches!(answer.verdict, Verdict::Forward(_)));
    assert_eq!(
        server.stats().freed,
        1,
        "version 1 is freed with its last RPC"
    );
    assert_eq!(
        run(stamped(&old_digest)),
        2,
        "a freed version is no longer run"
    );
}

/// A stamp only picks among the versions that run the RPC. Naming a version that is still
/// alive but has no chain for the method must not skip the current version's chain: anyone
/// who can set a header could otherwise bypass it while an old RPC is in flight.
#[test]
fn a_stamp_of_a_version_without_the_method_runs_the_current_chain() {
    let dir = echo_copy();
    let config = dir.path().join("weft.yaml");
    let server = Engine::open(&config, "echo", options()).unwrap();
    let old_digest = server.digest();
    let _held_rpc = hold_an_rpc(&server);
    let yaml = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!(
            "{yaml}  frontend->echo-stream:\n    from: frontend\n    to: echo\n    method: echo.Echo/SayStream\n    server:\n      - firewall: {{field: user, deny: [mallory]}}\n"
        ),
    )
    .unwrap();
    assert_eq!(server.reload().unwrap(), Reloaded::Installed(2));
    let out = server
        .process_request(
            Side::Server,
            "/echo.Echo/SayStream",
            stamped(&old_digest),
            two_strings("mallory", "x"),
        )
        .unwrap();
    assert_eq!(out.version, 2);
    assert!(
        matches!(
            &out.verdict,
            Verdict::Reject {
                code: Code::PermissionDenied,
                ..
            }
        ),
        "{:?}",
        out.verdict
    );
}

/// Content installed twice (A, B, A again) has two live versions with one stamp; a request
/// stamped with it runs the newer, whose state is the one that went on.
#[test]
fn a_stamp_runs_the_newest_live_version_with_that_content() {
    let dir = echo_copy();
    let config = dir.path().join("weft.yaml");
    let server = Engine::open(&config, "echo", options()).unwrap();
    let digest = server.digest();
    let request = || {
        server
            .process_request(
                Side::Server,
                "/echo.Echo/Say",
                stamped(&digest),
                two_strings("a", "b"),
            )
            .unwrap()
    };
    let yaml = std::fs::read_to_string(&config).unwrap();
    let mut held = vec![request().rpc.expect("metrics holds version 1")];
    for (capacity, installed) in [(6, 2), (5, 3), (7, 4)] {
        std::fs::write(
            &config,
            yaml.replace("capacity: 5", &format!("capacity: {capacity}")),
        )
        .unwrap();
        assert_eq!(server.reload().unwrap(), Reloaded::Installed(installed));
        if installed == 3 {
            assert_eq!(server.digest(), digest, "version 3 has version 1's content");
            held.push(request().rpc.expect("metrics holds version 3"));
        }
    }
    assert_eq!(request().version, 3);
}

#[test]
fn abandoned_rpcs_release_their_version() {
    let dir = echo_copy();
    let config = dir.path().join("weft.yaml");
    let client = Engine::open(&config, "frontend", options()).unwrap();
    let out = client
        .process_request(
            Side::Client,
            "/echo.Echo/Say",
            Metadata::new(),
            two_strings("a", "b"),
        )
        .unwrap();
    let rpc = out.rpc.expect("logging waits for the response");
    let yaml = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, yaml.replace("rate: 1", "rate: 2")).unwrap();
    client.reload().unwrap();
    assert_eq!(client.stats().freed, 0);
    drop(rpc);
    assert_eq!(client.stats().freed, 1);
}

/// Replaces a file the way a ConfigMap update or an editor's save does: write a sibling, then
/// rename over. A plain `fs::write` truncates first, and a poll in between reads a half file.
fn replace_file(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp-write");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn the_watcher_reloads_changed_files_and_reports_failures() {
    let dir = echo_copy();
    let config = dir.path().join("weft.yaml");
    let opts = EngineOptions {
        watch_interval: Some(Duration::from_millis(20)),
        ..options()
    };
    let client = Engine::open(&config, "frontend", opts).unwrap();
    let yaml = std::fs::read_to_string(&config).unwrap();
    replace_file(&config, &yaml.replace("capacity: 5", "capacity: 7"));
    // The watcher installs, then records the result: wait for the record, not the version.
    assert!(
        eventually(Duration::from_secs(20), || client.last_watch_result()
            == Some(Ok(Reloaded::Installed(2)))),
        "the watcher did not install the changed config: {:?}",
        client.last_watch_result()
    );
    assert_eq!(client.version(), 2);
    // An element file is watched too; a broken one is reported and changes nothing.
    replace_file(
        &dir.path().join("elements/firewall.weft"),
        "req(rpc):\n    nonsense(\n",
    );
    assert!(
        eventually(Duration::from_secs(20), || matches!(
            client.last_watch_result(),
            Some(Err(_))
        )),
        "the watcher did not report the broken element"
    );
    let Some(Err(e)) = client.last_watch_result() else {
        unreachable!()
    };
    assert!(e.contains("firewall.weft"), "{e}");
    assert_eq!(client.version(), 2);
}

fn watching(dir: &Path, clock: Option<std::sync::Arc<CountingClock>>) -> Engine {
    let mut opts = EngineOptions {
        watch_interval: Some(Duration::from_millis(20)),
        ..options()
    };
    if let Some(clock) = clock {
        opts.clock = clock;
    }
    Engine::open(dir.join("weft.yaml"), "frontend", opts).unwrap()
}

fn watch_result_becomes(engine: &Engine, want: Option<Result<Reloaded, ()>>) -> bool {
    eventually(Duration::from_secs(20), || {
        engine.last_watch_result().map(|r| r.map_err(|_| ())) == want
    })
}

/// After a reload fails on a file the new config lists, fixing that file is a change: the
/// watcher watches what the failed build read, not only the running version's files.
#[test]
fn the_watcher_notices_the_fix_of_a_file_only_the_failed_config_lists() {
    let dir = echo_copy();
    let engine = watching(dir.path(), None);
    let extra = dir.path().join("elements/extra.weft");
    std::fs::write(&extra, "req(rpc):\n    nonsense(\n").unwrap();
    let config = dir.path().join("weft.yaml");
    let yaml = std::fs::read_to_string(&config).unwrap();
    replace_file(
        &config,
        &yaml.replace("      - logging", "      - logging\n      - extra"),
    );
    assert!(
        watch_result_becomes(&engine, Some(Err(()))),
        "{:?}",
        engine.last_watch_result()
    );
    let logging = Path::new(env!("CARGO_MANIFEST_DIR")).join("../elements/logging.weft");
    replace_file(&extra, &std::fs::read_to_string(logging).unwrap());
    assert!(
        watch_result_becomes(&engine, Some(Ok(Reloaded::Installed(2)))),
        "the fixed element was not noticed: {:?}",
        engine.last_watch_result()
    );
}

/// A reload the application makes itself after the watcher failed reads the config anew:
/// the watcher's failure no longer describes what runs, and is not reported after it.
#[test]
fn a_reload_of_the_callers_own_clears_the_watchers_failure() {
    let dir = echo_copy();
    let engine = watching(dir.path(), None);
    let config = dir.path().join("weft.yaml");
    let yaml = std::fs::read_to_string(&config).unwrap();
    replace_file(&config, &yaml.replace("capacity: 5", "capacity: lots"));
    assert!(
        watch_result_becomes(&engine, Some(Err(()))),
        "{:?}",
        engine.last_watch_result()
    );
    // A failing reload of the caller's leaves the report as it was.
    assert!(engine.reload().is_err());
    assert!(matches!(engine.last_watch_result(), Some(Err(_))));
    // The config as text: the broken file is no longer read, so the watcher has nothing to
    // reload and only the caller's reload can change the report.
    let fixed = yaml.replace("capacity: 5", "capacity: 6");
    assert_eq!(
        engine.reload_yaml(&fixed, dir.path()).unwrap(),
        Reloaded::Installed(2)
    );
    assert_eq!(engine.last_watch_result(), None);
}

/// A local element file that shadows a standard one: deleting it falls back to the
/// standard element, and putting it back is noticed though the running version no longer
/// reads it.
#[test]
fn the_watcher_notices_an_element_file_appearing_on_the_search_path() {
    let dir = echo_copy();
    let firewall = dir.path().join("elements/firewall.weft");
    let local = format!("{}# local\n", std::fs::read_to_string(&firewall).unwrap());
    std::fs::write(&firewall, &local).unwrap();
    let engine = watching(dir.path(), None);
    std::fs::remove_file(&firewall).unwrap();
    assert!(
        watch_result_becomes(&engine, Some(Ok(Reloaded::Installed(2)))),
        "{:?}",
        engine.last_watch_result()
    );
    std::fs::write(&firewall, &local).unwrap();
    assert!(
        watch_result_becomes(&engine, Some(Ok(Reloaded::Installed(3)))),
        "the restored file was not noticed: {:?}",
        engine.last_watch_result()
    );
}

/// Counts `current_time()` reads: ratelimit's `init` reads the clock once per build.
struct CountingClock(std::sync::atomic::AtomicU64);

impl weft_hostcalls::clock::Clock for CountingClock {
    fn now(&self) -> f64 {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        0.0
    }
}

/// Files that changed without changing the content digest (a local copy of a standard
/// element deleted) are built once, not at every poll.
#[test]
fn the_watcher_builds_an_unchanged_config_once() {
    let dir = echo_copy();
    let clock = std::sync::Arc::new(CountingClock(Default::default()));
    let engine = watching(dir.path(), Some(clock.clone()));
    // echo_copy's firewall.weft is the standard element's text: the digest stays.
    std::fs::remove_file(dir.path().join("elements/firewall.weft")).unwrap();
    assert!(
        watch_result_becomes(&engine, Some(Ok(Reloaded::Unchanged(1)))),
        "{:?}",
        engine.last_watch_result()
    );
    let builds = || clock.0.load(std::sync::atomic::Ordering::Relaxed);
    let after = builds();
    // The watcher polls in real time; fifteen polls' worth of it must stay idle.
    #[allow(clippy::disallowed_methods)]
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        builds(),
        after,
        "the watcher kept rebuilding the same content"
    );
}

#[test]
fn only_the_headers_elements_observe_are_decoded() {
    let yaml = echo_edge(&["logging"], &["metrics", "prequal_server"]);
    let keys = |service: &str, side: Side| {
        let e = Engine::open_yaml(&yaml, examples().join("echo"), service, options()).unwrap();
        let p = e.prepare(side, "/echo.Echo/Say", None).unwrap();
        p.header_keys().map(<[String]>::to_vec)
    };
    // logging sends the whole request to a channel: every header.
    assert_eq!(keys("frontend", Side::Client), None);
    // metrics reads none; prequal_server writes its load headers on responses.
    // A server reads the stamp but not `dst`, which only routes a client's request.
    let server = keys("echo", Side::Server).unwrap();
    assert_eq!(server[0], "weft-version");
    assert!(!server.iter().any(|k| k == "dst"), "{server:?}");
    // Its elements do not see the stamp; they see what they read and write.
    let e = Engine::open_yaml(&yaml, examples().join("echo"), "echo", options()).unwrap();
    let p = e.prepare(Side::Server, "/echo.Echo/Say", None).unwrap();
    let visible = p.visible_keys().unwrap();
    assert!(!visible.iter().any(|k| k == "weft-version"), "{visible:?}");
    assert_eq!(visible, &server[1..]);
    assert!(
        server.iter().any(|k| k.starts_with("prequal-")),
        "{server:?}"
    );
}

#[test]
fn inert_response_paths_need_no_response_call() {
    // logging's response handler only emits a record; the others pass the response on.
    let yaml = echo_edge(
        &["logging", "firewall: {field: user, deny: [mallory]}"],
        &["metrics"],
    );
    let run = |service: &str, side: Side, options: EngineOptions| {
        let e = Engine::open_yaml(&yaml, examples().join("echo"), service, options).unwrap();
        let out = e
            .process_request(
                side,
                "/echo.Echo/Say",
                Metadata::new(),
                two_strings("a", "b"),
            )
            .unwrap();
        assert!(matches!(out.verdict, Verdict::Forward(_)));
        out.rpc.is_some()
    };
    assert!(!run("frontend", Side::Client, options()));
    // With an observer the records are wanted: the response call runs logging.
    let observed = EngineOptions {
        channels: Some(std::sync::Arc::new(|_, _| {})),
        ..options()
    };
    assert!(run("frontend", Side::Client, observed));
    // metrics counts responses.
    assert!(run("echo", Side::Server, options()));
}

/// A config whose messages live in a proto it reaches only through `import`: `svc.proto`
/// (listed) imports `common/msgs.proto`, where the firewall's field `user` is field
/// `user_number`.
fn imported_messages_dir(user_number: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("svc.proto"),
        "syntax = \"proto3\";\npackage imp;\nimport \"common/msgs.proto\";\n\
         service Svc {\n  rpc Call(imp.common.Req) returns (imp.common.Resp);\n}\n",
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("common")).unwrap();
    std::fs::write(
        dir.path().join("common/msgs.proto"),
        msgs_proto(user_number),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("weft.yaml"),
        "protos: [svc.proto]\nedges:\n  frontend->backend:\n    from: frontend\n    to: backend\n\
         \x20   method: imp.Svc/Call\n    client:\n      - firewall: {field: user, deny: [mallory]}\n",
    )
    .unwrap();
    dir
}

fn msgs_proto(user_number: u32) -> String {
    format!(
        "syntax = \"proto3\";\npackage imp.common;\n\
         message Req {{\n  string user = {user_number};\n}}\nmessage Resp {{\n  string body = 1;\n}}\n"
    )
}

/// A request whose field 3 is "mallory".
fn mallory_in_field_3() -> Vec<u8> {
    let mut bytes = vec![0x1a, 7];
    bytes.extend_from_slice(b"mallory");
    bytes
}

fn denied(engine: &Engine) -> bool {
    let out = engine
        .process_request(
            Side::Client,
            "/imp.Svc/Call",
            Metadata::new(),
            mallory_in_field_3(),
        )
        .unwrap();
    matches!(
        out.verdict,
        Verdict::Reject {
            code: Code::PermissionDenied,
            ..
        }
    )
}

/// Two processes agree on a version only if they compiled the same schema: a proto reached
/// through `import` alone is part of the digest.
#[test]
fn an_imported_proto_is_part_of_the_digest() {
    let dir = imported_messages_dir(1);
    let open = || Engine::open(dir.path().join("weft.yaml"), "frontend", options()).unwrap();
    let before = open().digest();
    std::fs::write(dir.path().join("common/msgs.proto"), msgs_proto(3)).unwrap();
    let changed = open().digest();
    assert_ne!(
        before, changed,
        "the imported proto's change left the digest"
    );
    // The same files elsewhere: the same digest (import names, not paths, enter it).
    let elsewhere = imported_messages_dir(3);
    let there = Engine::open(elsewhere.path().join("weft.yaml"), "frontend", options()).unwrap();
    assert_eq!(there.digest(), changed);
}

/// The watcher reloads when an imported proto changes, so the chain reads fields by the new
/// numbers; a broken import is reported, keeps the running version, and its fix is noticed.
#[test]
fn the_watcher_follows_imported_protos() {
    let dir = imported_messages_dir(1);
    let opts = EngineOptions {
        watch_interval: Some(Duration::from_millis(20)),
        ..options()
    };
    let engine = Engine::open(dir.path().join("weft.yaml"), "frontend", opts).unwrap();
    assert!(!denied(&engine), "field 3 is not `user` yet");
    let msgs = dir.path().join("common/msgs.proto");
    replace_file(&msgs, &msgs_proto(3));
    assert!(
        watch_result_becomes(&engine, Some(Ok(Reloaded::Installed(2)))),
        "the imported proto's change was not noticed: {:?}",
        engine.last_watch_result()
    );
    assert!(denied(&engine), "the new version reads `user` as field 3");
    replace_file(
        &msgs,
        "syntax = \"proto3\";\nmessage Req {\n  string user = \n",
    );
    assert!(
        watch_result_becomes(&engine, Some(Err(()))),
        "{:?}",
        engine.last_watch_result()
    );
    let Some(Err(e)) = engine.last_watch_result() else {
        unreachable!()
    };
    assert!(
        e.contains("msgs.proto"),
        "the error names the broken file: {e}"
    );
    assert_eq!(engine.version(), 2);
    assert!(denied(&engine), "the running version is kept");
    replace_file(&msgs, &msgs_proto(1));
    assert!(
        watch_result_becomes(&engine, Some(Ok(Reloaded::Installed(3)))),
        "the fixed import was not noticed: {:?}",
        engine.last_watch_result()
    );
    assert!(!denied(&engine));
}

/// `dst` routes a client's request, whoever set it: an element, or the caller passing it
/// on. A response goes back to its caller whatever headers it carries, so it never routes.
#[test]
fn a_request_carrying_dst_routes_and_a_response_never_does() {
    let yaml = echo_edge(&["metrics"], &[]);
    let client = Engine::open_yaml(&yaml, examples().join("echo"), "frontend", options()).unwrap();
    let mut md = Metadata::new();
    md.insert("dst".into(), "echo-2".into());
    let out = client
        .process_request(
            Side::Client,
            "/echo.Echo/Say",
            md,
            two_strings("alice", "hi"),
        )
        .unwrap();
    match &out.verdict {
        Verdict::Route { replica, .. } => assert_eq!(replica, "echo-2"),
        other => panic!("{other:?}"),
    }
    let mut back = Metadata::new();
    back.insert("dst".into(), "somewhere".into());
    let answer = client
        .process_response(
            out.rpc.unwrap(),
            ServerResponse::Ok {
                message: vec![],
                metadata: back,
            },
        )
        .unwrap();
    assert!(
        matches!(answer.verdict, Verdict::Forward(_)),
        "{:?}",
        answer.verdict
    );
}

#[test]
fn a_parameter_an_element_refuses_stops_a_load_and_a_reload_keeps_the_running_version() {
    let breaker = |n: i64| echo_edge(&[&format!("circuitbreaker: {{max_pending: {n}}}")], &[]);
    let dir = examples().join("echo");
    let Err(e) = Engine::open_yaml(&breaker(0), &dir, "frontend", options()) else {
        panic!("a circuit breaker of 0 loaded");
    };
    let e = e.to_string();
    assert!(
        e.contains("circuitbreaker") && e.contains("max_pending must be at least 1, got 0"),
        "{e}"
    );
    // It points at the value in the config, as `weft check --config` does: the line, and a
    // caret under the `0`.
    let line = e
        .lines()
        .find(|l| l.contains("- circuitbreaker: {max_pending: 0}"))
        .unwrap_or_else(|| panic!("no config line in: {e}"));
    let caret = e
        .lines()
        .skip_while(|l| *l != line)
        .nth(1)
        .unwrap_or_default();
    assert_eq!(caret.find('^'), line.find("0}"), "{e}");

    let engine = Engine::open_yaml(&breaker(1), &dir, "frontend", options()).unwrap();
    let send = || {
        engine
            .process_request(
                Side::Client,
                "/echo.Echo/Say",
                Metadata::new(),
                two_strings("alice", "hi"),
            )
            .unwrap()
    };
    // The breaker of one holds this RPC's slot (its response never comes).
    let first = send();
    assert!(matches!(first.verdict, Verdict::Forward(_)));
    let e = engine
        .reload_yaml(&breaker(-3), &dir)
        .unwrap_err()
        .to_string();
    assert!(e.contains("max_pending must be at least 1, got -3"), "{e}");
    // The running version stays, state and all: the slot is still taken.
    let second = send();
    assert_eq!(second.version, first.version);
    assert!(
        matches!(
            second.verdict,
            Verdict::Reject {
                code: Code::Unavailable,
                ..
            }
        ),
        "{:?}",
        second.verdict
    );
}

/// A parameter refused by an element the other end runs stops this end's load and reload
/// too: the soak test (bindings/go/soak_test.go) found a server installing a config whose
/// client-side rate limiter refused `capacity: 0`, which the client refused, so the two
/// ends ran different configs and only one of them said so.
#[test]
fn a_parameter_the_other_ends_element_refuses_stops_this_ends_load_and_reload() {
    let limiter = |capacity: i64| {
        echo_edge(
            &[&format!("ratelimit: {{capacity: {capacity}, rate: 1}}")],
            &["metrics"],
        )
    };
    let dir = examples().join("echo");
    for service in ["frontend", "echo"] {
        let Err(e) = Engine::open_yaml(&limiter(0), &dir, service, options()) else {
            panic!("{service} loaded a rate limiter of capacity 0");
        };
        let e = e.to_string();
        assert!(
            e.contains("capacity must be at least 1.0"),
            "{service}: {e}"
        );
        // Pointed at in the config, as on the end that runs the element.
        assert!(
            e.contains("ratelimit: {capacity: 0, rate: 1}"),
            "{service}: {e}"
        );

        let engine = Engine::open_yaml(&limiter(5), &dir, service, options()).unwrap();
        let e = engine
            .reload_yaml(&limiter(0), &dir)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("capacity must be at least 1.0"),
            "{service}: {e}"
        );
        assert_eq!(
            engine.version(),
            1,
            "{service} installed the refused config"
        );
    }
}
