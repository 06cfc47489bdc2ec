//! JPEG and PNG bytes to and from 8-bit pixels: zune-jpeg and the `png` crate decode, the
//! `png` and `jpeg-encoder` crates encode. See [`super`] for the channel conversions.

use std::io::Cursor;

use zune_core::bytestream::{ZByteIoError, ZByteReaderTrait, ZSeekFrom};
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;

use super::types::{check_buffer, check_pixels, Decoded};
use crate::alloc::MAX_ROW_BYTES;
use crate::error::{Error, Result};

/// Resizes a reused pixel buffer to `len` zeros, or refuses when the memory is not there.
fn fill_zeros(buf: &mut Vec<u8>, len: usize) -> Result<()> {
    buf.clear();
    buf.try_reserve_exact(len)
        .map_err(|_| Error::decode(format!("cannot allocate {len} bytes for the pixels")))?;
    buf.resize(len, 0);
    Ok(())
}

/// Checks that a JPEG holds an end-of-image marker after its first start-of-scan.
///
/// A JPEG is a sequence of segments `FF xx [u16 big-endian length incl. itself] [payload]` up
/// to `FF DA` (start of scan), then entropy-coded data in which a literal `FF` is stuffed as
/// `FF 00` (and `FF D0`..`FF D7` are restart markers), so an `FF D9` there is the real end of
/// the image (or of a progressive scan sequence). Thumbnails live in APP segments before the
/// scan and are skipped by length, so their own `FF D9` does not count.
fn check_jpeg_complete(data: &[u8]) -> Result<()> {
    let truncated = || {
        Error::decode(format!(
            "truncated JPEG: {} bytes and no end-of-image marker (FF D9)",
            data.len()
        ))
    };
    let mut pos = 2; // past SOI
    loop {
        // Fill bytes (FF FF ...) may precede a marker.
        while data.get(pos) == Some(&0xFF) && data.get(pos + 1) == Some(&0xFF) {
            pos += 1;
        }
        match (data.get(pos), data.get(pos + 1)) {
            (Some(0xFF), Some(0xDA)) => break,
            (Some(0xFF), Some(0xD9)) => {
                return Err(Error::decode("JPEG ends before its first scan"))
            }
            (Some(0xFF), Some(m)) if (0xD0..=0xD7).contains(m) || *m == 0x01 => pos += 2,
            (Some(0xFF), Some(_)) => {
                let len = match (data.get(pos + 2), data.get(pos + 3)) {
                    (Some(&hi), Some(&lo)) => usize::from(u16::from_be_bytes([hi, lo])),
                    _ => return Err(truncated()),
                };
                if len < 2 {
                    return Err(Error::decode(format!(
                        "corrupt JPEG: segment length {len} at byte {pos}"
                    )));
                }
                pos += 2 + len;
            }
            (Some(_), Some(_)) => {
                return Err(Error::decode(format!(
                    "corrupt JPEG: expected a marker at byte {pos}"
                )));
            }
            _ => return Err(truncated()),
        }
    }
    // From the end: a complete file ends with its EOI, so this usually looks at two bytes
    // instead of every byte of the scan (2-3% of a JPEG batch's parse). Any `FF D9` after the
    // scan's start is found either way.
    let scan = &data[pos..];
    let mut end = scan.len();
    while let Some(at) = scan[..end].iter().rposition(|&b| b == 0xFF) {
        if scan.get(at + 1) == Some(&0xD9) {
            return Ok(());
        }
        end = at;
    }
    Err(truncated())
}

type IoResult<T> = std::result::Result<T, ZByteIoError>;

