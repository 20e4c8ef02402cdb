"""Dependency layers: a wheel's declared dependencies for its smoke test, on top of a torch environment.

On this machine a layer is a venv that sees a torch venv of the store (``deps_layer``); for another machine's smoke
test, a folder this host's pip fills for that machine (``foreign_deps_layer``). Each is made once in a temporary
folder, renamed into place whole and reused; it lives in its torch's slot of the store, which evicts it with its torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from builder.environments.store import real_dirs, touch
from builder.environments.venv import run_step, site_packages
from builder.errors import VerificationError
from builder.facts import timings
from builder.facts.untrusted import Untrusted, read_inside, shown, text


def _layer_begin(layer: Path) -> Path | None:
    """None when LAYER is made already (touched: in use); else a fresh temporary folder beside it to make it in."""
    if (layer / ".complete").exists():
        touch(layer)
        return None
    layer.parent.mkdir(parents=True, exist_ok=True)
    tmp = layer.parent / f".{layer.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    return tmp


def _layer_commit(tmp: Path, layer: Path, lines: list[str]) -> None:
    """Mark TMP complete (LINES: what it holds) and rename it into place as LAYER, whole or not at all."""
    (tmp / ".complete").write_text("".join(ln + "\n" for ln in lines))
    if layer.is_dir() and not layer.is_symlink() and not (layer / ".complete").exists():
        shutil.rmtree(layer)  # a layer a killed run left half made
    try:
        os.rename(tmp, layer)  # another run's layer of the same name is as good
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (layer / ".complete").exists():
            raise VerificationError(f"smoke test: could not put the dependency layer in place at {layer}") from None
    touch(layer)


def deps_layer(torch_venv: Path, torch_requirement: str, requirements: list[str], root: Path) -> Path:
    """A layer holding REQUIREMENTS (a wheel's declared dependencies, judged for the smoke test's Python, torch
    left out: builder.verifying.smoke.declared_requirements) on top of TORCH_VENV, made once under ROOT and
    reused: its folder is named by the torch venv and the sorted requirement set. It is a venv that sees the
    torch venv through a .pth file, so pip resolves against the torch already there (held to
    TORCH_REQUIREMENT by a constraint: never replaced) and installs only what is missing; made in a
    temporary folder and renamed into place whole. The smoke test adds its site-packages with
    ``site.addsitedir`` (builder.verifying.smoke)."""
    key = hashlib.sha256("\n".join([torch_requirement, *sorted(requirements)]).encode()).hexdigest()[:12]
    layer = root / f"{torch_venv.name}-{key}"
    if (tmp := _layer_begin(layer)) is None:
        return layer
    started = time.monotonic()
    tpy = str(torch_venv / "bin" / "python")
    run_step([tpy, "-m", "venv", "--without-pip", str(tmp)], "create the dependency layer")
    (Path(site_packages(str(tmp / "bin" / "python"))) / "_torch_base.pth").write_text(site_packages(tpy) + "\n")
    wanted = tmp / ".requirements.txt"
    wanted.write_text("".join(r + "\n" for r in sorted(requirements)))
    held = tmp / ".constraints.txt"
    held.write_text(torch_requirement + "\n")
    pip = [tpy, "-m", "pip", "--python", str(tmp / "bin" / "python")]
    run_step(
        [*pip, "install", "-q", "--no-compile", "-r", str(wanted), "-c", str(held)],  # as in torch_venv
        f"install the wheel's dependencies ({', '.join(sorted(requirements))}) next to {torch_requirement}",
    )
    _layer_commit(tmp, layer, [torch_requirement, *sorted(requirements)])
    timings.record("deps", f"layer {layer.name} ({len(requirements)} requirement(s))", time.monotonic() - started)
    return layer


# pip judges a requirement's markers by the interpreter it runs in: fetching for another machine, it is given that
# machine's marker environment (argv[1], JSON); --platform and --python-version pick the wheels.
_TARGET_PIP = """
import json, runpy, sys
from pip._vendor.packaging import markers
env = json.loads(sys.argv.pop(1))
markers.default_environment = lambda: dict(env)
runpy.run_module("pip", run_name="__main__", alter_sys=True)
"""
_PIP_FAILED = re.compile(r"No matching distribution found for (.{1,300})|satisfies the requirement (.{1,300}?) \(from versions")


def installed_dists(site: Path) -> dict[str, str]:
    """{canonical name: version} of the distributions pip put under SITE (``--target``), read from their
    ``.dist-info`` folder names (pip writes them ``name-version``); a name that is not one is skipped."""
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

    out = {}
    for info in real_dirs(site):
        name, sep, version = info.name.removesuffix(".dist-info").partition("-")
        if not info.name.endswith(".dist-info") or not sep:
            continue
        try:
            out[canonicalize_name(name)] = str(Version(version))
        except InvalidVersion:
            continue
    return out


def foreign_deps_layer(
    torch_site: Path, requirements: list[str], root: Path, *, platforms: list[str], python: str,
    environment: dict[str, str], pip_args: list[str] = (), compile_with: Path | None = None,
    log_path: Path | None = None, timeout: float = 1800,
) -> Path:
    """A layer holding REQUIREMENTS (a wheel's declared dependencies, torch left out:
    builder.verifying.smoke.declared_requirements) for another machine's smoke test, next to the torch folder whose
    site-packages is TORCH_SITE (builder.environments.build_torch.fetched_for_target). This host's pip fetches
    it natively: wheels only, for PLATFORMS (every manylinux tag the wheel under test runs on) and CPython PYTHON,
    markers judged in ENVIRONMENT (the target's). Its resolution holds every distribution in the torch folder to its
    version (torch among them); what the folder already has is left out, the rest installed with ``--target`` into
    the layer's ``site/``. Made once under ROOT and reused, named by the torch folder and the sorted requirement set
    (``.complete`` says both, as ``deps_layer``'s does); made in a temporary folder and renamed into place whole.
    COMPILE_WITH (a host Python of that version) byte-compiles it: the container mounts it read-only. A requirement
    pip cannot fetch for the target is a VerificationError naming it and the platform, and leaves nothing behind."""
    held = installed_dists(torch_site)
    if "torch" not in held:
        raise VerificationError(f"smoke test: no torch in {torch_site}: the dependency layer has no torch to hold")
    torch_requirement = f"torch=={held['torch']}"
    wanted = sorted(requirements)
    key = hashlib.sha256("\n".join([torch_requirement, platforms[0], python, *wanted]).encode()).hexdigest()[:12]
    layer = root / f"{torch_site.parent.name}-{key}"
    if (tmp := _layer_begin(layer)) is None:
        return layer
    started = time.monotonic()
    target = _TargetPip(platforms, python, environment, pip_args, log_path, timeout)
    try:
        (tmp / "site").mkdir(parents=True)
        (tmp / ".requirements.txt").write_text("".join(r + "\n" for r in wanted))
        (tmp / ".constraints.txt").write_text("".join(f"{n}=={v}\n" for n, v in sorted(held.items())))
        resolved = target.resolve(tmp, wanted, torch_requirement)
        fetch = sorted(f"{n}=={v}" for n, v in resolved.items() if n not in held)
        (tmp / ".resolved.txt").write_text("".join(r + "\n" for r in fetch))
        if fetch:
            target.run(["--no-deps", "--target", str(tmp / "site"), *fetch], f"fetch {len(fetch)} distribution(s)")
        if compile_with is not None:  # bytecode is the same on every machine; a file its Python cannot read stays .py
            _byte_compile(compile_with, tmp / "site", timeout)
        _layer_commit(tmp, layer, [torch_requirement, *wanted])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    where = target.where
    timings.record("deps", f"layer {layer.name} ({len(requirements)} requirement(s), {where})", time.monotonic() - started)
    return layer


class _TargetPip:
    """This host's pip installing for another machine: wheels only, for PLATFORMS and CPython PYTHON, markers judged
    in ENVIRONMENT (``_TARGET_PIP``); each run's output appended to LOG_PATH; a failure a VerificationError that names
    the requirement pip could not fetch and the platform."""

    def __init__(self, platforms: list[str], python: str, environment: dict[str, str], pip_args, log_path, timeout):
        self.where = f"{platforms[0]} (CPython {python})"
        self.pip = [
            sys.executable, "-c", _TARGET_PIP, json.dumps(environment), "install", "--no-compile", "--only-binary",
            ":all:", *(a for tag in platforms for a in ("--platform", tag)), "--python-version", python,
            "--implementation", "cp", "--disable-pip-version-check", *pip_args,
        ]  # fmt: skip
        self.log_path, self.timeout = log_path, timeout

    def run(self, args: list[str], what: str) -> str:
        """``pip install ARGS`` for the target; its stdout."""
        try:
            proc = subprocess.run([*self.pip, *args], check=False, capture_output=True, text=True, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise VerificationError(f"smoke test: {what} for {self.where} timed out after {self.timeout:.0f}s") from None
        if self.log_path is not None:
            with open(self.log_path, "a") as f:
                f.write(f"== {what} for {self.where}\n{proc.stdout}{proc.stderr}")
        if proc.returncode:
            errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR:")]
            found = next((m for ln in errors if (m := _PIP_FAILED.search(ln))), None)
            if found:
                raise VerificationError(
                    f"smoke test: the wheel's dependency {shown(found.group(1) or found.group(2), 300)} cannot be "
                    f"fetched for {self.where}: {shown(errors[-1], 400)}")  # fmt: skip
            last = (errors or proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise VerificationError(f"smoke test: could not {what} for {self.where}: {shown(last, 400)}")
        return proc.stdout

    def resolve(self, tmp: Path, wanted: list[str], torch_requirement: str) -> dict[str, str]:
        """{name: version} pip's resolution of TMP's requirements and constraints installs for the target (a dry run
        with a report in TMP); empty, without pip, when WANTED is."""
        from packaging.utils import canonicalize_name

        report = tmp / ".report.json"
        report.write_text('{"install": []}')  # nothing declared but torch: an empty layer, no pip
        if wanted:
            self.run(["--dry-run", "--ignore-installed", "--report", str(report), "--target", str(tmp / "dry"),
                      "-r", str(tmp / ".requirements.txt"), "-c", str(tmp / ".constraints.txt")],
                     f"resolve the wheel's dependencies ({', '.join(wanted)}) next to {torch_requirement}")  # fmt: skip
        try:
            items = json.loads(text(read_inside(tmp, report, 64 << 20), str(report))).get("install") or []
            return {canonicalize_name(i["metadata"]["name"]): str(i["metadata"]["version"]) for i in items}
        except (Untrusted, ValueError, KeyError, TypeError, AttributeError) as err:
            raise VerificationError(f"smoke test: pip's report of the dependencies cannot be read ({shown(err, 200)})") from None


def _byte_compile(python: Path, site: Path, timeout: float) -> None:
    """SITE byte-compiled by PYTHON (a host Python of the target's version: bytecode is the same on every machine)."""
    try:
        subprocess.run([str(python), "-m", "compileall", "-q", "-j", "0", str(site)],
                       check=False, capture_output=True, timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise VerificationError(f"smoke test: byte-compiling the dependency layer timed out after {timeout:.0f}s") from None
