"""Reading a wheel for the index: what its filename says, then its METADATA (builder.verifying.wheelmeta) and sidecar.

The sidecar ``<wheel>.spec.json`` is the build's BuildSpec.to_json(); the index reads two keys: ``serves`` (a
stable wheel's variants) and ``source`` (what the wheel was built from; absent: this checkout).

Paths are plain strings here: pathlib's overhead shows at 5,000 wheels.
"""

from __future__ import annotations

import functools
import os
import re
from typing import NamedTuple

from packaging.tags import Tag, parse_tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from builder.errors import UsageError
from builder.facts.untrusted import WHEEL_FILENAME_RE, Untrusted, load_json, read_regular
from builder.publishing.index.model import CHECKOUT, PROJECT, Wheel, parse_version
from builder.verifying import wheelmeta
from mamba_ssm import variant as _variant


class Named(NamedTuple):
    """What a wheel's filename says."""

    project: str  # canonical
    version: Version
    tag: Tag
    variant: _variant.Variant
    shown: str  # the version as commands print it (the farm's spelling of the label)


# A wheel's filename: the layer's alphabet (builder.facts.untrusted.WHEEL_FILENAME_RE); each tag part letters,
# digits and ``_`` (``.`` joins compressed tag sets).
_TAG_PART_RE = re.compile(r"[A-Za-z0-9_]+")
_MAX_SIDECAR_BYTES = 1 << 20  # a BuildSpec's JSON is a few kB
# builder/facts/spec.py's identities: this checkout, or a recipe's pin (a PyPI sdist or an archive URL by sha256,
# a git repository at a full commit)
_SOURCE_RE = re.compile(
    r"checkout|(?:sdist|archive):(?P<name>[A-Za-z0-9._-]+)==[^@\s]+@sha256:[0-9a-f]{64}"
    r"|(?:git|canary):(?P<git_name>[A-Za-z0-9._-]+)==[^@\s]+@[0-9a-f]{40}"
)
_DIST_RE = re.compile(r"[A-Za-z0-9]+(?:[._][A-Za-z0-9]+)*")


@functools.cache
def _parse_tag(tag: str) -> frozenset:
    return parse_tag(tag)


@functools.cache
def _dist_name(part: str) -> str | None:
    """The canonical project of a filename's first part, None where packaging should judge it."""
    return canonicalize_name(part) if _DIST_RE.fullmatch(part) else None


def _parse_filename(name: str):
    """parse_wheel_filename, with the common case (no build tag) served from caches: a 5,000-wheel run
    repeats names, versions and tags a lot. Anything unusual goes to packaging for its checks and messages."""
    parts = name[:-4].split("-")
    if len(parts) == 5 and name.endswith(".whl") and (project := _dist_name(parts[0])):
        try:
            return project, parse_version(parts[1]), (), _parse_tag("-".join(parts[2:]))
        except InvalidVersion:
            pass
    return parse_wheel_filename(name)


@functools.cache
def projects() -> tuple[str, ...]:
    """The projects the farm builds, so the ones an index takes: this repository's, then one per recipe."""
    from builder.planning.recipes import RECIPES_DIR  # (only for a wheel that is not mamba-ssm)

    return (PROJECT, *sorted({canonicalize_name(p.stem) for p in RECIPES_DIR.glob("*.toml")} - {PROJECT}))


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


