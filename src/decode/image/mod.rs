//! Images: JPEG/PNG bytes to 8-bit pixels, then to the fixed shape a spec asks for, the way
//! `tf.io.decode_image` + `tf.image.resize_with_crop_or_pad` / `tf.image.resize` do it.
//!
//! Decoding: JPEG with zune-jpeg (`ISLOW`-class integer IDCT and libjpeg-style "fancy"
//! upsampling; pixels differ from libjpeg-turbo's by a few levels, see `tests/golden`), PNG with
//! the `png` crate (exact). Channel conversion follows TensorFlow's `channels=` argument:
//!
//! ```text
//! stored \ wanted   1 (gray)                        3 (RGB)              4 (RGBA)
//! gray              as is                           replicated           replicated, A = 255
//! gray + alpha      alpha dropped                   replicated           replicated, A kept
//! RGB               (R*9797 + G*19234 + B*3737)>>15 as is                A = 255
//! RGBA              as RGB, alpha dropped           alpha dropped        as is
//! ```
//!
//! The gray weights are libpng's fixed-point form of the (0.299, 0.587) TensorFlow passes to
//! `png_set_rgb_to_gray`; JPEGs go to gray by keeping their Y (luma) plane, as libjpeg does.
//! PNG palettes and `tRNS` transparency are expanded first, 1/2/4-bit gray is scaled to 8 bits,
//! and 16-bit samples keep their high byte (`png_set_strip_16`). An alpha channel added to an
//! image without one is 255, except for 1/2/4-bit PNGs, where TensorFlow's filler gives 1/3/15.
//!
//! Nothing is allocated from a header's width and height before they are checked against the
//! caller's pixel budget, and a JPEG must hold its end-of-image marker (TensorFlow rejects a
//! truncated JPEG too, rather than returning the grey rows a lenient decoder would invent).

mod codecs;
mod resize;
mod types;

pub use codecs::{encode_jpeg, encode_png};
pub use resize::{fit, Pixel};
pub use types::{sniff, Decoded, Format, ImageSpec, PixelType, Resize};

use super::pad::MAX_ROW_BYTES;
use super::rows::{single_bytes, Found, RowError, Rows};
use crate::alloc::{DenseBatch, ZeroBits};
use crate::column::{Column, ColumnData};
use crate::error::{Error, Result};
use codecs::{decode_jpeg, decode_png};

fn describe_unknown(data: &[u8]) -> String {
    let kind = if data.starts_with(b"GIF8") {
        " (a GIF)"
    } else if data.starts_with(b"BM") {
        " (a BMP?)"
    } else if data.starts_with(b"RIFF") && data.get(8..12) == Some(b"WEBP") {
        " (a WebP)"
    } else {
        ""
    };
    let head: Vec<String> = data.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!(
        "not a JPEG or PNG image{kind}: {} bytes starting {}",
        data.len(),
        if head.is_empty() {
            "with nothing".to_string()
        } else {
            head.join(" ")
        }
    )
}

/// Decodes JPEG or PNG bytes to `channels` (1, 3 or 4) 8-bit channels.
///
/// Errors are messages for the caller to wrap with the record and feature.
pub fn decode(data: &[u8], format: Format, channels: usize, max_pixels: u64) -> Result<Decoded> {
    decode_reusing(data, format, channels, max_pixels, Vec::new(), None)
}

