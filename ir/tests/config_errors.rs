#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Chain configs that cannot mean what they say are refused when loaded, with an error that
//! names the file and what in it is wrong.

use std::path::{Path, PathBuf};

use weft_ir::config::Config;
use weft_ir::load::load_edge;

fn echo_proto() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/echo/echo.proto")
}

/// A config in `dir` with one edge `e` running `firewall`, and `element_paths` as given.
fn write_config(dir: &Path, element_paths: &str) -> PathBuf {
    let path = dir.join("weft.yaml");
    std::fs::write(
        &path,
        format!(
            "protos: [{}]\nelement_paths: {element_paths}\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    any:\n      - firewall: {{field: user, deny: [mallory]}}\n",
            echo_proto().display()
        ),
    )
    .unwrap();
    path
}

fn load_error(config: &Path) -> String {
    let cfg = Config::load(config).unwrap();
    match load_edge(&cfg, "e") {
        Err(e) => e.to_string(),
        Ok(l) => panic!(
            "the config was accepted, with firewall from {}",
            l.elements[0].source.path
        ),
    }
}

#[test]
fn an_element_path_that_is_not_a_directory_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let config = write_config(tmp.path(), "[elemnts]");
    let err = load_error(&config);
    assert!(err.contains(&config.display().to_string()), "{err}");
    assert!(err.contains("`elemnts`"), "{err}");
    assert!(err.contains("does not exist"), "{err}");

    std::fs::write(tmp.path().join("elemnts"), "").unwrap();
    let err = load_error(&config);
    assert!(err.contains("`elemnts`"), "{err}");
    assert!(err.contains("is not a directory"), "{err}");
}

#[test]
fn a_custom_element_that_cannot_be_read_is_an_error_not_the_standard_one() {
    let tmp = tempfile::tempdir().unwrap();
    let elements = tmp.path().join("elements");
    std::fs::create_dir(&elements).unwrap();
    let config = write_config(tmp.path(), "[elements]");
    let custom = elements.join("firewall.weft");

    // Not UTF-8.
    std::fs::write(&custom, b"state:\n    pass\n\xff\xfe\n").unwrap();
    let err = load_error(&config);
    assert!(err.contains("edge `e`, element `firewall`"), "{err}");
    assert!(err.contains(&custom.display().to_string()), "{err}");
    assert!(err.contains("cannot read"), "{err}");

    // A directory where the file would be.
    std::fs::remove_file(&custom).unwrap();
    std::fs::create_dir(&custom).unwrap();
    let err = load_error(&config);
    assert!(err.contains(&custom.display().to_string()), "{err}");

    // Without it, the standard library's firewall is the one.
    std::fs::remove_dir(&custom).unwrap();
    let cfg = Config::load(&config).unwrap();
    let loaded = load_edge(&cfg, "e").unwrap();
    assert_eq!(loaded.elements[0].source.path, "<std>/firewall.weft");
}

#[test]
fn two_edge_keys_that_name_one_edge_are_an_error() {
    let yaml = "protos: [echo.proto]\nedges:\n  1:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    any: [logging]\n  \"1\":\n    from: a\n    to: b\n    method: echo.Echo/Say\n    any: [metrics]\n";
    let err = Config::parse("weft.yaml", Path::new("."), yaml)
        .expect_err("two edges named `1`")
        .to_string();
    assert!(err.starts_with("weft.yaml"), "{err}");
    assert!(err.contains("edge `1`"), "{err}");
    assert!(err.contains("twice"), "{err}");
}

#[test]
fn an_instance_name_with_a_slash_is_an_error() {
    // State is shared per `edge/instance`: edge `x` with `y/z` and edge `x/y` with `z`
    // shared one counter (a review lost 14 % of its read-modify-writes that way).
    let yaml = "protos: [echo.proto]\nedges:\n  x:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    any:\n      - element: logging\n        name: y/z\n";
    let err = Config::parse("weft.yaml", Path::new("."), yaml)
        .expect_err("a `/` in an instance name")
        .to_string();
    assert!(err.contains("element name `y/z` contains `/`"), "{err}");
}

