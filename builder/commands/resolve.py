"""``python -m builder resolve``: which wheel of an index fits an environment (builder.publishing.resolve)."""

from __future__ import annotations

import argparse
import json
import re
import sys

from packaging.utils import canonicalize_name

from builder.commands import summary
from builder.errors import NoMatchingWheel, UsageError
from builder.facts.untrusted import PLAIN_URL_RE, shown
from builder.publishing.index.model import PROJECT, Manifest, install_command
from builder.publishing.resolve import DEFAULT_INDEX, is_http_url, load, resolve
from builder.verifying import variants
from mamba_ssm import variant as _variant
from mamba_ssm.elf import tag_machine


def add_command(subparsers) -> None:
    p = subparsers.add_parser(
        "resolve",
        help=summary("resolve"),
        description="Which wheel of an index fits torch/CUDA/ROCm/ABI/Python, and how to install exactly it.",
    )
    p.add_argument(
        "--project", default=PROJECT, help=f"the distribution to install (default: {PROJECT}), e.g. causal-conv1d"
    )
    p.add_argument("--torch", required=True, help="torch version: 2.6 or 2.6.0+cu124")
    acc = p.add_mutually_exclusive_group()
    acc.add_argument("--cuda", help="torch's CUDA version (torch.version.cuda), e.g. 12.4")
    acc.add_argument("--rocm", help="torch's ROCm/HIP version (torch.version.hip), e.g. 6.2")
    p.add_argument(
        "--abi",
        type=str.upper,
        choices=["TRUE", "FALSE"],
        help="torch._C._GLIBCXX_USE_CXX11_ABI (default: torch's rule for that release)",
    )
    p.add_argument(
        "--python", default=f"{sys.version_info[0]}.{sys.version_info[1]}", help="e.g. 3.11 (default: this Python)"
    )
    p.add_argument(
        "--platform",
        type=_parse_platform,
        help="the user's machine: x86_64 or aarch64, or a wheel platform tag such as linux_aarch64 (default: this one)",
    )
    p.add_argument("--index", default=DEFAULT_INDEX, help=f"index folder or URL (default: {DEFAULT_INDEX})")
    p.add_argument("--format", choices=["text", "json"], default="text", help="text (default) or json")
    p.set_defaults(func=run)


def _parse_platform(value: str) -> str:
    """x86_64 / aarch64 (or arm64), or a Linux wheel platform tag -> the tag Variant carries (linux_<machine>)."""
    name = value.strip()  # lowercase only, as wheel tags are: pip and uv match a tag's spelling exactly
    name = {"arm64": "aarch64", "amd64": "x86_64"}.get(name, name)
    machine = (
        name
        if name in ("x86_64", "aarch64")
        else tag_machine(name)
        if re.fullmatch(r"(many)?linux_[a-z0-9_]+", name)
        else None
    )
    if machine not in ("x86_64", "aarch64"):
        raise argparse.ArgumentTypeError(
            f"{shown(repr(value), 100)}: expected x86_64 or aarch64 (or a tag such as linux_aarch64), in lowercase"
        )
    return f"linux_{machine}"


def _parse_python(value: str) -> str:
    m = re.fullmatch(r"(?:cp)?(\d)\.?(\d+)", value.strip())
    if not m:
        raise UsageError(f"--python {value!r}: expected major.minor, e.g. 3.11")
    return f"cp{m.group(1)}{int(m.group(2))}"


def run(args: argparse.Namespace) -> int:
    try:
        variant = _variant.from_values(
            args.torch,
            cuda=args.cuda,
            hip=args.rocm,
            cxx11abi=None if args.abi is None else args.abi == "TRUE",
            python=_parse_python(args.python),
            platform=args.platform,
        )
    except _variant.VariantError as err:
        raise UsageError(f"{err}", hint="e.g. --torch 2.6 --cuda 12.4 --abi FALSE --python 3.11") from None
    doc, base = load(args.index)
    manifest = Manifest.from_json(doc)
    project = canonicalize_name(args.project)
    if manifest.files and project not in manifest.projects:
        raise UsageError(
            f"--project {args.project}: {args.index} has no {project} wheels (it serves {', '.join(manifest.projects)})",
            hint="name one of its projects, or point --index at the index that publishes it",
        )
    res = resolve(manifest, variant, project)
    if res.entry is not None and not (is_http_url(base) or base.startswith("file://") and PLAIN_URL_RE.fullmatch(base)):
        raise UsageError(
            f"--index {args.index}: its base URL {base!r} is not an http(s) URL; no command is printed with it",
            hint="point --index at an index whose base_url is http(s)",
        )
    command = install_command(res.entry, res.key, base) if res.entry else None
    if args.format == "json":
        print(
            json.dumps(
                {
                    "project": project,
                    "variant": variant.key,
                    "python": variant.python,
                    "page": res.key,
                    "wheel": res.filename,
                    "sha256": res.entry.sha256 if res.entry else None,
                    "command": command,
                    "nearest": [{"variant": k, "why_not": r} for k, r in res.near],
                    "wheel_variants": variants.summary(doc.get("wheel_variants"), project),
                },
                indent=1,
            )
        )
        return 0 if res.entry else NoMatchingWheel.exit_code
    if res.entry is None:
        lines = [f"no {project} wheel in {args.index} fits {variant.key} on {variant.python}; nearest:"]
        lines += [f"  {k}: {'; '.join(r)}" for k, r in res.near] or ["  (the index is empty)"]
        raise NoMatchingWheel(
            "\n".join(lines),
            hint=f"build from source for your torch: pip install {project} --no-build-isolation",
        )
    print(f"project: {project}")
    print(f"variant: {variant.key} ({variant.python})")
    if res.key != variant.key:
        print(f"served by: {res.key} (one stable-ABI wheel for many torch releases)")
    print(f"wheel:   {res.filename}")
    print(f"sha256:  {res.entry.sha256}")
    print(f"install: {command}")
    if res.entry.stable:  # the variant root serves the stable line: the command that needs no variant folder
        for line in variants.describe(doc.get("wheel_variants"), project, base.rstrip("/") + "/"):
            print(line)
    return 0
