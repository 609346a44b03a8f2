//! Tools that build the project's test data: the corpus generators (`gen_corpus`,
//! `gen_review_corpus`, this package's binaries) and the archive builders they share with the
//! extraction benchmark (`benches/extract.rs`). Not part of skillbox: nothing here is shipped.

pub mod stock;
