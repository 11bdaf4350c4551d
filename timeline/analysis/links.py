"""Link bandwidths: named presets and a parser for ``--link-gbps``.

Takes what a user types (``100``, ``25G``, ``100Gbps``, ``12.5GB/s``, ``400GbE``, ``ib-hdr``,
``nvlink4``) and gives the link's bandwidth in Gbit/s (10⁹ bits per second, one direction), the unit
the utilisation figures of :mod:`timeline.analysis.collectives` compare the achieved bus bandwidth
with (nccl-tests' convention: bus bandwidth approaches the peak one-direction bandwidth of the
slowest link of the ring).

Presets are the advertised one-direction data rates:

- Ethernet (``1gbe`` … ``800gbe``): the port speed.
- InfiniBand 4x ports (``ib-qdr`` … ``ib-xdr``): QDR 40 (32 after 8b/10b coding), FDR 56, EDR 100,
  HDR 200, NDR 400, XDR 800.
- NVLink, per GPU, all links, one direction (NVIDIA's "bidirectional" figure halved): NVLink 1
  (P100) 80 GB/s, NVLink 2 (V100) 150 GB/s, NVLink 3 (A100) 300 GB/s, NVLink 4 (H100) 450 GB/s,
  NVLink 5 (B200) 900 GB/s.
- PCIe x16, one direction: gen3 ≈ 15.75 GB/s, gen4 ≈ 31.5 GB/s, gen5 ≈ 63 GB/s, gen6 ≈ 121 GB/s.
"""

from __future__ import annotations

import re
from types import MappingProxyType

from timeline.errors import UsageError

__all__ = [
    "LINK_PRESETS",
    "PHYSICAL_CEILING_GBPS",
    "bandwidth_ceiling",
    "describe_link",
    "describe_presets",
    "parse_link_gbps",
]

_PRESETS: dict[str, float] = {
    # Ethernet port speeds.
    "1gbe": 1.0,
    "10gbe": 10.0,
    "25gbe": 25.0,
    "40gbe": 40.0,
    "50gbe": 50.0,
    "100gbe": 100.0,
    "200gbe": 200.0,
    "400gbe": 400.0,
    "800gbe": 800.0,
    # InfiniBand 4x ports, advertised data rate.
    "ib-sdr": 10.0,
    "ib-ddr": 20.0,
    "ib-qdr": 40.0,
    "ib-fdr": 56.0,
    "ib-edr": 100.0,
    "ib-hdr": 200.0,
    "ib-ndr": 400.0,
    "ib-xdr": 800.0,
    # NVLink per GPU, all links, one direction (GB/s × 8).
    "nvlink1": 640.0,
    "nvlink2": 1200.0,
    "nvlink3": 2400.0,
    "nvlink4": 3600.0,
    "nvlink5": 7200.0,
    # PCIe x16, one direction (GB/s × 8).
    "pcie3": 126.0,
    "pcie4": 252.0,
    "pcie5": 504.0,
    "pcie6": 968.0,
}

LINK_PRESETS = MappingProxyType(_PRESETS)
"""Preset name → one-direction bandwidth in Gbit/s."""

PHYSICAL_CEILING_GBPS = _PRESETS["nvlink5"]
"""The fastest per-GPU link there is, one direction, in Gbit/s: 7,200 (900 GB/s).

NVLink 5 (NVIDIA Blackwell, B200/GB200) gives a GPU 18 links and 1.8 TB/s in both directions
together, 900 GB/s each way (NVIDIA, "NVLink and NVLink Switch", nvidia.com/en-us/data-center/nvlink;
the B200 datasheet). No collective can move its bus bytes faster than its GPUs can send them: a bus
bandwidth above this, without ``--link-gbps``, is a timing or size the trace got wrong (a span cut
short, bytes of the wrong tensor), not a fast network.
"""


def bandwidth_ceiling(link_gbps: float | None) -> tuple[float, str]:
    """Return the bus bandwidth no transfer can exceed, in Gbit/s, and how to name it in a warning.

    The given link when there is one (``--link-gbps``), else :data:`PHYSICAL_CEILING_GBPS`.

    Examples
    --------
    >>> bandwidth_ceiling(100.0)
    (100.0, 'the 100 Gbit/s link')
    >>> bandwidth_ceiling(None)
    (7200.0, '7,200 Gbit/s (900 GB/s, NVLink 5, the fastest per-GPU link)')
    """
    if link_gbps is not None:
        return link_gbps, f"the {link_gbps:g} Gbit/s link"
    ceiling = PHYSICAL_CEILING_GBPS
    return ceiling, f"{ceiling:,.0f} Gbit/s ({ceiling / 8:,.0f} GB/s, NVLink 5, the fastest per-GPU link)"


