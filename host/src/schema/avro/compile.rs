//! A schema's JSON compiled to the node arena the decoder and encoders walk.

use std::collections::HashMap;

use serde_json::Value;

use super::text::string;
use super::{Field, Key, Node, SchemaError, Unit};
use crate::schema::json::Json;

/// Builds the node arena; named types by full name.
#[derive(Default)]
pub(super) struct Builder {
    pub(super) nodes: Vec<Node>,
    pub(super) names: HashMap<String, usize>,
}

pub(super) const PRIMITIVES: [&str; 8] = [
    "null", "boolean", "int", "long", "float", "double", "bytes", "string",
];

impl Builder {
    pub(super) fn push(&mut self, n: Node) -> usize {
        self.nodes.push(n);
        self.nodes.len() - 1
    }

    pub(super) fn full_name(name: &str, ns: Option<&str>) -> String {
        match ns {
            Some(ns) if !name.contains('.') && !ns.is_empty() => format!("{ns}.{name}"),
            _ => name.to_owned(),
        }
    }

    pub(super) fn primitive(name: &str) -> Option<Node> {
        Some(match name {
            "null" => Node::Null,
            "boolean" => Node::Boolean,
            "int" => Node::Int,
            "long" => Node::Long,
            "float" => Node::Float,
            "double" => Node::Double,
            "bytes" => Node::Bytes,
            "string" => Node::String,
            _ => return None,
        })
    }

    pub(super) fn node(&mut self, v: &Value, ns: Option<&str>) -> Result<usize, SchemaError> {
        match v {
            Value::String(name) => {
                if let Some(p) = Self::primitive(name) {
                    return Ok(self.push(p));
                }
                let full = Self::full_name(name, ns);
                self.names
                    .get(&full)
                    .or_else(|| self.names.get(name))
                    .copied()
                    .ok_or_else(|| SchemaError(format!("unknown type `{name}`")))
            }
            Value::Array(branches) => {
                let b = branches
                    .iter()
                    .map(|b| self.node(b, ns))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(self.push(Node::Union(b)))
            }
            Value::Object(m) => self.complex(m, ns),
            other => Err(SchemaError(format!("`{other}` is not a type"))),
        }
    }

