//! The per-thread plans of the direct message JSON writer must not keep the descriptor pools
//! of schemas nobody else holds: each version of a runtime compiles its own, and a plan held
//! a reference to its pool until 64 newer plans pushed it out, on every thread that rendered
//! records (the Go soak test, `make soak`, saw memory climb with every reload).
// A counting global allocator is the one way to see what stays allocated.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use weft_ir::schema::Schema;

/// The system allocator, counting the bytes live on all threads.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed on to `System` unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const PROTO: &str = r#"syntax = "proto3";
package soak;
message Request {
  string user = 1;
  string body = 2;
  repeated string tags = 3;
  map<string, int64> counts = 4;
  Inner inner = 5;
}
message Inner { int64 n = 1; bytes blob = 2; }
"#;

/// Compiles the schema afresh (as each version does), renders one message with it, and
/// drops the schema.
fn render_once() {
    let schema = Schema::from_source("soak.proto", PROTO).expect("the proto compiles");
    let desc = schema.message("soak.Request").expect("the type exists");
    // user "a", body "b", inner { n: 1 }
    let bytes = [0x0a, 1, b'a', 0x12, 1, b'b', 0x2a, 2, 0x08, 1];
    let mut out = Vec::new();
    weft_ir::wire_json::write(&desc, &bytes, &mut out).expect("rendered");
    assert_eq!(
        std::str::from_utf8(&out).expect("UTF-8"),
        r#"{"user":"a","body":"b","inner":{"n":1}}"#
    );
}

#[test]
fn a_dropped_schemas_pool_is_not_kept_by_the_plans() {
    for _ in 0..4 {
        render_once();
    }
    let before = LIVE.load(Ordering::Relaxed);
    for _ in 0..40 {
        render_once();
    }
    let grown = LIVE.load(Ordering::Relaxed) - before;
    // One pool of this proto is tens of kilobytes; forty kept ones are more than a megabyte.
    // Nothing else here keeps anything from one render to the next.
    assert!(
        grown < 16 * 1024,
        "{grown} bytes more live after 40 schemas were compiled, used once and dropped"
    );
}
