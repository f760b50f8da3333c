//! Request bodies parsed as JSON, with errors that name the field at fault
//! (`temperature: invalid type: string "hot", expected f32`), answered with a 400 (413 for a
//! body over the size limit).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::ApiError;
use super::protocol::common::CommonFields;

/// Parses a request body that axum read (or failed to read, e.g. over the size limit).
pub fn parse_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body.map_err(|rejection| ApiError {
        status: rejection.status(),
        message: rejection.body_text(),
        param: None,
    })?;
    parse(&bytes)
}

/// Parses `bytes` as `T`, naming the field of a type error.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|error| {
        ApiError::bad_request(format!("the request body is not valid JSON: {error}"))
    })?;
    match serde_path_to_error::deserialize::<_, T>(&value) {
        Ok(parsed) => Ok(parsed),
        // Fields of a flattened struct lose their path: find it by parsing the shared fields
        // alone.
        Err(error) if error.path().to_string() == "." => {
            match serde_path_to_error::deserialize::<_, CommonFields>(&value) {
                Err(common) if common.path().to_string() != "." => Err(field_error(common)),
                _ => Err(ApiError::bad_request(format!(
                    "invalid request: {}",
                    error.into_inner()
                ))),
            }
        }
        Err(error) => Err(field_error(error)),
    }
}

/// A 400 naming the field of `error`.
fn field_error(error: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = error.path().to_string();
    ApiError::invalid_field(&path, format!("{path}: {}", error.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct Body {
        #[allow(dead_code)]
        temperature: Option<f32>,
    }

    #[test]
    fn type_errors_name_the_field() {
        let error = parse::<Body>(br#"{"temperature": "hot"}"#).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("temperature"));
        assert!(error.message.starts_with("temperature: invalid type"));
    }

    #[test]
    fn syntax_errors_say_the_body_is_not_json() {
        let error = parse::<Body>(b"{not json").unwrap_err();
        assert!(
            error.message.contains("not valid JSON"),
            "{}",
            error.message
        );
    }
}
