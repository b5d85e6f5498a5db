"""Checkpoint references, read without touching a checkpoint: what ``checkpoint=`` names and how it is pinned.

A reference is a registered name, a local directory or an ``http(s)://`` base URL, each optionally pinned by the
whole checkpoint's sha256 as ``REF#sha256=HEX`` (the key and the digits in any case). :func:`parse_reference`
tells which one a string is, or why it is none, without reading, loading or downloading anything:
:func:`biomjepa._pretrained.resolve_checkpoint` acts on its answer, ``bj.settings.checkpoint`` checks a value's
form when it is set (:func:`check_form`), and the command line checks ``--checkpoint`` while parsing its arguments.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

_PIN = re.compile(r"\s*sha256\s*=(.*)", re.IGNORECASE | re.DOTALL)


def hex_digest(value: str) -> str:
    """``value`` as a lower-case sha256 digest (64 hexadecimal digits), or a ValueError."""
    digest = str(value).strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise ValueError(f"sha256={value!r} is not a sha256 digest (64 hexadecimal digits).")
    return digest


def split_pin(ref: str, name: str = "checkpoint") -> tuple[str, str | None]:
    """``ref`` without its ``#sha256=HEX`` pin, and the pin (lower case; ``None`` without one). A reference that
    exists as a path is never split (a directory may have ``#`` in its name); a ``#`` followed by anything but
    ``sha256=<64 hexadecimal digits>`` is a ValueError."""
    head, sep, frag = ref.rpartition("#")
    if not sep or Path(ref).expanduser().exists():
        return ref, None
    match = _PIN.fullmatch(frag)
    if match is None:
        raise ValueError(f"{name}={ref!r} is not a checkpoint reference: what follows '#' must pin the whole "
                         f"checkpoint as `sha256=<64 hexadecimal digits>` (`biomjepa.model.checkpoint_sha256(dir)` of a "
                         f"trusted copy), not {frag!r}; and {ref!r} is no existing directory.")
    try:
        return head, hex_digest(match.group(1))
    except ValueError:
        raise ValueError(f"{name}={ref!r}: the pin sha256={match.group(1)!r} is not a sha256 digest (64 "
                         "hexadecimal digits: the whole checkpoint's, `biomjepa.model.checkpoint_sha256(dir)`).") from None


def check_form(value, name: str = "checkpoint") -> str:
    """``value`` (a str or path) as a reference string whose form is right (not empty; a pin, if any, well
    formed); whether it exists is left to :func:`parse_reference`."""
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"{name}={value!r} is not a checkpoint reference: give a registered name (e.g. "
                         "'biomjepa-mini'), a checkpoint directory, or `URL#sha256=<hex>`.")
    ref = str(value)
    if not ref.strip():  # Path("") is the current directory: never load whatever lies there by accident
        raise ValueError(f"{name}={ref!r} is empty: pass a registered name (e.g. 'biomjepa-mini'), a checkpoint "
                         "directory or `URL#sha256=<hex>`" + (", or None for bj.settings.checkpoint." if name ==
                                                               "checkpoint" else "."))
    split_pin(ref, name)
    return ref


def parse_reference(ref, sha256: str | None = None, *, registry: Mapping) -> tuple[str, str, str | None]:
    """``(kind, target, pin)``: ``kind`` ``"name"`` (``target`` a name of ``registry``, :data:`biomjepa._pretrained.
    REGISTRY`), ``"url"`` or ``"dir"`` (``target`` the reference without its pin), ``pin`` the sha256 digest asked for
    (``#sha256=`` or ``sha256``) or ``None``. A malformed, unknown or unpinned-URL reference is refused here, before
    any file is read."""
    ref = check_form(ref)
    target, pin = (ref, None) if ref in registry else split_pin(ref)
    if sha256 is not None:
        given = hex_digest(sha256)
        if pin is not None and pin != given:
            raise ValueError(f"checkpoint={ref!r} pins sha256 {pin} but sha256= asks for {given}; give one of them.")
        pin = given
    if target in registry:
        return "name", target, pin
    if target.startswith(("http://", "https://")):
        if pin is None:
            raise ValueError(
                f"Downloading {target} needs its sha256, the whole checkpoint's (`biomjepa.model.checkpoint_sha256(dir)` "
                f"of a trusted copy): pass `{target}#sha256=<hex>` or sha256=.")
        return "url", target, pin
    if Path(target).expanduser().exists():
        return "dir", target, pin
    if target != ref:
        raise FileNotFoundError(f"Checkpoint directory {target!r} (pinned by {ref!r}) does not exist. Pass "
                                "`checkpoint=` an existing checkpoint directory, as `DIR#sha256=<hex>` to pin it, or a "
                                f"registered name ({', '.join(sorted(registry))}), as `NAME#sha256=<hex>`.")
    known = ", ".join(sorted(registry)) or "none bundled in this version"
    raise FileNotFoundError(
        f"Checkpoint {ref!r} is neither a registered name ({known}), an existing directory, nor an "
        "http(s) URL. Pass `checkpoint=` a directory exported by `bj.train` or set `bj.settings.checkpoint`."
    )
