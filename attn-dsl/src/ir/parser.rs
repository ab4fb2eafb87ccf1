//! IR text parser (inverse of [`super::printer`]).

use super::Function;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("IR parse error at line {line}: {msg}")]
pub struct ParseError {
    pub line: usize,
    pub msg: String,
}

/// Parses the text form produced by [`super::printer::print_function`].
pub fn parse_function(text: &str) -> Result<Function, ParseError> {
    let _ = text;
    Err(ParseError { line: 0, msg: "IR parser not implemented yet".into() })
}
