//! Arbitrary bytes as a message of each test type: the direct JSON writer
//! (`weft_ir::wire_json`, what channel records use) must render only what prost-reflect
//! decodes, and then the same JSON value.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use weft_ir::schema::Schema;
use weft_ir::wire::write_bytes_json_reflect;
use weft_ir::wire_json;

const TYPES: [&str; 7] = [
    "weft.test.Root",
    "weft.test.Choice",
    "weft.test.Maps",
    "weft.test.Lists",
    "weft.test.Scalars",
    "weft.test.Optionals",
    "weft.evolve.Narrow",
];

fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ir/tests/protos");
        let files = ["scalars.proto", "legacy.proto", "evolve.proto"].map(|f| dir.join(f));
        Schema::load(&files, &[dir]).expect("the test protos compile")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, bytes)) = data.split_first() else {
        return;
    };
    let name = TYPES[usize::from(pick) % TYPES.len()];
    let desc = schema().message(name).expect("a test message");
    let mut direct = Vec::new();
    if wire_json::write(&desc, bytes, &mut direct).is_err() {
        return;
    }
    let mut reference = Vec::new();
    if let Err(e) = write_bytes_json_reflect(&desc, bytes, &mut reference) {
        panic!("{name}: rendered {} where prost-reflect refuses: {e}", String::from_utf8_lossy(&direct));
    }
    let direct: serde_json::Value = serde_json::from_slice(&direct).expect("the direct writer writes JSON");
    let reference: serde_json::Value = serde_json::from_slice(&reference).expect("prost-reflect writes JSON");
    assert_eq!(direct, reference, "{name}");
});
