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

pub use codecs::{encode_jpeg, encode_png};
pub use resize::{fit, Pixel};

use super::rows::{single_bytes, RowError, Rows};
use super::{Found, MAX_ROW_BYTES};
use crate::column::{Column, ColumnData};
use crate::error::{Error, Result};
use codecs::{decode_jpeg, decode_png};

/// The container format of encoded image bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Decide from the first bytes (JPEG `FF D8 FF`, PNG `89 'PNG' 0D 0A 1A 0A`).
    Auto,
    /// JPEG (baseline or progressive, 8-bit).
    Jpeg,
    /// PNG (any bit depth and colour type; 16-bit is reduced to 8).
    Png,
}

/// How a decoded image is brought to the spec's height and width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resize {
    /// The image must already have the spec's size.
    None,
    /// `tf.image.resize_with_crop_or_pad`: centre crop and/or centre zero-pad.
    CropOrPad,
    /// `tf.image.resize(method="bilinear", antialias=...)` (stretches to the size).
    Bilinear {
        /// Low-pass filter when shrinking (`tf.image.resize(..., antialias=True)`).
        antialias: bool,
    },
}

/// The output element type of an image column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PixelType {
    /// uint8 in 0..=255 (resized values are rounded half to even and saturated).
    U8,
    /// float32 scaled to [0, 1] (`tf.image.convert_image_dtype`).
    F32,
}

/// What an `Image` spec entry asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSpec {
    /// Output height.
    pub height: usize,
    /// Output width.
    pub width: usize,
    /// Output channels: 1, 3 or 4.
    pub channels: usize,
    /// Container format, or `Auto`.
    pub format: Format,
    /// How to reach `height` x `width`.
    pub resize: Resize,
    /// Output element type.
    pub pixel: PixelType,
    /// Largest `width * height` a header may declare; larger images are rejected before decoding.
    pub max_pixels: u64,
}

/// A decoded image: `height * width * channels` bytes, row-major, channels last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
    /// Channels per pixel (as asked for).
    pub channels: usize,
    /// The pixels.
    pub pixels: Vec<u8>,
}

pub(crate) const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

/// Guesses the format from the first bytes; `None` for anything but JPEG and PNG.
pub fn sniff(data: &[u8]) -> Option<Format> {
    if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some(Format::Jpeg)
    } else if data.starts_with(PNG_MAGIC) {
        Some(Format::Png)
    } else {
        None
    }
}

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
    decode_reusing(data, format, channels, max_pixels, Vec::new())
}

/// [`decode`], writing the pixels into `scratch` (a previous image's buffer, so that a batch
/// of images reuses one allocation).
pub fn decode_reusing(
    data: &[u8],
    format: Format,
    channels: usize,
    max_pixels: u64,
    scratch: Vec<u8>,
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
    match format {
        Format::Png => decode_png(data, channels, max_pixels, scratch),
        _ => decode_jpeg(data, channels, max_pixels, scratch),
    }
}

fn name(f: Format) -> &'static str {
    match f {
        Format::Jpeg => "JPEG",
        Format::Png => "PNG",
        Format::Auto => "JPEG or PNG",
    }
}

/// Refuses an empty image, or one over the caller's pixel budget, before anything is allocated.
fn check_pixels(width: usize, height: usize, max_pixels: u64) -> Result<()> {
    let pixels = (width as u64).saturating_mul(height as u64);
    if width == 0 || height == 0 {
        return Err(Error::decode(format!(
            "image header declares an empty {width}x{height} image"
        )));
    }
    if pixels > max_pixels {
        return Err(Error::decode(format!(
            "image header declares {width}x{height} = {pixels} pixels, over the limit of \
             {max_pixels} (raise the spec's max_pixels to accept it)"
        )));
    }
    Ok(())
}

/// Decodes every row's image into one `[rows, height, width, channels]` array.
pub(super) fn image_column<'a, T: Pixel>(
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
    let mut out = vec![T::default(); total];
    let mut scratch = Vec::new(); // one pixel buffer, reused image after image
    for (row, found) in mine.iter().enumerate() {
        let dst = &mut out[row * n..(row + 1) * n];
        let buf = std::mem::take(&mut scratch);
        let res = single_bytes(*found).and_then(|bytes| {
            let img = decode_reusing(bytes, spec.format, spec.channels, spec.max_pixels, buf)
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
    Ok(rows.column(wrap(out), shape, None))
}