/// [`decode`], writing the pixels into `scratch` (a previous image's buffer, so that a batch
/// of images reuses one allocation).
///
/// `crop_rows`: the caller reads only the rows that a centred crop to that many rows keeps
/// (`resize_with_crop_or_pad`'s); the rows below them may be left zero where stopping
/// early saves work (a baseline JPEG's), the rows read are as [`decode`] gives them.
pub fn decode_reusing(
    data: &[u8],
    format: Format,
    channels: usize,
    max_pixels: u64,
    scratch: Vec<u8>,
    crop_rows: Option<usize>,
) -> Result<Decoded> {
    if !matches!(channels, 1 | 3 | 4) {
        return Err(Error::decode(format!(
            "channels must be 1, 3 or 4, not {channels}"
        )));
    }
    if data.is_empty() {
        return Err(Error::decode("empty image bytes"));
    }
    let found = sniff(data);
    let format = match (format, found) {
        (Format::Auto, Some(f)) => f,
        (Format::Auto, None) => return Err(Error::decode(describe_unknown(data))),
        (want, Some(f)) if want != f => {
            return Err(Error::decode(format!(
                "expected a {} image but the bytes are a {}",
                name(want),
                name(f)
            )))
        }
        (want, Some(_)) => want,
        (want, None) => {
            return Err(Error::decode(format!(
                "expected a {} image: {}",
                name(want),
                describe_unknown(data)
            )))
        }
    };
    // The codecs are third-party code fed untrusted bytes: a panic inside one (a bug of
    // theirs, like png 0.18's on a palette of a partial entry) is this image's error, never
    // a PanicException (a BaseException) out of a parse or a training step.
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match format {
        Format::Png => decode_png(data, channels, max_pixels, scratch),
        _ => decode_jpeg(data, channels, max_pixels, scratch, crop_rows),
    }));
    let img = match decoded {
        Ok(result) => result?,
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            return Err(Error::decode(format!(
                "the {} decoder failed on these bytes ({why})",
                name(format)
            )));
        }
    };
    // Resizing indexes the pixels by the declared size: they must agree.
    let want = img
        .height
        .checked_mul(img.width)
        .and_then(|p| p.checked_mul(img.channels));
    if want != Some(img.pixels.len()) {
        return Err(Error::decode(format!(
            "image decodes to {} bytes, not {}x{}x{}",
            img.pixels.len(),
            img.height,
            img.width,
            img.channels
        )));
    }
    Ok(img)
}

fn name(f: Format) -> &'static str {
    match f {
        Format::Jpeg => "JPEG",
        Format::Png => "PNG",
        Format::Auto => "JPEG or PNG",
    }
}

/// Decodes every row's image into one `[rows, height, width, channels]` array.
pub(super) fn image_column<'a, T: Pixel + ZeroBits + Default>(
    spec: &ImageSpec,
    mine: &[Found<'a>],
    mut rows: Rows<'_>,
    wrap: fn(Vec<T>) -> ColumnData<'a>,
) -> Result<Column<'a>> {
    let b = mine.len();
    let n = spec.height * spec.width * spec.channels;
    let total = b
        .checked_mul(n)
        .filter(|t| t.saturating_mul(std::mem::size_of::<T>()) <= MAX_ROW_BYTES.saturating_mul(4))
        .ok_or_else(|| Error::spec(Some(rows.name()), "image batch too large"))?;
    // A spare batch holds an earlier batch's pixels: `fit` writes every pixel of a row
    // (padding included) and a row that fails is zeroed.
    let mut out = DenseBatch::<T>::new(total, n)
        .map_err(|e| Error::spec(Some(rows.name()), format!("image batch too large: {e}")))?;
    let mut scratch = Vec::new(); // one pixel buffer, reused image after image
                                  // A crop reads only the rows it keeps: the decoder may stop below them.
    let crop = matches!(spec.resize, Resize::CropOrPad).then_some(spec.height);
    for (row, found) in mine.iter().enumerate() {
        let dst = out.row(row);
        let buf = std::mem::take(&mut scratch);
        let res = single_bytes(*found).and_then(|bytes| {
            let img = decode_reusing(
                bytes,
                spec.format,
                spec.channels,
                spec.max_pixels,
                buf,
                crop,
            )
            .map_err(|e| RowError::Row(e.detail()))?;
            let fitted = fit(&img, spec, dst).map_err(|e| RowError::Row(e.detail()));
            scratch = img.pixels;
            fitted
        });
        if let Err(e) = res {
            dst.fill(T::default());
            rows.fail(row, e)?;
        }
    }
    let shape = vec![b, spec.height, spec.width, spec.channels];
    Ok(rows.column(wrap(out.into_vec()), shape, None))
}
