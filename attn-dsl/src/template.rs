//! Kernel templates embedded in binaries for run-time specialization (DESIGN §3.2).
