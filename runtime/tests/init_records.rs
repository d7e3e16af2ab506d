//! What an element's `init` sends reaches the channel observer when its version is
//! installed, and only then: a reload that fails after some `init`s ran, or that changes
//! nothing, sends nothing (a review found each such reload repeated the records).

// Helpers outside #[test] functions are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};

use common::{echo_dir_with_elements, options};
use weft_runtime::{Engine, EngineOptions, Reloaded};

const HELLO: &str = "state:\n    log: Channel\n\ninit(greeting: string = 'started'):\n    send(greeting, log)\n\nreq(rpc):\n    send(rpc, Down)\n\nresp(rpc):\n    send(rpc, Up)\n";
/// Its `init` fails (an integer division by zero) after `hello`'s has run.
const BROKEN: &str = "state:\n    q: int\n\ninit(d: int = 0):\n    q = 100 / d\n\nreq(rpc):\n    send(rpc, Down)\n\nresp(rpc):\n    send(rpc, Up)\n";

fn config(client: &[&str]) -> String {
    let list: String = client.iter().map(|e| format!("      - {e}\n")).collect();
    format!(
        "protos: [echo.proto]\nelement_paths: [elements]\nedges:\n  frontend->echo:\n    from: frontend\n    to: echo\n    method: echo.Echo/Say\n    client:\n{list}"
    )
}

#[test]
fn init_records_are_sent_when_their_version_is_installed_and_only_then() {
    let dir = echo_dir_with_elements(&[("hello.weft", HELLO), ("broken.weft", BROKEN)]);
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let engine = Engine::open_yaml(
        &config(&["hello"]),
        dir.path(),
        "frontend",
        EngineOptions {
            channels: Some(Arc::new(move |record, _| {
                sink.lock().unwrap().push(format!("{:?}", record.value));
            })),
            ..options()
        },
    )
    .unwrap();
    let seen = move || std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(seen().len(), 1, "the first version's init");

    let failed = engine.reload_yaml(&config(&["hello: {greeting: again}", "broken"]), dir.path());
    assert!(failed.is_err());
    assert_eq!(engine.version(), 1);
    assert_eq!(
        seen(),
        Vec::<String>::new(),
        "a failed reload's init records"
    );

    let unchanged = engine.reload_yaml(&config(&["hello"]), dir.path()).unwrap();
    assert_eq!(unchanged, Reloaded::Unchanged(1));
    assert_eq!(
        seen(),
        Vec::<String>::new(),
        "an unchanged reload's init records"
    );

    engine
        .reload_yaml(&config(&["hello: {greeting: installed}"]), dir.path())
        .unwrap();
    let records = seen();
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(records[0].contains("installed"), "{records:?}");
}
