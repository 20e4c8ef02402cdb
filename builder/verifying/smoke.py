"""The smoke test: a verified wheel installed alone beside the torch it was built for, in a clean environment,
imported and run.

The checkout's wheel runs ``SMOKE_SCRIPT`` (the registered ops, the CPU scan against the float64 reference); a
recipe's wheel runs its recipe's ``[test]``: imports, public API and commands (``recipe_steps``). Both print an
``evidence`` line of what ran, which becomes the wheel's record (``smoke_evidence``, ``recipe_ran``).

Where it runs: on this machine (:func:`on_host`), in a venv beside a torch venv of the environment store; another
machine's wheel (:func:`in_container`) in a container of its own image under emulation, which an executor runs
for it (:class:`Container`) with the script and files this module hands it. A recipe with ``deps = true`` gets
its wheel's declared dependencies (:func:`declared_requirements`) in a dependency layer
(builder/environments/layers.py), for this machine or the target's.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Protocol

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from builder.environments import layers, store
from builder.environments.markers import marker_environment, target_environment
from builder.environments.venv import clean_env, run_step, site_packages
from builder.errors import FarmError, VerificationError
from builder.facts.compat import machine_of, manylinux_platforms, newest_manylinux
from builder.facts.hostenv import host_machine, torch_index_args
from builder.facts.spec import BuildSpec
from builder.verifying import wheelmeta
from builder.facts.untrusted import Untrusted, marker_holds, shown

# The checkout's own smoke program, run by the smoke venv's Python (here, or in a container under emulation).
SMOKE_SCRIPT = r"""
import json, platform, sys, torch, mamba_ssm
from mamba_ssm.ops import selective_scan_interface as ssi
assert ssi.HAS_EXTENSION, f"compiled extension did not load: {ssi._IMPORT_ERROR}"
for op in ("selective_scan_fwd", "selective_scan_bwd"):
    assert hasattr(torch.ops.mamba_ssm, op), f"torch.ops.mamba_ssm.{op} is not registered"
from mamba_ssm import Mamba, selective_scan_fn, selective_scan_ref
torch.manual_seed(0)
b, d, n, L = 2, 4, 8, 33
u = torch.randn(b, d, L); delta = torch.rand(b, d, L); A = -torch.rand(d, n)
B = torch.randn(b, n, L); C = torch.randn(b, n, L); D = torch.randn(d); z = torch.randn(b, d, L)
out = ssi.selective_scan_fn(u, delta, A, B, C, D, z, None, True)
# the truth is the float64 reference; the float32 one is reported beside it, to tell which side drifted
dbl = [t.double() for t in (u, delta, A, B, C, D, z)]
ref = ssi.selective_scan_ref(*dbl, None, True)
ref32 = ssi.selective_scan_ref(u, delta, A, B, C, D, z, None, True)
err = (out.double() - ref).abs().max().item()
err32 = (ref32.double() - ref).abs().max().item()
assert torch.allclose(out.double(), ref, rtol=1e-4, atol=1e-4), (
    f"CPU scan differs from the float64 reference: max abs error {err:.3g} "
    f"(the float32 reference: {err32:.3g}; threads {torch.get_num_threads()})")
# one OpenMP runtime in the process: the extension uses the libgomp torch loaded
with open("/proc/self/maps") as maps:
    gomp = sorted({line.split()[-1] for line in maps if "/libgomp" in line})
