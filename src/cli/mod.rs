pub mod lifecycle;
