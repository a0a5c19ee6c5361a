//! Go's `strconv.ParseBool`, which HAMi uses for every boolean it reads from text
//! (`nvidia.com/numa-bind`, the legacy register's health field, `CUDA_DISABLE_CONTROL`).

use super::error::CodecError;

/// Accepts exactly Go's spellings: `1 t T TRUE true True` and `0 f F FALSE false False`.
/// Anything else, including surrounding spaces or `yes`, is an error: a value Go would
/// reject must not mean something here.
pub fn parse_go_bool(value: &str) -> Result<bool, CodecError> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(CodecError::InvalidBool {
            input: value.to_owned(),
        }),
    }
}
