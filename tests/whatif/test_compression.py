"""Compression: codec cost and the MLSys'22 criterion."""

from __future__ import annotations

import pytest

from timeline.errors import UsageError
from timeline.whatif.compression import Compression, compression_helps


def test_codec_cost() -> None:
    assert Compression().codec_ns(1e6) == 0  # no compression, no codec
    assert Compression(ratio=4).codec_ns(1e6) == 0  # a free codec
    assert Compression(ratio=4, codec_bytes_per_s=1e9).codec_ns(1e6) == 1_000_000
    assert not Compression(ratio=1, codec_bytes_per_s=1e9).active


@pytest.mark.parametrize(("ratio", "codec"), [(0.5, None), (2, 0.0), (2, -1.0)])
def test_bad_settings(ratio: float, codec: float | None) -> None:
    with pytest.raises(UsageError):
        Compression(ratio=ratio, codec_bytes_per_s=codec)


def test_compression_cannot_help_hidden_communication() -> None:
    assert not compression_helps(0.1, 0.09, ratio=100, encode_s=0.0)
    assert compression_helps(0.1, 0.3, ratio=4, encode_s=0.01)
    # Encoding that costs more than the exposed communication it saves.
    assert not compression_helps(0.1, 0.12, ratio=4, encode_s=0.05)
