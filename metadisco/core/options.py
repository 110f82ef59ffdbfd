"""NAME[key=value,...]: a named thing with options, as one command-line word.

One parser serves every such name: an environment with other parameters
(`MountainCar-v0[gravity=0.003]`, metadisco.core.catalog) and a baseline with other options
(`ppo[clip_eps=0.3]`, metadisco.analysis.targets). Values are numbers or true/false.
"""

from __future__ import annotations

import re

__all__ = ["split_options"]

_BRACKETED = re.compile(r"^(?P<base>[^\[\]]+)\[(?P<options>[^\[\]]*)\]$")


def split_options(spec: str) -> tuple[str, dict[str, bool | int | float]]:
    """"NAME[a=1,b=0.5,c=true]" -> ("NAME", {"a": 1, "b": 0.5, "c": True}); "NAME" -> ("NAME", {}).

    Raises ValueError saying what is wrong (the caller names the thing and gives an example):
    brackets that do not close the name, an item that is not key=value, a key given twice, a
    value that is not a number or true/false, empty brackets.
    """
    match = _BRACKETED.match(spec)
    if match is None:
        if "[" in spec or "]" in spec:
            raise ValueError("write options as NAME[key=value,...]")
        return spec, {}
    values: dict[str, bool | int | float] = {}
    for item in filter(None, (i.strip() for i in match["options"].split(","))):
        key, eq, text = (part.strip() for part in item.partition("="))
        if not eq or not key.isidentifier() or key in values:
            raise ValueError(f"{item!r} is not key=value (once per key)")
        if text.lower() in ("true", "false"):
            values[key] = text.lower() == "true"
            continue
        try:
            values[key] = int(text) if re.fullmatch(r"[+-]?\d+", text) else float(text)
        except ValueError:
            raise ValueError(f"{key} = {text!r} is not a number (or true/false)") from None
    if not values:
        raise ValueError("empty brackets; name an option")
    return match["base"].strip(), values
