#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The `weft` binary, driven as users drive it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value as Json;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn weft(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .current_dir(root())
        .args(args)
        .output()
        .expect("run weft")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn check_accepts_every_standard_element() {
    let mut args = vec!["check", "--proto", "examples/echo/echo.proto"];
    let files: Vec<String> = std::fs::read_dir(root().join("elements"))
        .unwrap()
        .map(|e| format!("elements/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    assert!(files.len() >= 17);
    args.extend(files.iter().map(String::as_str));
    let out = weft(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains(": error:"), "{}", stderr(&out));
    assert!(!stderr(&out).contains(": warning:"), "{}", stderr(&out));
}

#[test]
fn check_reports_errors_with_location_caret_and_hint_and_exits_1() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let bad = dir.join("bad.weft");
    std::fs::write(&bad, "state:\n    pass\ninit():\n    pass\nreq(rpc):\n    x = get(rpc, 'usr')\n    send(rpc, Down)\nresp(rpc):\n    send(rpc, Up)\n").unwrap();
    let out = weft(&[
        "check",
        "--proto",
        "examples/echo/echo.proto",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    let path = bad.display().to_string();
    // Column 19 is the `u` of `usr`, after the opening quote.
    assert!(err.contains(&format!("{path}:6:19: error: ")), "{err}");
    assert!(err.contains("6 |     x = get(rpc, 'usr')"), "{err}");
    assert!(err.contains("did you mean `user`?"), "{err}");
    assert!(err.contains("^^^"), "{err}");
}

#[test]
fn props_prints_the_property_record_with_parameters_bound() {
    let out = weft(&[
        "props",
        "--proto",
        "examples/echo/echo.proto",
        "--method",
        "echo.Echo/Say",
        "--param",
        "field=user",
        "--param",
        "deny=[mallory]",
        "elements/firewall.weft",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let j: Json = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(j["req"]["may_drop"], true);
    assert_eq!(j["req"]["drop_depends_on_random"], false);
    assert_eq!(j["req"]["fields_read"], serde_json::json!(["user"]));
    assert_eq!(j["req"]["fields_written"], serde_json::json!([]));
    assert_eq!(j["resp"]["may_drop"], false);
    assert_eq!(j["init"]["state_written"], serde_json::json!(["denied"]));
}

/// `props` binds parameters from the command line, so its errors about them say so, where a
/// config's errors name the chain config.
#[test]
fn props_errors_about_parameters_name_the_command_line() {
    let props = |params: &[&str]| {
        let mut args = vec![
            "props",
            "--proto",
            "examples/echo/echo.proto",
            "--method",
            "echo.Echo/Say",
        ];
        for p in params {
            args.extend(["--param", p]);
        }
        args.push("elements/ratelimit.weft");
        weft(&args)
    };

    let out = props(&["capacity=abc"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("parameter `capacity` is given a string, but it is declared `float`"),
        "{err}"
    );
    assert!(
        err.contains("the value comes from `--param capacity=…`"),
        "{err}"
    );
    assert!(!err.contains("chain config"), "{err}");

    let out = props(&["capacty=5.0"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("`--param capacty` names a parameter `init` does not declare"),
        "{err}"
    );
    assert!(err.contains("did you mean `capacity`?"), "{err}");
    assert!(!err.contains("chain config"), "{err}");

    let out = weft(&[
        "props",
        "--proto",
        "examples/echo/echo.proto",
        "--method",
        "echo.Echo/Say",
        "--param",
        "deny=[mallory]",
        "elements/firewall.weft",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("parameter `field` has no value"), "{err}");
    assert!(err.contains("give it with `--param field=VALUE`"), "{err}");
    assert!(!err.contains("chain config"), "{err}");
}

#[test]
fn sim_runs_the_example_chain() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let channels = dir.join("channels.jsonl");
    let state = dir.join("state.json");
    let out = weft(&[
        "sim",
        "--config",
        "examples/echo/weft.yaml",
        "--edge",
        "frontend->echo",
        "--trace",
        "examples/echo/trace.jsonl",
        "--channels",
        channels.to_str().unwrap(),
        "--dump-state",
        state.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: Vec<Json> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary: Vec<(String, String, Json)> = rows
        .iter()
        .map(|r| {
            (
                r["outcome"].as_str().unwrap().into(),
                r["status"].as_str().unwrap().into(),
                r["by"].clone(),
            )
        })
        .collect();
    // Ratelimit holds 5 tokens refilled at 1/s; rpcs 1-5 take them (mallory's rejected
    // request included: the limiter runs before the firewall), so at t=0.41 the bucket
    // holds 0.41 tokens. "hello" again is a cache hit. Rpc 4's server fails.
    let expected = [
        ("ok", "OK", Json::Null),
        ("rejected", "PERMISSION_DENIED", "firewall".into()),
        ("replied", "OK", "cache".into()),
        ("ok", "UNAVAILABLE", Json::Null),
        ("ok", "OK", Json::Null),
        ("rejected", "RESOURCE_EXHAUSTED", "ratelimit".into()),
        ("rejected", "RESOURCE_EXHAUSTED", "ratelimit".into()),
        ("ok", "OK", Json::Null),
    ];
    let expected: Vec<(String, String, Json)> = expected
        .into_iter()
        .map(|(a, b, c)| (a.into(), b.into(), c))
        .collect();
    assert_eq!(summary, expected);
    assert_eq!(
        rows[2]["client_got"]["served_by"], "echo-0",
        "the cached response of rpc 1"
    );
    assert_eq!(rows[2]["server_saw"], Json::Null);
    assert_eq!(rows[3]["message"], "echo is restarting");

    // Logging is first: every rpc's request and response are logged (16 records); metrics is
    // last: only the 4 rpcs that reached the server have a latency, t_resp - t.
    let records: Vec<Json> = std::fs::read_to_string(&channels)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.iter().filter(|r| r["channel"] == "log").count(), 16);
    let latencies: Vec<(u64, f64)> = records
        .iter()
        .filter(|r| r["channel"] == "latency")
        .map(|r| (r["rpc_id"].as_u64().unwrap(), r["value"].as_f64().unwrap()))
        .collect();
    let ids: Vec<u64> = latencies.iter().map(|l| l.0).collect();
    assert_eq!(ids, vec![1, 4, 5, 8]);
    for ((_, got), want) in latencies.iter().zip([0.004, 0.01, 0.0, 0.0]) {
        assert!((got - want).abs() < 1e-9, "latency {got} vs {want}");
    }
    let dump: Json = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(dump["state"]["metrics@echo"]["total"], 4);
    assert_eq!(dump["state"]["metrics@echo"]["failed"], 1);
}

#[test]
fn bad_inputs_get_a_clear_answer() {
    let out = weft(&[
        "sim",
        "--config",
        "no/such/weft.yaml",
        "--edge",
        "x",
        "--trace",
        "t",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot read the chain config"),
        "{}",
        stderr(&out)
    );

    let out = weft(&[
        "sim",
        "--config",
        "examples/echo/weft.yaml",
        "--edge",
        "frontend->ehco",
        "--trace",
        "examples/echo/trace.jsonl",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("did you mean `frontend->echo`?"),
        "{}",
        stderr(&out)
    );
}

/// `weft sim` of the echo example's edge over the trace at `path`.
fn sim_echo(path: &std::path::Path) -> Output {
    weft(&[
        "sim",
        "--config",
        "examples/echo/weft.yaml",
        "--edge",
        "frontend->echo",
        "--trace",
        path.to_str().unwrap(),
    ])
}

#[test]
fn sim_names_the_trace_file_line_and_field_of_a_bad_trace() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = |trace: &str| {
        let path = tmp.path().join("t.jsonl");
        std::fs::write(&path, trace).unwrap();
        let out = sim_echo(&path);
        assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
        (path.display().to_string(), stderr(&out))
    };
    // Found while reading the trace, and found while running it: both name file and line
    // alike (the second said only "trace line 2"), and the field a value does not fit.
    let (path, err) = sim("{\"id\": 1}\n{\"id\": 2, \"req\": {\"user\": 7}}\n");
    assert!(err.contains(&format!("{path}:2: `req`: ")), "{err}");
    assert!(err.contains("field `user`"), "{err}");
    let (path, err) = sim("{\"id\": 1}\n{\"id\": 2,, \"req\": {}}\n");
    assert!(
        err.contains(&format!("{path}:2: not JSON at column 10: ")),
        "{err}"
    );
}

/// A trace with no RPC (an empty file, or only comments) printed nothing at all and
/// exited 0, which reads like a run whose output went missing.
#[test]
fn sim_says_when_a_trace_holds_no_rpcs() {
    let tmp = tempfile::tempdir().unwrap();
    for trace in ["", "\n# nothing yet\n"] {
        let path = tmp.path().join("t.jsonl");
        std::fs::write(&path, trace).unwrap();
        let out = sim_echo(&path);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(stdout(&out), "", "no results to print");
        let err = stderr(&out);
        assert!(
            err.contains(&format!("{} holds no RPCs", path.display())),
            "{trace:?}: {err}"
        );
    }
}

#[test]
fn sim_gives_the_same_run_with_either_executor() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut runs = Vec::new();
    for executor in ["interp", "jit"] {
        let channels = dir.join(format!("{executor}.jsonl"));
        let state = dir.join(format!("{executor}.json"));
        let out = weft(&[
            "sim",
            "--config",
            "examples/echo/weft.yaml",
            "--edge",
            "frontend->echo",
            "--trace",
            "examples/echo/trace.jsonl",
            "--executor",
            executor,
            "--channels",
            channels.to_str().unwrap(),
            "--dump-state",
            state.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stderr(&out).is_empty(), "{}", stderr(&out));
        runs.push((
            stdout(&out),
            std::fs::read_to_string(channels).unwrap(),
            std::fs::read_to_string(state).unwrap(),
        ));
    }
    assert_eq!(runs[0], runs[1]);
}

#[test]
fn bench_prints_nanoseconds_per_rpc_for_both_executors() {
    let out = weft(&[
        "bench",
        "--config",
        "examples/echo/weft.yaml",
        "--edge",
        "frontend->echo",
        "--n",
        "200",
        "--message",
        r#"{"user": "alice", "body": "hi"}"#,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Times of a debug build say little about a service's: the command says when it is one
    // (the test binary and `weft` are built with the same profile).
    assert_eq!(
        stderr(&out).contains("this weft is a debug build"),
        cfg!(debug_assertions),
        "{}",
        stderr(&out)
    );
    let text = stdout(&out);
    for want in ["interp:", "jit:", "ns/RPC", "speed-up:"] {
        assert!(text.contains(want), "{want} missing in:\n{text}");
    }
    // Both executors report on the 200 RPCs and agree on how many reached the server (with
    // the example's rate limit and cache, few or none after the warm-up; a forwarding chain
    // is timed by the criterion benchmarks).
    let reached: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_once('(')?.1.strip_suffix(" reached the server)"))
        .collect();
    assert_eq!(reached.len(), 2, "{text}");
    assert_eq!(reached[0], reached[1], "{text}");
    assert!(reached[0].ends_with(" of 200"), "{text}");
    // The others are accounted for, by the element that stopped them: with the virtual
    // clock the example's rate limit is spent during the warm-up, so it rejects all 200
    // timed RPCs, in both executors.
    assert_eq!(reached[0], "0 of 200", "{text}");
    let stopped: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" rejected ") || l.contains(" answered "))
        .map(str::trim)
        .collect();
    assert_eq!(
        stopped,
        ["ratelimit rejected 200", "ratelimit rejected 200"],
        "{text}"
    );
    let bad = weft(&[
        "bench",
        "--config",
        "examples/echo/weft.yaml",
        "--edge",
        "frontend->echo",
        "--message",
        "not json",
    ]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("--message"), "{}", stderr(&bad));
}

#[test]
fn plan_places_figure3_and_prints_segments_cost_and_reasons() {
    let out = weft(&[
        "plan",
        "--config",
        "examples/planner/weft.yaml",
        "--edge",
        "figure3",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let plan: Json = serde_json::from_str(&stdout(&out)).unwrap();
    let element = |name: &str| {
        plan["elements"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .cloned()
            .unwrap()
    };
    // The rate limiter's shared counts are keyed per server replica: on the server side they
    // need no synchronisation, which saves w_strong = 2 for 0.1 of another lib segment.
    assert_eq!(element("ratelimit_replica")["side"], "server");
    assert_eq!(element("logging")["processor"], "lib");
    assert!(
        element("ratelimit_replica")["position"].as_u64()
            < element("firewall")["position"].as_u64()
    );
    let segments = plan["segments"].as_array().unwrap();
    assert_eq!(segments.len(), 2);
    assert_eq!(
        segments[1]["elements"],
        serde_json::json!(["ratelimit_replica", "firewall"])
    );
    // client/lib: 0.5 * (1 + 1) + 0.1; server/lib: 0.5 * (0.95 + 0.95^2) + 0.1.
    let cost = plan["cost"].as_f64().unwrap();
    assert!(
        (cost - (1.1 + 0.5 * (0.95 + 0.9025) + 0.1)).abs() < 1e-6,
        "{cost}"
    );
    assert!(plan["reasons"].as_array().unwrap().len() >= 4);

    let out = weft(&["plan", "--config", "examples/planner/weft.yaml"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("edge figure3") && text.contains("edge figure6"),
        "{text}"
    );
    assert!(
        text.contains("segments (each fused into one function)"),
        "{text}"
    );
}

#[test]
fn equiv_answers_with_a_reason_and_exit_code() {
    let args = |order: &str, consistency: &str| {
        weft(&[
            "equiv",
            "--config",
            "examples/planner/weft.yaml",
            "--edge",
            "figure6",
            "--order",
            order,
            "--consistency",
            consistency,
        ])
    };
    let out = args("logging,loadbalance,firewall", "strong");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Figure 6, option 1: the logger behind the balancer records the routed `dst`.
    let out = args("loadbalance,logging,firewall", "weak");
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = args("loadbalance,logging,firewall", "strong");
    assert_eq!(out.status.code(), Some(3));
    assert!(stdout(&out).contains("`logging`"), "{}", stdout(&out));
    // Option 2: the balancer behind the firewall stops counting rejected requests.
    let out = args("logging,firewall,loadbalance", "weak");
    assert_eq!(out.status.code(), Some(3));
    assert!(stdout(&out).contains("state `next`"), "{}", stdout(&out));
    // Mistakes in the order are usage errors.
    let out = args("logging,firewal,loadbalance", "weak");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("did you mean `firewall`?"),
        "{}",
        stderr(&out)
    );
    let out = args("logging,firewall", "weak");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("missing: loadbalance"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn plan_reports_contradictory_pins_naming_edge_and_element() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cfg = dir.join("weft.yaml");
    std::fs::write(
        &cfg,
        format!(
            "protos: [{}]\nedges:\n  a->b:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    any:\n      - {{element: metrics, processor: nic}}\n",
            root().join("examples/echo/echo.proto").display()
        ),
    )
    .unwrap();
    let out = weft(&["plan", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("edge `a->b`, element `metrics`"), "{err}");
    assert!(err.contains("channel `latency`"), "{err}");
}

/// A config in `dir` with edge `e` (echo.Echo/Say) listing `any` (YAML, indented 6).
fn echo_config(dir: &std::path::Path, any: &str) -> PathBuf {
    let cfg = dir.join("weft.yaml");
    std::fs::write(
        &cfg,
        format!(
            "protos: [{}]\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    any:\n{any}",
            root().join("examples/echo/echo.proto").display()
        ),
    )
    .unwrap();
    cfg
}

/// `weft bench` of edge `e` of `cfg` (an [`echo_config`]) over `n` RPCs.
fn bench_e(cfg: &std::path::Path, n: &str, more: &[&str]) -> Output {
    let mut args = vec![
        "bench",
        "--config",
        cfg.to_str().unwrap(),
        "--edge",
        "e",
        "--n",
        n,
    ];
    args.extend_from_slice(more);
    weft(&args)
}

#[test]
fn bench_starts_instances_as_sim_does() {
    let tmp = tempfile::tempdir().unwrap();
    // The config's `state:` is written after `init`: bob is denied.
    let cfg = echo_config(
        tmp.path(),
        "      - element: firewall\n        params: {field: user, deny: [mallory]}\n        state: {denied: {bob: true}}\n",
    );
    let out = bench_e(&cfg, "20", &["--message", r#"{"user": "bob"}"#]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("(0 of 20 reached the server)"), "{text}");
    assert!(text.contains("firewall rejected 20"), "{text}");

    // `max_iterations` holds `init` too: four names to deny are four iterations.
    let cfg = echo_config(
        tmp.path(),
        "      - element: firewall\n        params: {field: user, deny: [a, b, c, mallory]}\n        max_iterations: 2\n",
    );
    let out = bench_e(&cfg, "20", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("more than 2 foreach iterations"),
        "{}",
        stderr(&out)
    );
}

/// Several `--message`s are taken in turn, so a chain that treats users apart is timed on
/// the mix (one request alone timed a firewall's path for that user only).
#[test]
fn bench_takes_several_messages_in_turn() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = echo_config(
        tmp.path(),
        "      - firewall: {field: user, deny: [mallory]}\n",
    );
    let users = ["alice", "mallory", "bob"].map(|u| format!(r#"{{"user": "{u}"}}"#));
    let mut more = vec!["--executor", "both"];
    for u in &users {
        more.extend(["--message", u.as_str()]);
    }
    let out = bench_e(&cfg, "30", &more);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    // Each executor: one RPC in three is mallory's.
    assert_eq!(
        text.matches("(20 of 30 reached the server)").count(),
        2,
        "{text}"
    );
    assert_eq!(text.matches("firewall rejected 10").count(), 2, "{text}");

    // A bad one is named by its place.
    let out = bench_e(&cfg, "30", &["--message", "{}", "--message", "{"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("--message 2 is not JSON"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_refuses_a_method_it_cannot_check_against() {
    // --method without a proto to find it in.
    let out = weft(&[
        "check",
        "--method",
        "no.Such/Method",
        "elements/firewall.weft",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("--method") && err.contains("--proto"), "{err}");

    // A proto of messages only: fields would be checked against nothing.
    let tmp = tempfile::tempdir().unwrap();
    let proto = tmp.path().join("msgs.proto");
    std::fs::write(
        &proto,
        "syntax = \"proto3\";\npackage m;\nmessage A { string user = 1; }\n",
    )
    .unwrap();
    let out = weft(&[
        "check",
        "--proto",
        proto.to_str().unwrap(),
        "elements/firewall.weft",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "{} defines no service method to check against",
            proto.display()
        )),
        "{err}"
    );
}

#[test]
fn bench_refuses_zero_rpcs() {
    let out = weft(&[
        "bench",
        "--config",
        "examples/echo/weft.yaml",
        "--edge",
        "frontend->echo",
        "--n",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(!stdout(&out).contains("NaN"), "{}", stdout(&out));
    assert!(stderr(&out).contains("--n"), "{}", stderr(&out));
}

#[test]
fn bench_says_an_edge_without_elements_has_nothing_to_bench() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = echo_config(tmp.path(), "");
    let out = bench_e(&cfg, "10", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("edge `e` has no elements to bench"),
        "{}",
        stderr(&out)
    );
}

/// A `weft.yaml` in `dir` with `edges` (YAML lines under `edges:`) over `bad.proto`, a
/// proto that does not compile (`strin`, its methods `x.S/M` and `x.S/N`).
fn bad_proto_config(dir: &Path, edges: &str) -> PathBuf {
    std::fs::write(
        dir.join("bad.proto"),
        "syntax = \"proto3\";\npackage x;\nmessage A { strin a = 1; }\nservice S { rpc M(A) returns (A); rpc N(A) returns (A); }\n",
    )
    .unwrap();
    let cfg = dir.join("weft.yaml");
    std::fs::write(&cfg, format!("protos: [bad.proto]\nedges:\n{edges}")).unwrap();
    cfg
}

#[test]
fn a_proto_that_does_not_compile_is_reported_once() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = bad_proto_config(tmp.path(), "  e: {from: a, to: b, method: x.S/M}\n");
    let out = weft(&["plan", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(
        err.matches("name 'strin' is not defined").count(),
        1,
        "{err}"
    );
    assert!(err.contains(&cfg.display().to_string()), "{err}");
}

#[test]
fn check_reports_a_missing_file_and_checks_the_others() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.weft");
    std::fs::write(&bad, "state:\n    pass\ninit():\n    pass\nreq(rpc):\n    x = get(rpc, 'usr')\n    send(rpc, Down)\nresp(rpc):\n    send(rpc, Up)\n").unwrap();
    let missing = tmp.path().join("missing.weft");
    let out = weft(&[
        "check",
        "--proto",
        "examples/echo/echo.proto",
        "elements/firewall.weft",
        missing.to_str().unwrap(),
        bad.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{}: error: cannot read it", missing.display())),
        "{err}"
    );
    // The file after it was checked too.
    assert!(err.contains("did you mean `user`?"), "{err}");
    assert!(err.contains("weft: 2 of 3 file(s) have errors"), "{err}");
}

/// A reader that goes away (`weft check … 2>&1 | head -1`) ends the program quietly with
/// the status of a closed pipe; it used to panic (exit 101) in the middle of its output.
#[test]
fn a_closed_pipe_ends_the_program_quietly() {
    use std::io::{BufRead as _, BufReader};
    use std::process::Stdio;

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.weft");
    std::fs::write(&bad, "state:\n    x: nosuchtype\n").unwrap();
    let bad = bad.to_string_lossy().into_owned();
    // Far more diagnostics than a pipe holds, so a write meets the closed end.
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .current_dir(root())
        .arg("check")
        .args(std::iter::repeat_n(bad.as_str(), 3000))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run weft");
    let mut first = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("bad.weft"), "{first}");
    // The reader is dropped here, as `head -1` exits.
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(141), "{status:?}");
}

#[test]
fn check_config_starts_every_element_and_reports_each_refused_parameter() {
    let tmp = tempfile::tempdir().unwrap();
    // Both elements refuse their parameters: both are reported, not only the first.
    let bad = echo_config(
        tmp.path(),
        "      - circuitbreaker: {max_pending: 0}\n      - fault: {prob_pass: 2.0}\n",
    );
    let out = weft(&["check", "--config", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("edge `e`: element `circuitbreaker`: `init` failed: max_pending must be at least 1, got 0"),
        "{err}"
    );
    assert!(
        err.contains("edge `e`: element `fault`: `init` failed: prob_pass is a probability"),
        "{err}"
    );
    assert!(err.contains("1 of 1 edge(s) have errors"), "{err}");

    // A config whose elements all start passes, edge by edge; the example config too.
    let good = echo_config(tmp.path(), "      - circuitbreaker: {max_pending: 1}\n");
    let out = weft(&["check", "--config", good.to_str().unwrap(), "--edge", "e"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("edge `e`: 1 element(s) checked, started and placed"));
    // Every config the repository ships.
    for shipped in [
        "examples/echo/weft.yaml",
        "examples/go-echo/weft.yaml",
        "examples/planner/weft.yaml",
        "examples/tenant-quota/weft.yaml",
        "bench/loops/weft.yaml",
    ] {
        let out = weft(&["check", "--config", shipped]);
        assert!(out.status.success(), "{shipped}: {}", stderr(&out));
        assert!(stderr(&out).contains("checked, no errors"), "{shipped}");
    }

    // An element pinned where this runtime cannot run it: the runtime would refuse the
    // config, so the check does too.
    let nic = echo_config(tmp.path(), "      - {element: ratelimit, processor: nic}\n");
    let out = weft(&["check", "--config", nic.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("edge `e`") && err.contains("ratelimit"),
        "{err}"
    );
    assert!(err.contains("lib"), "{err}");

    // An element source error is shown with its caret, and the edge counts as failed.
    std::fs::write(
        tmp.path().join("broken.weft"),
        "state:\n    pass\ninit():\n    pass\nreq(rpc):\n    x = get(rpc, 'usr')\n    send(rpc, Down)\nresp(rpc):\n    send(rpc, Up)\n",
    )
    .unwrap();
    let broken = echo_config(tmp.path(), "      - broken\n");
    let text = std::fs::read_to_string(&broken).unwrap();
    std::fs::write(&broken, format!("element_paths: [.]\n{text}")).unwrap();
    let out = weft(&["check", "--config", broken.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("broken.weft:6:19: error: "), "{err}");
    assert!(err.contains("edge `e`: does not load"), "{err}");
}

/// The protos are compiled once for all edges: per edge, a mesh of 100 edges spent 10–18 s
/// compiling its 51 protos again and again, and a broken proto was reported once per edge.
#[test]
fn check_config_compiles_the_protos_once_for_every_edge() {
    let tmp = tempfile::tempdir().unwrap();
    let edges: String = (0..5)
        .map(|i| format!("  e{i}: {{from: a{i}, to: b, method: x.S/M}}\n"))
        .collect();
    let cfg = bad_proto_config(tmp.path(), &edges);
    let out = weft(&["check", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(
        err.matches("name 'strin' is not defined").count(),
        1,
        "{err}"
    );
    assert!(err.contains("the protos do not compile"), "{err}");
}

/// A runtime refuses two edges from one service that both apply to one method (neither end
/// can tell which edge a request belongs to), so `weft check --config` warns of them, naming
/// both edges and each service whose runtime refuses the config; it passed them without a
/// word. Edges from two services into one method are fine: the server picks by the caller.
/// Only a warning: a config of alternatives (examples/planner) is for `weft plan` and `weft
/// sim`.
#[test]
fn check_config_warns_of_two_edges_from_one_service_on_one_method_which_runtimes_refuse() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("examples/echo/echo.proto"),
        tmp.path().join("echo.proto"),
    )
    .unwrap();
    let options = || weft_runtime::EngineOptions {
        watch_interval: None,
        ..weft_runtime::EngineOptions::default()
    };
    let two_callers = "protos: [echo.proto]\nedges:\n  web->echo:\n    from: web\n    to: echo\n    method: echo.Echo/Say\n    server: [metrics]\n  cart->echo:\n    from: cart\n    to: echo\n    method: echo.Echo/*\n";
    let cfg = tmp.path().join("weft.yaml");
    std::fs::write(&cfg, two_callers).unwrap();
    let out = weft(&["check", "--config", cfg.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches("warning:").count(), 0, "{err}");
    weft_runtime::Engine::open(&cfg, "echo", options()).unwrap();

    std::fs::write(&cfg, two_callers.replace("from: cart", "from: web")).unwrap();
    let out = weft(&["check", "--config", cfg.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    for (side, service) in [("client", "web"), ("server", "echo")] {
        assert!(
            err.contains(&format!("warning: edges `web->echo` and `cart->echo` both apply to {side}-side method `echo.Echo/Say` of service `{service}`; an RPC must belong to one edge, so a runtime of `{service}` refuses this config")),
            "{err}"
        );
        // As the runtime says.
        let refused = weft_runtime::Engine::open(&cfg, service, options());
        assert!(
            matches!(
                refused,
                Err(weft_runtime::EngineError::OverlappingEdges { .. })
            ),
            "{service}: {:?}",
            refused.err()
        );
    }
    // One method of two: nothing else overlaps.
    assert_eq!(err.matches("warning:").count(), 2, "{err}");
}

/// A mistake in weft.yaml itself (bad YAML, an unknown key) was a fatal error of the tool:
/// `weft check --config` exited 2, not the 1 it documents for errors, and every command
/// printed it as `weft: weft.yaml:8:5: error: …`, so the `path:line:col` an editor or a
/// CI problem matcher looks for at the start of the line was not there.
#[test]
fn a_config_that_does_not_parse_is_an_error_of_the_config_located_at_the_line_start() {
    let tmp = tempfile::tempdir().unwrap();
    let bad_yaml = echo_config(tmp.path(), "      - ratelimit: {capacity: 5\n");
    let path = bad_yaml.display().to_string();
    let out = weft(&["check", "--config", &path]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with(&format!("{path}:9:1: error: not valid YAML")),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("no edge was checked"),
        "{}",
        stderr(&out)
    );

    let text = std::fs::read_to_string(&bad_yaml).unwrap();
    std::fs::write(
        &bad_yaml,
        text.replace("      - ratelimit: {capacity: 5\n", "      - metrics\n")
            .replace("    any:", "    sever: [logging]\n    any:"),
    )
    .unwrap();
    let out = weft(&["check", "--config", &path]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with(&format!("{path}:7:5: error: unknown key `sever`")),
        "{}",
        stderr(&out)
    );
    // The other commands keep their exit code for bad input, with the place first too.
    let out = weft(&["plan", "--config", &path]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with(&format!("{path}:7:5: error: unknown key `sever`")),
        "{}",
        stderr(&out)
    );
    let wrong_type = echo_config(tmp.path(), "      - ratelimit: {capacity: five}\n");
    // An element's parameter is an error in the edge's elements, as `sim` and `plan` say it
    // (exit 1); `bench` made it a fatal error of its own.
    let out = bench_e(&wrong_type, "10", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("weft: 1 error(s) in the elements of edge `e`"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).starts_with(&format!("{path}:8:")),
        "{}",
        stderr(&out)
    );
}

/// An element that reads request metadata (a tenant, a canary flag) could only be timed on
/// its path for a request without it: `--message` sets the message, and nothing set the
/// headers, so a quota keyed by a header rejected every RPC of the bench.
#[test]
fn bench_sets_request_headers() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("tenant.weft"),
        "state:\n    pass\ninit():\n    pass\nreq(rpc):\n    if get_rpc_header(rpc, 'x-tenant') == 'acme':\n        send(rpc, Down)\n    send(err('who?', UNAUTHENTICATED), Up)\nresp(rpc):\n    send(rpc, Up)\n",
    )
    .unwrap();
    let cfg = echo_config(tmp.path(), "      - tenant\n");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("element_paths: [.]\n{text}")).unwrap();
    let out = bench_e(&cfg, "20", &["--header", "x-tenant=acme"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("(20 of 20 reached the server)"),
        "{}",
        stdout(&out)
    );
    let out = bench_e(&cfg, "20", &["--header", "x-tenant=globex"]);
    assert!(
        stdout(&out).contains("tenant rejected 20"),
        "{}",
        stdout(&out)
    );
    let out = bench_e(&cfg, "20", &["--header", "x-tenant"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(stderr(&out).contains("NAME=VALUE"), "{}", stderr(&out));
}

/// `weft sim` of the tenant-quota example over `trace` (JSON lines), as (outcome, by,
/// status, message) per RPC.
fn tenant_quota_sim(config: &Path, trace: &str) -> Vec<(String, String, String, String)> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, trace).unwrap();
    let out = weft(&[
        "sim",
        "--config",
        config.to_str().unwrap(),
        "--edge",
        "checkout->inventory.reserve",
        "--trace",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|l| {
            let j: Json = serde_json::from_str(l).unwrap();
            let s = |k: &str| j[k].as_str().unwrap_or("").to_owned();
            (s("outcome"), s("by"), s("status"), s("message"))
        })
        .collect()
}

#[test]
fn the_tenant_quota_example_keeps_a_bucket_per_tenant_and_bounds_them() {
    let example = root().join("examples/tenant-quota");
    let trace = std::fs::read_to_string(example.join("trace.jsonl")).unwrap();
    let got = tenant_quota_sim(&example.join("weft.yaml"), &trace);
    let by: Vec<(&str, &str)> = got
        .iter()
        .map(|(o, b, ..)| (o.as_str(), b.as_str()))
        .collect();
    assert_eq!(
        by,
        [
            ("ok", ""),
            ("ok", ""),
            ("ok", ""),
            ("ok", ""),
            ("rejected", "tenantquota"),
            ("ok", ""),
            ("rejected", "tenantquota"),
            ("rejected", "firewall"),
            ("ok", ""),
        ]
    );
    assert_eq!(got[4].2, "RESOURCE_EXHAUSTED");
    assert_eq!(got[4].3, "tenantquota: tenant acme is over its quota");
    assert_eq!(got[6].2, "UNAUTHENTICATED");

    // With room for one tenant's bucket, every later tenant shares the bucket `*`: one
    // burst of 2 between them, while the first tenant keeps its own. `anonymous` charges
    // requests without the header to a tenant instead of refusing them.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(
        example.join("inventory.proto"),
        tmp.path().join("inventory.proto"),
    )
    .unwrap();
    let cfg = tmp.path().join("weft.yaml");
    std::fs::write(
        &cfg,
        format!(
            "protos: [inventory.proto]\nelement_paths: [{}]\nedges:\n  checkout->inventory.reserve:\n    from: checkout\n    to: inventory\n    method: inventory.Inventory/Reserve\n    server:\n      - tenantquota: {{rate: 1, burst: 2, max_tenants: 1, anonymous: guest}}\n",
            example.join("elements").display()
        ),
    )
    .unwrap();
    let rpc = |id: u32, tenant: &str| {
        let headers = if tenant.is_empty() {
            String::new()
        } else {
            format!(r#", "headers": {{"x-tenant": "{tenant}"}}"#)
        };
        format!(r#"{{"id": {id}, "t": 0.{id:02}{headers}}}"#) + "\n"
    };
    let trace: String = [
        rpc(1, "acme"),
        rpc(2, "b"),
        rpc(3, "c"),
        rpc(4, "d"),
        rpc(5, "acme"),
        rpc(6, ""),
    ]
    .concat();
    let got = tenant_quota_sim(&cfg, &trace);
    let outcomes: Vec<(&str, &str)> = got
        .iter()
        .map(|(o, _, _, m)| (o.as_str(), m.as_str()))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("ok", ""),
            ("ok", ""),
            ("ok", ""),
            ("rejected", "tenantquota: tenant * is over its quota"),
            ("ok", ""),
            ("rejected", "tenantquota: tenant * is over its quota"),
        ]
    );
}

/// A runtime whose service is the `from` of an edge refuses to open when the name is not
/// printable ASCII: it rides in every call's `weft-version` header. `weft check --config`
/// says so, once per service.
#[test]
fn check_config_warns_of_a_calling_service_whose_name_cannot_ride_in_a_header() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("examples/echo/echo.proto"),
        tmp.path().join("echo.proto"),
    )
    .unwrap();
    let cfg = tmp.path().join("weft.yaml");
    std::fs::write(
        &cfg,
        "protos: [echo.proto]\nedges:\n  café->echo:\n    from: café\n    to: echo\n    method: echo.Echo/Say\n  café->web:\n    from: café\n    to: web\n    method: echo.Echo/SayStream\n  echo->web:\n    from: echo\n    to: web\n    method: echo.Echo/Say\n",
    )
    .unwrap();
    let out = weft(&["check", "--config", cfg.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches("warning:").count(), 1, "{err}");
    assert!(
        err.contains("warning: service `café` is the `from` of an edge")
            && err.contains("so a runtime of `café` refuses this config"),
        "{err}"
    );
    let options = weft_runtime::EngineOptions {
        watch_interval: None,
        ..weft_runtime::EngineOptions::default()
    };
    assert!(matches!(
        weft_runtime::Engine::open(&cfg, "café", options),
        Err(weft_runtime::EngineError::ServiceName { .. })
    ));
}
