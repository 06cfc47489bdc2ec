//! The stages after parsing that change which records share a batch: [`pack`] (documents into
//! fixed-length rows).

pub mod pack;
