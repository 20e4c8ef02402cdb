"""Wheel variants (PEP 825, with variantlib 0.2.2's JSON layout): a verified stable-ABI wheel's variant form
and the index-level ``{name}-{version}-variants.json``.

``cputorchstable`` becomes the ``null`` variant; ``cu13torchstable`` becomes ``cu13``, with the CUDA major's
``.0`` as lower bound and one ``sm_arch`` per embedded arch. Classic and ROCm wheels have no variant form.
:func:`to_variant` and :func:`to_plain` rewrite only ``*.dist-info``.
"""

from __future__ import annotations

import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from builder.errors import VerificationError
from builder.facts.spec import sha256_of
from builder.facts.untrusted import Untrusted, expect, field
from builder.verifying.relabel import read_members, write_wheel
from mamba_ssm import elf as _elf
from mamba_ssm import variant as _variant

# The format version with ``providers`` (PEP 850's draft), as uv 0.13.9 names it; variantlib 0.2.2 writes the same
# layout under ".../v0.2.0.json" and does not check the URL, while uv logs that one as an unknown schema.
SCHEMA_URL = "https://variants-schema.wheelnext.dev/peps/850/v0.2.0.json"
NULL = "null"
NVIDIA = "nvidia"
# The provider the nvidia namespace names: uv 0.13.9 runs its vendored copy of this plugin.
PROVIDERS = {
    NVIDIA: {
        "requires": ["nvidia-variant-provider>=0.0.1,<1.0.0"],
        "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin",
    }
}
LABEL_RE = re.compile(r"[0-9a-z_.]+")  # a label as read (a later PEP 825 revision dropped the length limit)
WRITE_LABEL_RE = re.compile(r"[0-9a-z_.]{1,16}")  # as written: 1-16 characters in the revision followed
INSTALL_PREVIEW = "uv pip install --preview-features wheel-variants"


@dataclass(frozen=True)
class Form:
    """A variant: its label and properties (namespace -> feature -> values), as variant.json writes them."""

    label: str
    properties: dict

    def lines(self) -> list[str]:
        """``namespace :: feature :: value``, one per value (what people read)."""
        return [f"{ns} :: {f} :: {v}" for ns, feats in self.properties.items() for f, vs in feats.items() for v in vs]


def sm_arch_values(sass, ptx) -> list[str]:
    """The ``nvidia :: sm_arch`` values of an extension's code: ``sm_80`` -> ``80_real``, ``compute_90`` ->
    ``90_virtual`` (an arch-specific ``sm_90a`` -> ``90a_real``)."""
    out = [a.removeprefix("sm_") + "_real" for a in sass] + [a.removeprefix("compute_") + "_virtual" for a in ptx]
    return sorted(set(out), key=lambda v: (int(re.match(r"\d+", v).group()), v))


def form_of(variant: _variant.Variant, sass=(), ptx=()) -> Form:
    """The variant form of a farm variant whose extension embeds ``sass``/``ptx`` (cuobjdump's names)."""
    props: dict = {}
    if variant.backend == "cuda":
        major = variant.backend_version.split(".")[0]
        if not sass and not ptx:
            raise VerificationError(f"{variant.label}: a CUDA build with no GPU code: no sm_arch to declare")
        props[NVIDIA] = {"cuda_version_lower_bound": [f"{major}.0"], "sm_arch": sm_arch_values(sass, ptx)}
    elif variant.backend != "cpu":
        raise VerificationError(f"{variant.label}: {variant.backend_name} builds have no variant form (no provider)")
    if not variant.stable:
        raise VerificationError(
            f"{variant.label}: a classic per-torch wheel has no variant form (abi_dependency :: torch is not "
            "part of PEP 825 and variantlib 0.2.2 refuses it without a provider); only stable-ABI wheels have one"
        )
    return Form(variant.accelerator if props else NULL, props)


def metadata(forms) -> dict:
    """variant.json (one form) or -variants.json (every form of a release): the same layout."""
    forms = list(forms)
    # The nvidia provider is declared even where every form is the null variant: one release's variant.json
    # files and its -variants.json then agree on every key but ``variants`` (PEP 825's merge rule).
    providers = json.loads(json.dumps(PROVIDERS))  # (a copy: callers may edit the document)
    doc = {"$schema": SCHEMA_URL, "default-priorities": {"namespace": list(providers)}, "providers": providers}
    doc["variants"] = {f.label: f.properties for f in sorted(forms, key=lambda f: f.label)}
    return doc


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def variants_json_name(project: str, release: str) -> str:
    """``{name}-{version}-variants.json``, both normalised as in wheel file names."""
    return f"{canonicalize_name(project).replace('-', '_')}-{release}-variants.json"


