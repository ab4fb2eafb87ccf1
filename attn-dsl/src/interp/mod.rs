//! CPU executor of specialized IR (DESIGN §3.4): one program instance at a time over the grid.
