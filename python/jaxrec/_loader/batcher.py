"""Fixed-shape batches: pad a batch's real rows to ``batch_size`` and add the mask.

XLA compiles one program per input shape, so every batch of a run has the same shapes and
dtypes: the last batches of an epoch (or a host short of records) are padded with rows of
zeros (``b""`` for bytes) that the ``mask`` marks False. A batch whose arrays differ from the
first batch's (a decoder that changed shape, say) is an error, never a silent recompile.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from jaxrec.errors import FeatureSpecError, JaxrecError

__all__ = ["Batcher"]


class Batcher:
    """Pads parsed rows to full batches with a mask.

    Args:
        template: a parse of zero records: the keys, dtypes and per-row shapes of a batch.
        batch_size: rows per batch.
        mask_key: the key of the mask (bool ``[batch_size]``, False on padding rows).

    Raises:
        FeatureSpecError: ``mask_key`` is also an output key of the spec.
    """

    def __init__(
        self, template: Mapping[str, np.ndarray], batch_size: int, mask_key: str = "mask"
    ) -> None:
        if mask_key in template:
            raise FeatureSpecError(
                f"the mask key {mask_key!r} is also an output key; pass mask_key="
            )
        self.template = dict(template)
        self.batch_size = batch_size
        self.mask_key = mask_key

    def finish(self, parsed: Mapping[str, np.ndarray] | None, real: int) -> dict[str, np.ndarray]:
        """Pads ``real`` parsed rows (``None`` when there are none) to a full batch + mask.

        Raises:
            JaxrecError: an array's per-row shape or dtype differs from the template's.
        """
        b = self.batch_size
        src = parsed if parsed is not None else self.template
        out: dict[str, np.ndarray] = {}
        for k, tmpl in self.template.items():
            v = src[k]
            if v.shape[0] < b:
                pad = np.zeros((b - v.shape[0], *tmpl.shape[1:]), dtype=tmpl.dtype)
                if tmpl.dtype == object:
                    pad[...] = b""
                v = np.concatenate([v, pad])
            if v.shape[1:] != tmpl.shape[1:] or v.dtype != tmpl.dtype:
                raise JaxrecError(
                    f"batch array {k!r} has shape {v.shape[1:]} / dtype {v.dtype}, but the first "
                    f"batch had {tmpl.shape[1:]} / {tmpl.dtype}: refusing a silent recompile"
                )
            out[k] = v
        mask = np.zeros(b, dtype=bool)
        mask[:real] = True
        out[self.mask_key] = mask
        return out
