//! What an image spec asks for and what a decoder gives back, shared by the codecs, the
//! resizing and the column decoder.

use crate::alloc::MAX_ROW_BYTES;
use crate::error::{Error, Result};

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

/// Refuses an empty image, or one over the caller's pixel budget, before anything is allocated.
pub(super) fn check_pixels(width: usize, height: usize, max_pixels: u64) -> Result<()> {
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

/// Refuses an image one of whose decoding buffers (`bytes_per_pixel` bytes for each of
/// `width x height` pixels: the pixels asked for, a PNG frame of 16-bit samples, a JPEG's
/// coefficient planes) would be over [`MAX_ROW_BYTES`], before it is allocated. `max_pixels`
/// is the caller's budget; this is the one a header cannot talk past, however large
/// `max_pixels` is set.
pub(super) fn check_buffer(
    width: usize,
    height: usize,
    bytes_per_pixel: usize,
    what: &str,
) -> Result<()> {
    let need = width
        .checked_mul(height)
        .and_then(|p| p.checked_mul(bytes_per_pixel));
    match need {
        Some(n) if n <= MAX_ROW_BYTES => Ok(()),
        _ => Err(Error::decode(format!(
            "image header declares {width}x{height} pixels: {what} would take {} bytes, over \
             the {MAX_ROW_BYTES}-byte limit of one decoded row",
            need.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string())
        ))),
    }
}