def split_label(filename: str) -> tuple[str, str | None]:
    """(the wheel name without its variant label, the label or None): PEP 825 adds ``-{label}`` after the
    platform tag."""
    stem = filename.removesuffix(".whl")
    parts = stem.split("-")
    if filename.endswith(".whl") and len(parts) in (6, 7):
        try:
            parse_wheel_filename("-".join(parts[:-1]) + ".whl")
        except InvalidWheelFilename:
            return filename, None
        if LABEL_RE.fullmatch(parts[-1]) and not (len(parts) == 6 and parts[2][:1].isdigit()):
            return "-".join(parts[:-1]) + ".whl", parts[-1]
    return filename, None


def read_form(wheel: Path) -> Form:
    """The variant a variant wheel declares in ``*.dist-info/variant.json``, checked against its file name
    (exactly one variant, that label, the schema this module writes). VerificationError otherwise."""
    _base, label = split_label(wheel.name)
    if label is None:
        raise VerificationError(f"{wheel.name}: no variant label in the file name")
    _infos, members, info_dir = read_members(wheel)
    raw = members.get(f"{info_dir}/variant.json")
    if raw is None:
        raise VerificationError(f"{wheel.name}: a variant wheel without {info_dir}/variant.json")
    try:
        doc = json.loads(raw)
    except ValueError as err:
        raise VerificationError(f"{wheel.name}: variant.json is not JSON ({err})") from None
    variants = doc.get("variants") if isinstance(doc, dict) else None
    if doc.get("$schema") != SCHEMA_URL or not isinstance(variants, dict) or list(variants) != [label]:
        raise VerificationError(
            f"{wheel.name}: variant.json must use {SCHEMA_URL} and describe exactly the variant {label!r}, "
            f"it describes {sorted(variants or {})}"
        )
    return Form(label, variants[label])


def extension_archs(members: dict[str, bytes]) -> tuple[list[str], list[str]]:
    """(SASS, PTX) of every extension module of the wheel's package (not its bundled .libs)."""
    sass, ptx = set(), set()
    for name, data in members.items():
        if re.search(r"\.so(\.\d+)*$", name) and ".libs/" not in name:
            try:
                archs = _elf.archs_in(_elf.Elf(data, name))
            except _elf.NotAnElf as err:
                raise VerificationError(f"{name}: {err}") from None
            sass.update(archs.sass)
            ptx.update(archs.ptx)
    return sorted(sass), sorted(ptx)


def form_of_wheel(wheel: Path) -> Form:
    """The variant form a farm-labelled wheel gets: its label, and the archs its extension embeds."""
    _infos, members, _info_dir = read_members(wheel)
    return form_of(_farm_variant(wheel.name), *extension_archs(members))


def _farm_variant(filename: str) -> _variant.Variant:
    try:
        parse_wheel_filename(filename)
    except InvalidWheelFilename as err:
        raise VerificationError(f"{filename}: not a valid wheel filename ({err})") from None
    label = filename.split("-")[1].partition("+")[2]
    if not label:
        raise VerificationError(f"{filename}: no local label (+cu13torchstable ...): not a farm wheel")
    try:
        return _variant.Variant.from_label(label)
    except _variant.VariantError as err:
        raise VerificationError(f"{filename}: {err}") from None


def to_variant(wheel: Path, out_dir: Path, form: Form | None = None) -> Path:
    """The variant form of the verified farm wheel ``wheel`` in ``out_dir`` (``form``: default
    :func:`form_of_wheel`). Deterministic: the same input gives the same bytes."""
    return _rewrite(Path(wheel), Path(out_dir), form or form_of_wheel(Path(wheel)))


def to_plain(wheel: Path, out_dir: Path) -> Path:
    """``wheel`` under its release's plain version, no variant label: what pip takes from a variant root."""
    return _rewrite(Path(wheel), Path(out_dir), None)