assert len(gomp) <= 1, f"two OpenMP runtimes loaded: {gomp}"
# what ran, for the wheel's evidence record (builder/verifying/evidence.py)
print("evidence " + json.dumps({
    "imported": {"torch": torch.__version__, "python": platform.python_version(),
                 "modules": ["mamba_ssm", "mamba_ssm.ops.selective_scan_interface", "mamba_ssm._C"],
                 "api": ["Mamba", "selective_scan_fn", "selective_scan_ref",
                         "torch.ops.mamba_ssm.selective_scan_fwd", "torch.ops.mamba_ssm.selective_scan_bwd"]},
    "numerics": [{"check": "selective_scan_fn vs float64 reference", "device": "cpu", "shape": [b, d, n, L],
                  "max_abs_error": err, "tolerance": 1e-4}],
}))
print(f"smoke ok: torch {torch.__version__}, mamba_ssm {mamba_ssm.__version__}, max abs error {err:.2e}")
"""

# The recipe smoke's last step: what the interpreter that imported the recipe's modules runs on.
_RECIPE_FACTS = "import json, platform, torch; print('evidence ' + json.dumps({'torch': torch.__version__, 'python': platform.python_version()}))"


def smoke_evidence(output: str) -> dict:
    """What a smoke script's ``evidence {...}`` line says ran (its last one), or VerificationError."""
    for ln in reversed(output.splitlines()):
        if ln.startswith("evidence "):
            try:
                found = json.loads(ln[len("evidence "):])
            except ValueError:
                break
            if isinstance(found, dict):
                return found
            break
    raise VerificationError(f"the smoke test printed no evidence line of what it ran: {output.strip()[-300:]}")


# --------------------------------------------------------------------------- a recipe's test

def api_imports(api) -> list[str]:
    """``from module import Name`` for each of a recipe's public names (``module.Name``)."""
    return [f"from {m} import {n}" for m, _, n in (a.rpartition(".") for a in api)]


def recipe_steps(vpy: str, imports, commands, api) -> list[list[str]]:
    """The recipe smoke's programs, run with VPY (the smoke venv's Python, here or in a container): first its
    imports in order in one interpreter (an extension needs torch's libraries loaded first), then its public names
    from their modules, then which torch and Python ran them; then each command (``python`` is VPY)."""
    first = "; ".join([*(f"import {name}" for name in imports), *api_imports(api), _RECIPE_FACTS])
    return [[vpy, "-c", first], *([vpy if c[0] == "python" else c[0], *c[1:]] for c in commands)]


MAX_COMMAND_OUTPUT = 2000  # characters of a test command's output the evidence keeps (its end: where results print)


def command_output(raw: str) -> str:
    """A test command's output as the evidence keeps it: its last MAX_COMMAND_OUTPUT characters, stripped, with
    control and bidi characters escaped (newlines kept)."""
    text = shown(raw.strip()[-MAX_COMMAND_OUTPUT:], MAX_COMMAND_OUTPUT, keep_newlines=True)  # escapes lengthen it
    return text if len(text) <= MAX_COMMAND_OUTPUT and len(raw.strip()) <= MAX_COMMAND_OUTPUT \
        else "..." + text[-MAX_COMMAND_OUTPUT:]  # fmt: skip


def recipe_ran(facts: dict, torch_requirement: str, imports, commands, api, outputs=(), numerics=()) -> dict:
    """What a recipe's smoke test ran (``smoke_test``'s return), from the evidence FACTS its first step printed and
    each command's OUTPUTS, (stdout, stderr), as :func:`command_output` keeps them (stderr only when not empty:
    a library's warnings land there, a test's result on stdout). NUMERICS: the recipe's numerics checks, the last
    of COMMANDS; what each printed (:func:`numerics_results`) is the record's ``numerics``."""
    ran, checked = [], []
    for i, (c, (out, err)) in enumerate(zip(commands, outputs)):
        ran.append({"argv": shown(shlex.join(c), 300), "output": command_output(out)}
                   | ({"stderr": command_output(err)} if err.strip() else {}))  # fmt: skip
        if i >= len(commands) - len(numerics):
            checked += numerics_results(out, c)
    plain = len(commands) - len(numerics)
    return {
        "line": f"smoke ok: {len(imports)} import(s) and {plain} command(s) of the recipe"
        + (f", {len(checked)} numerics check(s) within tolerance" if numerics else "") + f" with {torch_requirement}",
        "imported": {**facts, "modules": [m for m in imports if m != "torch"], "api": list(api), "commands": ran},
        "numerics": checked,
    }


NUMERICS_MARK = "numerics "  # a numerics check's result line: numerics {"check": ..., "max_abs_error": ..., ...}
MAX_NUMERICS = 16  # result lines one command may report


