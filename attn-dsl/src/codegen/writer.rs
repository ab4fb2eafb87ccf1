//! An indented text buffer: the emitter appends whole lines, nesting is explicit.

/// Accumulates CUDA source one line at a time with four-space indentation.
#[derive(Default)]
pub(crate) struct SourceWriter {
    text: String,
    depth: usize,
    /// Per depth `d`, how many blocks opened at depth `d` were closed: a block is still open
    /// while its count is what it was when the block was entered ([`Self::scope`]).
    closed: Vec<u64>,
}

/// The innermost block open at some point of the text: what is declared there stays
/// visible while [`SourceWriter::in_scope`] says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Scope {
    depth: usize,
    closed: u64,
}

impl SourceWriter {
    /// Appends one line at the current depth (an empty `line` gives an empty line).
    pub(crate) fn line(&mut self, line: impl AsRef<str>) {
        let line = line.as_ref();
        if !line.is_empty() {
            for _ in 0..self.depth {
                self.text.push_str("    ");
            }
            self.text.push_str(line);
        }
        self.text.push('\n');
    }

    /// Appends `head {` and indents what follows.
    pub(crate) fn open(&mut self, head: impl AsRef<str>) {
        let head = head.as_ref();
        if head.is_empty() {
            self.line("{");
        } else {
            self.line(format!("{head} {{"));
        }
        self.depth += 1;
    }

    /// Closes the innermost `{` with `}` followed by `tail` (e.g. ` else {`).
    pub(crate) fn close(&mut self, tail: &str) {
        self.end_block();
        self.line(format!("}}{tail}"));
    }

    /// Closes the innermost block and opens the next one on the same line (`} else {`).
    pub(crate) fn reopen(&mut self, line: &str) {
        self.end_block();
        self.line(line);
        self.depth += 1;
    }

    fn end_block(&mut self) {
        if self.closed.len() <= self.depth {
            self.closed.resize(self.depth + 1, 0);
        }
        self.closed[self.depth] += 1;
        self.depth = self.depth.saturating_sub(1);
    }

    /// The block lines are appended to now.
    pub(crate) fn scope(&self) -> Scope {
        Scope {
            depth: self.depth,
            closed: self.closed_at(self.depth),
        }
    }

    /// Whether what was declared in `s` is visible where lines are appended now: `s`'s block
    /// is still open and lines go into it or a block nested in it.
    pub(crate) fn in_scope(&self, s: Scope) -> bool {
        self.depth >= s.depth && self.closed_at(s.depth) == s.closed
    }

    fn closed_at(&self, depth: usize) -> u64 {
        self.closed.get(depth).copied().unwrap_or(0)
    }

    /// Emits `#pragma unroll` + a counted loop header over `0..n` and opens its body.
    pub(crate) fn open_unrolled(&mut self, var: &str, n: usize) {
        self.line("#pragma unroll");
        self.open(format!("for (int {var} = 0; {var} < {n}; ++{var})"));
    }

    /// An unrolled loop over the even values of `var` below `n` (slot pairs `var`, `var + 1`).
    pub(crate) fn open_unrolled_pairs(&mut self, var: &str, n: usize) {
        self.line("#pragma unroll");
        self.open(format!("for (int {var} = 0; {var} < {n}; {var} += 2)"));
    }

    /// A counted loop unrolled by `factor` only (long bodies whose full unrolling would hold
    /// every iteration's temporaries live at once).
    pub(crate) fn open_partly_unrolled(&mut self, var: &str, n: usize, factor: usize) {
        self.line(format!("#pragma unroll {factor}"));
        self.open(format!("for (int {var} = 0; {var} < {n}; ++{var})"));
    }

    /// An empty writer whose lines start `depth` levels in (text emitted before the code
    /// around it is known).
    pub(crate) fn at_depth(depth: usize) -> Self {
        SourceWriter {
            text: String::new(),
            depth,
            closed: Vec::new(),
        }
    }

    /// Appends the lines of `inner` as they are.
    pub(crate) fn append(&mut self, inner: SourceWriter) {
        self.text.push_str(&inner.text);
    }

    /// Drops the text after `mark` (a probe's emission, see `warpgroup_loops`).
    pub(crate) fn truncate(&mut self, mark: usize) {
        self.text.truncate(mark);
    }

    /// Bytes of text so far (a mark for [`Self::mentions_since_outside`]).
    pub(crate) fn len(&self) -> usize {
        self.text.len()
    }

    /// Whether the text after `mark` names `needle` outside the spans `skip` (ascending,
    /// disjoint; those starting before `mark` are ignored); `true` when the text is shorter
    /// than the mark (replaced meanwhile: nothing can be said).
    pub(crate) fn mentions_since_outside(
        &self,
        mark: usize,
        needle: &str,
        skip: &[std::ops::Range<usize>],
    ) -> bool {
        let Some(text) = self.text.get(mark..) else {
            return true;
        };
        let mut from = 0;
        for s in skip
            .iter()
            .filter(|s| s.start >= mark && s.end <= self.text.len())
        {
            let (start, end) = (s.start - mark, s.end.saturating_sub(mark));
            if text.get(from..start).is_none_or(|t| t.contains(needle)) {
                return true;
            }
            from = end;
        }
        text.get(from..).is_none_or(|t| t.contains(needle))
    }

    pub(crate) fn finish(self) -> String {
        self.text
    }
}
