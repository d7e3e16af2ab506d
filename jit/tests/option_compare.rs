#![allow(clippy::unwrap_used)]
//! `opt == None` and `opt != None` compare the Option itself in both executors: a missing
//! map entry is `None`, a present one is not. (They used to unwrap both sides first, so a
//! present entry compared its value with an unwrapped `None` and every RPC was rejected.)

mod common;

use common::{BothExecutors, element_from_source};
use weft_hostcalls::Message;
use weft_ir::interp::Verdict;

const SOURCE: &str = "\
state:
    seen: Map<string, int>

init():
    pass

req(rpc):
    user = get_rpc_header(rpc, 'x-user')
    if get(seen, user) == None:
        set_rpc_header(rpc, 'x-first', 'yes')
        set(seen, user, 1)
    if None != get(seen, user):
        set_rpc_header(rpc, 'x-known', 'yes')
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

#[test]
fn an_option_compared_with_none_is_not_unwrapped() {
    let (e, warnings) = element_from_source("o", SOURCE);
    assert!(
        !warnings.contains("Option is used as a value"),
        "{warnings}"
    );
    let mut both = BothExecutors::new(e, "o");
    let request = || {
        let mut m = Message::request(vec![]);
        m.headers.insert("x-user".into(), "alice".into());
        m
    };
    for (round, first) in [(1, Some("yes")), (2, None)] {
        for (executor, out) in both.request(request) {
            let Verdict::Forward(m) = out.verdict else {
                panic!("{executor}, request {round}: {:?}", out.verdict)
            };
            assert_eq!(
                m.headers.get("x-first").map(String::as_str),
                first,
                "{executor}, request {round}"
            );
            assert_eq!(
                m.headers.get("x-known").map(String::as_str),
                Some("yes"),
                "{executor}, request {round}"
            );
        }
    }
}