def numerics_results(output: str, argv) -> list[dict]:
    """The results a recipe's numerics command ARGV printed in OUTPUT, one ``numerics {...}`` line each:
    ``check`` (what was compared with which reference), ``max_abs_error`` and ``tolerance`` (finite numbers),
    ``device`` (default cpu). A command that printed none, a malformed one, or an error above its tolerance is a
    VerificationError, whatever its exit status: the record lists only numerics that ran and passed."""
    import math

    cmd = shown(shlex.join(argv), 200)
    found = []
    for ln in output.splitlines():
        if not ln.startswith(NUMERICS_MARK):
            continue
        try:
            doc = json.loads(ln[len(NUMERICS_MARK):])
        except ValueError:
            doc = None
        ok = isinstance(doc, dict) and isinstance(doc.get("check"), str) and 0 < len(doc["check"]) <= 200 and all(
            isinstance(doc.get(k), (int, float)) and not isinstance(doc.get(k), bool) and math.isfinite(doc[k])
            for k in ("max_abs_error", "tolerance")) and isinstance(doc.get("device", "cpu"), str)  # fmt: skip
        if not ok:
            raise VerificationError(f"`{cmd}` printed a numerics line the farm cannot read: {shown(ln, 200)}",
                                    hint='print numerics {"check": "...", "max_abs_error": <number>, '
                                    '"tolerance": <number>} (JSON), one line per check')  # fmt: skip
        if not 0 <= doc["max_abs_error"] <= doc["tolerance"]:
            raise VerificationError(f"`{cmd}`: {shown(doc['check'], 200)}: max abs error {doc['max_abs_error']:.3g} "
                                    f"above the tolerance {doc['tolerance']:.3g}, though the command exited 0")
        found.append({"check": shown(doc["check"], 200), "device": shown(doc.get("device", "cpu"), 40),
                      "max_abs_error": doc["max_abs_error"], "tolerance": doc["tolerance"],
                      "command": cmd})  # fmt: skip
    if not found:
        raise VerificationError(f"`{cmd}` is a numerics check ([test] numerics) but printed no numerics line",
                                hint="a numerics check prints what it compared: numerics {\"check\": ..., "
                                "\"max_abs_error\": ..., \"tolerance\": ...}")  # fmt: skip
    if len(found) > MAX_NUMERICS:
        raise VerificationError(f"`{cmd}` printed {len(found)} numerics lines (at most {MAX_NUMERICS})")
    return found


def recipe_commands(recipe) -> tuple[tuple[str, ...], ...]:
    """A recipe's test commands in the order they run: its ``commands``, then its ``numerics`` checks."""
    return (*recipe.commands, *getattr(recipe, "numerics", ()))


def declared_requirements(wheel: Path, environment: dict[str, str]) -> list[str]:
    """What installing WHEEL (no extras) pulls in, judged for ENVIRONMENT (:func:`marker_environment`): its
    ``Requires-Dist`` whose markers hold there, torch left out (the smoke test's torch is already installed and
    ``pip check`` holds the wheel's pin against it), sorted, markers dropped once judged."""
    try:
        declared = wheelmeta.read(wheel).requires_dist
    except wheelmeta.MetadataError as err:
        raise VerificationError(f"{wheel.name}: {err}") from None
    out = set()
    for line in declared:
        try:
            req = Requirement(line)
        except InvalidRequirement as err:
            raise VerificationError(f"{wheel.name}: Requires-Dist {line!r} is not a requirement ({err})") from None
        try:
            if req.marker is not None and not marker_holds(req.marker, {**environment, "extra": ""}, wheel.name):
                continue
        except Untrusted as err:
            raise VerificationError(str(err)) from None
        if canonicalize_name(req.name) == "torch":
            continue
        req.marker = None
        out.add(str(req))
    return sorted(out)


