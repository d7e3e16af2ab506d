//! A config mistake that type-checks and silently does nothing: a parameter that lists the
//! *name* of an enum value (`EXPRESS`) for an element that reads the enum field. The language
//! reads an enum as its number, so `str()` of the field is `2` and never `EXPRESS`: a
//! firewall told `{field: speed, deny: [EXPRESS]}` denies nothing. Loading warns of each such
//! value where the config has it, with the number to write instead.

use prost_reflect::{EnumDescriptor, Kind, MessageDescriptor};
use weft_hostcalls::Value;

use crate::config::{Config, ElementUse, EntryPart};
use crate::ir::Element;
use crate::props::analyse;
use crate::schema::MethodSchema;

/// The warnings for `use_`'s parameters, rendered as config diagnostics (place, line, caret,
/// hint), one per parameter value, in parameter order. `checked` pairs each method of the
/// edge with the element checked against it.
pub fn warnings<'a>(
    config: &Config,
    edge: &str,
    use_: &ElementUse,
    checked: impl IntoIterator<Item = (&'a MethodSchema, &'a Element)>,
) -> String {
    let mut enums: Vec<(String, EnumDescriptor)> = Vec::new();
    for (method, element) in checked {
        let props = analyse(element);
        let read = [
            (&props.req.fields_read, &method.request),
            (&props.resp.fields_read, &method.response),
        ];
        for (fields, message) in read {
            for field in fields {
                if let Some(e) = enum_of(message, field)
                    && !enums.iter().any(|(f, known)| f == field && *known == e)
                {
                    enums.push((field.clone(), e));
                }
            }
        }
    }
    if enums.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    for (param, value) in &use_.params {
        let texts: Vec<(Option<usize>, &str)> = match value {
            Value::Str(s) => vec![(None, s)],
            Value::Vec(items) => (items.iter().enumerate())
                .filter_map(|(i, v)| match v {
                    Value::Str(s) => Some((Some(i), s.as_str())),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        for (index, text) in texts {
            let Some((field, e, number)) = enums.iter().find_map(|(field, e)| {
                e.get_value_by_name(text)
                    .map(|v| (field, e.full_name(), v.number()))
            }) else {
                continue;
            };
            let message = format!(
                "edge `{edge}`, element `{}`: `{param}` has `{text}`, the name of value {number} \
                 of enum `{e}`; the element reads field `{field}` as that enum's number, so \
                 `{text}` never matches it",
                use_.name
            );
            let hint = format!("write the number, quoted: '{number}'");
            let part = match index {
                Some(i) => EntryPart::ParamListItem(param, i),
                None => EntryPart::ParamValue(param),
            };
            match config.entry_error(edge, &use_.name, part, &message, Some(hint.clone())) {
                Some(placed) => out.push_str(&placed.as_warning().to_string()),
                None => out.push_str(&format!(
                    "{}: warning: {message}\n = hint: {hint}",
                    config.file
                )),
            }
            out.push('\n');
        }
    }
    out
}

/// The enum of field `path` (dotted, as the element names it) of `message`, when it is one
/// (singular, repeated or a map's values); `None` for any other field or a path that names
/// none (a header, the status).
fn enum_of(message: &MessageDescriptor, path: &str) -> Option<EnumDescriptor> {
    let mut message = message.clone();
    let mut steps = path.split('.').peekable();
    while let Some(step) = steps.next() {
        let field = message.get_field_by_name(step)?;
        let kind = match field.kind() {
            Kind::Message(entry) if field.is_map() => entry.map_entry_value_field().kind(),
            kind => kind,
        };
        match (kind, steps.peek()) {
            (Kind::Enum(e), None) => return Some(e),
            (Kind::Message(next), Some(_)) => message = next,
            _ => return None,
        }
    }
    None
}
