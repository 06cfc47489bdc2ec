//! The Loader's pipeline around the parser: [`handles`] (the planner's steps over record
//! handles, before parsing) and the stages after parsing that change which records share a
//! batch: [`pack`] (documents into fixed-length rows).

pub mod handles;
pub mod pack;
