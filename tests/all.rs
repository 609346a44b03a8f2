//! Integration tests: one binary, one module per area (see tests/suite/).
mod suite;
