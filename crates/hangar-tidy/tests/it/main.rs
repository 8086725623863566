//! hangar-tidy's test, laid out as every crate's are: one test binary of
//! modules (linking a binary per file cost more build time than the tests
//! take to run).

mod tidy;
