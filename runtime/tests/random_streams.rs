#![allow(clippy::unwrap_used)]
//! Element random streams in the runtime: each instance draws its own numbers, and a reload
//! does not replay the numbers already drawn (`encrypt` takes its nonces from the stream).

mod common;

use common::{echo_dir_with_elements, options, two_strings};
use weft_runtime::{Engine, EngineOptions, Metadata, Reloaded, Side, Verdict};

/// Two edges of one service, each with a client-side `fault` of the same instance name.
const TWO_EDGES: &str = "protos: [echo.proto]
edges:
  frontend->echo:
    from: frontend
    to: echo
    method: echo.Echo/Say
    client:
      - fault: {prob_pass: 0.5}
  frontend->echo-stream:
    from: frontend
    to: echo
    method: echo.Echo/SayStream
    client:
      - fault: {prob_pass: 0.5}
";

/// Which of 64 requests the fault let through: 64 draws of the instance's stream.
fn draws(engine: &Engine, method: &str) -> u64 {
    (0..64).fold(0, |bits, i| {
        let out = engine
            .process_request(Side::Client, method, Metadata::new(), two_strings("a", "b"))
            .unwrap();
        bits | (u64::from(matches!(out.verdict, Verdict::Forward(_))) << i)
    })
}

#[test]
fn instances_of_one_name_on_two_edges_draw_different_numbers() {
    let dir = echo_dir_with_elements(&[]);
    let engine = Engine::open_yaml(TWO_EDGES, dir.path(), "frontend", options()).unwrap();
    let say = draws(&engine, "/echo.Echo/Say");
    let stream = draws(&engine, "/echo.Echo/SayStream");
    assert_ne!(say, stream, "both edges' faults drew the same 64 numbers");

    // A fixed seed still makes every stream reproducible.
    let again = Engine::open_yaml(TWO_EDGES, dir.path(), "frontend", options()).unwrap();
    assert_eq!(draws(&again, "/echo.Echo/Say"), say);
    assert_eq!(draws(&again, "/echo.Echo/SayStream"), stream);
}

#[test]
fn a_reload_does_not_replay_the_numbers_drawn() {
    let dir = echo_dir_with_elements(&[]);
    let config = dir.path().join("weft.yaml");
    std::fs::write(&config, TWO_EDGES).unwrap();
    let engine = Engine::open(&config, "frontend", options()).unwrap();
    let before = draws(&engine, "/echo.Echo/Say");
    // Any change makes a new version; the unchanged fault is carried over into it.
    std::fs::write(&config, format!("# edited\n{TWO_EDGES}")).unwrap();
    assert_eq!(engine.reload().unwrap(), Reloaded::Installed(2));
    assert_ne!(
        draws(&engine, "/echo.Echo/Say"),
        before,
        "version 2 drew version 1's numbers again"
    );
}

/// Without a fixed seed (the default), streams come from the operating system: two engines
/// loading the same config draw different numbers.
#[test]
fn by_default_no_two_engines_draw_the_same_numbers() {
    let dir = echo_dir_with_elements(&[]);
    let open = || {
        let o = EngineOptions {
            watch_interval: None,
            ..EngineOptions::default()
        };
        Engine::open_yaml(TWO_EDGES, dir.path(), "frontend", o).unwrap()
    };
    assert_ne!(
        draws(&open(), "/echo.Echo/Say"),
        draws(&open(), "/echo.Echo/Say")
    );
}