/// The JPEG's bytes for zune-jpeg: `zune_core::bytestream::ZCursor`'s behaviour, method for
/// method (a position that may pass the end, reads past it giving zeros or errors), with
/// in-bounds copies of the length the caller asks for.
///
/// Why: the decoder's bit reader refills from `read_fixed_bytes_or_error::<4>`, and ZCursor
/// copies the bytes it has left (0 to 4, a length known only at run time) through a call to
/// `memcpy`: 5-6 % of a JPEG batch's CPU, once per 32 bits of entropy-coded data. Here the
/// in-bounds copy has the caller's constant length, a single load.
struct JpegBytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> JpegBytes<'a> {
    fn new(data: &'a [u8]) -> Self {
        JpegBytes { data, pos: 0 }
    }

    /// The bytes from the position on (none when it is past the end).
    #[inline(always)]
    fn rest(&self) -> &'a [u8] {
        self.data.get(self.pos..).unwrap_or(&[])
    }

    /// Copies what there is of the next `buf.len()` bytes into `buf`; returns how many.
    #[inline(always)]
    fn peek_into(&self, buf: &mut [u8]) -> usize {
        let rest = self.rest();
        if let Some(src) = rest.get(..buf.len()) {
            buf.copy_from_slice(src);
            buf.len()
        } else {
            buf[..rest.len()].copy_from_slice(rest);
            rest.len()
        }
    }
}

impl ZByteReaderTrait for JpegBytes<'_> {
    #[inline(always)]
    fn read_byte_no_error(&mut self) -> u8 {
        let byte = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos = self.pos.wrapping_add(1);
        byte
    }

    #[inline(always)]
    fn read_exact_bytes(&mut self, buf: &mut [u8]) -> IoResult<()> {
        let got = self.peek_into(buf);
        if got != buf.len() {
            return Err(ZByteIoError::NotEnoughBytes(got, buf.len()));
        }
        self.pos += got;
        Ok(())
    }

    #[inline(always)]
    fn read_bytes(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        let got = self.peek_into(buf);
        self.pos = self.pos.wrapping_add(got);
        Ok(got)
    }

    #[inline(always)]
    fn peek_bytes(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        Ok(self.peek_into(buf))
    }

    #[inline(always)]
    fn peek_exact_bytes(&mut self, buf: &mut [u8]) -> IoResult<()> {
        let got = self.peek_into(buf);
        if got != buf.len() {
            return Err(ZByteIoError::NotEnoughBytes(got, buf.len()));
        }
        Ok(())
    }

    fn z_seek(&mut self, from: ZSeekFrom) -> IoResult<u64> {
        let (base, offset) = match from {
            ZSeekFrom::Start(n) => {
                self.pos = n as usize;
                return Ok(n);
            }
            ZSeekFrom::End(n) => (self.data.len(), n as isize),
            ZSeekFrom::Current(n) => (self.pos, n as isize),
        };
        match base.checked_add_signed(offset) {
            Some(n) => {
                self.pos = n;
                Ok(n as u64)
            }
            None => Err(ZByteIoError::SeekError("Negative seek")),
        }
    }

    #[inline(always)]
    fn is_eof(&mut self) -> IoResult<bool> {
        Ok(self.pos >= self.data.len())
    }

    #[inline(always)]
    fn z_position(&mut self) -> IoResult<u64> {
        Ok(self.pos as u64)
    }

    fn read_remaining(&mut self, sink: &mut Vec<u8>) -> IoResult<usize> {
        let rest = self.data.get(self.pos..).ok_or(ZByteIoError::Generic(
            "Somehow read remaining couldn't satisfy it's invariants",
        ))?;
        sink.extend_from_slice(rest);
        self.pos += rest.len();
        Ok(rest.len())
    }
}

/// Decodes a complete JPEG to `channels` channels, into `pixels`' allocation.
///
/// `crop_rows`: the caller reads only the rows a centred crop to that many rows keeps
/// (`tf.image.resize_with_crop_or_pad`'s), and the rows below them may be left zero: a
/// baseline JPEG's decoding stops once the crop's last row is written. The rows read are
/// the same bytes as a whole decode's.
pub(super) fn decode_jpeg(
    data: &[u8],
    channels: usize,
    max_pixels: u64,
    pixels: Vec<u8>,
    crop_rows: Option<usize>,
) -> Result<Decoded> {
    check_jpeg_complete(data)?;
    decode_jpeg_from(
        JpegBytes::new(data),
        channels,
        max_pixels,
        pixels,
        crop_rows,
    )
}

