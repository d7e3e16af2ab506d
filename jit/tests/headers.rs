#![allow(clippy::unwrap_used)]
//! Header names computed at run time (here a parameter) reach messages lower-cased in both
//! executors, as the runtime and the simulator store every key they receive: a read finds
//! the header whatever case the name has, and a write replaces it instead of adding a key
//! of another case.

mod common;

use common::{BothExecutors, element_from_source};
use weft_hostcalls::Message;
use weft_ir::interp::Verdict;

const SOURCE: &str = "\
state:
    pass

init(name: string = 'X-User'):
    pass

req(rpc):
    set_rpc_header(rpc, 'x-seen', get_rpc_header(rpc, name))
    set_rpc_header(rpc, name, 'replaced')
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

#[test]
fn a_computed_header_name_is_lower_cased_in_both_executors() {
    let (e, warnings) = element_from_source("h", SOURCE);
    assert!(warnings.is_empty(), "{warnings}");
    let request = || {
        let mut m = Message::request(vec![]);
        m.headers.insert("x-user".into(), "alice".into());
        m
    };
    for (executor, out) in BothExecutors::new(e, "h").request(request) {
        let Verdict::Forward(m) = out.verdict else {
            panic!("{executor}: {:?}", out.verdict)
        };
        let headers: Vec<_> = m.headers.iter().collect();
        assert_eq!(
            headers,
            [
                (&"x-seen".to_owned(), &"alice".to_owned()),
                (&"x-user".to_owned(), &"replaced".to_owned())
            ],
            "{executor}"
        );
    }
}