def _rewrite(wheel: Path, out_dir: Path, form: Form | None) -> Path:
    infos, members, info_dir = read_members(wheel)
    parts = wheel.name.removesuffix(".whl").split("-")
    dist, version = parts[0], parts[1]
    release = version.partition("+")[0]
    new_dir = f"{dist}-{release}.dist-info"

    def moved(name: str) -> str:
        return new_dir + name[len(info_dir) :] if name.startswith(info_dir + "/") else name

    out_members, out_infos = {}, []
    for info in infos:
        if info.filename == f"{info_dir}/variant.json":
            continue
        data = members[info.filename]
        if info.filename == f"{info_dir}/METADATA":
            data = _set_version(data, release, wheel.name)
        zi = zipfile.ZipInfo(moved(info.filename), date_time=info.date_time)
        zi.external_attr = info.external_attr
        out_infos.append(zi)
        out_members[zi.filename] = data
    name = "-".join([dist, release, *parts[2:]])
    if form is not None:
        if not WRITE_LABEL_RE.fullmatch(form.label):
            raise VerificationError(f"variant label {form.label!r} is not 1-16 of [0-9a-z_.]")
        zi = zipfile.ZipInfo(f"{new_dir}/variant.json", date_time=infos[0].date_time)
        zi.external_attr = 0o644 << 16
        record = next(i for i, z in enumerate(out_infos) if z.filename == f"{new_dir}/RECORD")
        out_infos.insert(record, zi)  # before RECORD, as wheel builders order them
        out_members[zi.filename] = dumps(metadata([form])).encode()
        name += f"-{form.label}"
    return write_wheel(out_infos, out_members, new_dir, out_dir / f"{name}.whl")


def _set_version(metadata_bytes: bytes, release: str, filename: str) -> bytes:
    text = metadata_bytes.decode("utf-8")
    head, sep, body = text.partition("\n\n")
    lines = head.splitlines()
    at = [i for i, line in enumerate(lines) if line.lower().startswith("version:")]
    if len(at) != 1:
        raise VerificationError(f"{filename}: METADATA has {len(at)} Version fields")
    lines[at[0]] = f"Version: {release}"
    return ("\n".join(lines) + (sep + body if sep else "\n")).encode("utf-8")


# --------------------------------------------------------------------------- the index's variant root

ROOT = "variants"  # <index>/variants/: a PEP 503 root of variant wheels, their plain fallback, -variants.json


def install_command(base: str, project: str) -> str:
    """The one command a variant-aware installer needs (``base``: the index's URL, ending in /). ``--index``, not
    ``--index-url``: PyPI stays the default index, so torch resolves; uv takes a name from the first index that
    has it, so mamba-ssm comes from the variant root and never from PyPI (where the name is upstream's)."""
    return f"{INSTALL_PREVIEW} {project} --index {base}{ROOT}/"