/// [`decode_jpeg`] after its completeness check, from any byte reader (the tests compare
/// [`JpegBytes`] with zune's own `ZCursor`).
fn decode_jpeg_from<R: ZByteReaderTrait>(
    bytes: R,
    channels: usize,
    max_pixels: u64,
    mut pixels: Vec<u8>,
    crop_rows: Option<usize>,
) -> Result<Decoded> {
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
    let mut decoder = JpegDecoder::new_with_options(bytes, options);
    decoder
        .decode_headers()
        .map_err(|e| Error::decode(format!("corrupt JPEG: {e}")))?;
    let info = decoder
        .info()
        .ok_or_else(|| Error::decode("corrupt JPEG: no frame header"))?;
    let (width, height) = (usize::from(info.width), usize::from(info.height));
    check_pixels(width, height, max_pixels)?;
    check_buffer(width, height, channels, "the pixels")?;
    // The decoder keeps 16-bit coefficients of every component of a progressive (or
    // multi-scan) image, padded to whole 16x16 blocks: bound them before it allocates them.
    let components = usize::from(info.components.max(1));
    let padded = |side: usize| side.div_ceil(16) * 16;
    check_buffer(
        padded(width),
        padded(height),
        2 * components,
        "its coefficients",
    )?;
    let size = decoder
        .output_buffer_size()
        .ok_or_else(|| Error::decode("corrupt JPEG: image size overflows"))?;
    if size != width * height * channels {
        return Err(Error::decode(format!(
            "JPEG decodes to {size} bytes, not {width}x{height}x{channels}"
        )));
    }
    fill_zeros(&mut pixels, size)?;
    if let Some(rows) = crop_rows.filter(|&rows| rows < height) {
        // The crop keeps rows (height - rows) / 2 onwards: the rows below it are never read.
        // (Skipping the rows above it would save only their IDCT and colour conversion: their
        // Huffman codes must be decoded all the same.)
        decoder.set_rows_wanted((height - rows) / 2 + rows);
    }
    decoder
        .decode_into(&mut pixels)
        .map_err(|e| Error::decode(format!("corrupt JPEG: {e}")))?;
    Ok(Decoded {
        height,
        width,
        channels,
        pixels,
    })
}

// ---------------------------------------------------------------------------------------------
// PNG

