//! The literal `true` and `false` of `ok` in every answer, as types: a
//! body that reads as one of them has the right `ok`, and the schema of
//! each is a `const`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! literal {
    ($(#[$doc:meta])* $ty:ident = $value:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $ty;

        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_bool($value)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                match bool::deserialize(deserializer)? {
                    $value => Ok($ty),
                    other => Err(serde::de::Error::custom(format!(
                        "expected `ok: {}`, got `{other}`",
                        $value
                    ))),
                }
            }
        }

        #[cfg(feature = "schema")]
        impl schemars::JsonSchema for $ty {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($ty).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({ "const": $value })
            }
        }
    };
}

literal! {
    /// The `ok: true` of every success body.
    True = true
}

literal! {
    /// The `ok: false` of every error body.
    False = false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_literal_reads_only_its_own_value() {
        assert_eq!(serde_json::to_string(&True).unwrap(), "true");
        assert!(serde_json::from_str::<True>("true").is_ok());
        assert!(serde_json::from_str::<True>("false").is_err());
        assert!(serde_json::from_str::<False>("false").is_ok());
        assert!(serde_json::from_str::<False>("1").is_err());
    }
}
