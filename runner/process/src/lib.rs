//! Managed child processes: pipes, PTYs, output rings, process groups.
