//! The Loader's pipeline around the parser: [`interleave`] (the order a host takes its pieces'
//! records in) and [`block_size`] (how much of a piece is read at once) for the native stream,
//! [`handles`] (the planner's steps over record handles, before parsing) and the stages after parsing that change which records share a
//! batch: [`pack`] (documents into fixed-length rows).

pub mod block_size;
pub mod handles;
pub mod interleave;
pub mod pack;
