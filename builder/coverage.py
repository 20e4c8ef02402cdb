"""The coverage page (OUT/index.html): which torch x accelerator x Python x ABI cells have a wheel.

Pure: takes the index model, returns HTML. The layout lives in templates/coverage.html.j2.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import jinja2

from mamba_ssm import _variant

_TEMPLATES = Path(__file__).parent / "templates"
_ACC_ORDER = {"cpu": (0, 0), "cu": (1, 0), "hip": (2, 0)}


@dataclass(frozen=True)
class Cell:
    filename: str
    href: str
    version: str
    key: str  # the variant page the command points at
    command: str
    stable: bool

    @property
    def release(self) -> str:
        return self.version.partition("+")[0]

    @property
    def label(self) -> str:
        return self.version.partition("+")[2]


def _acc_sort(acc: str) -> tuple:
    kind = "cpu" if acc == "cpu" else "cu" if acc.startswith("cu") else "hip"
    return (_ACC_ORDER[kind][0], -int(acc.lstrip("cuhip") or 0))


def _torch_sort(torch: str) -> tuple:
    return (0, 0) if torch == "stable" else tuple(-int(x) for x in torch.split("."))


def model(index) -> dict:
    from builder.index import install_command, python_serves

    files = index.files
    # Without --base-url the page fills in its own address (a line of JavaScript); "./" until then.
    base = index.base_url.rstrip("/") + "/" if index.base_url else "./"
    pythons = sorted({e["python"] for e in files.values()}, key=lambda t: (int(t[2]), int(t[3:])))
    abis = sorted({e["cxx11abi"] for e in files.values() if e["cxx11abi"] is not None}) or [True]
    found: dict = {}  # (variant, serving) -> {python tag: file}, filled as cells ask
    rows: dict[tuple[str, str], dict] = {}
    for key in index.variants:
        parts = _variant.parse_key(key)
        row = rows.setdefault((parts["torch"], parts["accelerator"]), {"keys": {}})
        row["keys"][parts["cxx11abi"]] = key
    out_rows = []
    for (torch, acc), row in sorted(rows.items(), key=lambda kv: (_acc_sort(kv[0][1]), _torch_sort(kv[0][0]))):
        cells = []
        for py in pythons:
            for abi in abis:
                key = row["keys"].get(abi) or row["keys"].get(None)  # a stable row serves both ABIs
                cell = _best(index, key, py, base, install_command, python_serves, found, pythons) if key else None
                stable_key = f"{acc}-torchstable-abi3"
                if cell is None and key and key != stable_key and stable_key in index.variants:
                    # e.g. no exact cp312 wheel of this release: the stable wheel's own page serves it
                    cell = _best(
                        index, stable_key, py, base, install_command, python_serves, found, pythons, serving=key
                    )
                cells.append(cell)
        floor = ""
        if torch == "stable":
            floors = {files[fn]["requires_torch"] for fn in index.variants[row["keys"][None]]}
            floor = ", ".join(sorted(f for f in floors if f))
        out_rows.append({"torch": torch, "accelerator": acc, "floor": floor, "cells": cells})
    columns = [{"python": f"{py[2]}.{py[3:]}", "abi": abi} for py in pythons for abi in abis]
    return {
        "rows": out_rows,
        "columns": columns,
        "pythons": [f"{py[2]}.{py[3:]}" for py in pythons],
        "abis": abis,
        "base_url": index.base_url,
        "base": base,
        "accelerator_names": {r["accelerator"]: _acc_name(r["accelerator"]) for r in out_rows},
        "n_files": len(files),
        "n_variants": len(index.variants),
    }


def _best(
    index,
    key: str,
    py: str,
    base: str,
    install_command,
    python_serves,
    found: dict,
    pythons: list[str],
    serving: str | None = None,
) -> Cell | None:
    """The wheel a user in this cell gets: the newest release; within one, an exact build before a stable one."""
    by_python = found.get((key, serving))
    if by_python is None:
        by_python = found[(key, serving)] = _best_by_python(index, key, pythons, python_serves, serving)
    fn = by_python.get(py)
    if fn is None:
        return None
    e = index.files[fn]
    return Cell(
        filename=fn,
        href=index.href(fn, 0),
        version=e["version"],
        key=key,
        command=install_command(e, key, base),
        stable=e["stable"],
    )


def _best_by_python(index, key: str, pythons: list[str], python_serves, serving: str | None) -> dict[str, str]:
    """For each Python tag, the first file of ``key`` with the highest (release, exact before stable):
    one pass over the variant's files, not one per cell."""
    files = index.files
    best: dict[str, tuple] = {}
    for fn in index.variants[key]:
        e = files[fn]
        if serving is not None and serving not in e["serves"]:
            continue
        rank = (_public(e["version"]), not e["stable"])
        for py in pythons if e["abi"] == "abi3" else (e["python"],):
            if python_serves(e, py) and (py not in best or rank > best[py][0]):
                best[py] = (rank, fn)
    return {py: fn for py, (_rank, fn) in best.items()}


@functools.cache
def _public(version: str):
    """The release part as a Version (cached: every cell compares the same few versions)."""
    from builder.index import parse_version

    return parse_version(version.partition("+")[0])


def _acc_name(acc: str) -> str:
    if acc == "cpu":
        return "CPU only"
    if acc.startswith("cu"):
        return f"CUDA {acc[2:]}.x"
    return f"ROCm {acc[3]}.{acc[4:]}"


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(index) -> str:
    return _environment().get_template("coverage.html.j2").render(**model(index))