/// The error loading edge `e` of a config beside examples/echo's proto with `any` (YAML,
/// indented 6).
fn edge_error(any: &str) -> String {
    let dir = echo_proto().parent().unwrap().to_path_buf();
    let yaml = format!(
        "protos: [echo.proto]\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    any:\n{any}"
    );
    let cfg = Config::parse("weft.yaml", &dir, &yaml).unwrap();
    match load_edge(&cfg, "e") {
        Err(e) => e.to_string(),
        Ok(_) => panic!("the config was accepted:\n{yaml}"),
    }
}

#[test]
fn config_state_is_checked_when_the_edge_loads() {
    let acl = |state: &str| {
        format!(
            "      - element: firewall\n        name: acl\n        params: {{field: user, deny: [mallory]}}\n        state: {state}\n"
        )
    };
    // `state: {denid: …}` is line 11; `denid` starts at column 17.
    let err = edge_error(&acl("{denid: {bob: true}}"));
    assert!(
        err.starts_with("weft.yaml:11:17: error: edge `e`, element `acl`"),
        "{err}"
    );
    assert!(
        err.contains("\n11 |         state: {denid: {bob: true}}\n   |                 ^^^^^\n"),
        "{err}"
    );
    assert!(err.contains("`denid`"), "{err}");
    assert!(
        err.ends_with("\n   = hint: did you mean `denied`?"),
        "{err}"
    );
    // The value, `[bob]`, at column 25.
    let err = edge_error(&acl("{denied: [bob]}"));
    assert!(
        err.starts_with("weft.yaml:11:25: error: edge `e`, element `acl`"),
        "{err}"
    );
    assert!(err.contains("`denied`"), "{err}");
    assert!(err.contains("Map<string, bool>"), "{err}");
}

#[test]
fn version_is_not_a_config_key() {
    // Nothing reads it, so any value was accepted and meant nothing.
    let yaml = "version: {totally: bogus}\nprotos: [echo.proto]\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Say\n";
    let err = Config::parse("weft.yaml", Path::new("."), yaml)
        .expect_err("`version` is refused")
        .to_string();
    assert!(err.contains("unknown key `version`"), "{err}");
}

#[test]
fn parameter_errors_name_the_edge_and_the_instance() {
    // Two instances of one element: the caret points into its source, which both share.
    let err = edge_error(
        "      - ratelimit: {capacity: 5, rate: 1}\n      - element: ratelimit\n        name: rl2\n        params: {capacity: five}\n",
    );
    assert!(
        err.contains("error: edge `e`, element `rl2`: parameter `capacity` is given a string"),
        "{err}"
    );
    assert!(!err.contains("element `ratelimit`"), "{err}");
}

#[test]
fn a_yaml_syntax_error_shows_the_line_with_a_caret() {
    let yaml = "protos: [echo.proto]\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    any:\n      - ratelimit: {capacity: 5\n      - firewall: {field: user}\n";
    let err = Config::parse("weft.yaml", Path::new("."), yaml)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("weft.yaml:9:17: error: not valid YAML"),
        "{err}"
    );
    // The place is in front, once: the parser's own "at line 9 column 17" repeated it.
    assert!(!err.contains("at line 9"), "{err}");
    assert!(
        err.contains("\n9 |       - firewall: {field: user}\n  |                 ^"),
        "{err}"
    );
}

/// A `protos` entry that is not there was reported as "<file>: cannot read the proto file
/// `/abs/path`", with no place, though it is a mistake written in weft.yaml; the errors
/// about the config point at what they are about.
#[test]
fn a_missing_proto_file_points_at_its_entry() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/echo");
    for (protos, col) in [("[protos/echo.proto]", 10), ("protos/echo.proto", 9)] {
        let yaml = format!(
            "protos: {protos}\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    any: [logging]\n"
        );
        let cfg = Config::parse("weft.yaml", &dir, &yaml).unwrap();
        let err = load_edge(&cfg, "e").unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "weft.yaml:1:{col}: error: cannot read the proto file `protos/echo.proto` ("
            )),
            "{err}"
        );
        assert!(err.contains("protos/echo.proto): no such file"), "{err}");
        assert!(err.contains("\n1 | protos: "), "{err}");
        assert!(
            err.contains(
                "= hint: a relative path is resolved against the config's directory, here "
            ),
            "{err}"
        );
    }
}