    pub(super) fn complex(
        &mut self,
        m: &serde_json::Map<String, Value>,
        ns: Option<&str>,
    ) -> Result<usize, SchemaError> {
        let ty = m
            .get("type")
            .ok_or_else(|| SchemaError("a type without `type`".into()))?;
        let logical = m.get("logicalType").and_then(Value::as_str);
        let ty_name = match ty {
            Value::String(t) => t.as_str(),
            // `{"type": {"type": "array", ...}}` or `{"type": ["null", ...]}`.
            other => return self.node(other, ns),
        };
        // Logical types over primitives.
        if let Some(l) = logical {
            let node = match (l, ty_name) {
                ("decimal", "bytes") => Some(Node::Decimal {
                    scale: scale(m)?,
                    fixed: None,
                }),
                ("uuid", "string") => Some(Node::Uuid { fixed: false }),
                ("date", "int") => Some(Node::Date),
                ("time-millis", "int") => Some(Node::Time(Unit::Millis)),
                ("time-micros", "long") => Some(Node::Time(Unit::Micros)),
                ("timestamp-millis", "long") => Some(Node::Timestamp {
                    unit: Unit::Millis,
                    local: false,
                }),
                ("timestamp-micros", "long") => Some(Node::Timestamp {
                    unit: Unit::Micros,
                    local: false,
                }),
                ("timestamp-nanos", "long") => Some(Node::Timestamp {
                    unit: Unit::Nanos,
                    local: false,
                }),
                ("local-timestamp-millis", "long") => Some(Node::Timestamp {
                    unit: Unit::Millis,
                    local: true,
                }),
                ("local-timestamp-micros", "long") => Some(Node::Timestamp {
                    unit: Unit::Micros,
                    local: true,
                }),
                ("local-timestamp-nanos", "long") => Some(Node::Timestamp {
                    unit: Unit::Nanos,
                    local: true,
                }),
                // An unknown logical type, or one on the wrong type, is ignored (the spec's rule).
                _ => None,
            };
            if let Some(n) = node {
                return Ok(self.push(n));
            }
        }
        if let Some(p) = Self::primitive(ty_name) {
            return Ok(self.push(p));
        }
        match ty_name {
            "array" => {
                let items = m
                    .get("items")
                    .ok_or_else(|| SchemaError("an array without `items`".into()))?;
                let i = self.node(items, ns)?;
                Ok(self.push(Node::Array(i)))
            }
            "map" => {
                let values = m
                    .get("values")
                    .ok_or_else(|| SchemaError("a map without `values`".into()))?;
                let i = self.node(values, ns)?;
                Ok(self.push(Node::Map(i)))
            }
            "record" | "error" | "enum" | "fixed" => {
                let name = m
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| SchemaError(format!("a {ty_name} without a `name`")))?;
                let own_ns = m.get("namespace").and_then(Value::as_str).or(ns);
                let full = Self::full_name(name, own_ns);
                // The namespace the type's own parts are in.
                let inner_ns = full.rsplit_once('.').map(|(n, _)| n.to_owned());
                if self.names.contains_key(&full) {
                    return Err(SchemaError(format!("`{full}` is defined twice")));
                }
                let at = self.push(Node::Placeholder);
                self.names.insert(full.clone(), at);
                let node = match ty_name {
                    "enum" => Node::Enum {
                        name: full,
                        symbols: m
                            .get("symbols")
                            .and_then(Value::as_array)
                            .ok_or_else(|| SchemaError("an enum without `symbols`".into()))?
                            .iter()
                            .map(|s| s.as_str().map(str::to_owned))
                            .collect::<Option<Vec<_>>>()
                            .ok_or_else(|| SchemaError("enum symbols are text".into()))?,
                    },
                    "fixed" => {
                        let size =
                            m.get("size").and_then(Value::as_u64).ok_or_else(|| {
                                SchemaError(format!("fixed {full} without a `size`"))
                            })? as usize;
                        match logical {
                            Some("decimal") if size > 0 => Node::Decimal {
                                scale: scale(m)?,
                                fixed: Some(size),
                            },
                            Some("uuid") if size == 16 => Node::Uuid { fixed: true },
                            Some("duration") if size == 12 => Node::Duration,
                            _ => Node::Fixed(size),
                        }
                    }
                    _ => {
                        let list = m.get("fields").and_then(Value::as_array).ok_or_else(|| {
                            SchemaError(format!("record {full} without `fields`"))
                        })?;
                        let mut fields = Vec::with_capacity(list.len());
                        for f in list {
                            let fname = f.get("name").and_then(Value::as_str).ok_or_else(|| {
                                SchemaError(format!("a field of {full} without a `name`"))
                            })?;
                            let ftype = f.get("type").ok_or_else(|| {
                                SchemaError(format!("field `{fname}` of {full} without a `type`"))
                            })?;
                            let node = self.node(ftype, inner_ns.as_deref())?;
                            let mut key = Vec::new();
                            string(&mut key, fname);
                            key.push(b':');
                            fields.push(Field {
                                name: fname.to_owned(),
                                key: Key::new(&key),
                                node,
                                default: f.get("default").map(Json::from_value),
                            });
                        }
                        Node::Record { name: full, fields }
                    }
                };
                self.nodes[at] = node;
                Ok(at)
            }
            other if PRIMITIVES.contains(&other) => unreachable!("primitives are handled above"),
            other => {
                let full = Self::full_name(other, ns);
                self.names
                    .get(&full)
                    .or_else(|| self.names.get(other))
                    .copied()
                    .ok_or_else(|| SchemaError(format!("unknown type `{other}`")))
            }
        }
    }
}

pub(super) fn scale(m: &serde_json::Map<String, Value>) -> Result<u32, SchemaError> {
    let s = m
        .get("scale")
        .map_or(Some(0), Value::as_u64)
        .unwrap_or(u64::MAX);
    let p = m.get("precision").and_then(Value::as_u64).unwrap_or(38);
    if s > p || p > 38 {
        return Err(SchemaError(format!(
            "decimal(precision {p}, scale {s}): Weir takes precision up to 38 and scale up to precision"
        )));
    }
    Ok(s as u32)
}
