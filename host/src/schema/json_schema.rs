//! JSON Schema records in the registry's wire format: the record is JSON text already, so
//! decoding and encoding validate it against the schema (`boon`: drafts 4, 6, 7, 2019-09 and
//! 2020-12) and take or add the 5-byte header. A value that does not fit is named by its
//! path (`$.items[1].qty`). No schema is ever fetched from a URL or a file: references come
//! from the registry.

use boon::{Compiler, SchemaIndex, Schemas};

/// Where the registry's schema is placed for resolving relative `$ref`s (`other.json`
/// becomes `weir-registry:///other.json`).
const BASE: &str = "weir-registry:///";

/// A compiled JSON Schema.
pub struct JsonSchema {
    schemas: Schemas,
    root: SchemaIndex,
}

impl std::fmt::Debug for JsonSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JsonSchema")
    }
}

/// Refuses every URL: a schema names its references through the registry, never the network.
struct NoLoader;

impl boon::UrlLoader for NoLoader {
    fn load(&self, url: &str) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
        Err(format!("`{url}` is not a reference the registry gave").into())
    }
}

impl JsonSchema {
    /// Compiles `text` with the schemas it references: `refs` are (reference name, text)
    /// pairs, each reachable by its name (relative to the schema) and its own `$id`.
    pub fn parse(text: &str, refs: &[(String, String)]) -> Result<Self, String> {
        let mut c = Compiler::new();
        c.use_loader(Box::new(NoLoader));
        // Confluent's clients write draft-07 when a schema says nothing.
        c.set_default_draft(boon::Draft::V7);
        let json = |t: &str, what: &str| {
            serde_json::from_str::<serde_json::Value>(t)
                .map_err(|e| format!("{what}: not JSON: {e}"))
        };
        for (name, t) in refs {
            let v = json(t, &format!("reference `{name}`"))?;
            let loc = if name.contains("://") {
                name.clone()
            } else {
                format!("{BASE}{name}")
            };
            c.add_resource(&loc, v)
                .map_err(|e| format!("reference `{name}`: {e}"))?;
        }
        let root_loc = format!("{BASE}weir-schema.json");
        c.add_resource(&root_loc, json(text, "schema")?)
            .map_err(|e| e.to_string())?;
        let mut schemas = Schemas::new();
        let root = c
            .compile(&root_loc, &mut schemas)
            .map_err(|e| format!("{e:#}").replace('\n', " "))?;
        Ok(JsonSchema { schemas, root })
    }

    /// Checks `json` against the schema; `Err` names the first value that does not fit.
    pub fn validate(&self, json: &[u8]) -> Result<(), String> {
        let v: serde_json::Value =
            serde_json::from_slice(json).map_err(|e| format!("$: not JSON: {e}"))?;
        self.schemas
            .validate(&v, self.root)
            .map_err(|e| explain(&e))
    }
}

/// The deepest cause of a validation error: its path in `$.a[1].b` form and what failed.
fn explain(e: &boon::ValidationError) -> String {
    let mut leaf = e;
    while let Some(c) = leaf.causes.first() {
        leaf = c;
    }
    let mut path = String::from("$");
    for t in &leaf.instance_location.tokens {
        match t {
            boon::InstanceToken::Prop(p) => {
                path.push('.');
                path.push_str(p);
            }
            boon::InstanceToken::Item(i) => path.push_str(&format!("[{i}]")),
        }
    }
    let more = count(e).saturating_sub(1);
    if more > 0 {
        format!("{path}: {} (and {more} more)", leaf.kind)
    } else {
        format!("{path}: {}", leaf.kind)
    }
}

/// How many leaf errors there are.
fn count(e: &boon::ValidationError) -> usize {
    if e.causes.is_empty() {
        1
    } else {
        e.causes.iter().map(count).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORDER: &str = r#"{
      "$schema": "http://json-schema.org/draft-07/schema#",
      "type": "object",
      "properties": {
        "id": {"type": "string"},
        "items": {"type": "array", "items": {"$ref": "item.json"}},
        "status": {"enum": ["NEW", "PAID"]}
      },
      "required": ["id"],
      "additionalProperties": false
    }"#;
    const ITEM: &str = r#"{"type":"object","properties":{"sku":{"type":"string"},"qty":{"type":"integer","minimum":1}},"required":["sku","qty"]}"#;

    fn schema() -> JsonSchema {
        JsonSchema::parse(ORDER, &[("item.json".into(), ITEM.into())]).unwrap()
    }

    #[test]
    fn a_value_that_fits_passes() {
        schema()
            .validate(br#"{"id":"o-1","items":[{"sku":"a","qty":2}],"status":"PAID"}"#)
            .unwrap();
    }

    #[test]
    fn what_does_not_fit_is_named_by_its_path() {
        let s = schema();
        let e = s
            .validate(br#"{"id":"o-1","items":[{"sku":"a","qty":2},{"sku":"b","qty":0}]}"#)
            .unwrap_err();
        assert!(e.starts_with("$.items[1].qty: "), "{e}");
        assert!(e.contains(">=1, but got 0"), "{e}");
        let e = s.validate(br#"{"items":[]}"#).unwrap_err();
        assert!(e.starts_with("$: ") && e.contains("id"), "{e}");
        let e = s.validate(br#"{"id":"x","colour":"red"}"#).unwrap_err();
        assert!(e.contains("colour"), "{e}");
        let e = s.validate(b"{not json").unwrap_err();
        assert!(e.starts_with("$: not JSON"), "{e}");
    }

    #[test]
    fn references_come_from_the_registry_never_the_network_or_files() {
        let e = JsonSchema::parse(ORDER, &[]).unwrap_err();
        assert!(e.contains("item.json"), "{e}");
        let e = JsonSchema::parse(r#"{"$ref":"file:///etc/passwd"}"#, &[]).unwrap_err();
        assert!(e.contains("/etc/passwd"), "{e}");
        let e = JsonSchema::parse(r#"{"$ref":"https://example.com/s.json"}"#, &[]).unwrap_err();
        assert!(e.contains("example.com"), "{e}");
        assert!(JsonSchema::parse("{nope", &[])
            .unwrap_err()
            .contains("not JSON"));
        let e = JsonSchema::parse(r#"{"type":"strnig"}"#, &[]).unwrap_err();
        assert!(e.contains("metaschema") && e.contains("'/type'"), "{e}");
    }
}
