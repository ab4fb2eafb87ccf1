//! Tokens of the IR text form, each with the line it starts on (for error messages).

use super::ParseError;

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok {
    /// `%name`, `%name.3`, `%12`, `%"a b".1`: `key` is the full text after `%` (unique per
    /// value in printed IR), `name` the value's name (`None` for `%12`).
    Value {
        key: String,
        name: Option<String>,
    },
    /// `@name` or `@"name"`.
    Global(String),
    /// `#blocked` and other layout mnemonics (without `#`).
    Attr(String),
    /// Keywords, numbers, float literals (`-inf`, `1e-7`, `NaN`), shapes (`16x64`).
    Word(String),
    /// A quoted string (parameter aliases).
    Str(String),
    Punct(char),
}

impl std::fmt::Display for Tok {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tok::Value { key, .. } => write!(f, "`%{key}`"),
            Tok::Global(g) => write!(f, "`@{g}`"),
            Tok::Attr(a) => write!(f, "`#{a}`"),
            Tok::Word(w) => write!(f, "`{w}`"),
            Tok::Str(s) => write!(f, "string {s:?}"),
            Tok::Punct(c) => write!(f, "`{c}`"),
        }
    }
}

#[derive(Clone, Debug)]
pub(super) struct Token {
    pub tok: Tok,
    pub line: usize,
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '+' | '-')
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
}

impl Lexer<'_> {
    fn err(&self, msg: impl Into<String>) -> ParseError {
        ParseError {
            line: self.line,
            msg: msg.into(),
        }
    }

    fn take_while(&mut self, pred: impl Fn(char) -> bool) -> String {
        let mut s = String::new();
        while let Some(&c) = self.chars.peek() {
            if !pred(c) {
                break;
            }
            s.push(c);
            self.chars.next();
        }
        s
    }

    /// Reads a quoted string after its opening `"`, undoing `\` escapes.
    fn quoted(&mut self) -> Result<String, ParseError> {
        let mut s = String::new();
        loop {
            match self.chars.next() {
                None | Some('\n') => {
                    return Err(self.err("unterminated string: expected a closing `\"`"))
                }
                Some('"') => return Ok(s),
                Some('\\') => match self.chars.next() {
                    Some(c) => s.push(c),
                    None => return Err(self.err("unterminated string after `\\`")),
                },
                Some(c) => s.push(c),
            }
        }
    }

    /// `%...`: a quoted or bare base, then an optional `.N` uniquifier.
    fn value(&mut self) -> Result<Tok, ParseError> {
        if self.chars.peek() == Some(&'"') {
            self.chars.next();
            let base = self.quoted()?;
            let mut key = super::super::printer::quote(&base);
            let suffix = self.take_while(|c| c.is_ascii_digit() || c == '.');
            key.push_str(&suffix);
            return Ok(Tok::Value {
                key,
                name: Some(base),
            });
        }
        let key = self.take_while(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
        let base = match key.rsplit_once('.') {
            Some((b, n)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => b,
            _ => key.as_str(),
        };
        if base.is_empty() {
            return Err(self.err(format!("expected a value name after `%`, found `%{key}`")));
        }
        let name = if base.chars().all(|c| c.is_ascii_digit()) {
            None
        } else {
            Some(base.to_string())
        };
        Ok(Tok::Value { key, name })
    }

    fn next_token(&mut self) -> Result<Option<Token>, ParseError> {
        loop {
            match self.chars.peek().copied() {
                None => return Ok(None),
                Some('\n') => {
                    self.line += 1;
                    self.chars.next();
                }
                Some(c) if c.is_whitespace() => {
                    self.chars.next();
                }
                Some('/') => {
                    self.chars.next();
                    if self.chars.next() != Some('/') {
                        return Err(self.err("unexpected `/` (comments start with `//`)"));
                    }
                    self.take_while(|c| c != '\n');
                }
                Some(c) => {
                    let line = self.line;
                    self.chars.next();
                    let tok = match c {
                        '%' => self.value()?,
                        '@' => {
                            if self.chars.peek() == Some(&'"') {
                                self.chars.next();
                                Tok::Global(self.quoted()?)
                            } else {
                                Tok::Global(self.take_while(is_word_char))
                            }
                        }
                        '#' => Tok::Attr(self.take_while(is_word_char)),
                        '"' => Tok::Str(self.quoted()?),
                        '(' | ')' | '{' | '}' | '<' | '>' | '[' | ']' | ',' | ':' | '=' => {
                            Tok::Punct(c)
                        }
                        c if is_word_char(c) => {
                            let mut w = c.to_string();
                            w.push_str(&self.take_while(is_word_char));
                            Tok::Word(w)
                        }
                        c => return Err(self.err(format!("unexpected character {c:?}"))),
                    };
                    return Ok(Some(Token { tok, line }));
                }
            }
        }
    }
}

/// Splits IR text into tokens.
pub(super) fn tokenize(text: &str) -> Result<Vec<Token>, ParseError> {
    let mut lx = Lexer {
        chars: text.chars().peekable(),
        line: 1,
    };
    let mut out = vec![];
    while let Some(t) = lx.next_token()? {
        out.push(t);
    }
    Ok(out)
}