def smoke_wheel(spec: BuildSpec, wheel: Path, log_path: Path, *, recipe=None, container: Container | None = None,
                log=print) -> dict:  # fmt: skip
    """Smoke-test SPEC's WHEEL where it runs: on this machine (:func:`on_host`), or another machine's in a container
    of its own image under emulation that CONTAINER runs (:func:`in_container`, its output beside LOG_PATH). Without
    a CONTAINER another machine's wheel cannot be smoke-tested here: a FarmError says so."""
    if machine_of(spec.platform) == host_machine():
        return on_host(spec, wheel, recipe=recipe, log=log)
    if container is None:
        raise FarmError(
            f"cannot smoke-test {wheel.name} on this {host_machine()} host: this executor runs no other machine's image",
            hint="use --executor docker, or pass --no-smoke",
        )
    started = time.monotonic()
    ran = in_container(container, spec, wheel, log_path, recipe=recipe, log=log)
    log(f"{spec.id}: {ran['line']} (under emulation, {time.monotonic() - started:.0f}s)")
    return ran


# --------------------------------------------------------------------------- on this machine


def on_host(spec: BuildSpec, wheel: Path, *, recipe=None, log=print) -> dict:
    """Smoke-test SPEC's WHEEL on this machine (:func:`smoke_test`) with a CPython of SPEC's version (pyenv's, else
    the farm's own: exit 14 when neither) and the store's torch venv of that Python and SPEC's torch, made once and
    kept across runs; a RECIPE with ``deps = true`` gets the dependency layer its wheel declares. The (Python,
    torch) slot's lock is held throughout, so ``cache prune`` passes it by."""
    from filelock import FileLock

    from builder.environments.interpreters import python_prefix

    python3 = str(python_prefix(spec.python, log=log) / "bin" / "python3")
    torch_requirement = f"torch=={spec.torch_version}"
    slot = store.smoke_slot(spec.python_tag, spec.torch_version)
    slot.mkdir(parents=True, exist_ok=True)
    with FileLock(str(slot) + ".lock"):
        torch_venv = store.torch_venv(python3, torch_requirement, slot / "torch-envs")
        layer, deps = None, ()
        if recipe is not None and recipe.deps:  # its public modules import what it declares: installed once
            started = time.monotonic()
            deps = tuple(declared_requirements(wheel, marker_environment(python3)))
            layer = layers.deps_layer(torch_venv, torch_requirement, list(deps), slot / "deps-envs")
            took = time.monotonic() - started
            log(f"{spec.id}: dependency layer {layer.name}: {len(deps)} requirement(s) ({took:.0f}s)")
        return smoke_test(
            wheel, spec, python=python3, torch_requirement=torch_requirement, workdir=slot, torch_venv=torch_venv,
            imports=recipe.imports if recipe else (), commands=recipe_commands(recipe) if recipe else (),
            api=recipe.api if recipe else (), deps_layer=layer, deps=deps, numerics=getattr(recipe, "numerics", ()),
        )  # fmt: skip