def check_name(path: str, more: tuple[str, ...] = ()) -> Named:
    """What the filename says, or a UsageError naming the file (before anything is read). MORE: recipe projects
    taken beside :func:`projects`."""
    filename = os.path.basename(path)
    if not WHEEL_FILENAME_RE.fullmatch(filename):
        raise UsageError(
            f"{path!a}: not a wheel filename pip makes (PEP 427: ASCII letters, digits and _ . + - only)",
            hint="index wheels as the farm builds and names them",
        )
    try:
        name, version, _build, tags = _parse_filename(filename)
    except InvalidWheelFilename as err:
        raise UsageError(f"{path}: not a valid wheel filename ({err})") from None
    known = (*projects(), *(canonicalize_name(p) for p in more))
    if name != PROJECT and name not in known:
        raise UsageError(
            f"{path}: a {name} wheel, not {' or '.join(known)}; only the farm's projects belong in this index",
            hint="a project is this repository's mamba-ssm or one with a recipe (recipes/<name>.toml)",
        )
    if not version.local:
        raise UsageError(
            f"{path}: version {version} has no local label (e.g. +cu12torch2.6cxx11abiFALSE); "
            "index wheels that the farm built and verified"
        )
    if len(tags) != 1:
        raise UsageError(
            f"{path}: carries {len(tags)} tags ({'.'.join(sorted(str(t) for t in tags))}); "
            "pip and uv prefer different ones: retag to exactly one (builder.verifying.wheels.retag)"
        )
    (tag,) = tags
    if not all(_TAG_PART_RE.fullmatch(p) for p in (tag.interpreter, tag.abi, tag.platform)):
        raise UsageError(f"{path}: tag {tag} is not a PEP 425 tag (letters, digits and _ in each part)")
    # packaging lowercases the tags it parses; pip and uv match the filename's own spelling, so a wheel tagged
    # linux_X86_64 would be listed for x86_64 and installed by neither
    written = filename.removesuffix(".whl").split("-")[-3:]
    if written != [tag.interpreter, tag.abi, tag.platform]:
        raise UsageError(f"{path}: tag {'-'.join(written)} is not lowercase (PEP 425 tags are: {tag})",
                         hint="retag the wheel to the lowercase tag (builder.verifying.wheels.retag)")  # fmt: skip
    # packaging lowercases local labels; the farm's spelling (cxx11abiFALSE) is in the filename.
    release, _, label = filename.split("-")[1].partition("+")
    try:
        variant = _variant_of_label(label)
    except _variant.VariantError as err:
        raise UsageError(f"{path}: {err}") from None
    return Named(name, version, tag, variant, f"{release}+{_variant_fields(variant)['label']}")


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
    if canonicalize_name(meta.name or "-") != named.project:
        raise UsageError(
            f"{path}: METADATA says Name {meta.name or '(none)'!r}, the filename says {named.project}; "
            "pip refuses such a wheel",
            hint="rebuild the wheel; its METADATA and its filename name one project",
        )
    info_name, _, info_version = meta.dist_info[: -len(".dist-info")].rpartition("-")
    try:
        info_same = canonicalize_name(info_name) == named.project and parse_version(info_version) == named.version
    except InvalidVersion:
        info_same = False
    if not info_same:
        raise UsageError(
            f"{path}: its {meta.dist_info}/ does not name {named.project} {named.version}; pip refuses such a wheel",
            hint="rebuild the wheel; its .dist-info folder is <name>-<version>.dist-info of its filename",
        )
    v, tag = named.variant, named.tag
    sidecar = path + ".spec.json"
    spec = read_sidecar(sidecar)
    declared = _read_serves(sidecar, spec, v) if v.stable and spec is not None else None
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
        project=named.project,
        source=read_source(sidecar, spec, named.project),
        archs=_read_archs(sidecar, spec),
    )
    return wheel, meta.raw


_ARCH_RE = re.compile(r"(sm|compute)_\d{2,3}[af]?|gfx[0-9a-f]{3,5}")


def _read_archs(sidecar: str, spec: dict | None) -> tuple[str, ...]:
    """The GPU architectures a sidecar says the wheel holds (the coverage page shows them); () if it says none."""
    archs = [] if spec is None else spec.get("archs", [])
    if not isinstance(archs, list) or len(archs) > 64 or not all(isinstance(a, str) and _ARCH_RE.fullmatch(a) for a in archs):
        raise UsageError(f"{sidecar}: 'archs' is not a list of GPU architectures such as sm_90 or gfx942", hint="rebuild the wheel")
    return tuple(archs)


def read_sidecar(sidecar: str) -> dict | None:
    """The build's sidecar (the farm's BuildSpec.to_json()), None if the wheel has none."""
    if not os.path.lexists(sidecar):
        return None
    try:  # a FIFO must not block the locked run; a device is never read
        spec = load_json(read_regular(sidecar, _MAX_SIDECAR_BYTES), sidecar)
    except Untrusted as err:
        raise UsageError(f"{err}: not a build spec the index reads", hint="rebuild the wheel, or remove it") from None
    if not isinstance(spec, dict):
        raise UsageError(f"{sidecar}: expected a JSON object (the build's spec)", hint="rebuild the wheel")
    return spec


def read_source(sidecar: str, spec: dict | None, project: str) -> str:
    """What the wheel was built from: its sidecar's ``source``; this checkout where there is none."""
    source = CHECKOUT if spec is None else spec.get("source", CHECKOUT)
    m = _SOURCE_RE.fullmatch(source) if isinstance(source, str) else None
    if m is None:
        raise UsageError(
            f"{sidecar}: 'source' is {source!r}, not a source identity",
            hint="expected 'checkout', or a recipe's pin: 'sdist:' or 'archive:<name>==<version>@sha256:<hex>', "
            "'git:' or 'canary:<name>==<version>@<commit>' (builder/facts/spec.py)",
        )
    name = m["name"] or m["git_name"]
    if name and canonicalize_name(name) != project:
        raise UsageError(f"{sidecar}: 'source' is {source!r}, but the wheel is a {project} wheel")
    return source


def _read_serves(sidecar: str, spec: dict, variant: _variant.Variant) -> list[str]:
    """The variant keys a stable wheel's sidecar says it serves."""
    try:
        serves = spec["serves"]
        if isinstance(serves, str) or not all(isinstance(k, str) for k in serves):
            raise TypeError("not a list of strings")
    except (KeyError, TypeError) as err:
        raise UsageError(f"{sidecar}: expected JSON with a 'serves' list of variant keys ({err})") from None
    for key in serves:
        try:
            parts = _variant.parse_key(key)
        except _variant.VariantError as err:
            raise UsageError(f"{sidecar}: {err}") from None
        if parts["accelerator"] != variant.accelerator:
            raise UsageError(f"{sidecar}: serves {key}, but the wheel is built for {variant.accelerator}")
    return sorted(set(serves))
