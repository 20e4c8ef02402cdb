"""An emulated image's Debian packages: the image's own apt under emulation against the build host's apt and dpkg.

The arm64 images install their Debian packages (build tools' libraries, the suite's CPython) in a native stage:
apt with ``APT::Architecture=arm64`` and dpkg ``--root`` on a copy of the image's root, only the maintainer scripts
run under emulation (docker/_target_apt.Dockerfile.j2). The baseline is what the image's own ``apt-get install``
does under emulation (docker/_os_debian.Dockerfile.j2, which native images still use). Both install the same
packages (the ci-aarch64 CPU image's) onto the same arm64 base, cold (no build cache), one after the other, in
each round; the two roots' dpkg records are then compared (the same packages, versions, all installed) and the
native one's CPython imported under emulation.

    .venv/bin/python benchmarks/arm64_apt.py              # one round
    .venv/bin/python benchmarks/arm64_apt.py --rounds 2   # alternating, the baseline first
    .venv/bin/python benchmarks/arm64_apt.py --cpu        # CPU seconds of the install step itself

``--cpu``: the CI run is CPU-bound, so what counts there is CPU, not an idle machine's wall. Each way's install
command (the same text as its Dockerfile's RUN) runs in a container of its own, and the container's cgroup counter
(``builder.facts.cputime.CGROUP_CPU_SH``) says the CPU seconds of everything it ran, emulated or not; the native
way's container starts from its stage with the image's root already copied in (that copy is the engine's work).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from builder.building.images import base_image, render
from builder.building.images.engine import connect
from builder.building.images.images import local_name
from builder.facts.cputime import CGROUP_CPU_SH, parse_cgroup_cpu
from builder.facts.hostenv import find_ca_bundle
from builder.planning.plan import load_plan

HEAD = 'SHELL ["/bin/bash", "-o", "pipefail", "-c"]\nENV DEBIAN_FRONTEND=noninteractive\n'
RECORD = "dpkg-query -W -f '${Package}:${Architecture} ${Version} ${Status}\\n' | sort"


def dockerfiles(base: str) -> dict[str, str]:
    """The two ways, rendered from the farm's own templates with the ci-aarch64 CPU image's context."""
    (image,) = [i for i in load_plan(profile="ci-aarch64").images.values() if i.kind == "cpu"]
    pythons = render.render(image, base=base).pythons
    ctx = render.context(image, base, pythons)
    env = render.environment()
    final = f"FROM --platform={ctx['cross']['target_platform']} {base}\n{HEAD}"
    return {
        "emulated apt": final + env.get_template("_os_debian.Dockerfile.j2").render(**ctx),
        "native apt+dpkg": env.get_template("_target_apt.Dockerfile.j2").render(**ctx)
        + f"\n{final}COPY --from=target-apt /opt/target-os/ /\n",
    }


def install_commands(base: str) -> dict[str, tuple[str, str, str]]:
    """Each way's install step: (the image it runs in, its Dockerfile up to that step, the step's shell command)."""
    (image,) = [i for i in load_plan(profile="ci-aarch64").images.values() if i.kind == "cpu"]
    ctx = render.context(image, base, render.render(image, base=base).pythons)
    env = render.environment()
    emulated = env.get_template("_os_debian.Dockerfile.j2").render(**ctx).strip()
    steps = env.get_template("_cross_steps.j2").make_module(ctx)
    native = f"FROM --platform={ctx['cross']['host_platform']} {ctx['cross']['base']}\n"
    stage = env.get_template("_target_apt.Dockerfile.j2").render(**ctx).split("\nRUN ", 1)[0]
    return {
        "emulated apt": (
            base,
            f"FROM --platform={ctx['cross']['target_platform']} {base}\n",
            emulated.removeprefix("RUN "),
        ),
        "native apt+dpkg": (
            "",
            stage + "\n" if stage.startswith("#") else native,
            str(steps.target_install(ctx["os_packages"], "os")),
        ),
    }


def cpu_seconds(client, tag: str, dockerfile: str, command: str) -> tuple[float, float]:
    """(wall, CPU seconds) of COMMAND in a container of DOCKERFILE's image, from the container's own cgroup."""
    build(client, tag, dockerfile)
    started = time.monotonic()
    script = f"set -e -o pipefail; {command}; {CGROUP_CPU_SH.rsplit(' > ', 1)[0]}"
    out = client.containers.run(
        tag, ["bash", "-c", script], remove=True, environment={"DEBIAN_FRONTEND": "noninteractive"}
    )
    cpu = parse_cgroup_cpu(out.decode().strip().splitlines()[-1])
    if cpu is None:
        raise SystemExit(f"no cgroup CPU counter in the container: {out.decode()[-500:]}")
    return time.monotonic() - started, cpu


def build(client, tag: str, dockerfile: str) -> float:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="arm64-apt-") as tmp:
        (Path(tmp) / "Dockerfile").write_text(dockerfile)
        # no --platform: each stage names its own (the engine's classic builder refuses a COPY across them else)
        for chunk in client.api.build(path=tmp, tag=tag, nocache=True, rm=True, forcerm=True, decode=True):
            if "error" in chunk:
                raise SystemExit(f"{tag} failed to build: {chunk['error'].strip()}")
    return time.monotonic() - started


def run_in(client, tag: str, command: str) -> str:
    out = client.containers.run(tag, ["bash", "-c", command], remove=True, platform="linux/arm64")
    return out.decode()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--cpu", action="store_true", help="CPU seconds of each way's install step")
    args = ap.parse_args()
    client = connect()
    base = local_name("bookworm", "aarch64")
    base_image.ensure(client, "bookworm", ca_bundle=find_ca_bundle(), machine="aarch64")
    base_image.ensure(client, "bookworm", ca_bundle=find_ca_bundle())  # the native stage's base
    if args.cpu:
        got = {}
        for name, (_, dockerfile, command) in install_commands(base).items():
            tag = f"mamba-farm-bench/arm64-apt-cpu:{len(got)}"
            got[name] = cpu_seconds(client, tag, dockerfile, command)
            client.images.remove(tag)
            print(f"{name}: {got[name][0]:.0f} s wall, {got[name][1]:.1f} CPU-s", flush=True)
        (_, base_cpu), (_, new_cpu) = got.values()
        print(f"native / emulated, CPU seconds of the install step: {new_cpu / base_cpu:.2f}")
        return 0
    files = dockerfiles(base)
    times: dict[str, list[float]] = {name: [] for name in files}
    tags = {name: f"mamba-farm-bench/arm64-apt:{i}" for i, name in enumerate(files)}
    for r in range(args.rounds):
        for name, text in files.items():
            times[name].append(build(client, tags[name], text))
            print(f"round {r + 1}: {name}: {times[name][-1]:.0f} s", flush=True)
    records = {name: run_in(client, tag, RECORD) for name, tag in tags.items()}
    same = records["emulated apt"] == records["native apt+dpkg"]
    lines = records["native apt+dpkg"].splitlines()
    whole = all(line.endswith(" install ok installed") for line in lines)
    py = run_in(
        client, tags["native apt+dpkg"], "python3.11 -c 'import ssl, sqlite3, ctypes, venv; print(ssl.OPENSSL_VERSION)'"
    )
    base_s, new_s = (min(v) for v in times.values())
    print(f"\nthe ci-aarch64 CPU image's Debian packages ({len(lines)} in the record), cold, best of {args.rounds}:")
    print(f"  emulated apt {base_s:.0f} s, native apt+dpkg {new_s:.0f} s: ratio {new_s / base_s:.2f}")
    print(f"  dpkg records equal: {same}; every package installed: {whole}; CPython under emulation: {py.strip()}")
    for tag in tags.values():
        client.images.remove(tag)
    return 0 if same and whole else 1


if __name__ == "__main__":
    raise SystemExit(main())
