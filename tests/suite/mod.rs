mod cli;
mod corpus;
