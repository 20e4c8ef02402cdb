"""Reading a wheel for the index: what its filename says, then its METADATA (builder.wheelmeta) and sidecar.

Paths are plain strings here: pathlib's overhead shows at 5,000 wheels.
"""

from __future__ import annotations

import functools
import json
import os
from typing import NamedTuple

from packaging.tags import Tag, parse_tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from builder import wheelmeta
from builder.errors import UsageError
from builder.index.model import PROJECT, Wheel, parse_version
from mamba_ssm import _variant


class Named(NamedTuple):
    """What a wheel's filename says."""

    version: Version
    tag: Tag
    variant: _variant.Variant
    shown: str  # the version as commands print it (the farm's spelling of the label)


@functools.cache
def _parse_tag(tag: str) -> frozenset:
    return parse_tag(tag)


def _parse_filename(name: str):
    """parse_wheel_filename, with the common case (no build tag) served from caches: a 5,000-wheel run
    repeats versions and tags a lot. Anything unusual goes to packaging for its checks and messages."""
    parts = name[:-4].split("-")
    if len(parts) == 5 and name.endswith(".whl") and parts[0] == "mamba_ssm":
        try:
            return PROJECT, parse_version(parts[1]), (), _parse_tag("-".join(parts[2:]))
        except InvalidVersion:
            pass
    return parse_wheel_filename(name)


@functools.cache
def _variant_of_label(raw: str) -> _variant.Variant:
    return _variant.Variant.from_label(raw)


@functools.cache
def _variant_fields(v: _variant.Variant) -> dict:
    """(Cached: a variant's names are computed once per run, not once per wheel.)"""
    return {
        "label": v.label,
        "key": v.key,
        "accelerator": v.accelerator,
        "torch": v.torch,
        "cxx11abi": v.cxx11abi,
        "stable": v.stable,
    }


def check_name(path: str) -> Named:
    """What the filename says, or a UsageError naming the file (before anything is read)."""
    filename = os.path.basename(path)
    try:
        name, version, _build, tags = _parse_filename(filename)
    except InvalidWheelFilename as err:
        raise UsageError(f"{path}: not a valid wheel filename ({err})") from None
    if name != canonicalize_name(PROJECT):
        raise UsageError(f"{path}: a {name} wheel, not {PROJECT}; only {PROJECT} wheels belong in this index")
    if not version.local:
        raise UsageError(
            f"{path}: version {version} has no local label (e.g. +cu12torch2.6cxx11abiFALSE); "
            "index wheels that the farm built and verified"
        )
    if len(tags) != 1:
        raise UsageError(
            f"{path}: carries {len(tags)} tags ({'.'.join(sorted(str(t) for t in tags))}); "
            "pip and uv prefer different ones: retag to exactly one (builder.wheels.retag)"
        )
    (tag,) = tags
    # packaging lowercases local labels; the farm's spelling (cxx11abiFALSE) is in the filename.
    release, _, label = filename.split("-")[1].partition("+")
    try:
        variant = _variant_of_label(label)
    except _variant.VariantError as err:
        raise UsageError(f"{path}: {err}") from None
    return Named(version, tag, variant, f"{release}+{_variant_fields(variant)['label']}")


def describe(path: str, zsrc, named: Named) -> tuple[Wheel, bytes]:
    """The wheel (its ``zsrc``: the file or a buffer of it) and its METADATA bytes."""
    try:
        meta = wheelmeta.read(zsrc)
    except wheelmeta.MetadataError as err:
        raise UsageError(f"{path}: {err}") from None
    try:
        same = parse_version(meta.version or "0") == named.version
    except InvalidVersion:
        same = False
    if not same:
        raise UsageError(f"{path}: METADATA says version {meta.version or '0'}, the filename says {named.version}")
    v, tag = named.variant, named.tag
    declared = None
    if v.stable and os.path.isfile(path + ".spec.json"):
        declared = _read_serves(path + ".spec.json", v)
    wheel = Wheel.make(
        filename=os.path.basename(path),
        version=named.shown,
        **_variant_fields(v),
        python=tag.interpreter,
        abi=tag.abi,
        platform=tag.platform,
        requires_python=meta.requires_python,
        requires_torch=meta.requires_torch or "",
        serves_declared=declared,
    )
    return wheel, meta.raw


def _read_serves(sidecar: str, variant: _variant.Variant) -> list[str]:
    """The variant keys a stable wheel's sidecar (the farm's BuildSpec.to_json()) says it serves."""
    try:
        with open(sidecar, encoding="utf-8") as f:
            serves = json.load(f)["serves"]
    except (ValueError, KeyError, TypeError) as err:
        raise UsageError(f"{sidecar}: expected JSON with a 'serves' list of variant keys ({err})") from None
    for key in serves:
        try:
            parts = _variant.parse_key(key)
        except _variant.VariantError as err:
            raise UsageError(f"{sidecar}: {err}") from None
        if parts["accelerator"] != variant.accelerator:
            raise UsageError(f"{sidecar}: serves {key}, but the wheel is built for {variant.accelerator}")
    return sorted(set(serves))