def smoke_test(
    wheel: Path, spec: BuildSpec, *, python: str, torch_venv: Path, torch_requirement: str, workdir: Path,
    imports: tuple[str, ...] = (), commands: tuple[tuple[str, ...], ...] = (), api: tuple[str, ...] = (),
    deps_layer: Path | None = None, deps: tuple[str, ...] = (), numerics: tuple[tuple[str, ...], ...] = (),
) -> dict:
    """Install ``wheel`` into a clean venv made by ``python`` next to ``torch_requirement``; import it,
    check the ops are registered, run the CPU scan against the reference. Returns what ran: ``line`` (the
    success line), ``imported`` (torch, Python, modules, public API) and ``numerics`` (the CPU checks that ran).

    A recipe's wheel (``spec.from_recipe``) is installed without its dependencies (upstream's pull in
    triton, transformers...) and proven by the recipe's own ``imports``, ``api`` and ``commands`` instead (the
    last of them its ``numerics`` checks, whose results become the record's ``numerics``),
    run from ``/`` (``python`` in a command is the smoke venv's). With ``deps_layer`` (a recipe's
    ``deps = true``: the layer its caller made of ``deps``, :func:`declared_requirements`, on top of the torch
    venv; builder.environments.layers.deps_layer) the smoke venv sees that layer too, through ``site.addsitedir``
    (its own .pth files run), and ``pip check`` must pass before anything is imported.

    ``torch_venv`` holds only ``torch_requirement``, made once and kept by the caller (the build: the farm
    store's, builder.environments.store.torch_venv); each smoke test gets a fresh venv that sees its
    site-packages through a .pth file, so the wheel is installed alone into an otherwise empty environment
    without reinstalling torch (minutes) each time.
    """
    workdir = Path(workdir)
    base = Path(torch_venv)
    venv = workdir / f"smoke-{spec.id}"
    shutil.rmtree(venv, ignore_errors=True)
    run_step([python, "-m", "venv", "--without-pip", str(venv)], "create the smoke-test venv")
    vpy = str(venv / "bin" / "python")
    (Path(site_packages(vpy)) / "_torch_base.pth").write_text(site_packages(str(base / "bin" / "python")) + "\n")
    bpip = [str(base / "bin" / "python"), "-m", "pip", "--python", vpy]
    run_step([*bpip, "install", "-q", "--no-deps", str(wheel)], f"install {wheel.name}")
    if spec.from_recipe:
        if deps_layer is not None:
            layer_site = site_packages(str(Path(deps_layer) / "bin" / "python"))
            (Path(site_packages(vpy)) / "_farm_deps.pth").write_text(f"import site; site.addsitedir({layer_site!r})\n")
            run_step([*bpip, "check"], f"pip check ({wheel.name}'s dependencies and {torch_requirement})")
        ran = _recipe_smoke(wheel, vpy, torch_requirement, imports, commands, api, numerics)
        if deps_layer is not None:
            ran["imported"]["deps"] = list(deps)
        shutil.rmtree(venv, ignore_errors=True)
        return ran
    # the wheel's own torch pin must accept the torch it is tested with
    run_step([*bpip, "check"], f"pip check (the wheel's Requires-Dist against {torch_requirement})")
    proc = subprocess.run(
        [vpy, "-c", SMOKE_SCRIPT], check=False, capture_output=True, text=True, cwd=workdir, env=clean_env()
    )
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise VerificationError(f"{wheel.name}: smoke test failed with {torch_requirement}: {last}")
    shutil.rmtree(venv, ignore_errors=True)
    return {"line": proc.stdout.strip().splitlines()[-1], **smoke_evidence(proc.stdout)}


def _recipe_smoke(wheel: Path, vpy: str, torch_requirement: str, imports, commands, api=(), numerics=()) -> dict:
    """The recipe's [test] (``recipe_steps``), in the smoke venv from / (not the source tree)."""
    facts, outputs = None, []
    for argv in recipe_steps(vpy, imports, commands, api):
        proc = subprocess.run(argv, check=False, capture_output=True, text=True, cwd="/", env=clean_env(),
                              errors="replace")  # fmt: skip
        if proc.returncode:
            last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["(no output)"])[-1]
            ran = " ".join(["python", *argv[1:]] if argv[0] == vpy else argv)
            raise VerificationError(f"{wheel.name}: smoke test `{ran}` failed with {torch_requirement}: {last}")
        if facts is None:
            facts = smoke_evidence(proc.stdout)
        else:
            outputs.append((proc.stdout, proc.stderr))
    return recipe_ran(facts, torch_requirement, imports, commands, api, outputs, numerics)


# --------------------------------------------------------------------------- in a container, under emulation


class Container(Protocol):
    """What the smoke test asks of an executor that runs SPEC's own image (the Docker executor)."""

    def smoke_torch(self, spec, log_path: Path, timeout: float) -> str:
        """Where SPEC's torch is, for a container to mount at /torch: a volume's name, or a host folder (another
        machine's: its ``site/`` holds torch); a VerificationError when it cannot be had."""
        ...

    def run_script(
        self, spec, script: str, *, files: dict[str, bytes], mounts: dict[str, str], log_path: Path, timeout: float
    ) -> int:
        """Run the bash SCRIPT in a fresh container of SPEC's image, with its Python as ``$FARM_PYTHON``: FILES (path
        under / -> bytes) put in first, MOUNTS (a volume or host folder -> where) read-only, its output appended to
        LOG_PATH; its exit code, TimeoutError past TIMEOUT."""
        ...


