"""``python -m builder release gate``: the release's GPU gate (release.yml's ``gpu-gate`` job).

Each CUDA wheel of the run is installed from a staged index on 127.0.0.1 as its coverage-page cell says, in a
fresh venv, then checked (``benchmarks/gpu_check.py --no-speed``, or a recipe's ``[test]``); each run goes
into the wheel's evidence record. A failure exits 4 and publish does not run; ``--device cpu`` is the dry run.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import platform
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from builder.errors import UsageError, VerificationError
from builder.facts.paths import REPO

GPU_CHECK = REPO / "benchmarks" / "gpu_check.py"
STEP_TIMEOUT = 3600  # one pip install or one check (a torch with its CUDA libraries is gigabytes)
TAIL = 3000  # characters of a failed step's output kept in the results


@dataclass
class GateResult:
    wheel: str
    variant: str
    check: str  # what ran: "gpu_check numerics" or "recipe tests"
    ok: bool
    seconds: float
    detail: str = ""  # the failed step's last output
    device: dict | None = None  # what it ran on, as the venv's torch saw it: gpu, sm, torch

    def run(self, device: str) -> dict:
        """The run as the wheel's evidence record keeps it (builder.verifying.evidence: ``gpu``)."""
        facts = self.device or {}
        return {
            "device": device, "gpu": facts.get("gpu") or f"none ({device})", "sm": facts.get("sm"),
            "torch": facts.get("torch"), "check": self.check, "passed": self.ok, "seconds": round(self.seconds, 1),
        }  # fmt: skip


# What the check ran on, printed by the venv's torch after the check passed.
_DEVICE_FACTS = (
    "import json, torch; c = torch.cuda.is_available(); "
    "print(json.dumps({'torch': torch.__version__, 'gpu': torch.cuda.get_device_name() if c else None, "
    "'sm': 'sm_%d%d' % torch.cuda.get_device_capability() if c else None}))"
)


def cuda_wheels(index: Path, machine: str) -> list[tuple[str, str, object]]:
    """(file name, the variant page a user of its newest torch installs it from, its Entry) of every CUDA wheel
    of INDEX for MACHINE (x86_64, aarch64)."""
    from builder.publishing.index.model import Manifest
    from mamba_ssm.variant import Variant

    doc = json.loads((index / "manifest.json").read_text(encoding="utf-8"))
    files = Manifest.from_json(doc).files
    out = []
    for fn, e in files.items():
        if not e.accelerator.startswith("cu") or e.machine not in (None, machine):
            continue
        keys = [k for k in doc["files"][fn].get("serves", []) if not Variant.from_key(k).stable]
        if not keys:
            raise VerificationError(f"{fn}: serves no torch release, so no user installs it")
        newest = max(keys, key=lambda k: tuple(int(x) for x in Variant.from_key(k).torch.split(".")))
        out.append((fn, newest, e))
    return sorted(out, key=lambda t: t[0])


def _run(cmd: list[str], log, cwd: Path | str | None = None) -> subprocess.CompletedProcess:
    log.write(f"$ {shlex.join(cmd)}\n")
    log.flush()
    # the venv's own packages only: a PYTHONPATH (this checkout's, say) would put another mamba_ssm under test
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT, check=False)
    except OSError as err:  # a step that cannot start fails that wheel, with its reason, never a traceback
        proc = subprocess.CompletedProcess(cmd, 127, "", f"cannot run {cmd[0]}: {err.strerror or err}\n")
    log.write(proc.stdout + proc.stderr)
    return proc