/// `method: echo.Echo` (the service alone) was answered "did you mean `echo.Echo/SayStream`?",
/// a method picked by spelling; the form for all of a service's methods is `echo.Echo/*`.
#[test]
fn a_service_given_as_the_method_suggests_its_wildcard() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/echo");
    for method in ["echo.Echo", "echo.Echo/"] {
        let yaml = format!(
            "protos: [echo.proto]\nedges:\n  e:\n    from: a\n    to: b\n    method: {method}\n    any: [logging]\n"
        );
        let cfg = Config::parse("weft.yaml", &dir, &yaml).unwrap();
        let err = load_edge(&cfg, "e").unwrap_err().to_string();
        assert!(err.contains("did you mean `echo.Echo/*`?"), "{err}");
    }
}

#[test]
fn an_unknown_method_names_the_edge_and_no_element() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/echo");
    let yaml = "protos: [echo.proto]\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Sya\n    any: [logging]\n";
    let cfg = Config::parse("weft.yaml", &dir, yaml).unwrap();
    let err = load_edge(&cfg, "e").unwrap_err().to_string();
    // It said "element `-`", as if an element were at fault.
    assert!(!err.contains("element"), "{err}");
    // At the method's value (line 6, column 13).
    assert!(
        err.starts_with("weft.yaml:6:13: error: edge `e`: unknown gRPC method `echo.Echo/Sya`"),
        "{err}"
    );
    assert!(
        err.contains("\n6 |     method: echo.Echo/Sya\n  |             ^^^^^^^^^^^^^"),
        "{err}"
    );
    assert!(err.contains("did you mean `echo.Echo/Say`?"), "{err}");
}

#[test]
fn an_edge_name_cut_at_the_arrow_says_the_shell_took_it() {
    let yaml = "protos: [echo.proto]\nedges:\n  web->cart:\n    from: web\n    to: cart\n    method: echo.Echo/Say\n    any: [logging]\n";
    let cfg = Config::parse("weft.yaml", Path::new("."), yaml).unwrap();
    // `--edge web->cart` unquoted: the shell writes to a file `cart` and passes `web-`.
    let err = cfg.edge("web-").unwrap_err().to_string();
    assert!(err.contains("no edge named `web-`"), "{err}");
    assert!(err.contains("--edge 'web->cart'"), "{err}");
    assert!(err.contains("redirect"), "{err}");
}

// Semantic errors in weft.yaml point at the text the user wrote: `file:line:col`, the line,
// carets under the key or value, then the hint. Columns below are counted from the YAML of
// each test.

/// The error parsing `yaml`, rendered.
fn parse_error(yaml: &str) -> String {
    Config::parse("weft.yaml", Path::new("."), yaml)
        .expect_err("the config is refused")
        .to_string()
}

const EDGE_HEAD: &str =
    "protos: [echo.proto]\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Say\n";

#[test]
fn an_unknown_key_points_at_the_key() {
    // Three comment lines push it to line 10: the gutter widens and the hint lines up.
    let yaml = format!("# a\n# b\n# c\n{EDGE_HEAD}    clients: [logging]\n");
    let err = parse_error(&yaml);
    assert_eq!(
        err,
        "weft.yaml:10:5: error: unknown key `clients` in edge `e`\n10 |     clients: [logging]\n   |     ^^^^^^^\n   = hint: did you mean `client`?"
    );

    let yaml = format!("{EDGE_HEAD}    any:\n      - element: firewall\n        nmae: acl\n");
    let err = parse_error(&yaml);
    assert!(
        err.starts_with(
            "weft.yaml:9:9: error: unknown key `nmae` in edge `e`, element `firewall`\n9 |         nmae: acl\n  |         ^^^^\n"
        ),
        "{err}"
    );
    assert!(err.ends_with("\n  = hint: did you mean `name`?"), "{err}");

    let err = parse_error(&format!("versoin: 1\n{EDGE_HEAD}"));
    assert!(
        err.starts_with("weft.yaml:1:1: error: unknown key `versoin` in the top level\n1 | versoin: 1\n  | ^^^^^^^\n"),
        "{err}"
    );
}

#[test]
fn a_missing_key_points_at_the_edge_name() {
    let yaml = "protos: [echo.proto]\nedges:\n  e:\n    from: a\n    to: b\n    any: [logging]\n";
    let err = parse_error(yaml);
    assert_eq!(
        err,
        "weft.yaml:3:3: error: edge `e`: `method` is missing\n3 |   e:\n  |   ^\n  = hint: name the RPC method, e.g. `method: echo.Echo/Say` or `echo.Echo/*`"
    );
}

