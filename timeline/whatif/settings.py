"""What-if settings as a user writes them (``10,25,100Gbps``, ``ddp:25``, ``0.8``…), read and checked.

Takes the text of each setting and gives a :class:`Settings` (the values :func:`build_whatif_report`
sweeps), raising :class:`~timeline.errors.UsageError` with the option and the fix for bad values;
:func:`choose_efficiency` picks the link efficiency when none is given.

Every value is checked against a documented range (``docs/whatif.md``): finite, positive where a
zero means nothing, and bounded so that predicted times stay well inside the ``Int64`` nanoseconds
they are written in: a latency of at most :data:`~timeline.whatif.engine.MAX_LATENCY_S`, a world
size of at most :data:`~timeline.whatif.engine.MAX_WORLD_SIZE`.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from timeline.analysis.links import parse_link_gbps
from timeline.errors import UsageError
from timeline.whatif.bucketing import MEASURED, BucketPolicy, parse_bucket_policy
from timeline.whatif.compression import Compression
from timeline.whatif.costs import (
    ALGORITHMS,
    MAX_LATENCY_S,
    MAX_WORLD_SIZE,
    Algorithm,
    Efficiency,
    parse_duration_s,
)

if TYPE_CHECKING:
    from timeline.whatif.engine import Scenario

__all__ = [
    "DimensionValues",
    "Settings",
    "check_codec_gbps",
    "check_dimensions",
    "check_named",
    "choose_efficiency",
    "parse_bandwidths",
    "parse_dimension_bandwidth",
    "parse_efficiency",
    "parse_latencies",
    "parse_measured_links",
    "parse_settings",
]

_UNIT = re.compile(r"^\s*[0-9]*\.?[0-9]+\s*(?P<unit>[A-Za-z/]+)\s*$")
_DIMENSION = re.compile(r"[A-Za-z0-9_.-]+")

DimensionValues = tuple[tuple[str, float], ...]
"""``(dimension, value)`` pairs, in the order given: a link (Gbit/s) or a latency (s) per dimension."""


def parse_bandwidths(text: str) -> list[float | None]:
    """Read ``10,25,40,100Gbps`` (a unit on the last item applies to the bare numbers), presets, ``measured``.

    Examples
    --------
    >>> parse_bandwidths("10,25,100Gbps"), parse_bandwidths("800Mbps,measured,ib-hdr")
    ([10.0, 25.0, 100.0], [0.8, None, 200.0])
    """
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise UsageError(f"--bandwidth {text!r}: give one or more bandwidths, e.g. 10,25,40,100Gbps")
    unit = ""
    last = _UNIT.match(items[-1])
    if last is not None:
        unit = last["unit"]
    out: list[float | None] = []
    for item in items:
        if item.lower() == "measured":
            out.append(None)
            continue
        bare = re.fullmatch(r"[0-9]*\.?[0-9]+", item) is not None
        try:
            out.append(parse_link_gbps(item + unit if bare else item))
        except UsageError:
            msg = f"--bandwidth {item!r}: not a bandwidth; give Gbit/s (10, 25G, 12.5GB/s) or a preset"
            raise UsageError(msg) from None
    return out


def _split_dimension(item: str, option: str, text: str) -> tuple[str | None, str]:
    """Return (dimension, value) of ``tp=nvlink4``; (None, value) for an item without ``=``."""
    dimension, sep, value = item.partition("=")
    if not sep:
        return None, item.strip()
    dimension, value = dimension.strip(), value.strip()
    if not _DIMENSION.fullmatch(dimension) or not value:
        msg = (
            f"{option} {text!r}: {item!r} is not DIMENSION=VALUE; write the dimension as the trace "
            f"labels it, e.g. {option} tp=nvlink4,dp=25Gbps"
        )
        raise UsageError(msg)
    return dimension, value


def _by_dimension(text: str, option: str, parse: Any) -> tuple[float | None, DimensionValues]:
    """Read ``[VALUE,]DIM=VALUE[,DIM=VALUE…]``: the value of every other dimension and each named one."""
    every: float | None = None
    named: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        dimension, value = _split_dimension(item, option, text)
        if dimension is None:
            if every is not None:
                msg = f"{option} {text!r}: give one value for every other dimension, not several"
                raise UsageError(msg)
            every = parse(value)
            continue
        if dimension in named:
            raise UsageError(f"{option} {text!r}: dimension {dimension!r} is given twice")
        named[dimension] = parse(value)
    return every, tuple(named.items())


def parse_dimension_bandwidth(
    text: str, *, option: str = "--bandwidth"
) -> tuple[float | None, DimensionValues]:
    """Read one per-dimension link setting: ``tp=nvlink4,dp=25Gbps``.

    ``25Gbps,tp=nvlink4``: tp at NVLink 4, every other dimension at 25 Gbit/s. Each link as
    :func:`~timeline.analysis.links.parse_link_gbps` reads it (Gbit/s, a rate with a unit, a preset).

    Returns
    -------
    tuple
        The link of every dimension not named (None: as measured), and ``(dimension, Gbit/s)`` pairs.

    Examples
    --------
    >>> parse_dimension_bandwidth("tp=nvlink4,dp=25Gbps")
    (None, (('tp', 3600.0), ('dp', 25.0)))
    >>> parse_dimension_bandwidth("100,tp=400")
    (100.0, (('tp', 400.0),))
    """

    def link(value: str) -> float:
        try:
            return parse_link_gbps(value)
        except UsageError:
            msg = (
                f"{option} {text!r}: {value!r} is not a bandwidth; give Gbit/s (10, 25G, 12.5GB/s) "
                "or a preset"
            )
            raise UsageError(msg) from None

    return _by_dimension(text, option, link)


def parse_measured_links(text: str | None) -> tuple[float | None, DimensionValues]:
    """Read ``--link-gbps``: the link the trace ran on (``25``, ``100gbe``), or one per dimension.

    ``tp=nvlink4,dp=25``: the links tp's and dp's collectives ran on; a bare link: every other one.

    Examples
    --------
    >>> parse_measured_links("25"), parse_measured_links("tp=400,100")
    ((25.0, ()), (100.0, (('tp', 400.0),)))
    """
    if text is None:
        return None, ()
    if "=" not in text:
        return parse_link_gbps(text), ()
    return parse_dimension_bandwidth(text, option="--link-gbps")


def parse_latencies(text: str | None) -> tuple[float | None, DimensionValues]:
    """Read ``--latency``: ``5us`` (every collective), or per dimension ``tp=1us,dp=20us``.

    ``5us,tp=1us``: tp at 1 µs, every other dimension at 5 µs. Not given (None), or no bare duration:
    the other collectives keep the fixed cost fitted from the trace (None).

    Examples
    --------
    >>> parse_latencies("5us"), parse_latencies("2us,dp=20us"), parse_latencies(None)
    ((5e-06, ()), (2e-06, (('dp', 2e-05),)), (None, ()))
    """
    if text is None:
        return None, ()
    return _by_dimension(text, "--latency", _latency_s)


def _parse_list(text: str, option: str, kind: type[int] | type[float]) -> list[Any]:
    values: list[Any] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if item.lower() == "measured" and kind is int:
            values.append(None)
            continue
        try:
            values.append(kind(item))
        except ValueError:
            raise UsageError(f"{option} {text!r}: {item!r} is not a number") from None
    if not values:
        raise UsageError(f"{option} {text!r}: give at least one value")
    return values


def parse_efficiency(text: str) -> Efficiency:
    """Read ``observed``, ``uniform``, ``full`` or a fraction (``0.8``, ``80%``)."""
    spelled = text.strip().lower()
    if spelled in ("observed", "uniform", "full"):
        return spelled  # type: ignore[return-value]
    try:
        value = float(spelled.rstrip("%")) / (100 if spelled.endswith("%") else 1)
    except ValueError:
        raise UsageError(
            f"--efficiency {text!r}: use observed, uniform, full, or a fraction such as 0.8"
        ) from None
    if not 0 < value <= 1:
        raise UsageError(f"--efficiency {text!r}: a fraction must be in (0, 1]")
    return value


@dataclass(frozen=True, kw_only=True)
class Settings:
    """The settings a what-if sweeps, read from their text (``timeline whatif``'s options); one value object.

    The defaults are the measured conditions: ``Settings()`` replays the trace as it ran.
    :meth:`scenarios` packs every combination into a :class:`~timeline.whatif.engine.Scenario`, in
    the order a sweep lists them, and :meth:`scenario` one of them (what a target's search starts from).

    Raises
    ------
    UsageError
        ``dimension_bandwidths`` not of the length of ``bandwidths``.
    """

    bandwidths: list[float | None] = field(default_factory=lambda: [None])
    """Per link setting, the link of every collective (or of the dimensions not named); None: measured."""
    world_sizes: list[int | None] = field(default_factory=lambda: [None])
    """World sizes; None: as measured."""
    compressions: list[float] = field(default_factory=lambda: [1.0])
    """Gradient compression ratios (1: none)."""
    buckets: list[BucketPolicy] = field(default_factory=lambda: [MEASURED])
    """Gradient bucketing policies; a target's search takes the first."""
    algorithm: Algorithm = "ring"
    latency_s: float | None = None
    """The latency of one step of every collective (of those of the dimensions ``dimension_latencies``
    does not name); None: as measured (each keeps its fitted fixed cost)."""
    codec_gbps: float | None = None
    """The codec's throughput, Gbit/s of gradient for encoding and for decoding; None: free."""
    target_sf: float | None = None
    """Also search the bandwidth, and the compression ratio at each bandwidth, that reach it."""
    dimension_bandwidths: list[DimensionValues] | None = None
    """Per link setting (same length as ``bandwidths``): the links of named dimensions; None: none."""
    dimension_latencies: DimensionValues = ()
    """``α`` of the collectives of named dimensions (``latency_s`` for the others)."""
    efficiency: Efficiency = "observed"
    """The fraction of the link collectives achieve (:func:`choose_efficiency` picks it for a command)."""
    iterations: list[int] | None = None
    """Average over these iterations only (``ProfilerStep`` numbers); None: every iteration."""

    def __post_init__(self) -> None:
        if self.dimension_bandwidths is not None and len(self.dimension_bandwidths) != len(self.bandwidths):
            raise UsageError("dimension_bandwidths: give one entry per bandwidth (bandwidths)")

    @property
    def links(self) -> list[tuple[float | None, DimensionValues]]:
        """Each link setting: (link of every other dimension, links of named dimensions)."""
        named = self.dimension_bandwidths or [() for _ in self.bandwidths]
        return list(zip(self.bandwidths, named, strict=True))

    @property
    def dimensions(self) -> list[tuple[str, str]]:
        """Every (option, dimension) named, in the order given."""
        named = [("--bandwidth", d) for pairs in self.dimension_bandwidths or [] for d, _ in pairs]
        return named + [("--latency", d) for d, _ in self.dimension_latencies]

    def scenario(
        self,
        *,
        bandwidth_gbps: float | None = None,
        dimension_bandwidths: DimensionValues = (),
        world_size: int | None = None,
        compression: float = 1.0,
        buckets: BucketPolicy | None = None,
    ) -> Scenario:
        """Return the scenario of one combination, with the settings every combination shares.

        ``buckets``: default the first policy. The codec applies to every ratio above 1.
        """
        from timeline.whatif.engine import Scenario

        codec = self.codec_gbps * 1e9 / 8 if self.codec_gbps is not None else None
        return Scenario(
            dimension_bandwidths=dimension_bandwidths,
            dimension_latencies=self.dimension_latencies,
            bandwidth_gbps=bandwidth_gbps,
            world_size=world_size,
            efficiency=self.efficiency,
            latency_s=self.latency_s,
            algorithm=self.algorithm,
            buckets=buckets if buckets is not None else self.buckets[0],
            compression=Compression(ratio=compression, codec_bytes_per_s=codec),
        )

    def scenarios(self) -> list[Scenario]:
        """Return every combination of links, world sizes, compression ratios and buckets, in that order."""
        return [
            self.scenario(
                bandwidth_gbps=bandwidth,
                dimension_bandwidths=named,
                world_size=world,
                compression=ratio,
                buckets=policy,
            )
            for (bandwidth, named), world, ratio, policy in itertools.product(
                self.links, self.world_sizes, self.compressions, self.buckets
            )
        ]


def _read_bandwidths(values: str | Sequence[str]) -> tuple[list[float | None], list[DimensionValues]]:
    """Read the ``--bandwidth`` values: each a list of links (a sweep) or one per-dimension setting."""
    bandwidths: list[float | None] = []
    named: list[DimensionValues] = []
    for value in [values] if isinstance(values, str) else values:
        if "=" in value:
            every, pairs = parse_dimension_bandwidth(value)
            bandwidths.append(every)
            named.append(pairs)
            continue
        links = parse_bandwidths(value)
        bandwidths.extend(links)
        named.extend(() for _ in links)
    return bandwidths, named


def check_dimensions(settings: Settings, dimensions: Sequence[str]) -> None:
    """Check that every dimension the settings name is one of the trace's.

    Raises
    ------
    UsageError
        A dimension the trace has none of, listing the trace's dimensions.
    """
    check_named(settings.dimensions, dimensions)


def check_named(named: Sequence[tuple[str, str]], dimensions: Sequence[str]) -> None:
    """Check that every (option, dimension) named is one of the trace's ``dimensions``.

    Raises
    ------
    UsageError
        A dimension the trace has none of, listing the trace's dimensions.
    """
    for option, dimension in named:
        if dimension in dimensions:
            continue
        known = ", ".join(dimensions) if dimensions else "none (its process groups have no description)"
        msg = (
            f"{option} {dimension}=…: the trace has no dimension {dimension!r}; its dimensions: {known} "
            "(give a bare value for every collective)"
        )
        raise UsageError(msg)


def parse_settings(
    *,
    bandwidth: str | Sequence[str] | None,
    world_size: str | None,
    compression: str,
    buckets: str,
    algorithm: str,
    latency: str | None,
    codec_gbps: float | None = None,
    target_sf: float | None = None,
    iterations: Sequence[int] | None = None,
) -> Settings:
    """Read the settings to sweep from their text; ``None`` keeps what was measured.

    ``iterations``: average over these only (none or empty: every iteration). The efficiency stays
    ``observed``: a command picks it once the measured link is known (:func:`choose_efficiency`).

    Ranges: world sizes 1 to :data:`MAX_WORLD_SIZE`, compression ratios finite and at least 1, a
    latency of 0 to :data:`MAX_LATENCY_S` seconds, a codec throughput finite and positive (no codec
    given: free), a target scaling factor in (0, 1].

    Raises
    ------
    UsageError
        A value that is not one, or out of its range, naming the option and what it takes.
    """
    bandwidths: list[float | None] = [None]
    named: list[DimensionValues] = [()]
    if bandwidth is not None and (isinstance(bandwidth, str) or bandwidth):
        bandwidths, named = _read_bandwidths(bandwidth)
    latency_s, latencies = parse_latencies(latency)
    worlds: list[int | None] = _parse_list(world_size, "--world-size", int) if world_size else [None]
    ratios = [float(r) for r in _parse_list(compression, "--compression", float)]
    for ratio in ratios:
        if not math.isfinite(ratio):
            raise UsageError(f"--compression {ratio}: must be a finite ratio of at least 1 (1 = none)")
        Compression(ratio=ratio)
    for world in worlds:
        if world is not None and world < 1:
            raise UsageError(f"--world-size {world}: must be at least 1")
        if world is not None and world > MAX_WORLD_SIZE:
            raise UsageError(f"--world-size {world}: must be at most {MAX_WORLD_SIZE:,}")
    policies = [parse_bucket_policy(item) for item in buckets.split(",") if item.strip()]
    if not policies:
        raise UsageError("--buckets: give at least one policy (measured, ddp:25, fusion:64:5)")
    if algorithm not in ALGORITHMS:
        raise UsageError(f"--algorithm {algorithm!r}: use ring or tree")
    return Settings(
        bandwidths=bandwidths,
        world_sizes=worlds,
        compressions=ratios,
        buckets=policies,
        algorithm="tree" if algorithm == "tree" else "ring",
        latency_s=latency_s,
        codec_gbps=_codec_gbps(codec_gbps),
        target_sf=_target_sf(target_sf),
        dimension_bandwidths=named if any(named) else None,
        dimension_latencies=latencies,
        iterations=list(iterations) if iterations else None,
    )


def _latency_s(text: str) -> float:
    try:
        latency_s = parse_duration_s(text)
    except UsageError as exc:
        raise UsageError(f"--latency {exc}") from None
    if not math.isfinite(latency_s) or latency_s > MAX_LATENCY_S:
        msg = f"--latency {text!r}: must be at most 1 hour ({MAX_LATENCY_S:g} s) per step; typical is 5us"
        raise UsageError(msg)
    return latency_s


def check_codec_gbps(value: float | None) -> float | None:
    """Return a codec's throughput (``--codec-gbps``) when it is one: finite and positive; None stays None.

    Raises
    ------
    UsageError
        Zero, negative, infinite or nan.
    """
    if value is not None and not (math.isfinite(value) and value > 0):
        msg = (
            f"--codec-gbps {value:g}: must be a positive number of Gbit/s, your gradient codec's throughput; "
            "leave it out for an assumed one"
        )
        raise UsageError(msg)
    return value


def _codec_gbps(value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        msg = (
            f"--codec-gbps {value:g}: must be a positive number of Gbit/s; leave it out for a free codec "
            "(an upper bound on what compression gives)"
        )
        raise UsageError(msg)
    return value


def _target_sf(value: float | None) -> float | None:
    if value is not None and not 0 < value <= 1:
        raise UsageError(f"--target-sf {value:g}: a scaling factor must be in (0, 1], e.g. 0.9")
    return value


def choose_efficiency(
    efficiency: str | None, *, link_known: bool, bandwidths: list[float | None], target: bool = False
) -> tuple[Efficiency, str | None]:
    """Return the link efficiency to predict with, and a note to show when it was chosen for the user.

    Given: as given. Else ``observed`` (each collective as in the trace), or ``full`` with a note when
    the measured link is unknown and other bandwidths are asked for, or a bandwidth is searched
    (``target``: ``--target-sf``).
    """
    if efficiency is not None:
        return parse_efficiency(efficiency), None
    if not link_known and (target or any(b is not None for b in bandwidths)):
        note = (
            "the measured link is unknown (pass --link-gbps GBPS); predictions at other bandwidths assume "
            "the full link (--efficiency full)"
        )
        return "full", note
    return "observed", None