/// Decodes a PNG (checking every chunk's CRC) to `channels` channels, into `raw`'s allocation.
pub(super) fn decode_png(
    data: &[u8],
    channels: usize,
    max_pixels: u64,
    mut raw: Vec<u8>,
) -> Result<Decoded> {
    let corrupt = |e: png::DecodingError| Error::decode(format!("corrupt PNG: {e}"));
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
    check_buffer(width, height, channels, "the pixels")?;
    // The decoder's own allocation budget: the checked frame plus its row buffers.
    let budget = (max_pixels as usize)
        .saturating_mul(8)
        .min(2 * MAX_ROW_BYTES)
        .saturating_add(1 << 20);
    decoder.set_limits(png::Limits { bytes: budget });
    let mut reader = decoder.read_info().map_err(corrupt)?;
    // libpng refuses a palette of a partial entry or of over 256 entries; png 0.18 panics on
    // the first while expanding it (an index out of range), so it is checked here.
    if let Some(palette) = reader.info().palette.as_deref() {
        if palette.len() % 3 != 0 || palette.len() > 3 * 256 {
            return Err(Error::decode(format!(
                "corrupt PNG: a palette (PLTE) of {} bytes is not 1 to 256 RGB entries",
                palette.len()
            )));
        }
    }
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| Error::decode("PNG frame size overflows"))?;
    // The frame as stored (up to 16-bit RGBA: 8 bytes a pixel), before channel conversion.
    if size > MAX_ROW_BYTES {
        return Err(Error::decode(format!(
            "image header declares {width}x{height} pixels: its frame would take {size} bytes, \
             over the {MAX_ROW_BYTES}-byte limit of one decoded row"
        )));
    }
    fill_zeros(&mut raw, size)?;
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
) -> Result<Vec<u8>> {
    let bytes = if sixteen { 2 } else { 1 };
    let need = n.checked_mul(src).and_then(|v| v.checked_mul(bytes));
    if need.is_none_or(|need| raw.len() < need) {
        return Err(Error::decode("PNG frame is shorter than its header says"));
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
    let mut out = Vec::new();
    fill_zeros(&mut out, n.saturating_mul(dst))?;
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
            other => {
                return Err(Error::decode(format!(
                    "unsupported PNG sample count {other}"
                )))
            }
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
) -> Result<Vec<u8>> {
    let color = match channels {
        1 => png::ColorType::Grayscale,
        2 => png::ColorType::GrayscaleAlpha,
        3 => png::ColorType::Rgb,
        4 => png::ColorType::Rgba,
        c => return Err(Error::encode(format!("PNG holds 1 to 4 channels, not {c}"))),
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
    let mut writer = encoder
        .write_header()
        .map_err(|e| Error::encode(e.to_string()))?;
    writer
        .write_image_data(pixels)
        .map_err(|e| Error::encode(e.to_string()))?;
    writer.finish().map_err(|e| Error::encode(e.to_string()))?;
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
) -> Result<Vec<u8>> {
    let color = match channels {
        1 => jpeg_encoder::ColorType::Luma,
        3 => jpeg_encoder::ColorType::Rgb,
        c => {
            return Err(Error::encode(format!(
                "JPEG images hold 1 or 3 channels, not {c}"
            )))
        }
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
        .map_err(|e| Error::encode(e.to_string()))?;
    Ok(out)
}

fn check_encode_size(
    pixels: &[u8],
    height: usize,
    width: usize,
    channels: usize,
    max_side: usize,
) -> Result<()> {
    if height == 0 || width == 0 {
        return Err(Error::encode(format!(
            "cannot encode an empty {height}x{width} image"
        )));
    }
    if height > max_side || width > max_side {
        return Err(Error::encode(format!(
            "a {height}x{width} image is too large for this format (at most {max_side} per side)"
        )));
    }
    if pixels.len() != height * width * channels {
        return Err(Error::encode(format!(
            "{} bytes do not make a {height}x{width}x{channels} image",
            pixels.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::image::types::PNG_MAGIC;
    use crate::decode::image::{decode, Format};

    /// `h x w x c` pixels (c 1 or 3) as a JPEG of `quality`, with the encoder set by `set`.
    fn jpeg_with(
        px: &[u8],
        h: usize,
        w: usize,
        c: usize,
        quality: u8,
        set: impl FnOnce(&mut jpeg_encoder::Encoder<&mut Vec<u8>>),
    ) -> Vec<u8> {
        let colour = if c == 1 {
            jpeg_encoder::ColorType::Luma
        } else {
            jpeg_encoder::ColorType::Rgb
        };
        let mut out = Vec::new();
        let mut enc = jpeg_encoder::Encoder::new(&mut out, quality);
        set(&mut enc);
        enc.encode(px, w as u16, h as u16, colour).unwrap();
        out
    }

    /// JpegBytes must read as zune's ZCursor does, also past the end and around markers: the
    /// same pixels or the same error for whole, cut and damaged JPEGs (baseline and
    /// progressive, with and without restart markers, gray, 4:2:0 and 4:4:4).
    #[test]
    fn jpeg_bytes_decode_as_zune_s_cursor_does() {
        use zune_core::bytestream::ZCursor;
        let outcome = |r: Result<Decoded>| match r {
            Ok(d) => Ok((d.height, d.width, d.pixels)),
            Err(e) => Err(e.to_string()),
        };
        let mut files = Vec::new();
        for (h, w, c) in [(17, 23, 3), (64, 48, 3), (9, 130, 1), (40, 40, 3)] {
            let px: Vec<u8> = (0..h * w * c).map(|i| ((i * 37) % 251) as u8).collect();
            for (progressive, restart, subsample) in [
                (false, 0, true),
                (true, 0, true),
                (false, 2, false),
                (false, 1, true),
            ] {
                files.push(jpeg_with(&px, h, w, c, 85, |enc| {
                    enc.set_progressive(progressive);
                    if restart > 0 {
                        enc.set_restart_interval(restart);
                    }
                    if !subsample {
                        enc.set_sampling_factor(jpeg_encoder::SamplingFactor::R_4_4_4);
                    }
                }));
            }
        }
        let mut cases = 0;
        for file in &files {
            let mut variants = vec![file.clone()];
            for cut in (0..file.len()).step_by(7) {
                variants.push(file[..cut].to_vec());
            }
            for at in (2..file.len()).step_by(11) {
                for byte in [0x00, 0xFF, 0xD9, 0x5A] {
                    let mut v = file.clone();
                    v[at] = byte;
                    variants.push(v);
                }
            }
            for v in &variants {
                for channels in [1, 3, 4] {
                    let ours =
                        decode_jpeg_from(JpegBytes::new(v), channels, 1 << 20, Vec::new(), None);
                    let zune =
                        decode_jpeg_from(ZCursor::new(v), channels, 1 << 20, Vec::new(), None);
                    assert_eq!(outcome(ours), outcome(zune), "{} bytes", v.len());
                    cases += 1;
                }
            }
        }
        assert!(cases > 5000, "{cases}");
    }

    /// A decode for a centred crop (`crop_rows`) stops below the crop, and the rows the crop
    /// keeps are the bytes of a whole decode's: for every sampling (gray, 4:2:0, 4:2:2, 4:4:0,
    /// 4:4:4), with restart markers, for progressive images (decoded whole), for 1, 3 and 4
    /// output channels, for crops of every height, and for damaged files (where the crop's
    /// decode may succeed when the whole one fails below the crop, never the other way).
    #[test]
    fn a_crop_s_rows_decode_as_a_whole_decode_s() {
        use jpeg_encoder::SamplingFactor as F;
        let mut stopped_early = 0;
        let mut compared = 0;
        for (h, w, c) in [
            (64, 48, 3),
            (61, 37, 3),
            (100, 24, 3),
            (45, 45, 1),
            (33, 70, 3),
        ] {
            let px: Vec<u8> = (0..h * w * c)
                .map(|i| ((i * 29 + i / 97) % 251) as u8)
                .collect();
            for (progressive, restart, sampling) in [
                (false, 0, F::F_2_2),
                (false, 0, F::F_2_1),
                (false, 0, F::F_1_2),
                (false, 0, F::F_1_1),
                (false, 3, F::F_2_2),
                (true, 0, F::F_2_2),
            ] {
                let file = jpeg_with(&px, h, w, c, 88, |enc| {
                    enc.set_progressive(progressive);
                    enc.set_sampling_factor(sampling);
                    if restart > 0 {
                        enc.set_restart_interval(restart);
                    }
                });
                // Damage in the scan's second half, below the first rows (four places: the
                // test decodes each variant some forty times).
                let mut variants = vec![file.clone()];
                for q in 0..4 {
                    let at = file.len() / 2 + q * (file.len() / 2 - 2) / 4;
                    let mut v = file.clone();
                    v[at] ^= 0x5A;
                    variants.push(v);
                }
                for v in &variants {
                    for channels in [1, 3, 4] {
                        let whole = decode_jpeg(v, channels, 1 << 20, Vec::new(), None);
                        for rows in (1..h + 2).step_by(5) {
                            let crop = decode_jpeg(v, channels, 1 << 20, Vec::new(), Some(rows));
                            let Ok(crop) = crop else {
                                assert!(whole.is_err(), "{h}x{w}: the crop failed alone");
                                continue;
                            };
                            let Ok(whole) = &whole else { continue };
                            let line = w * channels;
                            let top = h.saturating_sub(rows) / 2;
                            let kept = top * line..(top + rows.min(h)) * line;
                            assert_eq!(
                                crop.pixels[kept.clone()],
                                whole.pixels[kept],
                                "{h}x{w}x{channels}, crop {rows}, progressive {progressive}, \
                                 restart {restart}"
                            );
                            compared += 1;
                            if crop.pixels[(h - 1) * line..] != whole.pixels[(h - 1) * line..] {
                                stopped_early += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(compared > 2000, "{compared}");
        // The decodes did stop early (their last rows were left unwritten).
        assert!(
            stopped_early > compared / 4,
            "{stopped_early} of {compared}"
        );
    }

    /// The vendored zune-jpeg reuses the Huffman tables it derived for earlier images of the
    /// same thread when a DHT segment repeats: images with other tables (optimised per image,
    /// progressive, gray), decoded one after another in an interleaved order, must come out as
    /// each does on a fresh thread, where nothing is kept.
    #[test]
    fn huffman_tables_kept_from_earlier_images_decode_as_fresh_ones() {
        let mut files = Vec::new();
        for (i, (h, w, c)) in [(24, 31, 3), (50, 20, 1), (33, 33, 3)]
            .into_iter()
            .enumerate()
        {
            let px: Vec<u8> = (0..h * w * c)
                .map(|k| ((k * (13 + i) + k / 7) % 256) as u8)
                .collect();
            for (optimized, progressive, quality) in [
                (false, false, 90),
                (true, false, 90),
                (true, false, 40),
                (true, true, 75),
            ] {
                files.push(jpeg_with(&px, h, w, c, quality, |enc| {
                    enc.set_optimized_huffman_tables(optimized);
                    enc.set_progressive(progressive);
                }));
            }
        }
        let decode_one = |data: &[u8]| {
            decode_jpeg(data, 3, 1 << 20, Vec::new(), None)
                .unwrap()
                .pixels
        };
        let fresh: Vec<Vec<u8>> = files
            .iter()
            .map(|f| std::thread::scope(|s| s.spawn(|| decode_one(f)).join().unwrap()))
            .collect();
        // Every file after every other, both ways round, on this one thread.
        for step in [1, 5, 7] {
            for k in 0..files.len() * 2 {
                let at = (k * step) % files.len();
                assert_eq!(decode_one(&files[at]), fresh[at], "file {at}, step {step}");
            }
        }
        // Optimised tables differ from image to image: the test covers more than one set.
        assert!(files.windows(2).any(|p| p[0][..200] != p[1][..200]));
    }

    fn gradient(h: usize, w: usize, c: usize) -> Vec<u8> {
        (0..h * w * c).map(|i| ((i * 7) % 251) as u8).collect()
    }

    #[test]
    fn a_jpeg_is_complete_when_an_eoi_follows_its_first_scan() {
        // SOI, an APP1 segment holding a thumbnail's own EOI, SOS, then the scan.
        let head = [
            0xFF, 0xD8, 0xFF, 0xE1, 0x00, 0x06, 0xAB, 0xFF, 0xD9, 0xCD, 0xFF, 0xDA,
        ];
        let jpeg = |scan: &[u8]| [&head[..], scan].concat();
        for scan in [
            &[0x12, 0xFF, 0x00, 0xFF, 0xD9][..], // EOI last
            &[0xFF, 0xD9, 0x00, 0x00],           // bytes after the EOI
            &[0xFF, 0xFF, 0xD9],                 // a fill byte before it
            &[0xFF, 0xD9, 0xFF],                 // an FF last, the EOI before it
            &[0xFF, 0xD0, 0xFF, 0xD9, 0xFF, 0x00],
        ] {
            assert!(check_jpeg_complete(&jpeg(scan)).is_ok(), "{scan:02x?}");
        }
        for scan in [
            &[][..],
            &[0x12, 0xFF, 0x00, 0xFF],
            &[0xD9, 0xFF, 0xFF, 0x00],
            &[0xFF, 0xD8, 0xD9],
        ] {
            let e = check_jpeg_complete(&jpeg(scan)).unwrap_err().to_string();
            assert!(e.contains("no end-of-image marker"), "{scan:02x?}: {e}");
        }
        // The thumbnail's EOI before the scan does not count, nor one before the first scan.
        assert!(check_jpeg_complete(&head[..10]).is_err());
        assert!(check_jpeg_complete(&[0xFF, 0xD8, 0xFF, 0xD9]).is_err());
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
            assert!(err.to_string().contains("JPEG"), "{err}");
        }
        let err = decode(&jpg, Format::Auto, 3, 100).unwrap_err();
        assert!(err.to_string().contains("over the limit"), "{err}");
        let png = encode_png(&px, 16, 16, 3, None).unwrap();
        let err = decode(&png, Format::Auto, 3, 100).unwrap_err();
        assert!(err.to_string().contains("over the limit"), "{err}");
        let mut bad = png.clone();
        let n = bad.len();
        bad[n - 20] ^= 1;
        assert!(decode(&bad, Format::Auto, 3, 1 << 20).is_err());
        assert!(decode(&png[..n / 2], Format::Auto, 3, 1 << 20).is_err());
        assert!(decode(b"GIF89a....", Format::Auto, 3, 1 << 20)
            .unwrap_err()
            .to_string()
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
        assert!(err.to_string().contains("60000x60000"), "{err}");
    }

    /// A PNG of the chunks given (`(type, data)`), CRCs computed.
    fn png_of(chunks: &[(&[u8; 4], Vec<u8>)]) -> Vec<u8> {
        let mut png = PNG_MAGIC.to_vec();
        for (kind, data) in chunks {
            png.extend_from_slice(&(data.len() as u32).to_be_bytes());
            let mut body = kind.to_vec();
            body.extend_from_slice(data);
            png.extend_from_slice(&body);
            png.extend_from_slice(&crc32fast_like(&body).to_be_bytes());
        }
        png
    }

    fn ihdr(width: u32, height: u32, depth: u8, color: u8) -> Vec<u8> {
        let mut d = width.to_be_bytes().to_vec();
        d.extend_from_slice(&height.to_be_bytes());
        d.extend_from_slice(&[depth, color, 0, 0, 0]);
        d
    }

    /// A zlib stream of one zero byte: enough IDAT for a decoder to get past its headers.
    const ZLIB_EMPTY: [u8; 9] = [0x78, 0x9c, 0x63, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01];

    #[test]
    fn headers_past_the_row_limit_are_errors_whatever_max_pixels_says() {
        // issue 9 item 2: 1 x (2^31 - 1) RGB (6 GiB) with max_pixels raised aborted the process.
        for (w, h, depth, color, channels) in [
            (1, (1 << 31) - 1, 8, 2, 3),
            ((1 << 31) - 1, 1, 8, 2, 1),
            (1 << 16, 1 << 14, 16, 6, 1), // a 16-bit RGBA frame of 8 GiB, asked as gray
            (40_000, 40_000, 8, 0, 1),
        ] {
            let png = png_of(&[
                (b"IHDR", ihdr(w, h, depth, color)),
                (b"IDAT", ZLIB_EMPTY.to_vec()),
                (b"IEND", vec![]),
            ]);
            for max_pixels in [u64::MAX, 1 << 40] {
                let err = decode(&png, Format::Auto, channels, max_pixels).unwrap_err();
                assert!(
                    err.to_string().contains("limit of one decoded row"),
                    "{w}x{h}: {err}"
                );
            }
        }
        // A JPEG frame header of 65535 x 65535 (4 Gi pixels): refused before decoding.
        let px = gradient(8, 8, 3);
        let mut jpg = encode_jpeg(&px, 8, 8, 3, 90, false).unwrap();
        let sof = jpg.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
        jpg[sof + 5..sof + 9].copy_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF]);
        let err = decode(&jpg, Format::Auto, 3, u64::MAX).unwrap_err();
        assert!(
            err.to_string().contains("limit of one decoded row"),
            "{err}"
        );
    }

    #[test]
    fn a_palette_of_a_partial_entry_is_an_error_not_a_panic() {
        // png 0.18 panics expanding it (found by tests/fuzz); libpng refuses it too.
        for plte in [vec![0, 255, 0, 16, 239], vec![1; 3 * 257]] {
            let png = png_of(&[
                (b"IHDR", ihdr(2, 1, 8, 3)),
                (b"PLTE", plte.clone()),
                (b"tRNS", vec![0, 255]),
                (b"IDAT", ZLIB_EMPTY.to_vec()),
                (b"IEND", vec![]),
            ]);
            let err = decode(&png, Format::Png, 4, 1 << 20).unwrap_err();
            let err = err.to_string();
            assert!(err.contains("PLTE"), "{} bytes: {err}", plte.len());
        }
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
}
