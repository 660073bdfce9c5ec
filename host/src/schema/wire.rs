//! The schema registry's wire format: the magic byte, the schema id, then the record;
//! and why a record is not in it ([`CodecReject`]). The codec and the local schemas both
//! write it.

use super::protobuf::ProtoSchema;
use super::registry::{Compiled, Registered};

/// The wire format's first byte.
pub const MAGIC: u8 = 0;

/// Why a record was rejected by the codec: a short reason for the metrics and the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecReject {
    /// `no_magic_byte`, `truncated`, `unknown_schema`, `does_not_fit`, `wrong_format`,
    /// `unsupported`.
    pub reason: &'static str,
    /// What the reject path's record says.
    pub text: String,
}

/// The schema id of a wire-format record, or why it is not one.
pub fn schema_id(bytes: &[u8]) -> Result<u32, CodecReject> {
    match bytes {
        [MAGIC, a, b, c, d, ..] => Ok(u32::from_be_bytes([*a, *b, *c, *d])),
        [MAGIC, ..] => Err(CodecReject {
            reason: "truncated",
            text: format!(
                "{} bytes: too short for the schema registry's wire format (5-byte header)",
                bytes.len()
            ),
        }),
        [] => Err(CodecReject {
            reason: "truncated",
            text: "empty: no schema registry header".into(),
        }),
        [first, ..] => Err(CodecReject {
            reason: "no_magic_byte",
            text: format!(
                "first byte {first:#04x}, not the schema registry's magic byte 0 (not wire format)"
            ),
        }),
    }
}

/// Writes `value` (JSON text) in the wire format of `schema` into `out`: the header, then the
/// record (Protobuf: as `proto`, the message and its indexes). `Err`: why it does not fit.
pub(super) fn wire(
    schema: &Registered,
    proto: Option<&(prost_reflect::MessageDescriptor, Vec<i32>)>,
    value: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), String> {
    out.push(MAGIC);
    out.extend_from_slice(&schema.id.to_be_bytes());
    match (&schema.compiled, proto) {
        (Ok(Compiled::Avro(avro)), _) => avro.from_json(value, out).map_err(|e| e.to_string()),
        (Ok(Compiled::Protobuf(_)), Some((desc, indexes))) => {
            ProtoSchema::from_json(desc, indexes, value, out)
        }
        (Ok(Compiled::Protobuf(_)), None) => Err("no Protobuf message to encode as".into()),
        (Ok(Compiled::Json(json)), _) => {
            json.validate(value).map(|()| out.extend_from_slice(value))
        }
        (Err(why), _) => Err(why.clone()),
    }
}
