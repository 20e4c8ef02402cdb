"""ROCm as a first-class row: the real kernels hipify and compile for AMD GPUs, ROCm images
render and lint, ROCm builds are planned, ROCm < 6.0 is refused, ROCm 6.0's header is fixed.

The docker tests compile for real with Debian trixie's hipcc 5.7.1 (clang 17) in the farm's
cached hipcc image (built once, tagged by content hash): see builder/building/hip.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder.building import hip
from builder.building.images.render import render
from builder.commands.cli import main as cli_main
from builder.facts import compat as compat_mod
from builder.facts.compat import parse_accelerator
from builder.facts.spec import ImageSpec

from conftest import REPO

ARCHS = ("gfx90a", "gfx942", "gfx1100")
KERNELS = {"selective_scan_fwd": "scan_fwd_kernel", "selective_scan_bwd": "scan_bwd_kernel"}


def _has_torch() -> bool:
    try:
        import torch.utils.hipify  # noqa: F401
    except ImportError:
        return False
    return True


needs_torch = pytest.mark.skipif(not _has_torch(), reason="torch.utils.hipify needs torch in this Python")


@pytest.fixture(scope="module")
def client():
    from builder.building.images.engine import connect

    return connect()


@pytest.fixture(scope="module")
def image(client) -> str:
    return hip.ensure_image(client, log=print)


# ---- the real compile ------------------------------------------------------------------


@pytest.mark.docker
@needs_torch
def test_kernels_hipify_and_compile_for_three_gfx_targets(client, image, tmp_path: Path) -> None:
    started = time.monotonic()
    version, results = hip.compile_kernels(client, tmp_path, archs=ARCHS, python=sys.executable)
    took = time.monotonic() - started
    print(f"\nhipify + hipcc ({version}) of {len(results)} TUs for {', '.join(ARCHS)}: {took:.1f}s")
    for r in results:
        sizes = ", ".join(f"{c.arch} {c.size} B" for c in r.code_objects)
        print(f"  {r.tu}: {r.seconds:.1f}s wall, {r.cpu_seconds:.1f}s CPU ({sizes})")

    assert version.startswith("5.7."), version
    assert sorted(Path(r.tu).stem for r in results) == sorted(KERNELS)
    from mamba_ssm.elf import archs_of

    for r in results:
        assert r.tu.endswith(".hip") and (tmp_path / "csrc" / r.tu).is_file()
        # one AMDGPU code object per requested target, each holding this TU's kernel
        assert [c.arch for c in r.code_objects] == sorted(ARCHS), r.tu
        kernel = KERNELS[Path(r.tu).stem]
        for c in r.code_objects:
            assert c.size > 4096, (r.tu, c)
            assert any(kernel in k for k in c.kernels), (r.tu, c.arch, c.kernels)
        # LLVM's own bundler agrees, and so does the doctor's reader (what users run)
        assert set(r.bundler_targets) == {f"hipv4-amdgcn-amd-amdhsa--{a}" for a in ARCHS} | {
            "host-x86_64-unknown-linux--"
        }
        assert archs_of(r.obj).hip == sorted(ARCHS)


@pytest.mark.docker
@needs_torch
def test_hip_compile_records_what_compiled_and_the_ledger_takes_it(image, tmp_path: Path, capsys) -> None:
    """The maintainer's two commands (docs/maintainer/rocm.md): `hip-compile --evidence` records the targets the
    audit found, the image and `linked: false`; `evidence harvest --hip` puts it in a ledger, and this line's ROCm
    cells then say it."""
    from builder.planning.plan import load_plan
    from builder.publishing import tiers
    from builder.verifying import evidence

    path = tmp_path / "hip.evidence.json"
    assert cli_main(["hip-compile", "--archs", "gfx90a", "--evidence", str(path)]) == 0
    rec = evidence.read_hip(path)
    assert rec["archs"] == ["gfx90a"] and rec["linked"] is False and rec["toolchain"]["image"] == image
    assert rec["hip_version"].startswith("5.7.") and rec["line"] == "checkout"
    assert sorted(t["tu"] for t in rec["tus"]) == ["hip/selective_scan_bwd.hip", "hip/selective_scan_fwd.hip"]
    assert all(t["archs"] == ["gfx90a"] and t["bytes"] > 4096 for t in rec["tus"])
    ledger = tmp_path / "ledger.json"
    assert cli_main(["evidence", "harvest", "--hip", str(path), "--ledger", str(ledger)]) == 0
    assert tiers.load_hip(ledger) == [rec]
    rocm = next(b for b in load_plan(profile="release").builds if b.label.startswith("hip") and not b.from_recipe)
    assert tiers.cell_detail(rocm, "planned", None, [rec]).startswith(f"planned: HIP compiled (gfx90a; not {rocm.archs[1]}")
    capsys.readouterr()


@needs_torch
def test_hipify_leaves_no_cuda_runtime_api(tmp_path: Path) -> None:
    """What hipify does not map would surface as a hipcc error; catch it without Docker."""
    tus = hip.hipify(tmp_path, python=sys.executable)
    assert sorted(tus) == ["hip/selective_scan_bwd.hip", "hip/selective_scan_fwd.hip"]
    csrc = tmp_path / "csrc"
    for path in [csrc / t for t in tus] + [csrc / "hip" / "scan_common.cuh"]:
        code = re.sub(r"//[^\n]*|/\*.*?\*/", "", path.read_text(), flags=re.DOTALL)
        assert "#include <hip/hip_runtime.h>" in code or '#include "hip/hip_runtime.h"' in code, path
        # the CUDA branch of the MAMBA_HIP shims may name CUDA intrinsics; runtime API calls may not remain
        leftovers = set(re.findall(r"\bcuda[A-Z]\w*|<cuda\w*\.h>|\bcudaStream_t\b", code))
        assert not leftovers, (path.name, leftovers)


# ---- ROCm 6.0's header patch, on the real (5.7.1) header turned into 6.0's form ------------

# 6.0's amd_hip_bf16.h is 5.7.1's (same line numbers) with `inline` missing on these six.
ROCM60_FUNCS = (
    "__float2bfloat16",
    "__bfloat1622float2",
    "__double2bfloat16",
    "__float22bfloat162_rn",
    "__high2float",
    "__low2float",
)
# `exec 2>&1`: Docker keeps stdout and stderr as two streams, so without it a stderr line may
# arrive after the next section's marker (it did in CI).
PATCH_CHECK = r"""
set -u; exec 2>&1
R=/w/rocm60; mkdir -p $R/include; cp -r /usr/include/hip $R/include/
H=$R/include/hip/amd_detail/amd_hip_bf16.h
for f in {funcs}; do sed -i -E "s/^__HOST_DEVICE__ inline (.* $f\()/__HOST_DEVICE__ \1/" $H; done
for t in a b; do printf '#include <hip/hip_runtime.h>\n#include <hip/hip_bf16.h>\nfloat %s_round(float x) {{ return __bfloat162float(__float2bfloat16(x)); }}\n' $t > /w/$t.hip; done
echo 'int main() {{ return 0; }}' >> /w/a.hip
link() {{ for t in a b; do hipcc -isystem $R/include --offload-arch=gfx90a -w -c /w/$t.hip -o /w/$t.o || return 9; done; hipcc /w/a.o /w/b.o -o /w/t; }}
echo "== 6.0 header"; link; echo "== rc=$?"
echo "== apply 5.7"; bash /patch/apply.sh $R 5.7.1; echo "== rc=$?"
echo "== apply 6.2"; bash /patch/apply.sh $R 6.2.4; echo "== rc=$?"
echo "== apply 6.0"; bash /patch/apply.sh $R 6.0.2; echo "== rc=$?"
echo "== patched header"; link; echo "== rc=$?"
echo "== apply 6.0 again"; bash /patch/apply.sh $R 6.0.2; echo "== rc=$?"
"""


def _sections(text: str) -> dict[str, tuple[str, int]]:
    """'== name' ... '== rc=N' blocks of PATCH_CHECK's output -> name: (output, rc)."""
    out = {}
    for m in re.finditer(r"^== (?!rc=)(.+?)\n(.*?)^== rc=(\d+)$", text, flags=re.DOTALL | re.MULTILINE):
        out[m.group(1)] = (m.group(2), int(m.group(3)))
    return out


