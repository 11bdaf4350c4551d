"""Gradient compression with its cost: a ratio, and the time to encode and decode.

Takes a compression ratio ``r`` and the codec's throughput; gives the extra time each bucket pays.
The model is the one of Agarwal et al., "On the Utility of Gradient Compression in Distributed
Training Systems" (MLSys 2022): compression divides the bits on the wire by ``r``, but encoding
runs on the training's own compute (before the bucket can leave) and decoding after the transfer
(before the update can use the gradient). In the replay (:mod:`timeline.whatif.engine`):

- encode: ``bytes / codec`` inserted in the rank's compute timeline when the bucket is ready,
  delaying everything after it, the bucket's collective included;
- the collective's bandwidth term is divided by ``r`` (its latency term is not);
- decode: ``bytes / codec`` added to the collective's end.

So compression shortens an iteration only when communication is on its critical path, and by less
than the codec costs when it is not: :func:`compression_helps` is the paper's closed-form test.
"""

from __future__ import annotations

from dataclasses import dataclass

from timeline.errors import UsageError

__all__ = ["Compression", "compression_helps"]


@dataclass(frozen=True)
class Compression:
    """Gradient compression: ``ratio`` ≥ 1 and the codec's throughput (None: free, an upper bound).

    Attributes
    ----------
    ratio
        Uncompressed bytes over bytes sent; 1 means no compression (and no codec cost).
    codec_bytes_per_s
        Bytes of gradient encoded per second, and decoded per second, each; None: free.
    """

    ratio: float = 1.0
    codec_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        if not self.ratio >= 1:
            raise UsageError(f"compression ratio {self.ratio}: must be at least 1 (1 = no compression)")
        if self.codec_bytes_per_s is not None and not self.codec_bytes_per_s > 0:
            raise UsageError(f"codec throughput {self.codec_bytes_per_s} bytes/s: must be positive")

    @property
    def active(self) -> bool:
        """Whether anything is compressed."""
        return self.ratio > 1

    def codec_ns(self, nbytes: float) -> int:
        """Return the time to encode (or to decode) ``nbytes`` of gradient, in ns; 0 when inactive or free."""
        if not self.active or self.codec_bytes_per_s is None or nbytes <= 0:
            return 0
        return round(nbytes / self.codec_bytes_per_s * 1e9)


def compression_helps(
    backward_s: float, communication_s: float, *, ratio: float, encode_s: float, decode_s: float = 0.0
) -> bool:
    """Return whether compression shortens an overlapped iteration, by the MLSys'22 criterion.

    Overlapped, the backward pass and the communication take ``max(T_bwd, T_comm)``; compressed,
    at most ``T_bwd + T_enc + T_comm / r + T_dec``. Compression pays only when the second is smaller,
    which is impossible when communication is already hidden (``T_comm ≤ T_bwd``).

    Examples
    --------
    >>> compression_helps(0.1, 0.05, ratio=10, encode_s=0.001)  # communication already hidden
    False
    >>> compression_helps(0.1, 0.5, ratio=10, encode_s=0.01)
    True
    """
    return backward_s + encode_s + communication_s / ratio + decode_s < max(backward_s, communication_s)