# Other spellings of the presets: "hdr", "infiniband-hdr", "nvlink-4", "v100-nvlink", "100g-ethernet"…
_ALIASES: dict[str, str] = {
    **{name.removeprefix("ib-"): name for name in _PRESETS if name.startswith("ib-")},
    **{f"infiniband-{name.removeprefix('ib-')}": name for name in _PRESETS if name.startswith("ib-")},
    **{f"nvlink-{name[-1]}": name for name in _PRESETS if name.startswith("nvlink")},
    **{f"pcie-{name[-1]}": name for name in _PRESETS if name.startswith("pcie")},
    **{f"pcie-gen{name[-1]}": name for name in _PRESETS if name.startswith("pcie")},
    **{f"pciegen{name[-1]}": name for name in _PRESETS if name.startswith("pcie")},
    "p100-nvlink": "nvlink1",
    "v100-nvlink": "nvlink2",
    "a100-nvlink": "nvlink3",
    "h100-nvlink": "nvlink4",
    "b200-nvlink": "nvlink5",
}

# A number with an optional prefix and unit. Upper-case ``B`` (``GB/s``, ``GBps``) or ``byte`` means
# bytes; anything else (``G``, ``Gb``, ``Gbps``, ``Gbit/s``, ``GbE``) means bits.
_RATE = re.compile(
    r"^\s*(?P<value>\d+(?:\.\d*)?|\.\d+)\s*(?:(?P<prefix>[kKmMgGtT])(?P<binary>i)?)?(?P<unit>[A-Za-z/]*)\s*$"
)
_BIT_UNITS = frozenset({"", "b", "bps", "b/s", "bit", "bits", "bit/s", "bits/s", "be", "ethernet"})
_BYTE_UNITS = frozenset({"b", "bps", "b/s", "byte", "bytes", "byte/s", "bytes/s"})
_DECIMAL = {"": 1e-9, "k": 1e-6, "m": 1e-3, "g": 1.0, "t": 1e3}
_BINARY = {"k": 2**10 / 1e9, "m": 2**20 / 1e9, "g": 2**30 / 1e9, "t": 2**40 / 1e9}


def _rate_gbps(text: str) -> float | None:
    """Return the Gbit/s of a number with an optional unit, or None if ``text`` is not one."""
    match = _RATE.match(text)
    if match is None:
        return None
    value = float(match.group("value"))
    prefix = (match.group("prefix") or "").lower()
    unit = match.group("unit")
    lowered = unit.lower()
    is_bytes = (unit.startswith("B") and lowered in _BYTE_UNITS) or lowered.startswith("byte")
    if not is_bytes and lowered not in _BIT_UNITS:
        return None
    if not prefix and not unit:
        return value  # a bare number is Gbit/s
    scale = _BINARY[prefix] if match.group("binary") else _DECIMAL[prefix]
    return value * scale * (8 if is_bytes else 1)


def _normalise(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def parse_link_gbps(text: str) -> float:
    """Return the one-direction bandwidth in Gbit/s that ``text`` names.

    Parameters
    ----------
    text
        A number of Gbit/s (``100``), a number with a unit (``25G``, ``100Gbps``, ``400GbE``,
        ``800 Mbit/s``, ``1.6Tbps``; bytes with an upper-case ``B``: ``12.5GB/s``, ``25GiB/s``) or a
        preset name (:data:`LINK_PRESETS`, case, ``-`` and ``_`` insensitive: ``ib-hdr``, ``HDR``,
        ``nvlink4``, ``NVLink-4``, ``100gbe``, ``pcie4``).

    Returns
    -------
    float
        Gbit/s (10⁹ bits per second), positive.

    Raises
    ------
    UsageError
        If ``text`` is neither a positive rate nor a preset.

    Examples
    --------
    >>> parse_link_gbps("25G"), parse_link_gbps("ib-hdr"), parse_link_gbps("12.5GB/s")
    (25.0, 200.0, 100.0)
    """
    key = _normalise(text)
    if key in _PRESETS:
        return _PRESETS[key]
    if key in _ALIASES:
        return _PRESETS[_ALIASES[key]]
    value = _rate_gbps(text)
    if value is None:
        msg = (
            f"--link-gbps {text!r}: not a bandwidth; give Gbit/s (100, 25G, 100Gbps, 12.5GB/s) "
            f"or a preset: {describe_presets()}"
        )
        raise UsageError(msg)
    if value <= 0:
        msg = f"--link-gbps {text!r}: the bandwidth must be positive"
        raise UsageError(msg)
    return value


def describe_link(text: str, gbps: float, *, option: str = "--link-gbps") -> str:
    """Return the capacity an option's text names, as every figure derived from it uses it.

    Examples
    --------
    >>> describe_link("100GB", 800.0)
    'link 800 Gbit/s one direction (--link-gbps 100GB: bytes, 8 bits each)'
    >>> describe_link("ib-hdr", 200.0)
    'link 200 Gbit/s one direction (--link-gbps ib-hdr: a preset)'
    """
    key = _normalise(text)
    if key in _PRESETS or key in _ALIASES:
        how = ": a preset"
    else:
        match = _RATE.match(text)
        unit = "" if match is None else match.group("unit")
        is_bytes = unit.startswith("B") or unit.lower().startswith("byte")
        how = ": bytes, 8 bits each" if is_bytes else ""
    return f"link {gbps:g} Gbit/s one direction ({option} {text}{how})"


def describe_presets() -> str:
    """Return the presets as ``name=Gbps`` pairs, for help texts and error messages."""
    return ", ".join(f"{name}={gbps:g}" for name, gbps in _PRESETS.items())
