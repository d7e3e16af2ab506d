//! A layout: the order a request meets an edge's elements and the side each runs on.
//!
//! This is what changes semantics when the planner moves elements; which processor runs an
//! element on its side does not (one semantics everywhere), so processors live in
//! [`crate::placement`]. The simulator can run an edge in any layout
//! ([`crate::sim::simulate_layout`]), and the equivalence checker compares layouts.

use crate::config::{Edge, Position, Side};

/// Elements are named by their index in [`Edge::chain`] order (the index into
/// [`crate::load::LoadedEdge::elements`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Element indices in the order a request meets them.
    pub order: Vec<usize>,
    /// The side each element runs on, by element index.
    pub sides: Vec<Side>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("the order must name each of the {expected} elements exactly once")]
    NotAPermutation { expected: usize },
    /// A request leaves the client before it reaches the server, so every client-side element
    /// comes before every server-side one.
    #[error(
        "`{server}` runs on the server side, so it cannot come before `{client}`, which runs on the client side: a request meets every client-side element before any server-side one"
    )]
    SidesOutOfOrder { client: String, server: String },
}

impl Layout {
    /// The configured chain: `client`, pair firsts, `any`, pair seconds, `server`, each on
    /// the side its list implies. An `any` element runs where it is pinned; unpinned, on the
    /// client side — or on the server side when an element before it in `any` is pinned to
    /// the server (a request cannot come back to the client), which is the only place a
    /// deployment can run it.
    pub fn canonical(edge: &Edge) -> Result<Layout, LayoutError> {
        let chain = edge.chain();
        let mut sides = Vec::with_capacity(chain.len());
        let mut server_reached = false;
        for (pos, use_) in &chain {
            let side = match pos {
                Position::Client | Position::PairFirst(_) => Side::Client,
                Position::Server | Position::PairSecond(_) => Side::Server,
                Position::Any => match use_.constraints.side {
                    Some(s) => s,
                    None if server_reached => Side::Server,
                    None => Side::Client,
                },
            };
            server_reached |= side == Side::Server;
            sides.push(side);
        }
        let layout = Layout {
            order: (0..chain.len()).collect(),
            sides,
        };
        let names: Vec<&str> = chain.iter().map(|(_, u)| u.name.as_str()).collect();
        layout.validate(&names)?;
        Ok(layout)
    }

    /// Checks that the order is a permutation and keeps client-side elements first.
    pub fn validate(&self, names: &[&str]) -> Result<(), LayoutError> {
        let n = names.len();
        let mut seen = vec![false; n];
        if self.order.len() != n || self.sides.len() != n {
            return Err(LayoutError::NotAPermutation { expected: n });
        }
        for &k in &self.order {
            if k >= n || seen[k] {
                return Err(LayoutError::NotAPermutation { expected: n });
            }
            seen[k] = true;
        }
        let mut last_server: Option<usize> = None;
        for &k in &self.order {
            match self.sides[k] {
                Side::Server => last_server = last_server.or(Some(k)),
                Side::Client => {
                    if let Some(s) = last_server {
                        return Err(LayoutError::SidesOutOfOrder {
                            client: names[k].to_owned(),
                            server: names[s].to_owned(),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Position of each element in the order, by element index.
    pub fn positions(&self) -> Vec<usize> {
        let mut pos = vec![0; self.order.len()];
        for (i, &k) in self.order.iter().enumerate() {
            pos[k] = i;
        }
        pos
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    fn edge(any: &str) -> Edge {
        let text = format!(
            "edges:\n  a->b:\n    from: a\n    to: b\n    method: p.S/M\n    client: [logging]\n    any: {any}\n    server: [metrics]\n"
        );
        Config::parse("weft.yaml", Path::new("."), &text)
            .unwrap()
            .edges
            .remove(0)
    }

    #[test]
    fn unpinned_any_follows_a_server_pin_to_the_server() {
        let e = edge("[{element: firewall, side: server}, cache]");
        let l = Layout::canonical(&e).unwrap();
        assert_eq!(
            l.sides,
            [Side::Client, Side::Server, Side::Server, Side::Server]
        );
        let e = edge("[cache, firewall]");
        let l = Layout::canonical(&e).unwrap();
        assert_eq!(
            l.sides,
            [Side::Client, Side::Client, Side::Client, Side::Server]
        );
    }

    #[test]
    fn a_client_pin_after_a_server_pin_is_contradictory() {
        // The config loader refuses this; the layout check is the backstop for edges built
        // in code.
        let mut e = edge("[firewall, cache]");
        e.any[0].constraints.side = Some(Side::Server);
        e.any[1].constraints.side = Some(Side::Client);
        let err = Layout::canonical(&e).unwrap_err();
        assert_eq!(
            err,
            LayoutError::SidesOutOfOrder {
                client: "cache".into(),
                server: "firewall".into()
            }
        );
    }

    #[test]
    fn validate_rejects_repeats() {
        let l = Layout {
            order: vec![0, 0],
            sides: vec![Side::Client; 2],
        };
        assert!(matches!(
            l.validate(&["a", "b"]),
            Err(LayoutError::NotAPermutation { expected: 2 })
        ));
    }
}
