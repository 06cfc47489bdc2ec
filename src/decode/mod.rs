//! Bytes features decoded into arrays after the record scan: raw bytes (`tf.io.decode_raw` +
//! reshape, `raw.rs`), serialized `TensorProto`s (`tf.io.parse_tensor`, [`tensor`]) and images
//! ([`image`]).
//!
//! A decoded feature is a scalar bytes feature (one value per record). Its rows are decoded
//! one by one into one preallocated array for the batch. Shapes that vary by record (from
//! other features, a `-1`, or a tensor's own shape) are padded with zeros to the spec's
//! `max_shape`, or to the largest row of the batch, and each row's shape is returned beside.
//!
//! This layer sits below [`crate::parse`]: the parser's batch step calls
//! [`decoded_column`] with what its scan found ([`Inputs`]); nothing here knows how records
//! are scanned.

pub mod image;
mod pad;
mod raw;
mod rows;
pub mod spec;
pub mod tensor;
mod tensor_proto;

pub use pad::MAX_ROW_BYTES;
pub use rows::{Found, Inputs};
pub use tensor_proto::MAX_RANK;

use crate::column::{Column, ColumnData};
use crate::error::Result;
use image::PixelType;
use rows::Rows;
use spec::{DecoderConfig, Transform};

/// Decodes the feature in slot `slot` (named `name`) of every row through `dec`.
pub fn decoded_column<'a>(
    name: &str,
    dec: &DecoderConfig,
    inputs: Inputs<'_, 'a>,
    slot: usize,
) -> Result<Column<'a>> {
    let mine = inputs.slot(slot);
    let rows = Rows::new(name, dec.skip_errors, inputs.rows());
    match &dec.transform {
        Transform::Image(spec) => match spec.pixel {
            PixelType::U8 => image::image_column::<u8>(spec, mine, rows, ColumnData::U8),
            PixelType::F32 => image::image_column::<f32>(spec, mine, rows, ColumnData::F32),
        },
        Transform::Raw(spec) => raw::raw_column(spec, mine, inputs, rows),
        Transform::Tensor(spec) => tensor::tensor_column(
            spec,
            mine.iter().map(|f| rows::single_bytes(*f)).collect(),
            rows,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::spec::{Dim, RawSpec, ShapeFrom};
    use super::*;
    use crate::dtype::OutDType;
    use crate::wire;

    fn bytes_feature(v: &[u8]) -> Vec<u8> {
        let mut list = vec![0x0a];
        wire::write_varint(&mut list, v.len() as u64);
        list.extend_from_slice(v);
        let mut f = vec![0x0a];
        wire::write_varint(&mut f, list.len() as u64);
        f.extend_from_slice(&list);
        f
    }

    fn int_feature(v: &[u64]) -> Vec<u8> {
        let mut packed = Vec::new();
        for &x in v {
            wire::write_varint(&mut packed, x);
        }
        let mut list = vec![0x0a];
        wire::write_varint(&mut list, packed.len() as u64);
        list.extend_from_slice(&packed);
        let mut f = vec![0x1a];
        wire::write_varint(&mut f, list.len() as u64);
        f.extend_from_slice(&list);
        f
    }

    #[test]
    fn raw_rows_take_their_shape_from_another_slot() {
        // Slot 0: the raw bytes of two rows; slot 1: each row's length.
        let (a, b) = (bytes_feature(&[1, 2, 3]), bytes_feature(&[4]));
        let (la, lb) = (int_feature(&[3]), int_feature(&[1]));
        let found: Vec<Found<'_>> = vec![Some(&a), Some(&b), Some(&la), Some(&lb)];
        let dec = DecoderConfig {
            transform: Transform::Raw(RawSpec {
                dtype: OutDType::U8,
                shape: ShapeFrom::Dims(vec![Dim::Feature {
                    name: "n".into(),
                    slot: 1,
                }]),
                max_shape: None,
                little_endian: true,
            }),
            skip_errors: false,
        };
        let col = decoded_column("x", &dec, Inputs::new(&found, 2), 0).unwrap();
        assert_eq!(col.shape, vec![2, 3]);
        assert_eq!(col.shapes, Some(vec![3, 1]));
        match col.data {
            ColumnData::U8(v) => assert_eq!(v, vec![1, 2, 3, 4, 0, 0]),
            other => panic!("{other:?}"),
        }
    }
}
