//! The standard element library (`elements/*.weft`), embedded so the `weft` binary and the
//! runtime find it wherever they run. A chain config's `element_paths` are searched first.

const ELEMENTS: &[(&str, &str)] = &[
    (
        "admissioncontrol",
        include_str!("../../elements/admissioncontrol.weft"),
    ),
    (
        "bandwidthlimit",
        include_str!("../../elements/bandwidthlimit.weft"),
    ),
    ("cache", include_str!("../../elements/cache.weft")),
    (
        "circuitbreaker",
        include_str!("../../elements/circuitbreaker.weft"),
    ),
    ("decrypt", include_str!("../../elements/decrypt.weft")),
    ("encrypt", include_str!("../../elements/encrypt.weft")),
    ("fault", include_str!("../../elements/fault.weft")),
    ("firewall", include_str!("../../elements/firewall.weft")),
    (
        "loadbalance",
        include_str!("../../elements/loadbalance.weft"),
    ),
    ("logging", include_str!("../../elements/logging.weft")),
    ("metrics", include_str!("../../elements/metrics.weft")),
    ("mutation", include_str!("../../elements/mutation.weft")),
    (
        "prequal_client",
        include_str!("../../elements/prequal_client.weft"),
    ),
    (
        "prequal_server",
        include_str!("../../elements/prequal_server.weft"),
    ),
    ("ratelimit", include_str!("../../elements/ratelimit.weft")),
    (
        "servicerouter_client",
        include_str!("../../elements/servicerouter_client.weft"),
    ),
    (
        "servicerouter_server",
        include_str!("../../elements/servicerouter_server.weft"),
    ),
];

/// Source of a standard element.
pub fn source(name: &str) -> Option<&'static str> {
    ELEMENTS.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// Names of the standard elements.
pub fn names() -> impl Iterator<Item = &'static str> {
    ELEMENTS.iter().map(|(n, _)| *n)
}