#[test]
fn a_value_of_the_wrong_kind_points_at_the_value() {
    let yaml =
        format!("{EDGE_HEAD}    any:\n      - element: firewall\n        side: serverside\n");
    let err = parse_error(&yaml);
    assert_eq!(
        err,
        "weft.yaml:9:15: error: edge `e`, element `firewall`: `side` is `client` or `server`\n9 |         side: serverside\n  |               ^^^^^^^^^^"
    );

    let yaml = EDGE_HEAD.replace("from: a", "from: [a]");
    let err = parse_error(&yaml);
    assert!(
        err.starts_with("weft.yaml:4:11: error: edge `e`: `from` must be a string\n4 |     from: [a]\n  |           ^"),
        "{err}"
    );

    let yaml = format!("{EDGE_HEAD}    consistency: eventual\n");
    let err = parse_error(&yaml);
    assert!(
        err.starts_with("weft.yaml:7:18: error: edge `e`: `consistency` is `strong` or `weak`\n7 |     consistency: eventual\n  |                  ^^^^^^^^"),
        "{err}"
    );

    let yaml =
        format!("{EDGE_HEAD}    any:\n      - element: firewall\n        max_iterations: lots\n");
    let err = parse_error(&yaml);
    assert!(err.starts_with("weft.yaml:9:25: error: "), "{err}");
    assert!(
        err.contains(
            "\n9 |         max_iterations: lots\n  |                         ^^^^\n  = hint: "
        ),
        "{err}"
    );
}

#[test]
fn an_unknown_element_points_at_its_name() {
    let err = edge_error("      - circuitbraker\n");
    assert_eq!(
        err,
        "weft.yaml:8:9: error: edge `e`, element `circuitbraker`: unknown element `circuitbraker`\n8 |       - circuitbraker\n  |         ^^^^^^^^^^^^^\n  = hint: did you mean `circuitbreaker`?"
    );
    // In the long form, at the value of `element:`.
    let err = edge_error("      - element: circuitbraker\n        name: cb\n");
    assert!(
        err.starts_with("weft.yaml:8:18: error: edge `e`, element `cb`: unknown element `circuitbraker`\n8 |       - element: circuitbraker\n  |                  ^^^^^^^^^^^^^\n"),
        "{err}"
    );
}

/// `deny: [5]` for a `Vec<string>` was reported as "gives parameter `deny` a int": the
/// value given is a list, the int is one of its items, and quoting it is the fix.
#[test]
fn a_list_item_of_the_wrong_type_is_named_as_such_with_the_fix() {
    let err = edge_error("      - firewall: {field: user, deny: [5]}\n");
    assert!(
        err.contains(
            "parameter `deny` is given a list with an int item, but it is declared `Vec<string>`"
        ),
        "{err}"
    );
    assert!(
        err.contains("= hint: quote the value in weft.yaml"),
        "{err}"
    );
    let err = edge_error("      - firewall: {field: 5, deny: [mallory]}\n");
    assert!(
        err.contains("parameter `field` is given an int, but it is declared `string`"),
        "{err}"
    );
    assert!(
        err.contains("= hint: quote the value in weft.yaml"),
        "{err}"
    );
    // One value where a list is declared.
    let err = edge_error("      - firewall: {field: user, deny: mallory}\n");
    assert!(
        err.contains("= hint: `deny` takes a list, even of one: `deny: [...]`"),
        "{err}"
    );
    // No quoting hint where quoting would not help.
    let err = edge_error("      - circuitbreaker: {max_pending: five}\n");
    assert!(!err.contains("quote"), "{err}");
}

#[test]
fn a_parameter_of_the_wrong_type_points_at_the_value_in_the_config() {
    let err = edge_error("      - circuitbreaker: {max_pending: five}\n");
    assert!(
        err.starts_with(
            "weft.yaml:8:39: error: edge `e`, element `circuitbreaker`: parameter `max_pending` is given a string, but it is declared `int`"
        ),
        "{err}"
    );
    assert!(
        err.contains("\n8 |       - circuitbreaker: {max_pending: five}\n  |                                       ^^^^\n"),
        "{err}"
    );
    // Where the element declares it is still said.
    assert!(err.contains("<std>/circuitbreaker.weft:"), "{err}");
}