@pytest.mark.docker
def test_rocm60_header_patch_fixes_the_multiple_definition_link(client, image, tmp_path: Path) -> None:
    script = PATCH_CHECK.format(funcs=" ".join(ROCM60_FUNCS))
    out = client.containers.run(
        image,
        ["bash", "-c", script],
        remove=True,
        volumes={
            str(tmp_path): {"bind": "/w", "mode": "rw"},
            str(REPO / "rocm_patch"): {"bind": "/patch", "mode": "ro"},
        },
    ).decode()
    s = _sections(out)
    assert set(s) == {"6.0 header", "apply 5.7", "apply 6.2", "apply 6.0", "patched header", "apply 6.0 again"}, out
    # ROCm 6.0 as shipped: two TUs that include hip_bf16.h do not link
    assert s["6.0 header"][1] != 0 and "multiple definition of `__float2bfloat16" in s["6.0 header"][0], out
    # < 6.0 refused in one line; newer ROCm left alone
    assert s["apply 5.7"][1] == 3 and "ROCm 5.7 is too old" in s["apply 5.7"][0] and ">= 6.0" in s["apply 5.7"][0], out
    assert s["apply 6.2"][1] == 0 and "no header patch needed" in s["apply 6.2"][0]
    # 6.0: patched, then the same two TUs link; a second run sees the fix and changes nothing
    assert s["apply 6.0"][1] == 0 and "applied rocm6_0.patch" in s["apply 6.0"][0]
    assert s["patched header"][1] == 0, s["patched header"][0]
    assert s["apply 6.0 again"][1] == 0 and "already has the fix" in s["apply 6.0 again"][0]
    header = (tmp_path / "rocm60/include/hip/amd_detail/amd_hip_bf16.h").read_text()
    for f in ROCM60_FUNCS:
        assert re.search(rf"^__HOST_DEVICE__ inline .* {f}\(", header, flags=re.MULTILINE), f


