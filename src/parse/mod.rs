//! Parses batches of serialized `tf.train.Example` / `tf.train.SequenceExample` straight into
//! columnar, fixed-shape arrays.
//!
//! The messages (tensorflow/core/example/{example,feature}.proto):
//!
//! ```text
//! Example         { Features features = 1; }
//! SequenceExample { Features context = 1; FeatureLists feature_lists = 2; }
//! Features        { map<string, Feature> feature = 1; }          // entries: key = 1, value = 2
//! FeatureLists    { map<string, FeatureList> feature_list = 1; }
//! FeatureList     { repeated Feature feature = 1; }
//! Feature         { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
//! BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1 [packed]; }
//! Int64List { repeated int64 value = 1 [packed]; }
//! ```
//!
//! Two passes, as in TensorFlow's `example_proto_fast_parsing.cc`: first each record's feature
//! map is scanned and the bytes of every *requested* feature remembered (a repeated key: the last
//! one wins; unrequested features are skipped without decoding); then each feature is decoded
//! column by column into one preallocated array for the whole batch. Packed floats are copied in
//! bulk; packed int64 varints are decoded straight into the output dtype with a range check.

//!
//! The files, in the order the data flows: [`spec`] (the compiled spec and its contract with
//! `jaxrec/_spec.py`), `scan` (pass 1), `lists` (the `*List` decoders), `fill` and
//! `feature_list` (pass 2 per kind of feature), `short_varints` (the SIMD decoder of packed
//! token ids that `lists` calls) and `batch` (the entry points, which hand
//! decoded bytes features to [`crate::decode`]).

mod batch;
mod feature_list;
mod fill;
mod lists;
#[cfg(test)]
mod oracle_tests;
mod scan;
mod short_varints;
pub mod spec;

pub use batch::{parse_examples, parse_sequence_examples, ParsedBatch};
