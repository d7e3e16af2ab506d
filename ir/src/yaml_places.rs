//! Where each node of a YAML text was written, so errors about the chain config can point
//! at it.
//!
//! The config is read into serde_norway's tree, which keeps no positions. This reads the same
//! text again with an event parser that reports a span for every node, and records the spans
//! by path (mapping keys and sequence indices from the root). Best effort: anything it cannot
//! place (a subtree reached through an alias, a key that is not a plain scalar, the text after
//! a construct this parser refuses) is simply absent, and an error about it is shown without a
//! position, as before.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser};

use crate::diag::{SourceFile, Span};

/// One step from a node to a child.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// A mapping entry, by its key's text.
    Key(String),
    /// A sequence item, from 0.
    Index(usize),
}

impl From<&str> for Step {
    fn from(key: &str) -> Step {
        Step::Key(key.to_owned())
    }
}

impl From<usize> for Step {
    fn from(index: usize) -> Step {
        Step::Index(index)
    }
}

/// A path from the root, such as `edges`, `e`, `any`, `0`.
pub type YamlPath = Vec<Step>;

/// Where one node was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// The key of a mapping entry; `None` for a sequence item or the root.
    pub key: Option<Span>,
    /// The value: a scalar whole, the start of a collection.
    pub value: Span,
}

/// The places of a YAML text's nodes (the first document's).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Places {
    nodes: HashMap<YamlPath, Place>,
}

/// An open collection while the events are read.
enum Open {
    Sequence {
        path: YamlPath,
        next: usize,
    },
    Mapping {
        path: YamlPath,
        /// The key just read, waiting for its value: its text (`None` for a collection used
        /// as a key, whose entry cannot be named by a path) and span.
        key: Option<(Option<String>, Span)>,
    },
    /// A collection used as a mapping key: its events are skipped, this counts the depth.
    Key {
        depth: usize,
    },
}

impl Places {
    pub fn index(source: &SourceFile) -> Places {
        let mut places = Places::default();
        let mut open: Vec<Open> = Vec::new();
        for event in Parser::new_from_str(&source.text) {
            // What this parser refuses but serde_norway accepted (their YAML versions differ
            // in corners): what was indexed before it stays useful.
            let Ok((event, span)) = event else { break };
            let span = byte_span(source, span);
            let starts = match &event {
                Event::Scalar(..) | Event::Alias(_) => Some(false),
                Event::SequenceStart(..) | Event::MappingStart(..) => Some(true),
                Event::SequenceEnd | Event::MappingEnd => None,
                Event::DocumentEnd => break,
                _ => continue,
            };
            let Some(collection) = starts else {
                match open.last_mut() {
                    Some(Open::Key { depth }) if *depth > 0 => *depth -= 1,
                    _ => {
                        open.pop();
                        // A collection key ended: its value comes next.
                    }
                }
                continue;
            };
            if let Some(Open::Key { depth }) = open.last_mut() {
                if collection {
                    *depth += 1;
                }
                continue;
            }
            let (path, key) = match open.last_mut() {
                None => (Vec::new(), None),
                Some(Open::Sequence { path, next }) => {
                    let mut p = path.clone();
                    p.push(Step::Index(*next));
                    *next += 1;
                    (p, None)
                }
                Some(Open::Mapping { path, key }) => match key.take() {
                    None => {
                        // This node is a key.
                        let text = match &event {
                            Event::Scalar(text, ..) => Some(text.to_string()),
                            _ => None,
                        };
                        *key = Some((text, span));
                        if collection {
                            open.push(Open::Key { depth: 0 });
                        }
                        continue;
                    }
                    Some((None, _)) => {
                        // The value of a collection key: skipped with it.
                        if collection {
                            open.push(Open::Key { depth: 0 });
                        }
                        continue;
                    }
                    Some((Some(text), key_span)) => {
                        let mut p = path.clone();
                        p.push(Step::Key(text));
                        (p, Some(key_span))
                    }
                },
                Some(Open::Key { .. }) => continue,
            };
            // A key given twice: the first is the one serde_norway's error names.
            places
                .nodes
                .entry(path.clone())
                .or_insert(Place { key, value: span });
            match &event {
                Event::SequenceStart(..) => open.push(Open::Sequence { path, next: 0 }),
                Event::MappingStart(..) => open.push(Open::Mapping { path, key: None }),
                _ => {}
            }
        }
        places
    }

    /// The place of the node at `path`, if it was indexed.
    pub fn get(&self, path: &[Step]) -> Option<Place> {
        self.nodes.get(path).copied()
    }
}

/// The parser counts characters; spans count bytes.
fn byte_span(source: &SourceFile, span: saphyr_parser::Span) -> Span {
    let at = |m: saphyr_parser::Marker| {
        let start = source.line_start(m.line());
        let line = source.text.get(start..).unwrap_or("");
        start
            + line
                .char_indices()
                .nth(m.col())
                .map_or(line.len(), |(i, _)| i)
    };
    Span::new(at(span.start), at(span.end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn places(text: &str) -> (SourceFile, Places) {
        let f = SourceFile::new("t.yaml", text);
        let p = Places::index(&f);
        (f, p)
    }

    fn path(steps: &[&str]) -> YamlPath {
        steps
            .iter()
            .map(|s| match s.parse::<usize>() {
                Ok(i) => Step::Index(i),
                Err(_) => Step::Key((*s).to_owned()),
            })
            .collect()
    }

    #[test]
    fn keys_and_values_are_placed_in_block_and_flow_style() {
        let text = "edges:\n  e:\n    any:\n      - ratelimit: {capacity: 5}\n      - element: x\n";
        let (f, p) = places(text);
        let key = |steps: &[&str]| f.slice(p.get(&path(steps)).unwrap().key.unwrap());
        let value = |steps: &[&str]| f.slice(p.get(&path(steps)).unwrap().value);
        assert_eq!(key(&["edges", "e"]), "e");
        assert_eq!(
            key(&["edges", "e", "any", "0", "ratelimit", "capacity"]),
            "capacity"
        );
        assert_eq!(
            value(&["edges", "e", "any", "0", "ratelimit", "capacity"]),
            "5"
        );
        assert_eq!(value(&["edges", "e", "any", "1", "element"]), "x");
        let (line, col) = f.line_col(
            p.get(&path(&["edges", "e", "any", "1", "element"]))
                .unwrap()
                .key
                .unwrap()
                .start,
        );
        assert_eq!((line, col), (5, 9));
    }

    #[test]
    fn collection_keys_and_aliases_are_skipped() {
        let (f, p) = places("a: &x {b: 1}\n? [k]\n: {c: 2}\nd: *x\ne: 3\n");
        assert_eq!(f.slice(p.get(&path(&["e"])).unwrap().value), "3");
        assert!(p.get(&path(&["c"])).is_none());
        assert!(p.get(&path(&["d", "b"])).is_none());
        assert_eq!(f.slice(p.get(&path(&["a", "b"])).unwrap().value), "1");
    }

    #[test]
    fn characters_before_a_node_are_counted_as_bytes() {
        let (f, p) = places("é: {ü: 5}\n");
        assert_eq!(f.slice(p.get(&path(&["é", "ü"])).unwrap().value), "5");
    }
}
