//! Example kernels written as DSL code.