def in_container(runner: Container, spec: BuildSpec, wheel: Path, log_path: Path, *, recipe=None,
                 timeout: float = 1800, log=print) -> dict:  # fmt: skip
    """Smoke-test WHEEL in a container of SPEC's own image (another machine's, under emulation) that RUNNER runs:
    a fresh venv that sees only the torch the build used, the wheel installed alone, ``pip check``, then
    ``SMOKE_SCRIPT``; for a RECIPE's wheel, its imports, public API and commands instead, as on the host. A recipe
    with ``deps = true`` gets its wheel's declared dependencies from a layer this host's pip fetched for the target
    (:func:`_foreign_deps`), mounted read-only at /deps, added with ``site.addsitedir`` and checked by ``pip check``
    first. Returns what ran, as :func:`smoke_test` does (``imported.emulated``: under emulation); the container's
    output goes to ``<log>.smoke.log`` beside LOG_PATH."""
    from filelock import FileLock

    torch = runner.smoke_torch(spec, log_path, timeout)
    machine = machine_of(spec.platform)
    out = log_path.with_name(log_path.stem + ".smoke.log")
    out.write_text(f"== smoke test of {wheel.name} in image {spec.image} ({machine})\n")
    if recipe is None or not recipe.deps:
        return _contained(runner, spec, wheel, torch, out, timeout, recipe)
    if machine == host_machine():  # its dependencies are the host smoke test's to install
        raise VerificationError(
            f"{wheel.name}: the recipe's declared dependencies (`[test] deps = true`) are installed only for another "
            "machine's smoke test here (the host executor installs them for this one)"
        )
    slot = store.smoke_slot(spec.python_tag, spec.torch_version, machine)
    slot.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(slot) + ".lock"):  # held while the layer is used: `cache prune` passes it by
        layer, deps = _foreign_deps(spec, wheel, Path(torch), slot / "deps-envs", out, timeout, log)
        return _contained(runner, spec, wheel, torch, out, timeout, recipe, layer=layer, deps=deps)


def wheel_manylinux(wheel: Path, spec) -> str:
    """The newest PEP 600 manylinux tag WHEEL's name carries (what it was repaired to: the systems it runs on), else
    SPEC's planned one."""
    return newest_manylinux(wheel.name) or spec.manylinux


def _foreign_deps(spec, wheel: Path, torch_folder: Path, root: Path, log_path: Path, timeout: float, log):
    """The layer of WHEEL's declared dependencies for SPEC's machine and Python, fetched by this host's pip
    (builder.environments.layers.foreign_deps_layer), and those requirements: judged for the target, torch left out."""
    from builder.environments.interpreters import python_prefix

    machine = machine_of(spec.platform)
    environment = target_environment(machine, spec.python)
    deps = tuple(declared_requirements(wheel, environment))
    try:
        python = python_prefix(spec.python, log=log) / "bin" / "python3"
    except FarmError:  # no host Python of that version: imports compile it, slowly
        python = None
    started = time.monotonic()
    layer = layers.foreign_deps_layer(
        torch_folder / "site", list(deps), root, platforms=manylinux_platforms(wheel_manylinux(wheel, spec)),
        python=spec.python, environment=environment, pip_args=torch_index_args(spec.torch_index_url),
        compile_with=python, log_path=log_path, timeout=timeout,
    )  # fmt: skip
    log(f"{spec.id}: dependency layer {layer.name} for {machine}: {len(deps)} requirement(s) ({time.monotonic() - started:.0f}s)")
    return layer, deps


_VPY = "/smoke/venv/bin/python"  # the container's smoke venv
COMMAND_MARK = "@@mamba-farm-command-"  # brackets each recipe command's output in the container's one stream