def run_one(fn: str, key: str, entry, base: str, device: str, work: Path, python: str, venv: Path) -> GateResult:
    """Install wheel FN as its cell says (from BASE, the staged index) in a fresh VENV and run its check; its log
    and results go to WORK (the job's artifact: the venv, torch and all, stays out of it)."""
    from builder.planning.recipes import load_recipes
    from builder.publishing.index.model import CHECKOUT, install_command
    from builder.verifying.smoke import api_imports, recipe_commands
    from mamba_ssm.variant import Variant

    start = time.monotonic()
    ours = entry.source == CHECKOUT
    check = "gpu_check numerics" if ours else "recipe tests"
    work.mkdir(parents=True, exist_ok=True)
    with open(work / "log.txt", "w", encoding="utf-8") as log:

        def failed(what: str, proc: subprocess.CompletedProcess) -> GateResult:
            tail = (proc.stdout + proc.stderr)[-TAIL:]
            return GateResult(fn, key, check, False, time.monotonic() - start, f"{what} exited {proc.returncode}\n{tail}")

        vpy = str(venv / "bin" / "python")
        steps = [
            ("venv", [python, "-m", "venv", str(venv)]),
            ("torch", [vpy, "-m", "pip", "install", f"torch=={Variant.from_key(key).torch}.*"]),
            ("install", [vpy, "-m", *shlex.split(install_command(entry, key, base))]),
        ]
        if ours:
            cmd = [vpy, "-P", str(GPU_CHECK), "--device", device, "--no-speed", "--out", str(work / "results")]
            steps.append(("gpu_check", cmd + (["--quick"] if device == "cpu" else [])))
        else:
            recipe = load_recipes()[entry.project]
            imports = "; ".join([*(f"import {m}" for m in recipe.imports), *api_imports(recipe.api)])
            steps.append(("imports", [vpy, "-I", "-c", imports]))
            run = recipe_commands(recipe)  # its numerics checks too
            steps += [(f"test {i}", [vpy if a == "python" else a for a in argv]) for i, argv in enumerate(run)]
        for what, cmd in steps:
            # From / for the checks: never this checkout's mamba_ssm/ instead of the installed wheel.
            proc = _run(cmd, log, cwd="/" if what not in ("venv", "torch", "install") else None)
            if proc.returncode:
                return failed(what, proc)
        proc = _run([vpy, "-I", "-c", _DEVICE_FACTS], log, cwd="/")
        try:
            facts = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
        except (ValueError, IndexError):
            facts = None
    return GateResult(fn, key, check, True, time.monotonic() - start, device=facts if isinstance(facts, dict) else None)


def gate(lines: Path, device: str, out: Path, python: str = sys.executable) -> list[GateResult]:
    """Index LINES (``release split``'s folders), serve it on 127.0.0.1, run every CUDA wheel for this machine."""
    from builder.publishing.index import build_index

    if not lines.is_dir():
        raise UsageError(f"--lines {lines}: no such folder", hint="pass the folder `release split --out` made")
    out = out.absolute()  # the checks run from / (never this checkout's mamba_ssm/): every path they get is absolute
    www = out / "www"
    www.mkdir(parents=True, exist_ok=True)
    found = []
    for line in ("checkout", "upstream"):
        if (lines / line).is_dir():
            build_index(lines / line, out / f"index-{line}")
            if not (www / line).exists():
                (www / line).symlink_to(Path("..") / f"index-{line}")
            found.append(line)
    if not found:
        raise UsageError(
            f"--lines {lines}: neither checkout/ nor upstream/", hint="pass `release split --out`'s folder"
        )
    handler = functools.partial(_Quiet, directory=str(www))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    outcomes = []
    try:
        for line in found:
            for fn, key, entry in cuda_wheels(out / f"index-{line}", platform.machine()):
                print(f"gate: {fn}: installing from {url}/{line}/{key}/, then its check ({device})", flush=True)
                name = fn.removesuffix(".whl")
                res = run_one(
                    fn, key, entry, f"{url}/{line}", device, out / "results" / name, python, out / "venvs" / name
                )
                print(f"gate: {fn}: {'passed' if res.ok else 'FAILED'} in {res.seconds:.0f} s", flush=True)
                outcomes.append(res)
                _record(lines / line / fn, res.run(device), out / "results" / "evidence")
    finally:
        server.shutdown()
        server.server_close()
    return outcomes


def _record(wheel: Path, run: dict, folder: Path) -> None:
    """Append RUN to WHEEL's evidence record (a wheel built without one has nothing to append to) and put the
    record in FOLDER, the job's artifact: publish takes it over the build job's copy."""
    from builder.verifying import evidence

    path = evidence.path_of(wheel)
    if not path.exists():
        print(f"gate: {wheel.name}: no evidence record beside it; the run is in results/gate.json only", flush=True)
        return
    rec = evidence.append_gpu(path, run)
    folder.mkdir(parents=True, exist_ok=True)
    evidence.write(folder / path.name, rec)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # the gate's own lines say what it fetched
        pass


def summary(outcomes: list[GateResult], device: str) -> str:
    """The job's step summary: one row per wheel."""
    lines = [f"## GPU gate ({device})", ""]
    if not outcomes:
        return "\n".join([*lines, "No CUDA wheel for this runner's platform: nothing ran.", ""])
    lines += ["| wheel | installed from | check | result | seconds |", "| --- | --- | --- | --- | --- |"]
    for o in outcomes:
        lines.append(
            f"| `{o.wheel}` | `{o.variant}/` | {o.check} | {'passed' if o.ok else '**failed**'} | {o.seconds:.0f} |"
        )
    return "\n".join([*lines, ""])
