//! Variables in scope while lowering one function: the SSA renaming environment.
//!
//! A flat list with scope marks: lookups search from the innermost definition, and the
//! position of a variable is a stable identity while its scope is open, which is how
//! `if`/`for`/`while` lowering finds the variables a region reassigns (by comparing
//! snapshots index by index, in declaration order: deterministic).

use super::value::Val;

#[derive(Clone, Debug)]
pub(crate) struct Var {
    pub name: String,
    pub val: Val,
    pub mutable: bool,
}

#[derive(Default)]
pub(crate) struct Env {
    vars: Vec<Var>,
    marks: Vec<usize>,
}

/// Why an assignment was refused.
pub(crate) enum AssignError {
    Unknown,
    Immutable,
}

impl Env {
    pub fn push_scope(&mut self) {
        self.marks.push(self.vars.len());
    }
    pub fn pop_scope(&mut self) {
        if let Some(m) = self.marks.pop() {
            self.vars.truncate(m);
        }
    }
    /// Number of open scopes.
    pub fn depth(&self) -> usize {
        self.marks.len()
    }
    /// Closes scopes until `depth` remain (after a sequence that stopped early at a `return`).
    pub fn truncate_scopes(&mut self, depth: usize) {
        while self.marks.len() > depth {
            self.pop_scope();
        }
    }
    pub fn define(&mut self, name: &str, val: Val, mutable: bool) {
        self.vars.push(Var {
            name: name.to_string(),
            val,
            mutable,
        });
    }
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.vars.iter().rposition(|v| v.name == name)
    }
    pub fn lookup(&self, name: &str) -> Option<&Var> {
        self.index_of(name).map(|i| &self.vars[i])
    }
    pub fn var(&self, idx: usize) -> &Var {
        &self.vars[idx]
    }
    pub fn set(&mut self, idx: usize, val: Val) {
        self.vars[idx].val = val;
    }
    pub fn assign(&mut self, name: &str, val: Val) -> Result<(), AssignError> {
        let i = self.index_of(name).ok_or(AssignError::Unknown)?;
        if !self.vars[i].mutable {
            return Err(AssignError::Immutable);
        }
        self.vars[i].val = val;
        Ok(())
    }
    /// The values of all variables in scope, by position.
    pub fn snapshot(&self) -> Vec<Val> {
        self.vars.iter().map(|v| v.val.clone()).collect()
    }
    /// Restores values saved by [`Env::snapshot`] (scopes opened since must be closed).
    pub fn restore(&mut self, snap: &[Val]) {
        self.vars.truncate(snap.len());
        for (v, s) in self.vars.iter_mut().zip(snap) {
            v.val = s.clone();
        }
    }
}
