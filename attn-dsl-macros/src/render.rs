//! Re-renders a token stream as source text with every token on its original line and
//! column, so that a run-time template parses to spans with the user's line numbers.

use proc_macro2::{Delimiter, LineColumn, Spacing, Span, TokenStream, TokenTree};

/// Source text of a token stream plus the file line its first line corresponds to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderedSource {
    /// The text; its line 1 is line `line_offset + 1` of the user's file.
    pub text: String,
    /// Lines of the user's file above the text.
    pub line_offset: u32,
}

/// Renders `tokens` preserving positions where spans carry them.
///
/// Tokens whose spans go backwards (tokens produced by other macros, synthesized tokens)
/// are separated by one space instead, so the text always re-lexes to the same tokens.
pub fn render_preserving_lines(tokens: &TokenStream) -> RenderedSource {
    let first_line = first_line(tokens.clone()).unwrap_or(1).max(1);
    let mut writer = Writer {
        text: String::new(),
        line: first_line,
        col: 0,
        glue_next: true,
    };
    writer.stream(tokens.clone());
    writer.text.push('\n');
    RenderedSource {
        text: writer.text,
        line_offset: (first_line - 1) as u32,
    }
}

/// The line of the first token that has a real position.
fn first_line(tokens: TokenStream) -> Option<usize> {
    tokens
        .into_iter()
        .map(|t| t.span().start().line)
        .find(|&l| l > 0)
}

/// Appends tokens to `text`, tracking the (file) line and column the text has reached.
struct Writer {
    text: String,
    line: usize,
    col: usize,
    /// The next token may touch the previous one (start of text, after a joint punct,
    /// after an opening delimiter).
    glue_next: bool,
}

impl Writer {
    fn stream(&mut self, tokens: TokenStream) {
        for token in tokens {
            self.tree(token);
        }
    }

    fn tree(&mut self, token: TokenTree) {
        match token {
            TokenTree::Group(group) => {
                let (open, close) = delimiters(group.delimiter());
                self.token(group.span_open(), open, false);
                self.glue_next = true;
                self.stream(group.stream());
                self.token(group.span_close(), close, false);
            }
            TokenTree::Punct(p) => {
                let joint = p.spacing() == Spacing::Joint;
                self.token(p.span(), &p.as_char().to_string(), false);
                self.glue_next = joint;
            }
            TokenTree::Ident(i) => self.token(i.span(), &i.to_string(), true),
            TokenTree::Literal(l) => self.token(l.span(), &l.to_string(), true),
        }
    }

    /// Moves to `span`'s position (or past a separating space) and writes `text`.
    fn token(&mut self, span: Span, text: &str, word: bool) {
        if text.is_empty() {
            return;
        }
        let at = span.start();
        let merges_words = word && self.ends_with_word();
        if is_ahead(at, self.line, self.col)
            && !(merges_words && at.line == self.line && at.column == self.col)
        {
            self.move_to(at);
        } else if !self.glue_next || merges_words {
            self.write(" ");
        }
        self.write(text);
        self.glue_next = false;
    }

    fn move_to(&mut self, at: LineColumn) {
        while self.line < at.line {
            self.write("\n");
        }
        let pad = at.column.saturating_sub(self.col);
        self.write(&" ".repeat(pad));
    }

    fn ends_with_word(&self) -> bool {
        self.text
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '"')
    }

    fn write(&mut self, s: &str) {
        for c in s.chars() {
            if c == '\n' {
                self.line += 1;
                self.col = 0;
            } else {
                self.col += 1;
            }
        }
        self.text.push_str(s);
    }
}

/// Whether position `at` is at or after (`line`, `col`), i.e. writing can move there.
fn is_ahead(at: LineColumn, line: usize, col: usize) -> bool {
    at.line > line || at.line == line && at.column >= col
}

fn delimiters(d: Delimiter) -> (&'static str, &'static str) {
    match d {
        Delimiter::Parenthesis => ("(", ")"),
        Delimiter::Brace => ("{", "}"),
        Delimiter::Bracket => ("[", "]"),
        Delimiter::None => ("", ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (line, column, text) of every leaf token, groups flattened with their delimiters.
    fn positions(tokens: TokenStream) -> Vec<(usize, usize, String)> {
        let mut out = Vec::new();
        for t in tokens {
            match t {
                TokenTree::Group(g) => {
                    let (o, c) = delimiters(g.delimiter());
                    let s = g.span_open().start();
                    out.push((s.line, s.column, o.to_string()));
                    out.extend(positions(g.stream()));
                    let e = g.span_close().start();
                    out.push((e.line, e.column, c.to_string()));
                }
                other => {
                    let s = other.span().start();
                    out.push((s.line, s.column, other.to_string()));
                }
            }
        }
        out
    }

    const SAMPLE: &str = "\n\n\n    #[module]\n    pub mod m {\n        #[kernel(num_warps = 4, require(B >= 16, \"B must be >= 16\"))]\n\n        pub fn k<T, const B: i32>(x: *const T, out: *mut T) -> () {\n            let a = x + arange::<B>(); let s = 'l';\n            store(out, a.max(1), -1.5e3);\n        }\n    }\n";

    #[test]
    fn render_keeps_every_token_on_its_line_and_column() {
        let tokens: TokenStream = SAMPLE.parse().unwrap();
        let rendered = render_preserving_lines(&tokens);
        assert_eq!(rendered.line_offset, 3, "first token is on line 4");
        assert!(
            rendered.text.starts_with("    #[module]\n"),
            "{}",
            rendered.text
        );
        let padded = format!(
            "{}{}",
            "\n".repeat(rendered.line_offset as usize),
            rendered.text
        );
        let reparsed: TokenStream = padded.parse().unwrap();
        assert_eq!(positions(reparsed), positions(tokens));
    }

    #[test]
    fn render_keeps_lines_after_doc_comments() {
        let src = "/// doc one\n/// doc two\nfn f() {\n    a;\n}\n";
        let tokens: TokenStream = src.parse().unwrap();
        let rendered = render_preserving_lines(&tokens);
        let lines: Vec<&str> = rendered.text.lines().collect();
        assert_eq!(lines.len(), 5, "{}", rendered.text);
        assert_eq!(&lines[2..], &["fn f() {", "    a;", "}"]);
        let reparsed: TokenStream = rendered.text.parse().unwrap();
        assert_eq!(reparsed.to_string(), tokens.to_string());
    }

    #[test]
    fn render_keeps_joint_punctuation_and_separates_synthesized_tokens() {
        // Tokens from `quote!` carry no positions: they must still re-lex identically.
        let tokens = quote::quote!(
            fn f<'a>(x: &'a i32) -> i32 {
                x <<= 1;
                a::b
            }
        )
        .into_iter()
        .chain("let y = 2 ;".parse::<TokenStream>().unwrap())
        .collect::<TokenStream>();
        let rendered = render_preserving_lines(&tokens);
        let reparsed: TokenStream = rendered
            .text
            .parse()
            .unwrap_or_else(|e| panic!("{e:?}: {}", rendered.text));
        assert_eq!(reparsed.to_string(), tokens.to_string());
    }
}