#[test]
fn an_unknown_parameter_points_at_its_name_in_the_config() {
    let err =
        edge_error("      - element: circuitbreaker\n        params:\n          max_pendng: 5\n");
    assert!(
        err.starts_with(
            "weft.yaml:10:11: error: edge `e`, element `circuitbreaker`: the chain config sets `max_pendng`, which `init` does not declare"
        ),
        "{err}"
    );
    assert!(
        err.contains("\n10 |           max_pendng: 5\n   |           ^^^^^^^^^^\n   = hint: did you mean `max_pending`?"),
        "{err}"
    );
}

#[test]
fn a_parameter_left_out_points_at_the_element() {
    let err = edge_error("      - firewall\n");
    assert!(
        err.starts_with(
            "weft.yaml:8:9: error: edge `e`, element `firewall`: parameter `field` has no value"
        ),
        "{err}"
    );
    assert!(
        err.contains("\n8 |       - firewall\n  |         ^^^^^^^^\n"),
        "{err}"
    );
}

#[test]
fn a_place_the_index_cannot_name_is_reported_without_a_line() {
    // Edge `f`'s chain is edge `e`'s through an alias: its entry has no place of its own.
    let dir = echo_proto().parent().unwrap().to_path_buf();
    let yaml = "protos: [echo.proto]\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    any: &chain [circuitbraker]\n  f:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    any: *chain\n";
    let cfg = Config::parse("weft.yaml", &dir, yaml).unwrap();
    let err = load_edge(&cfg, "e").unwrap_err().to_string();
    assert!(err.starts_with("weft.yaml:7:18: error: "), "{err}");
    let err = load_edge(&cfg, "f").unwrap_err().to_string();
    assert_eq!(
        err,
        "weft.yaml: edge `f`, element `circuitbraker`: unknown element `circuitbraker`; did you mean `circuitbreaker`?"
    );
}

/// What starting every instance of edge `e` (`any` as given) reports, each failure rendered
/// as `weft check --config` does.
fn refusals(any: &str) -> Vec<String> {
    let dir = echo_proto().parent().unwrap().to_path_buf();
    let yaml = format!("{EDGE_HEAD}    any:\n{any}");
    let cfg = Config::parse("weft.yaml", &dir, &yaml).unwrap();
    let loaded = load_edge(&cfg, "e").unwrap();
    weft_ir::sim::start_each_instance(&loaded)
        .iter()
        .map(
            |e| match weft_ir::load::refusal_in_config(&cfg, &loaded, e) {
                Some(at) => at.to_string(),
                None => format!("edge `e`: {e}"),
            },
        )
        .collect()
}

#[test]
fn a_value_init_refuses_points_at_the_value() {
    let got = refusals("      - circuitbreaker: {max_pending: 0}\n");
    assert_eq!(
        got,
        [
            "weft.yaml:8:39: error: edge `e`: element `circuitbreaker`: `init` failed: max_pending must be at least 1, got 0\n8 |       - circuitbreaker: {max_pending: 0}\n  |                                       ^"
        ]
    );
    // Of two parameters, the one the failing `require` reads.
    let got = refusals("      - admissioncontrol: {multiplier: 2.0, buckets: 0}\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("weft.yaml:8:54: error: edge `e`: element `admissioncontrol`: `init` failed: buckets must be at least 1, got 0\n"),
        "{got:?}"
    );
    // A value it accepts starts.
    let got = refusals("      - circuitbreaker: {max_pending: 1}\n");
    assert!(got.is_empty(), "{got:?}");
}

/// A config loaded as `weft.yaml` from the current directory has an empty directory: the
/// hint said "resolved against the config's directory, here " and stopped, and the entry
/// was repeated as its own resolution (`inventry.proto` (inventry.proto)). A misspelt name
/// next to the right file is suggested.
#[test]
fn a_missing_proto_next_to_the_config_names_the_directory_and_the_likely_file() {
    let yaml = "protos: [ecoh.proto]\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    any: [logging]\n";
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/echo");
    for (base, shown) in [
        (Path::new(""), "the current directory".to_string()),
        (dir.as_path(), format!("`{}`", dir.display())),
    ] {
        let cfg = Config::parse("weft.yaml", base, yaml).unwrap();
        let err = load_edge(&cfg, "e").unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "a relative path is resolved against the config's directory, here {shown}"
            )),
            "{err}"
        );
        if base.as_os_str().is_empty() {
            assert!(
                err.contains("cannot read the proto file `ecoh.proto`: "),
                "{err}"
            );
        } else {
            assert!(err.contains("did you mean `echo.proto`?"), "{err}");
        }
    }
}