def build_root(index, store: Path, previous: dict) -> tuple[dict[str, str], dict]:
    """The variant root of ``index`` (a builder.publishing.index Index): (pages by path relative to the generation,
    the manifest's ``wheel_variants`` record). Each release's stable-ABI wheels of a CPU or CUDA build get
    their variant form, the CPU ones also the plain fallback; the files are written into ``store`` (the
    index's files/) once and reused while their source's sha256 stays the same. A stable wheel that has no
    variant form (no GPU code, a ROCm build) is left out with its reason in the record, never an error; one whose
    members cannot be read (a damaged extension) is left out too, and also named under ``refused``, which the
    index run reports as an error."""
    import hashlib
    import html

    before = (previous.get("wheel_variants") or {}).get("files", {})
    files: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    refused: dict[str, str] = {}  # of those skipped, the wheels whose members could not be read
    groups: dict[tuple[str, str], list] = {}
    spelled: dict[tuple[str, Version], str] = {}  # one -variants.json per version: 0.3.0 and 0.3.0.0 are one
    for fn, e in sorted(index.files.items()):
        if e.stable and (e.accelerator == "cpu" or e.accelerator.startswith("cu")):
            first = spelled.setdefault((e.project, Version(e.release)), e.release)
            if first != e.release:
                skipped[fn] = (f"release {e.release} is {first} spelled another way: one {variants_json_name(e.project, first)} "
                               "per version (an installer would see two)")  # fmt: skip
                continue
            groups.setdefault((e.project, e.release), []).append((fn, e))
    pages: dict[str, str] = {}
    releases: dict[str, list[str]] = {}
    for (project, release), members in sorted(groups.items()):
        made: list[tuple[str, Form | None, str]] = []  # (file, form or None for the plain one, source file)
        labels: dict[str, Form] = {}
        for fn, e in members:
            src = store / fn
            try:  # a wheel whose members cannot be read is refused (the index run says so and fails)
                _infos, members, _info_dir = read_members(src)
                archs = extension_archs(members)
            except (VerificationError, Untrusted) as err:
                skipped[fn] = refused[fn] = str(err)
                continue
            try:  # a wheel that has no variant form is left out with its reason
                form = form_of(_farm_variant(src.name), *archs)
            except VerificationError as err:
                skipped[fn] = str(err)
                continue
            if form.label in labels and labels[form.label] != form:  # one label, one property set
                form = Form(f"{form.label}_{e.platform.split('_', 1)[-1]}", form.properties)
            labels[form.label] = form
            made.append((_made(src, store, form, e.sha256, before, files), form, fn))
            if form.label == NULL:
                made.append((_made(src, store, None, e.sha256, before, files), None, fn))
        if not made:
            continue
        doc = dumps(metadata(labels.values()))
        vj = variants_json_name(project, release)
        rows = []
        for name, _form, fn in sorted(made):
            e = index.files[fn]
            url = variant_url(index, fn, name)
            rp = f' data-requires-python="{html.escape(e.requires_python)}"' if e.requires_python else ""
            if e.url is None:  # PEP 658, as the other pages: the .metadata file is served next to the wheel in files/
                md = f"sha256={files[name]['metadata_sha256']}"
                rp += f' data-dist-info-metadata="{md}" data-core-metadata="{md}"'
            rows.append(
                f'    <a href="{html.escape(url)}#sha256={files[name]["sha256"]}"{rp}>{html.escape(name)}</a><br>\n'
            )
        digest = hashlib.sha256(doc.encode()).hexdigest()
        rows.append(f'    <a href="{vj}#sha256={digest}">{vj}</a><br>\n')
        key = f"{ROOT}/{project}/"
        pages[key + vj] = doc
        pages.setdefault(key + "index.html", "")
        pages[key + "index.html"] += "".join(rows)
        releases.setdefault(project, []).append(release)
    for project in releases:
        path = f"{ROOT}/{project}/index.html"
        pages[path] = _page(f"Links for {project} (wheel variants)", pages[path])
    if releases:
        links = "".join(f'    <a href="{p}/">{p}</a><br>\n' for p in releases)
        pages[f"{ROOT}/index.html"] = _page("Wheel variants (PEP 825)", links)
    record = {"files": files, "skipped": skipped, "releases": releases}
    if refused:
        record["refused"] = refused
    return pages, record


def variant_url(index, fn: str, name: str) -> str:
    """Where variant file ``name`` (made from the index's wheel ``fn``) is downloaded from: next to its source
    wheel, so ``files/`` on the farm's own index, and the same release's assets for a wheel linked there
    (``--files-url``: a tag release's site has no files/, and the publish job uploads the variant files)."""
    e = index.files[fn]
    if e.url:
        return e.url.rpartition("/")[0] + "/" + quote(name)
    return index.href("", 2) + quote(name)


def _made(src: Path, store: Path, form: Form | None, source_sha: str, before: dict, files: dict) -> str:
    """The variant (or plain, ``form`` None) file of store file ``src`` in ``store``, with its PEP 658
    ``.metadata`` beside it, made unless an earlier run made both from the same bytes; its name."""
    name = _target_name(src.name, form)
    old = before.get(name)
    path = store / name
    md_path = store / (name + ".metadata")
    if (
        old
        and old.get("from_sha256") == source_sha
        and path.is_file()
        and path.stat().st_size == old["size"]
        and md_path.is_file()
        and "metadata_sha256" in old
        and _still_made_from(path, form, old)
    ):
        files[name] = old
        return name
    made = to_variant(src, store, form) if form is not None else to_plain(src, store)
    assert made.name == name, (made.name, name)
    with zipfile.ZipFile(made) as zf:  # the wheel just written by to_variant/to_plain: one METADATA
        (meta,) = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        md_path.write_bytes(zf.read(meta))
    files[name] = {
        "from": src.name,
        "from_sha256": source_sha,
        "label": form.label if form else None,
        "properties": form.lines() if form else [],
        "sha256": sha256_of(str(made)),
        "size": made.stat().st_size,
        "metadata_sha256": sha256_of(str(md_path)),
    }
    return name