def container_script(wheel_name: str, recipe=None, *, layer: bool = False) -> str:
    """The bash script of a container's smoke test: a venv of ``$FARM_PYTHON`` that sees /torch/site (and with
    LAYER, /deps/site through ``site.addsitedir``), the wheel at /smoke/WHEEL_NAME installed alone, then from /
    ``pip check`` and ``SMOKE_SCRIPT`` (at /smoke/smoke.py), or RECIPE's steps, each command between markers."""
    check = f'"$FARM_PYTHON" -m pip --python {_VPY} check'
    purelib = f"$({_VPY} -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')"
    if recipe is None:  # the wheel's own torch pin must accept the torch it is tested with
        steps = [check, f"{_VPY} /smoke/smoke.py"]
    else:  # installed without its dependencies, as on the host: pip check only when they are there
        argvs = recipe_steps(_VPY, recipe.imports, recipe_commands(recipe), recipe.api)
        first, *commands = [shlex.join(argv) for argv in argvs]
        steps = [first, *(f"echo {COMMAND_MARK}{i} && {c} 2> /smoke/err && echo {COMMAND_MARK}err "
                          f"&& cat /smoke/err && echo {COMMAND_MARK}end" for i, c in enumerate(commands))]  # fmt: skip
        if layer:  # the dependency layer as the host adds its own: its .pth files run
            steps = [f"echo \"import site; site.addsitedir('/deps/site')\" > \"{purelib}/_farm_deps.pth\"", check, *steps]
    return (
        f'set -e; "$FARM_PYTHON" -m venv --without-pip /smoke/venv; '
        f'echo /torch/site > "{purelib}/_torch.pth"; '
        f'"$FARM_PYTHON" -m pip --python {_VPY} install -q --no-deps /smoke/{wheel_name}; '
        "cd / && " + " && ".join(steps)
    )


def _contained(runner: Container, spec, wheel: Path, torch: str, out: Path, timeout: float, recipe=None,
               layer: Path | None = None, deps=()) -> dict:  # fmt: skip
    """Run the container's smoke test (``container_script``) through RUNNER; what ran, from its output."""
    files = {f"smoke/{wheel.name}": wheel.read_bytes(), "smoke/smoke.py": SMOKE_SCRIPT.encode()}
    mounts = {torch: "/torch", **({str(layer): "/deps"} if layer is not None else {})}
    script = container_script(wheel.name, recipe, layer=layer is not None)
    try:
        code = runner.run_script(spec, script, files=files, mounts=mounts, log_path=out, timeout=timeout)
    except TimeoutError:
        raise VerificationError(f"{wheel.name}: smoke test under emulation timed out after {timeout:.0f}s") from None
    lines = [ln for ln in out.read_text(errors="replace").splitlines() if ln.strip()]
    if code != 0:
        raise VerificationError(f"{wheel.name}: smoke test failed in image {spec.image}: {lines[-1] if lines else code} (log: {out})")
    emulated = machine_of(spec.platform) != host_machine()
    if recipe is not None:
        run, numerics = recipe_commands(recipe), getattr(recipe, "numerics", ())
        ran = recipe_ran(smoke_evidence("\n".join(lines)), f"torch=={spec.torch_version}", recipe.imports,
                         run, recipe.api, command_outputs(lines, len(run)), numerics)  # fmt: skip
        ran["imported"]["emulated"] = emulated
        if layer is not None:
            ran["imported"]["deps"] = list(deps)
        return ran
    ran = smoke_evidence("\n".join(lines))
    ran["imported"] = {**ran["imported"], "emulated": emulated}
    return {"line": next((ln for ln in reversed(lines) if ln.startswith("smoke ok")), "smoke ok"), **ran}


def command_outputs(lines: list[str], count: int) -> list[tuple[str, str]]:
    """Each recipe test command's (stdout, stderr), from the smoke container's lines between its markers."""
    outputs: list[tuple[list[str], list[str]]] = [([], []) for _ in range(count)]
    current, stream = None, 0
    for ln in lines:
        if ln.startswith(COMMAND_MARK):
            tail = ln[len(COMMAND_MARK) :].strip()
            if tail == "err":
                stream = 1
            else:
                current, stream = (int(tail) if tail.isdigit() and int(tail) < count else None), 0
        elif current is not None:
            outputs[current][stream].append(ln)
    return [("\n".join(out), "\n".join(err)) for out, err in outputs]