/// YAML indents with spaces only; a tab was reported as "found character that cannot start
/// any token", which does not say what to change.
#[test]
fn a_tab_in_the_yaml_indentation_says_so() {
    let yaml = "protos: [echo.proto]\nedges:\n  e:\n\tfrom: a\n";
    let err = Config::parse("weft.yaml", Path::new("."), yaml)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("weft.yaml:4:1: error: not valid YAML"),
        "{err}"
    );
    assert!(
        err.contains("= hint: YAML indents with spaces only: line 4 starts with a tab"),
        "{err}"
    );
}

/// `firewall: {field: usr}` names a field the method lacks: the mistake is the config's
/// value, but the error pointed into the element's source (`<std>/firewall.weft:16:36`,
/// the `field` in `get(rpc, field)`), a file the operator cannot edit and may never have
/// seen. It points at the value, as a value of the wrong type does, and still says where
/// the element reads it.
#[test]
fn a_field_parameter_the_method_lacks_points_at_the_value_in_the_config() {
    let err = edge_error("      - firewall: {field: usr, deny: [mallory]}\n");
    assert!(
        err.starts_with(
            "weft.yaml:8:27: error: edge `e`, element `firewall`: `echo.SayRequest` has no field `usr`"
        ),
        "{err}"
    );
    assert!(
        err.contains("\n8 |       - firewall: {field: usr, deny: [mallory]}\n  |                           ^^^\n"),
        "{err}"
    );
    assert!(err.contains("did you mean `user`?"), "{err}");
    assert!(
        err.contains(
            "the element reads parameter `field` as a field name at <std>/firewall.weft:16:"
        ),
        "{err}"
    );
}

/// The error named the method twice and put the suggestion and the schema's whole method
/// list in the message (`method `x.S/Reserv`: unknown gRPC method `x.S/Reserv` (did you
/// mean …?); the schema defines: …`), where every other config error has a hint line. A
/// schema of many methods lists a dozen, as other hints do.
#[test]
fn an_unknown_method_says_so_once_and_suggests_in_the_hint() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/echo");
    let yaml = "protos: [echo.proto]\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Sya\n    any: [logging]\n";
    let cfg = Config::parse("weft.yaml", &dir, yaml).unwrap();
    let err = load_edge(&cfg, "e").unwrap_err().to_string();
    assert_eq!(err.matches("echo.Echo/Sya").count(), 2, "{err}"); // message and excerpt
    assert!(
        err.contains("error: edge `e`: unknown gRPC method `echo.Echo/Sya`\n"),
        "{err}"
    );
    assert!(
        err.contains(
            "= hint: did you mean `echo.Echo/Say`? the schema defines: echo.Echo/Say, echo.Echo/SayStream"
        ),
        "{err}"
    );

    let tmp = tempfile::tempdir().unwrap();
    let methods: String = (0..30)
        .map(|i| format!("  rpc M{i:02}(R) returns (R);\n"))
        .collect();
    std::fs::write(
        tmp.path().join("big.proto"),
        format!("syntax = \"proto3\";\npackage big;\nmessage R {{}}\nservice S {{\n{methods}}}\n"),
    )
    .unwrap();
    let yaml = "protos: [big.proto]\nedges:\n  e:\n    from: a\n    to: b\n    method: big.S/Nope\n    any: [logging]\n    \n";
    let cfg = Config::parse("weft.yaml", tmp.path(), yaml).unwrap();
    let err = load_edge(&cfg, "e").unwrap_err().to_string();
    assert!(err.contains("big.S/M11 and 18 more"), "{err}");
    assert!(!err.contains("big.S/M12"), "{err}");
    // A service that is not there, for `pkg.Svc/*`.
    let yaml = "protos: [big.proto]\nedges:\n  e:\n    from: a\n    to: b\n    method: big.T/*\n    any: [logging]\n";
    let cfg = Config::parse("weft.yaml", tmp.path(), yaml).unwrap();
    let err = load_edge(&cfg, "e").unwrap_err().to_string();
    assert!(
        err.contains("error: edge `e`: unknown gRPC service `big.T`\n"),
        "{err}"
    );
    assert!(
        err.contains("= hint: did you mean `big.S`? the schema defines: big.S"),
        "{err}"
    );
}

