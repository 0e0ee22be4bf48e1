//! The literal `true` and `false` of `ok` in every answer, as types with a
//! `const` schema. A leaf: [`crate::api`] and [`crate::error`] both use it.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Serialize;

/// The `ok: true` of every success body.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct True;

impl Serialize for True {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bool(true)
    }
}

impl JsonSchema for True {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "True".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "const": true })
    }
}

/// The `ok: false` of every error body.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct False;

impl Serialize for False {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bool(false)
    }
}

impl JsonSchema for False {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "False".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "const": false })
    }
}