def test_rocm60_patch_is_a_p1_patch_of_the_six_functions() -> None:
    text = (REPO / "rocm_patch/rocm6_0.patch").read_text()
    assert re.findall(r"^\+\+\+ (\S+)", text, flags=re.MULTILINE) == ["b/include/hip/amd_detail/amd_hip_bf16.h"]
    removed = re.findall(r"^-__HOST_DEVICE__ [^(]*?(\w+)\(", text, flags=re.MULTILINE)
    added = re.findall(r"^\+__HOST_DEVICE__ inline [^(]*?(\w+)\(", text, flags=re.MULTILINE)
    assert removed == added == list(ROCM60_FUNCS)


# ---- plan, render, lint ------------------------------------------------------------------


def test_plan_has_rocm_builds_with_their_torch_index_and_gfx_targets(cli) -> None:
    proc = cli("plan", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    builds = json.loads(proc.stdout)
    rocm = {b["id"]: b for b in builds if b["accelerator"].startswith("hip")}
    labels = {b["accelerator"] for b in rocm.values()}
    assert {"hip62", "hip64"} <= labels, labels
    b62 = rocm["hip62-torch2.6-cxx11abiFALSE-cp311-linux_x86_64"]
    assert b62["label"] == "hip62torch2.6cxx11abiFALSE" and b62["toolkit"] == "6.2"
    assert b62["torch_index_url"] == "https://download.pytorch.org/whl/rocm6.2.4"
    assert b62["archs"] == list(ARCHS)
    b64 = next(b for b in rocm.values() if b["accelerator"] == "hip64")
    assert re.fullmatch(r"https://download\.pytorch\.org/whl/rocm6\.4(\.\d+)?", b64["torch_index_url"])
    # ROCm is linux_x86_64 only, as PyTorch publishes it
    assert all(b["platform"] == "linux_x86_64" for b in rocm.values())


def test_hip_architectures_follow_the_rocm_version() -> None:
    c = compat_mod.load()
    for version in c.rocm:
        archs = c.default_archs(parse_accelerator(f"rocm-{version}"))
        assert set(ARCHS) <= set(archs), version
        # MI350 (gfx950) needs ROCm 7's compiler
        assert ("gfx950" in archs) == (int(version.split(".")[0]) >= 7), version


def test_rocm_below_6_0_is_refused(tmp_path: Path, capsys) -> None:
    c = compat_mod.load()
    old = parse_accelerator("rocm-5.7")
    assert "ROCm >= 6.0" in c.drop_reason("2.2", "3.11", old, False, "linux_x86_64")
    # in a matrix: a one-line error naming the value, exit code 2, no traceback
    text = (REPO / "matrix.toml").read_text()
    text = re.sub(r"^accelerator = \[.*\]$", 'accelerator = ["cpu", "rocm-5.7"]', text, count=1, flags=re.MULTILINE)
    for entry in REPO.iterdir():  # the matrix's package paths resolve next to it
        if entry.name != "matrix.toml" and not entry.name.startswith("."):
            (tmp_path / entry.name).symlink_to(entry)
    (tmp_path / "matrix.toml").write_text(text)
    rc = cli_main(["plan", "--matrix", str(tmp_path / "matrix.toml"), "--format", "json"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and '"rocm-5.7"' in err, err
    # the hip-compile command refuses targets its compiler cannot build
    assert cli_main(["hip-compile", "--archs", "gfx90a,gfx950"]) == 2
    assert "gfx950" in capsys.readouterr().err


def _rocm_image(toolkit: str, base: str, source: str = "base") -> ImageSpec:
    extra = {"hip_bf16_patch": True} if toolkit == "6.0" else {}
    return ImageSpec(
        id=f"rocm{toolkit}-x86_64-test", kind="rocm", base=base, platform="linux_x86_64", toolkit=toolkit,
        toolkit_source=source, pythons=("3.11",), template="docker/rocm.Dockerfile.j2", extra=extra,
    )  # fmt: skip


def _hadolint(dockerfile: str, tmp_path: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    path = tmp_path / "Dockerfile"
    path.write_text(dockerfile)
    # DL3008: toolchain packages follow their Debian/Ubuntu release; pins would break on every point release.
    return subprocess.run(
        [exe, "--ignore", "DL3008", "--failure-threshold", "warning", str(path)],
        check=False,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("toolkit", ["6.0", "6.2", "6.4", "7.2"])
def test_rocm_dockerfiles_render_and_lint(toolkit: str, tmp_path: Path) -> None:
    c = compat_mod.load()
    full = c.rocm[toolkit]["full"]
    amd = _rocm_image(toolkit, f"rocm/dev-ubuntu-22.04:{full}-complete")
    r = render(amd, host_pythons={})
    text = r.dockerfile
    assert text.startswith(f"FROM rocm/dev-ubuntu-22.04:{full}-complete\n")
    assert "ROCM_HOME=/opt/rocm" in text and "RUN hipcc --version" in text
    lint = _hadolint(text, tmp_path)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    # the farm's own trixie base: Debian's hipcc under /usr
    local = render(_rocm_image(toolkit, "mamba-farm/debian:trixie"), host_pythons={})
    assert "hipcc" in local.dockerfile and "ROCM_HOME=/usr" in local.dockerfile
    assert _hadolint(local.dockerfile, tmp_path).returncode == 0
    # AMD's image brings its own toolkit (no Debian hipcc) and gets ROCm 6.0's header patch step
    assert "libamdhip64-dev" not in text
    assert "COPY rocm_patch/ /opt/mamba-farm/rocm_patch/" in text
    assert "RUN bash /opt/mamba-farm/rocm_patch/apply.sh /opt/rocm" in text


@pytest.mark.docker
@pytest.mark.slow
@needs_torch
def test_a_cuda_only_intrinsic_fails_the_hip_compile_with_its_name(client, image, tmp_path: Path) -> None:
    """The check catches what it is for: __syncwarp is not in HIP 5.7."""
    src = tmp_path / "src"
    shutil.copytree(REPO / "csrc", src)
    fwd = src / "cuda" / "selective_scan_fwd.cu"
    fwd.write_text(fwd.read_text().replace("if (!ch.valid) return;", "if (!ch.valid) return;\n  __syncwarp();", 1))
    tus = hip.hipify(tmp_path / "work", python=sys.executable, csrc=src)
    fwd_tu = next(t for t in tus if "fwd" in t)
    with hip.Toolchain(client, image, tmp_path / "work") as tc, pytest.raises(hip.BuildFailed) as err:
        tc.compile(fwd_tu, ("gfx90a",), "/w/fwd.o")
    assert "__syncwarp" in str(err.value) and "MAMBA_HIP" in (err.value.hint or "")