/// `state: {overrides: {bigcorp: lots}}` for a `Map<string, float>` put a single caret under
/// the `{` of the whole map; the entry at fault is pointed at.
#[test]
fn a_state_entry_of_the_wrong_type_is_pointed_at() {
    let acl = |state: &str| {
        format!(
            "      - element: firewall\n        params: {{field: user, deny: [mallory]}}\n        state: {state}\n"
        )
    };
    let err = edge_error(&acl("{denied: {bob: true, eve: maybe}}"));
    assert!(
        err.starts_with("weft.yaml:10:42: error: edge `e`, element `firewall`: `state` gives `denied` a map with a string value"),
        "{err}"
    );
    assert!(
        err.contains(&format!("\n   | {}^^^^^", " ".repeat(41))),
        "{err}"
    );
    // A list item: `replicas` is a `Vec<string>` in loadbalance.
    let err =
        edge_error("      - element: loadbalance\n        state:\n          replicas: [a, b, 3]\n");
    assert!(err.starts_with("weft.yaml:10:28: error: "), "{err}");
}

/// Two YAML slips an operator makes when writing an element list: parameters indented no
/// further than the element's name (so they are its siblings), and one element where a
/// list is expected. Both were refused with the general rule only.
#[test]
fn parameters_at_the_elements_level_and_a_bare_name_say_how_to_write_them() {
    let dir = echo_proto().parent().unwrap().to_path_buf();
    let parse_error = |yaml: &str| {
        Config::parse("weft.yaml", &dir, yaml)
            .unwrap_err()
            .to_string()
    };
    let err = parse_error(
        "protos: [echo.proto]\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    any:\n      - ratelimit:\n        capacity: 5\n        rate: 1\n",
    );
    assert!(err.starts_with("weft.yaml:8:9: error: "), "{err}");
    assert!(
        err.contains(
            "= hint: `capacity` and `rate` are beside `ratelimit`, not under it: indent them further than `ratelimit`, or write `- ratelimit: {capacity: …}`"
        ),
        "{err}"
    );
    let err = parse_error(
        "protos: [echo.proto]\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    any: logging\n",
    );
    assert!(err.contains("`any` must be a list of elements"), "{err}");
    assert!(err.contains("= hint: write `any: [logging]`"), "{err}");
}

/// The language reads an enum field as its number, so a firewall's deny list that names an
/// enum value (`EXPRESS`) denies nothing, and the config checked without a word. Loading
/// now warns at that list item with the number to write; a number, a name of no enum value
/// and a field of another type get no warning.
#[test]
fn an_enum_value_named_in_a_parameter_is_warned_of_with_its_number() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/diagnostics");
    let warnings = |method: &str, firewall: &str| {
        let yaml = format!(
            "protos: [shop.proto]\nedges:\n  e:\n    from: a\n    to: b\n    method: diag.Shop/{method}\n    any:\n      - firewall: {firewall}\n"
        );
        let cfg = Config::parse("weft.yaml", &dir, &yaml).unwrap();
        load_edge(&cfg, "e").unwrap().warnings
    };
    let w = warnings("Track", "{field: speed, deny: ['1', EXPRESS, mallory]}");
    assert_eq!(w.matches("warning:").count(), 1, "{w}");
    assert!(
        w.starts_with(
            "weft.yaml:8:46: warning: edge `e`, element `firewall`: `deny` has `EXPRESS`, the name of value 2 of enum `diag.Speed`; the element reads field `speed` as that enum's number, so `EXPRESS` never matches it"
        ),
        "{w}"
    );
    assert!(
        w.contains(
            "\n8 |       - firewall: {field: speed, deny: ['1', EXPRESS, mallory]}\n  |                                              ^^^^^^^\n"
        ),
        "{w}"
    );
    assert!(w.contains("= hint: write the number, quoted: '2'"), "{w}");

    // The numbers alone: nothing to say.
    let w = warnings("Track", "{field: speed, deny: ['1', '2']}");
    assert!(!w.contains("warning:"), "{w}");
    // `user` is a string: `EXPRESS` there is a user name like any other.
    let w = warnings("Order", "{field: user, deny: [EXPRESS]}");
    assert!(!w.contains("warning:"), "{w}");
}
