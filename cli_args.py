"""Parsing the command line's value arguments: ``--set`` dims (one value, or lists for a sweep),
``--price`` and ``--scale`` pairs, with errors that name the flag."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from .errors import NarrowpipeError, NarrowpipeWarning, UnknownTargetError

__all__ = ["analyze_price", "parse_sets", "parse_grid", "parse_prices", "parse_factors", "target_specs", "count_arg",
           "positive_arg", "positive_list_arg", "formats_arg", "timing_kwargs"]


def _items(text: str, flag: str) -> list[str]:
    """A comma list's items, one rule for every list flag: a trailing comma ends the list, an empty
    item between commas is a typo and an error (--set refused 'batch=1,,8' while --targets and
    --price dropped empty items silently)."""
    parts = [p.strip() for p in text.split(",")]
    while parts and not parts[-1]:
        parts.pop()
    if any(not p for p in parts):
        raise NarrowpipeError(f"{flag} {text!r} has an empty item between commas")
    return parts


def _parse_pairs(items: Sequence[str] | None, flag: str, what: str, convert: Callable[[str], Any],
                 kind: str) -> dict[str, Any]:
    """``["a=1", "b=2,c=3"]`` -> ``{"a": 1, "b": 2, "c": 3}``, with errors naming the flag."""
    out: dict[str, Any] = {}
    for item in items or ():
        for part in _items(item, flag):
            if "=" not in part:
                raise NarrowpipeError(f"{flag} expects {what}, got {part!r}")
            k, v = part.rsplit("=", 1)   # the last '=': a scaled chip's name has its own (h100-sxm@compute=2)
            if k.strip() in out:       # which of the two did the user mean?
                raise NarrowpipeError(f"{flag} {k.strip()} is given twice")
            try:
                out[k.strip()] = convert(v)
            except ValueError:
                raise NarrowpipeError(f"{flag} {k.strip()}: {v!r} is not {kind}") from None
    return out


def parse_sets(items: Sequence[str] | None) -> dict[str, int]:
    """``["batch=8", "seq=2048"]`` -> ``{"batch": 8, "seq": 2048}`` (also accepts comma lists)."""
    grid = parse_grid(items)
    many = sorted(k for k, v in grid.items() if len(v) > 1)
    if many:
        raise NarrowpipeError(f"--set {many[0]} has several values; this command binds one value per dim")
    return {k: v[0] for k, v in grid.items()}


def parse_grid(items: Sequence[str] | None) -> dict[str, list[int]]:
    """``["batch=1,8,64", "seq=512,2048"]`` -> ``{"batch": [1, 8, 64], "seq": [512, 2048]}``: a value
    without a name continues the list of the dim before it, so ``batch=8,seq=2048`` still binds two
    dims. An empty item inside a list (``batch=1,,8``), a value listed twice or a dim given twice is
    an error: each is a typo whose meaning the sweep would otherwise guess (it dropped the empty
    item, ran the duplicate twice and kept the last list)."""
    out: dict[str, list[int]] = {}
    for item in items or ():
        current: str | None = None
        for part in _items(item, "--set"):
            if "=" in part:
                current, value = (s.strip() for s in part.split("=", 1))
                if current in out:
                    raise NarrowpipeError(f"--set {current} is given twice")
                out[current] = []
            elif current is None:
                raise NarrowpipeError(f"--set expects DIM=VALUE[,VALUE...], got {part!r}")
            else:
                value = part
            try:
                number = int(value)
            except ValueError:
                raise NarrowpipeError(f"--set {current}: {value!r} is not an integer") from None
            if number in out[current]:
                raise NarrowpipeError(f"--set {current} lists {number} twice")
            out[current].append(number)
    return out


def count_arg(text: str) -> int:
    """An argparse type for how many rows to list: a whole number, 0 or more (a negative one would
    slice from the end of the list)."""
    return _whole_number(text, 0)


def positive_arg(text: str) -> int:
    """An argparse type for a size or a thread count: a whole number, 1 or more."""
    return _whole_number(text, 1)


def positive_list_arg(text: str) -> list[int]:
    """An argparse type for sizes given as a comma list (``--batch 1,8``), each 1 or more: the list
    rule of every flag (:func:`_items`); with ``action="extend"`` repeating the flag adds to it."""
    import argparse
    try:
        items = _items(text, "list")
    except NarrowpipeError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("list ")) from None
    if not items:
        raise argparse.ArgumentTypeError(f"{text!r} lists no size")
    return [_whole_number(x, 1) for x in items]


def _whole_number(text: str, least: int) -> int:
    import argparse
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {least} or more, got {value}")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(text)
    return value


def formats_arg(args: Any) -> Any:
    """``--weights``/``--activations`` as serving's :class:`~.costmodel.serving.formats.Formats`: one
    rule for every command (the linear layers' weights quantized, the embedding and ``lm_head`` kept),
    so ``compare --weights int8`` and ``serve --weights int8`` mean the same deployment."""
    from .costmodel.precision import FORMATS, number_format
    from .costmodel.serving.formats import Formats
    weights, activations = getattr(args, "weights", None), getattr(args, "activations", None)
    for flag, value in (("--weights", weights), ("--activations", activations)):
        if value and number_format(value) is None:   # the choices: formats, not every dtype (bool, string)
            raise NarrowpipeError(f"{flag} {value!r} is not a number format; choose from "
                                  + ", ".join(d.value for d in FORMATS))
    return Formats.of(weights, activations)


def timing_kwargs(args: Any) -> dict[str, Any]:
    """The options that change predicted times, as analyze/compare/whatif take them; with ``--mode`` (a
    serving step) the fit leaves ``serve``'s reserve to the runtime (vLLM's 10%,
    ``SERVING_MEMORY_RESERVE``), so analyze, compare and serve give one deployment one answer."""
    from .backends.defaults import SERVING_MEMORY_RESERVE
    serving = {"memory_reserve": SERVING_MEMORY_RESERVE} if getattr(args, "mode", None) else {}
    return {"fusion": args.fusion, "allow_tf32": args.tf32, "fp32_matmul": args.fp32_matmul,
            "fp32_conv": args.fp32_conv, "sparse": args.sparse,
            "expert_balance": args.expert_balance, **serving}


def parse_prices(items: Sequence[str] | None) -> dict[str, float]:
    """``--price`` pairs: USD per device-hour, a positive number (a price of 0 or less would rank
    a chip cheapest by a cost no one pays)."""
    return _parse_pairs(items, "--price", "TARGET=USD", _positive, "a positive number")


def analyze_price(target: str | None, items: Sequence[str] | None) -> float | None:
    """The ``--price`` of the analyzed chip; a price for another chip, or with no target, prices
    nothing and is warned about, as compare does (analyze dropped it silently)."""
    prices = parse_prices(items)
    if not prices:
        return None
    if not target:
        warnings.warn(f"--price for {', '.join(prices)}: analyze without --target times nothing, so it prices "
                      "nothing", NarrowpipeWarning, stacklevel=2)
        return None
    from .backends import get_target
    from .costmodel.prices import prices_by_target
    chip = get_target(target)
    priced = prices_by_target(prices, [chip])
    unused = sorted(set(priced) - {chip.name})
    if unused:
        warnings.warn(f"--price for {', '.join(unused)}: not the analyzed target ({chip.name}), so it prices nothing",
                      NarrowpipeWarning, stacklevel=2)
    return priced.get(chip.name)


def parse_factors(text: str) -> dict[str, float]:
    """``--scale`` pairs; at least one (an empty scaling would print a what-if of nothing)."""
    out = _parse_pairs([text], "--scale", "RESOURCE=FACTOR", float, "a number")
    if not out:
        raise NarrowpipeError("--scale expects RESOURCE=FACTOR, got nothing")
    return out


def target_specs(targets: str, files: Sequence[str]) -> list[Any]:
    """``--targets`` names (catalog names, aliases, paths) with the ``--target-file`` chips mixed in:
    a file's chip may be named in ``--targets`` by the ``name`` or an alias its file gives it, by the
    name it is reported under (``h100-sxm@my.toml`` for a changed copy of a catalog chip) or by its
    path; it then takes that place in the order. Files not named there come last, in the order given.
    A file named twice is refused, saying what each item typed meant (both read as the file's path)."""
    import os

    from .backends import name_index
    from .backends.registry import file_target
    chips = [file_target(f) for f in files]
    by_name: dict[str, str] = {}
    for path, (written, reported) in zip(files, chips):
        for key in (*name_index([written]), *name_index([reported]), os.path.realpath(path)):
            by_name.setdefault(key, path)
        shadowed = _catalog_name(written.name)
        if shadowed is not None:
            warnings.warn(f"{path}: its chip is named {written.name!r}, which is the catalog's {shadowed}; "
                          f"--targets {written.name} (or an alias it lists) means this file's chip here (to compare "
                          "the two, give the file to --targets instead, or rename its chip)",
                          NarrowpipeWarning, stacklevel=2)
        for alias in written.aliases:   # an alias takes a catalog name over as surely as a name does
            taken = _catalog_name(alias)
            if taken is not None and taken != shadowed:
                warnings.warn(f"{path}: its chip {written.name!r} lists the alias {alias!r}, which names the "
                              f"catalog's {taken}; --targets {alias} means this file's chip here (drop the alias "
                              "to compare the two)", NarrowpipeWarning, stacklevel=2)
    typed: dict[str, str] = {}     # a file given -> the item that named it (a file's chip goes on as its
    specs: list[Any] = []          # path, so errors can name the file)
    for name in _items(targets, "--targets"):
        given = by_name.get(name.lower()) or by_name.get(os.path.realpath(name))
        if given is not None and given in typed:
            raise NarrowpipeError(f"--targets names the chip of {given} twice: {_meant(typed[given], given)} and "
                                  f"{_meant(name, given)}")
        if given is not None:
            typed[given] = name
        specs.append(given or name)
    return specs + [f for f in files if f not in typed]


def _meant(item: str, path: str) -> str:
    """A ``--targets`` item that resolved to the ``--target-file`` ``path``, said as the user typed it:
    the path itself, or a name that file's chip goes by (``h100-sxm`` looked like the catalog's)."""
    import os
    if os.path.realpath(item) == os.path.realpath(path):
        return repr(item)
    return f"{item!r} (a name that file gives its chip, which --target-file puts before the catalog's)"


def _catalog_name(name: str) -> str | None:
    """The catalog chip ``name`` (any case, or an alias) names, or None."""
    from .backends import get_target
    try:
        return get_target(name).name
    except UnknownTargetError:
        return None
