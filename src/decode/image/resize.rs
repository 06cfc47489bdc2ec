//! A decoded image brought to the spec's shape: `tf.image.resize_with_crop_or_pad`, or
//! `tf.image.resize(..., "bilinear")` with or without antialiasing, in TensorFlow's float32
//! steps, and the uint8 / float32 output conversion.

use super::types::{Decoded, ImageSpec, Resize};
use crate::alloc::{row_bytes, try_filled};
use crate::error::{Error, Result};

/// A resampling buffer of `len` zeros: within the row limit (its size comes from the image's
/// declared width, times the spec's height), and allocated fallibly.
fn scratch(len: Option<usize>, what: &str) -> Result<Vec<f32>> {
    match len.filter(|&n| row_bytes::<f32>(n).is_some()) {
        Some(n) => try_filled(n, 0f32).map_err(|e| Error::decode(format!("resizing: {what}: {e}"))),
        None => Err(Error::decode(format!(
            "resizing this image needs a {what} over the row limit"
        ))),
    }
}

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
pub fn fit<T: Pixel>(img: &Decoded, spec: &ImageSpec, out: &mut [T]) -> Result<()> {
    let (h, w, c) = (spec.height, spec.width, img.channels);
    // Every resampler indexes both buffers by these sizes: check them, never slice past one.
    let pixels = img
        .height
        .checked_mul(img.width)
        .and_then(|p| p.checked_mul(c));
    let outputs = h.checked_mul(w).and_then(|p| p.checked_mul(c));
    if pixels != Some(img.pixels.len()) || outputs != Some(out.len()) || !(1..=4).contains(&c) {
        return Err(Error::internal(format!(
            "resize: {} pixels for {}x{}x{c}, {} outputs for {h}x{w}x{c}",
            img.pixels.len(),
            img.height,
            img.width,
            out.len()
        )));
    }
    match spec.resize {
        Resize::None => {
            if img.height != h || img.width != w {
                return Err(Error::decode(format!(
                    "image is {}x{} but the spec's shape is {h}x{w}; pass resize=\"crop_or_pad\" \
                     or resize=\"bilinear\" to accept other sizes",
                    img.height, img.width
                )));
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
                scale_and_translate(img, h, w, out)?;
            } else {
                resize_bilinear(img, h, w, out);
            }
        }
    }
    Ok(())
}

/// `tf.image.resize_with_crop_or_pad`: crop offsets `(in - out) / 2` where the image is larger,
/// pad offsets `(out - in) / 2` where it is smaller (integer division, so an odd remainder
/// goes to the bottom/right), zeros elsewhere. The zeros are written too: `out` may hold an
/// earlier batch's pixels.
fn crop_or_pad<T: Pixel>(img: &Decoded, h: usize, w: usize, out: &mut [T]) {
    let c = img.channels;
    let crop_y = img.height.saturating_sub(h) / 2;
    let crop_x = img.width.saturating_sub(w) / 2;
    let pad_y = h.saturating_sub(img.height) / 2;
    let pad_x = w.saturating_sub(img.width) / 2;
    let rows = img.height.min(h);
    let cols = img.width.min(w);
    let zero = T::from_u8(0);
    let line = w * c;
    out[..pad_y * line].fill(zero);
    out[(pad_y + rows) * line..].fill(zero);
    for r in 0..rows {
        let src_at = ((crop_y + r) * img.width + crop_x) * c;
        let dst_line = &mut out[(pad_y + r) * line..(pad_y + r + 1) * line];
        let (left, rest) = dst_line.split_at_mut(pad_x * c);
        let (middle, right) = rest.split_at_mut(cols * c);
        left.fill(zero);
        right.fill(zero);
        let src = &img.pixels[src_at..src_at + cols * c];
        for (o, &v) in middle.iter_mut().zip(src) {
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

fn spans(out: usize, inp: usize, antialias: bool) -> Result<Spans> {
    let scale = out as f32 / inp as f32;
    let inv_scale = (1.0f64 / f64::from(scale)) as f32;
    let kernel_scale = if antialias { inv_scale.max(1.0) } else { 1.0 };
    let radius = 1.0f32;
    let size = ((2.0 * (radius * kernel_scale).ceil()) as usize + 1).min(inp);
    let one_over_kernel_scale = 1.0 / kernel_scale;
    let mut starts = vec![0usize; out];
    let mut weights = scratch(out.checked_mul(size), "weight table")?;
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
    Ok(Spans {
        size,
        starts,
        weights,
    })
}

fn scale_and_translate<T: Pixel>(img: &Decoded, h: usize, w: usize, out: &mut [T]) -> Result<()> {
    let c = img.channels;
    let (in_h, in_w) = (img.height, img.width);
    let rows = spans(h, in_h, true)?;
    let cols = spans(w, in_w, true)?;
    // Rows first into [h, in_w, c], then columns, accumulating in the same order as TF.
    let row_len = in_w * c;
    let mut mid = scratch(h.checked_mul(row_len), "resampling buffer")?;
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::image::{Format, PixelType};

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

    /// Decoders write into spare batches holding an earlier batch's pixels: every mode of
    /// `fit` must write every output, padding included, for any crop/pad mix.
    #[test]
    fn fit_writes_every_output_pixel() {
        let modes = [
            Resize::CropOrPad,
            Resize::Bilinear { antialias: false },
            Resize::Bilinear { antialias: true },
        ];
        for (h, w) in [(3, 5), (5, 3), (2, 2), (6, 7), (4, 4), (1, 9)] {
            for c in [1, 3, 4] {
                let img = Decoded {
                    height: h,
                    width: w,
                    channels: c,
                    pixels: (0..h * w * c).map(|i| (i % 200) as u8 + 1).collect(),
                };
                for resize in modes {
                    for (oh, ow) in [(4, 4), (2, 6), (7, 3), (h, w)] {
                        let mut sp = spec(oh, ow, resize);
                        sp.channels = c;
                        let mut clean = vec![0u8; oh * ow * c];
                        let mut dirty = vec![0xABu8; oh * ow * c];
                        fit(&img, &sp, &mut clean).unwrap();
                        fit(&img, &sp, &mut dirty).unwrap();
                        assert_eq!(clean, dirty, "{h}x{w}x{c} -> {oh}x{ow} {resize:?}");
                        let mut clean = vec![0f32; oh * ow * c];
                        let mut dirty = vec![f32::NAN; oh * ow * c];
                        fit(&img, &sp, &mut clean).unwrap();
                        fit(&img, &sp, &mut dirty).unwrap();
                        assert_eq!(clean, dirty, "{h}x{w}x{c} -> {oh}x{ow} {resize:?} f32");
                    }
                }
            }
        }
    }

    #[test]
    fn an_antialiased_resize_of_a_very_wide_image_is_refused_not_allocated() {
        // A 1 x 2^20 gray image (1 MiB, a few KiB as PNG) to 2048 rows: the row pass would
        // need 2048 x 2^20 floats (8 GiB).
        let img = Decoded {
            height: 1,
            width: 1 << 20,
            channels: 1,
            pixels: vec![7; 1 << 20],
        };
        let mut out = vec![0u8; 2048 * 4];
        let aa = spec(2048, 4, Resize::Bilinear { antialias: true });
        let err = fit(&img, &aa, &mut out).unwrap_err();
        assert!(err.to_string().contains("row limit"), "{err}");
        let small = spec(16, 4, Resize::Bilinear { antialias: true });
        fit(&img, &small, &mut out[..64]).unwrap();
        assert!(out[..64].iter().all(|&v| v == 7));
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