def _still_made_from(path: Path, form: Form | None, old: dict) -> bool:
    """Whether an earlier run's file is still what this run would make: the bytes the manifest recorded, and
    (a variant file) the variant its own variant.json declares is the one -variants.json is written from. The
    manifest and the store are files on disk, not proof: a file that says sm_120 while -variants.json, made
    from the source wheel's extension, says sm_90 is made again, never republished."""
    if sha256_of(str(path)) != old.get("sha256"):
        return False
    if form is None:
        return True
    try:
        declared = read_form(path)
    except (VerificationError, Untrusted):
        return False
    return declared.label == form.label and declared.lines() == form.lines()


def _target_name(filename: str, form: Form | None) -> str:
    parts = filename.removesuffix(".whl").split("-")
    name = "-".join([parts[0], parts[1].partition("+")[0], *parts[2:]])
    return f"{name}-{form.label}.whl" if form else f"{name}.whl"


def _page(title: str, body: str) -> str:
    import html

    return (
        '<!DOCTYPE html>\n<html>\n  <head>\n    <meta name="pypi:repository-version" content="1.1">\n'
        f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n    <h1>{html.escape(title)}</h1>\n"
        f"{body}  </body>\n</html>\n"
    )


_LABEL_RE = re.compile(r"[a-z0-9_.]{1,64}")  # PEP 825's labels: the farm writes null, cu13, cu13_aarch64
_PROPERTY_RE = re.compile(r"[ -~]{1,256}")  # a property line (namespace :: feature :: value), printable ASCII


def check_record(record: object, where: str) -> dict | None:
    """The manifest's ``wheel_variants`` record (what :func:`summary` reads), its shape checked: objects where
    objects are meant, labels and property lines in their alphabets, each release a version. Untrusted
    naming the field otherwise (a hand-edited or hostile manifest: never an AttributeError, never a raw
    control character on a terminal)."""
    if record is None:
        return None
    where = f"{where}: wheel_variants"
    expect(record, dict, where)
    for name, f in field(record, "files", dict, where, {}).items():
        at = f"{where}.files[{name!r}]"
        label = field(f, "label", (str, type(None)), at, None)
        if label is not None and not _LABEL_RE.fullmatch(label):
            raise Untrusted(f"{at}.label {label!r}: not a variant label (a-z, 0-9, _ and .)")
        for line in field(f, "properties", list, at, []):
            if not isinstance(line, str) or not _PROPERTY_RE.fullmatch(line):
                raise Untrusted(f"{at}.properties: {line!r} is not a property line (printable ASCII)")
    for project, versions in field(record, "releases", dict, where, {}).items():
        for v in expect(versions, list, f"{where}.releases[{project!r}]"):
            try:
                Version(expect(v, str, f"{where}.releases[{project!r}]"))
            except ValueError:
                raise Untrusted(f"{where}.releases[{project!r}]: {v!r} is not a version") from None
    field(record, "skipped", dict, where, {})
    return record


def summary(record: dict | None, project: str) -> dict | None:
    """What the coverage page and ``builder resolve`` say about the variant root, from the manifest's
    ``wheel_variants`` record: {"labels": {label: [property lines]}, "plain": [file], "releases": [...]}."""
    if not record or project not in (record.get("releases") or {}):
        return None
    prefix = canonicalize_name(project).replace("-", "_") + "-"
    labels, plain = {}, []
    for name, f in sorted((record.get("files") or {}).items()):
        if not name.startswith(prefix):
            continue
        if f.get("label"):
            labels[f["label"]] = f.get("properties") or []
        else:
            plain.append(name)
    return {"labels": labels, "plain": plain, "releases": record["releases"][project]}


def describe(record: dict | None, project: str, base: str) -> list[str]:
    """The variant line(s), for people: the one command, what it picks from, what pip takes there."""
    s = summary(record, project)
    if s is None:
        return []
    picks = "; ".join(f"{label} ({', '.join(p) or 'no properties: the CPU build'})" for label, p in s["labels"].items())
    lines = [f"variant-aware: {install_command(base, project)}", f"  picks one of: {picks}"]
    if s["plain"]:
        lines.append(f"  installers without variant support take {', '.join(s['plain'])} there (the CPU build)")
    return lines
