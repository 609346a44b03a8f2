mod cli;
mod corpus;
mod replay;
mod fuzz_seeds;
mod review;
mod diff;
mod grpc;
