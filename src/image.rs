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

use std::io::Cursor;

use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;

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

const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

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
pub fn decode(
    data: &[u8],
    format: Format,
    channels: usize,
    max_pixels: u64,
) -> Result<Decoded, String> {
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
) -> Result<Decoded, String> {
    if !matches!(channels, 1 | 3 | 4) {
        return Err(format!("channels must be 1, 3 or 4, not {channels}"));
    }
    if data.is_empty() {
        return Err("empty image bytes".into());
    }
    let found = sniff(data);
    let format = match (format, found) {
        (Format::Auto, Some(f)) => f,
        (Format::Auto, None) => return Err(describe_unknown(data)),
        (want, Some(f)) if want != f => {
            return Err(format!(
                "expected a {} image but the bytes are a {}",
                name(want),
                name(f)
            ))
        }
        (want, Some(_)) => want,
        (want, None) => {
            return Err(format!(
                "expected a {} image: {}",
                name(want),
                describe_unknown(data)
            ))
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

fn check_pixels(width: usize, height: usize, max_pixels: u64) -> Result<(), String> {
    let pixels = (width as u64).saturating_mul(height as u64);
    if width == 0 || height == 0 {
        return Err(format!(
            "image header declares an empty {width}x{height} image"
        ));
    }
    if pixels > max_pixels {
        return Err(format!(
            "image header declares {width}x{height} = {pixels} pixels, over the limit of \
             {max_pixels} (raise the spec's max_pixels to accept it)"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// JPEG

/// Checks that a JPEG holds an end-of-image marker after its first start-of-scan.
///
/// A JPEG is a sequence of segments `FF xx [u16 big-endian length incl. itself] [payload]` up
/// to `FF DA` (start of scan), then entropy-coded data in which a literal `FF` is stuffed as
/// `FF 00` (and `FF D0`..`FF D7` are restart markers), so an `FF D9` there is the real end of
/// the image (or of a progressive scan sequence). Thumbnails live in APP segments before the
/// scan and are skipped by length, so their own `FF D9` does not count.
fn check_jpeg_complete(data: &[u8]) -> Result<(), String> {
    let truncated = || {
        format!(
            "truncated JPEG: {} bytes and no end-of-image marker (FF D9)",
            data.len()
        )
    };
    let mut pos = 2; // past SOI
    loop {
        // Fill bytes (FF FF ...) may precede a marker.
        while data.get(pos) == Some(&0xFF) && data.get(pos + 1) == Some(&0xFF) {
            pos += 1;
        }
        match (data.get(pos), data.get(pos + 1)) {
            (Some(0xFF), Some(0xDA)) => break,
            (Some(0xFF), Some(0xD9)) => return Err("JPEG ends before its first scan".into()),
            (Some(0xFF), Some(m)) if (0xD0..=0xD7).contains(m) || *m == 0x01 => pos += 2,
            (Some(0xFF), Some(_)) => {
                let len = match (data.get(pos + 2), data.get(pos + 3)) {
                    (Some(&hi), Some(&lo)) => usize::from(u16::from_be_bytes([hi, lo])),
                    _ => return Err(truncated()),
                };
                if len < 2 {
                    return Err(format!("corrupt JPEG: segment length {len} at byte {pos}"));
                }
                pos += 2 + len;
            }
            (Some(_), Some(_)) => {
                return Err(format!("corrupt JPEG: expected a marker at byte {pos}"));
            }
            _ => return Err(truncated()),
        }
    }
    let scan = &data[pos..];
    let mut i = 0;
    while let Some(off) = scan[i..].iter().position(|&b| b == 0xFF) {
        let at = i + off;
        if scan.get(at + 1) == Some(&0xD9) {
            return Ok(());
        }
        i = at + 1;
    }
    Err(truncated())
}

fn decode_jpeg(
    data: &[u8],
    channels: usize,
    max_pixels: u64,
    mut pixels: Vec<u8>,
) -> Result<Decoded, String> {
    check_jpeg_complete(data)?;
    let colorspace = match channels {
        1 => ColorSpace::Luma,
        4 => ColorSpace::RGBA,
        _ => ColorSpace::RGB,
    };
    // new_fast: SIMD IDCT/colour conversion where the CPU has it. Lenient mode, so that files
    // libjpeg accepts with a warning decode here too; truncation was checked above.
    let options = DecoderOptions::new_fast()
        .jpeg_set_out_colorspace(colorspace)
        .set_max_width(usize::from(u16::MAX))
        .set_max_height(usize::from(u16::MAX));
    let mut decoder = JpegDecoder::new_with_options(ZCursor::new(data), options);
    decoder
        .decode_headers()
        .map_err(|e| format!("corrupt JPEG: {e}"))?;
    let info = decoder
        .info()
        .ok_or_else(|| "corrupt JPEG: no frame header".to_string())?;
    let (width, height) = (usize::from(info.width), usize::from(info.height));
    check_pixels(width, height, max_pixels)?;
    let size = decoder
        .output_buffer_size()
        .ok_or_else(|| "corrupt JPEG: image size overflows".to_string())?;
    if size != width * height * channels {
        return Err(format!(
            "JPEG decodes to {size} bytes, not {width}x{height}x{channels}"
        ));
    }
    pixels.clear();
    pixels.resize(size, 0);
    decoder
        .decode_into(&mut pixels)
        .map_err(|e| format!("corrupt JPEG: {e}"))?;
    Ok(Decoded {
        height,
        width,
        channels,
        pixels,
    })
}

// ---------------------------------------------------------------------------------------------
// PNG

fn decode_png(
    data: &[u8],
    channels: usize,
    max_pixels: u64,
    mut raw: Vec<u8>,
) -> Result<Decoded, String> {
    let corrupt = |e: png::DecodingError| format!("corrupt PNG: {e}");
    let mut decoder = png::Decoder::new(Cursor::new(data));
    // Palette -> RGB, tRNS -> alpha, 1/2/4-bit gray -> 8-bit (scaled to 0..255, as libpng).
    decoder.set_transformations(png::Transformations::EXPAND);
    decoder.set_ignore_text_chunk(true);
    let header = decoder.read_header_info().map_err(corrupt)?;
    let (w, h) = header.size();
    // TensorFlow adds a missing alpha channel with png_set_add_alpha(2^bit_depth - 1), which
    // libpng applies after expanding low bit depths: 1/2/4-bit images get alpha 1/3/15.
    let filler = match header.bit_depth as u8 {
        d @ (1 | 2 | 4) => (1u8 << d) - 1,
        _ => 255,
    };
    let (width, height) = (w as usize, h as usize);
    check_pixels(width, height, max_pixels)?;
    // The decoder's own allocation budget: the checked frame plus its row buffers.
    let budget = (max_pixels as usize)
        .saturating_mul(8)
        .saturating_add(1 << 20);
    decoder.set_limits(png::Limits { bytes: budget });
    let mut reader = decoder.read_info().map_err(corrupt)?;
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| "PNG frame size overflows".to_string())?;
    raw.clear();
    raw.resize(size, 0);
    let frame = reader.next_frame(&mut raw).map_err(corrupt)?;
    // Read to IEND so that the CRCs of the chunks after the pixels are checked too, as libpng
    // does when TensorFlow calls png_read_end.
    reader.finish().map_err(corrupt)?;
    raw.truncate(frame.buffer_size());
    let src_channels = frame.color_type.samples();
    let sixteen = frame.bit_depth == png::BitDepth::Sixteen;
    let pixels = if !sixteen && src_channels == channels {
        raw.truncate(width * height * channels);
        raw
    } else {
        convert_channels(
            &raw,
            width * height,
            src_channels,
            sixteen,
            channels,
            filler,
        )?
    };
    Ok(Decoded {
        height,
        width,
        channels,
        pixels,
    })
}

/// libpng's `rgb_to_gray` with the coefficients TensorFlow asks for (0.299, 0.587), in 1/32768.
const GRAY_R: u32 = 9797;
const GRAY_G: u32 = 19234;
const GRAY_B: u32 = 32768 - GRAY_R - GRAY_G;

fn gray8(r: u8, g: u8, b: u8) -> u8 {
    if r == g && g == b {
        return r;
    }
    // libpng truncates for 8-bit samples.
    ((GRAY_R * u32::from(r) + GRAY_G * u32::from(g) + GRAY_B * u32::from(b)) >> 15) as u8
}

fn gray16(r: u16, g: u16, b: u16) -> u16 {
    if r == g && g == b {
        return r;
    }
    // ... and rounds for 16-bit ones.
    ((GRAY_R * u32::from(r) + GRAY_G * u32::from(g) + GRAY_B * u32::from(b) + 16384) >> 15) as u16
}

/// Converts `n` pixels of `src` samples (8-bit, or 16-bit big-endian) to 8-bit `dst` channels.
fn convert_channels(
    raw: &[u8],
    n: usize,
    src: usize,
    sixteen: bool,
    dst: usize,
    filler: u8,
) -> Result<Vec<u8>, String> {
    let bytes = if sixteen { 2 } else { 1 };
    if raw.len() < n * src * bytes {
        return Err("PNG frame is shorter than its header says".into());
    }
    let sample = |p: usize, c: usize| -> u16 {
        let i = (p * src + c) * bytes;
        if sixteen {
            u16::from_be_bytes([raw[i], raw[i + 1]])
        } else {
            u16::from(raw[i])
        }
    };
    let to8 = |v: u16| -> u8 {
        if sixteen {
            (v >> 8) as u8
        } else {
            v as u8
        }
    };
    let mut out = vec![0u8; n * dst];
    for (p, px) in out.chunks_exact_mut(dst).enumerate() {
        let (gray, color, alpha) = match src {
            1 => (Some(sample(p, 0)), None, None),
            2 => (Some(sample(p, 0)), None, Some(sample(p, 1))),
            3 => (None, Some([sample(p, 0), sample(p, 1), sample(p, 2)]), None),
            4 => (
                None,
                Some([sample(p, 0), sample(p, 1), sample(p, 2)]),
                Some(sample(p, 3)),
            ),
            other => return Err(format!("unsupported PNG sample count {other}")),
        };
        match dst {
            1 => {
                px[0] = match (gray, color) {
                    (Some(g), _) => to8(g),
                    (None, Some([r, g, b])) if sixteen => to8(gray16(r, g, b)),
                    (None, Some([r, g, b])) => gray8(r as u8, g as u8, b as u8),
                    _ => 0,
                }
            }
            _ => {
                let [r, g, b] = match (gray, color) {
                    (Some(v), _) => [v; 3],
                    (None, Some(c)) => c,
                    _ => [0; 3],
                };
                px[0] = to8(r);
                px[1] = to8(g);
                px[2] = to8(b);
                if dst == 4 {
                    px[3] = alpha.map_or(filler, to8);
                }
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// To the output shape

/// An output element type: uint8 or float32 in [0, 1].
pub trait Pixel: Copy + Default {
    /// A decoded 8-bit sample, as this type (`tf.image.convert_image_dtype`).
    fn from_u8(v: u8) -> Self;
    /// A resampled value on the 0..255 scale.
    fn from_f32(v: f32) -> Self;
}

impl Pixel for u8 {
    #[inline(always)]
    fn from_u8(v: u8) -> Self {
        v
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        // Saturate, then round half to even: tf.saturate_cast(tf.round(x), tf.uint8).
        v.clamp(0.0, 255.0).round_ties_even() as u8
    }
}

/// `1 / 255` as float32, the factor `tf.image.convert_image_dtype` multiplies uint8 by.
const INV_255: f32 = (1.0f64 / 255.0) as f32;

impl Pixel for f32 {
    #[inline(always)]
    fn from_u8(v: u8) -> Self {
        f32::from(v) * INV_255
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v * INV_255
    }
}

/// Writes `img` into `out` (`spec.height * spec.width * img.channels` elements, zeroed by
/// the caller) at the spec's size.
pub fn fit<T: Pixel>(img: &Decoded, spec: &ImageSpec, out: &mut [T]) -> Result<(), String> {
    let (h, w, c) = (spec.height, spec.width, img.channels);
    debug_assert_eq!(out.len(), h * w * c);
    match spec.resize {
        Resize::None => {
            if img.height != h || img.width != w {
                return Err(format!(
                    "image is {}x{} but the spec's shape is {h}x{w}; pass resize=\"crop_or_pad\" \
                     or resize=\"bilinear\" to accept other sizes",
                    img.height, img.width
                ));
            }
            for (o, &v) in out.iter_mut().zip(&img.pixels) {
                *o = T::from_u8(v);
            }
        }
        Resize::CropOrPad => crop_or_pad(img, h, w, out),
        Resize::Bilinear { antialias } => {
            if img.height == h && img.width == w && !antialias {
                // ResizeBilinear at scale 1 samples every pixel exactly.
                for (o, &v) in out.iter_mut().zip(&img.pixels) {
                    *o = T::from_f32(f32::from(v));
                }
            } else if antialias {
                scale_and_translate(img, h, w, out);
            } else {
                resize_bilinear(img, h, w, out);
            }
        }
    }
    Ok(())
}

/// `tf.image.resize_with_crop_or_pad`: crop offsets `(in - out) / 2` where the image is larger,
/// pad offsets `(out - in) / 2` where it is smaller (integer division, so an odd remainder
/// goes to the bottom/right), zeros elsewhere.
fn crop_or_pad<T: Pixel>(img: &Decoded, h: usize, w: usize, out: &mut [T]) {
    let c = img.channels;
    let crop_y = img.height.saturating_sub(h) / 2;
    let crop_x = img.width.saturating_sub(w) / 2;
    let pad_y = h.saturating_sub(img.height) / 2;
    let pad_x = w.saturating_sub(img.width) / 2;
    let rows = img.height.min(h);
    let cols = img.width.min(w);
    for r in 0..rows {
        let src_at = ((crop_y + r) * img.width + crop_x) * c;
        let dst_at = ((pad_y + r) * w + pad_x) * c;
        let src = &img.pixels[src_at..src_at + cols * c];
        for (o, &v) in out[dst_at..dst_at + cols * c].iter_mut().zip(src) {
            *o = T::from_u8(v);
        }
    }
}

/// TensorFlow's `ResizeBilinear` with `half_pixel_centers=True` (what `tf.image.resize` runs
/// for `bilinear` without antialiasing), in the same float32 steps.
fn resize_bilinear<T: Pixel>(img: &Decoded, h: usize, w: usize, out: &mut [T]) {
    struct Tap {
        lo: usize,
        hi: usize,
        lerp: f32,
    }
    fn taps(out: usize, inp: usize) -> Vec<Tap> {
        let scale = inp as f32 / out as f32;
        (0..out)
            .map(|i| {
                let x = (i as f32 + 0.5) * scale - 0.5;
                let f = x.floor();
                Tap {
                    lo: (f as i64).max(0) as usize,
                    hi: (x.ceil() as i64).min(inp as i64 - 1).max(0) as usize,
                    lerp: x - f,
                }
            })
            .collect()
    }
    let c = img.channels;
    let ys = taps(h, img.height);
    let xs = taps(w, img.width);
    let px = |y: usize, x: usize, k: usize| f32::from(img.pixels[(y * img.width + x) * c + k]);
    let mut at = 0;
    for ty in &ys {
        for tx in &xs {
            for k in 0..c {
                let tl = px(ty.lo, tx.lo, k);
                let tr = px(ty.lo, tx.hi, k);
                let bl = px(ty.hi, tx.lo, k);
                let br = px(ty.hi, tx.hi, k);
                let top = tl + (tr - tl) * tx.lerp;
                let bottom = bl + (br - bl) * tx.lerp;
                out[at] = T::from_f32(top + (bottom - top) * ty.lerp);
                at += 1;
            }
        }
    }
}

/// Sampling spans of TensorFlow's `ScaleAndTranslate` with the triangle kernel (what
/// `tf.image.resize(..., "bilinear", antialias=True)` runs): for output `x`, `size` weights
/// starting at input `starts[x]`.
struct Spans {
    size: usize,
    starts: Vec<usize>,
    weights: Vec<f32>,
}

fn spans(out: usize, inp: usize, antialias: bool) -> Spans {
    let scale = out as f32 / inp as f32;
    let inv_scale = (1.0f64 / f64::from(scale)) as f32;
    let kernel_scale = if antialias { inv_scale.max(1.0) } else { 1.0 };
    let radius = 1.0f32;
    let size = ((2.0 * (radius * kernel_scale).ceil()) as usize + 1).min(inp);
    let one_over_kernel_scale = 1.0 / kernel_scale;
    let mut starts = vec![0usize; out];
    let mut weights = vec![0f32; out * size];
    let mut tmp = Vec::with_capacity(size);
    for x in 0..out {
        let sample = (x as f32 + 0.5) * inv_scale;
        if sample < 0.0 || sample > inp as f32 {
            continue;
        }
        let last = inp as i64 - 1;
        let start = ((sample - radius * kernel_scale - 0.5).ceil() as i64).clamp(0, last);
        let end = ((sample + radius * kernel_scale - 0.5).floor() as i64).clamp(0, last) + 1;
        tmp.clear();
        let mut total = 0.0f32;
        for s in start..end {
            let pos = (s as f32 + 0.5 - sample) * one_over_kernel_scale;
            let wgt = (1.0 - pos.abs()).max(0.0);
            total += wgt;
            tmp.push(wgt);
        }
        if total.abs() >= 1000.0 * f32::MIN_POSITIVE {
            let inv = 1.0 / total;
            for (j, wgt) in tmp.iter().enumerate().take(size) {
                weights[x * size + j] = wgt * inv;
            }
        }
        starts[x] = start as usize;
    }
    Spans {
        size,
        starts,
        weights,
    }
}

fn scale_and_translate<T: Pixel>(img: &Decoded, h: usize, w: usize, out: &mut [T]) {
    let c = img.channels;
    let (in_h, in_w) = (img.height, img.width);
    let rows = spans(h, in_h, true);
    let cols = spans(w, in_w, true);
    // Rows first into [h, in_w, c], then columns, accumulating in the same order as TF.
    let row_len = in_w * c;
    let mut mid = vec![0f32; h * row_len];
    for y in 0..h {
        let dst = &mut mid[y * row_len..(y + 1) * row_len];
        let start = rows.starts[y];
        let real = (start + rows.size).min(in_h) - start;
        for j in 0..real {
            let wgt = rows.weights[y * rows.size + j];
            let src = &img.pixels[(start + j) * row_len..(start + j + 1) * row_len];
            for (d, &s) in dst.iter_mut().zip(src) {
                *d += wgt * f32::from(s);
            }
        }
    }
    let mut acc = [0f32; 4];
    for y in 0..h {
        let src_row = &mid[y * row_len..(y + 1) * row_len];
        for x in 0..w {
            let start = cols.starts[x];
            let real = (start + cols.size).min(in_w) - start;
            acc[..c].fill(0.0);
            for j in 0..real {
                let wgt = cols.weights[x * cols.size + j];
                let p = &src_row[(start + j) * c..(start + j + 1) * c];
                for k in 0..c {
                    acc[k] += wgt * p[k];
                }
            }
            let o = &mut out[(y * w + x) * c..(y * w + x + 1) * c];
            for k in 0..c {
                o[k] = T::from_f32(acc[k]);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding

/// Encodes 8-bit pixels (`height x width x channels`, channels 1-4) as PNG.
///
/// `level` is the zlib level 0-9, or `None` for the default.
pub fn encode_png(
    pixels: &[u8],
    height: usize,
    width: usize,
    channels: usize,
    level: Option<u8>,
) -> Result<Vec<u8>, String> {
    let color = match channels {
        1 => png::ColorType::Grayscale,
        2 => png::ColorType::GrayscaleAlpha,
        3 => png::ColorType::Rgb,
        4 => png::ColorType::Rgba,
        c => return Err(format!("PNG holds 1 to 4 channels, not {c}")),
    };
    check_encode_size(pixels, height, width, channels, u32::MAX as usize)?;
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width as u32, height as u32);
    encoder.set_color(color);
    encoder.set_depth(png::BitDepth::Eight);
    if let Some(level) = level {
        encoder.set_deflate_compression(if level == 0 {
            png::DeflateCompression::NoCompression
        } else {
            png::DeflateCompression::Level(level.min(9))
        });
        encoder.set_filter(if level == 0 {
            png::Filter::NoFilter
        } else {
            png::Filter::Adaptive
        });
    }
    let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
    writer.write_image_data(pixels).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    Ok(out)
}

/// Encodes 8-bit pixels (`height x width x channels`, channels 1 or 3) as baseline JPEG.
///
/// `quality` is 1-100; `chroma_downsampling` stores colour at half resolution (4:2:0), as
/// `tf.io.encode_jpeg` does by default.
pub fn encode_jpeg(
    pixels: &[u8],
    height: usize,
    width: usize,
    channels: usize,
    quality: u8,
    chroma_downsampling: bool,
) -> Result<Vec<u8>, String> {
    let color = match channels {
        1 => jpeg_encoder::ColorType::Luma,
        3 => jpeg_encoder::ColorType::Rgb,
        c => return Err(format!("JPEG images hold 1 or 3 channels, not {c}")),
    };
    check_encode_size(pixels, height, width, channels, usize::from(u16::MAX))?;
    let mut out = Vec::new();
    let mut encoder = jpeg_encoder::Encoder::new(&mut out, quality.clamp(1, 100));
    encoder.set_sampling_factor(if chroma_downsampling {
        jpeg_encoder::SamplingFactor::R_4_2_0
    } else {
        jpeg_encoder::SamplingFactor::R_4_4_4
    });
    encoder
        .encode(pixels, width as u16, height as u16, color)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

fn check_encode_size(
    pixels: &[u8],
    height: usize,
    width: usize,
    channels: usize,
    max_side: usize,
) -> Result<(), String> {
    if height == 0 || width == 0 {
        return Err(format!("cannot encode an empty {height}x{width} image"));
    }
    if height > max_side || width > max_side {
        return Err(format!(
            "a {height}x{width} image is too large for this format (at most {max_side} per side)"
        ));
    }
    if pixels.len() != height * width * channels {
        return Err(format!(
            "{} bytes do not make a {height}x{width}x{channels} image",
            pixels.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gradient(h: usize, w: usize, c: usize) -> Vec<u8> {
        (0..h * w * c).map(|i| ((i * 7) % 251) as u8).collect()
    }

    #[test]
    fn png_round_trip_every_channel_count() {
        for c in 1..=4 {
            let px = gradient(5, 7, c);
            let png = encode_png(&px, 5, 7, c, None).unwrap();
            let want = if c == 2 { 4 } else { c.max(1) };
            let img = decode(&png, Format::Auto, if c == 2 { 4 } else { want }, 1 << 20).unwrap();
            assert_eq!((img.height, img.width, img.channels), (5, 7, want));
            if c != 2 {
                assert_eq!(img.pixels, px);
            }
        }
    }

    #[test]
    fn png_channel_conversion() {
        let px = vec![10, 20, 30, 40, 50, 60, 255, 0, 0];
        let png = encode_png(&px, 1, 3, 3, Some(1)).unwrap();
        let gray = decode(&png, Format::Png, 1, 100).unwrap();
        let expect: Vec<u8> = px.chunks(3).map(|p| gray8(p[0], p[1], p[2])).collect();
        assert_eq!(gray.pixels, expect);
        let rgba = decode(&png, Format::Png, 4, 100).unwrap();
        assert_eq!(rgba.pixels[..4], [10, 20, 30, 255]);
    }

    #[test]
    fn jpeg_round_trip_is_close() {
        let px: Vec<u8> = (0..32 * 48 * 3)
            .map(|i| (64 + (i / 3) % 48) as u8)
            .collect();
        let jpg = encode_jpeg(&px, 32, 48, 3, 95, false).unwrap();
        let img = decode(&jpg, Format::Auto, 3, 1 << 20).unwrap();
        assert_eq!((img.height, img.width, img.channels), (32, 48, 3));
        let max = img
            .pixels
            .iter()
            .zip(&px)
            .map(|(a, b)| a.abs_diff(*b))
            .max()
            .unwrap();
        assert!(max <= 8, "max diff {max}");
    }

    #[test]
    fn truncated_and_oversized_images_are_errors() {
        let px = gradient(16, 16, 3);
        let jpg = encode_jpeg(&px, 16, 16, 3, 90, true).unwrap();
        for cut in [jpg.len() - 2, jpg.len() / 2, 40, 3] {
            let err = decode(&jpg[..cut], Format::Auto, 3, 1 << 20).unwrap_err();
            assert!(err.contains("JPEG"), "{err}");
        }
        let err = decode(&jpg, Format::Auto, 3, 100).unwrap_err();
        assert!(err.contains("over the limit"), "{err}");
        let png = encode_png(&px, 16, 16, 3, None).unwrap();
        let err = decode(&png, Format::Auto, 3, 100).unwrap_err();
        assert!(err.contains("over the limit"), "{err}");
        let mut bad = png.clone();
        let n = bad.len();
        bad[n - 20] ^= 1;
        assert!(decode(&bad, Format::Auto, 3, 1 << 20).is_err());
        assert!(decode(&png[..n / 2], Format::Auto, 3, 1 << 20).is_err());
        assert!(decode(b"GIF89a....", Format::Auto, 3, 1 << 20)
            .unwrap_err()
            .contains("GIF"));
        assert!(decode(&png, Format::Jpeg, 3, 1 << 20).is_err());
    }

    #[test]
    fn huge_header_is_rejected_before_allocating() {
        // A PNG header claiming 60000 x 60000 pixels, and nothing else.
        let mut png = PNG_MAGIC.to_vec();
        let mut ihdr = b"IHDR".to_vec();
        ihdr.extend_from_slice(&60000u32.to_be_bytes());
        ihdr.extend_from_slice(&60000u32.to_be_bytes());
        ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
        png.extend_from_slice(&13u32.to_be_bytes());
        png.extend_from_slice(&ihdr);
        png.extend_from_slice(&crc32fast_like(&ihdr).to_be_bytes());
        let err = decode(&png, Format::Auto, 3, 1 << 26).unwrap_err();
        assert!(err.contains("60000x60000"), "{err}");
    }

    // PNG's CRC-32 (ISO-HDLC), bitwise: only for building the test header above.
    fn crc32fast_like(data: &[u8]) -> u32 {
        let mut crc = 0xFFFF_FFFFu32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    fn spec(h: usize, w: usize, resize: Resize) -> ImageSpec {
        ImageSpec {
            height: h,
            width: w,
            channels: 1,
            format: Format::Auto,
            resize,
            pixel: PixelType::U8,
            max_pixels: 1 << 20,
        }
    }

    #[test]
    fn crop_or_pad_centres_like_tensorflow() {
        let img = Decoded {
            height: 3,
            width: 5,
            channels: 1,
            pixels: (1..=15).collect(),
        };
        let mut out = vec![0u8; 4 * 2];
        fit(&img, &spec(4, 2, Resize::CropOrPad), &mut out).unwrap();
        // Height 3 -> 4: pad 0 above, 1 below; width 5 -> 2: crop offset 1.
        assert_eq!(out, vec![2, 3, 7, 8, 12, 13, 0, 0]);
        let mut same = vec![0u8; 15];
        assert!(fit(&img, &spec(3, 4, Resize::None), &mut same[..12]).is_err());
        fit(&img, &spec(3, 5, Resize::None), &mut same).unwrap();
        assert_eq!(same, img.pixels);
    }

    #[test]
    fn bilinear_matches_hand_computed_values() {
        let img = Decoded {
            height: 1,
            width: 2,
            channels: 1,
            pixels: vec![0, 100],
        };
        let mut out = vec![0f32; 4];
        fit(
            &img,
            &spec(1, 4, Resize::Bilinear { antialias: false }),
            &mut out,
        )
        .unwrap();
        // Half-pixel centres: x_in = (x + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25.
        let want = [0.0, 25.0, 75.0, 100.0].map(|v: f32| v * INV_255);
        assert_eq!(out, want);
        let mut aa = vec![0f32; 1];
        let one = spec(1, 1, Resize::Bilinear { antialias: true });
        fit(&img, &one, &mut aa).unwrap();
        assert!((aa[0] - 50.0 * INV_255).abs() < 1e-6);
    }
}
