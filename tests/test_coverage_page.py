"""The coverage page, loaded in a real browser (Debian's headless Chromium) from 127.0.0.1."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from indexkit import serve
from wheelmaker import V, make_mamba_wheel

from builder.publishing.index import build_index

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1600,1100",
]


def _chromium(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile{len(list(tmp_path.glob('profile*')))}"
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, url]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120, cwd=tmp_path)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (scripts/bootstrap-host.sh installs it)")
def test_coverage_page_in_headless_chromium(tmp_path):
    wheels = tmp_path / "wheels"
    for py in ("cp311", "cp312"):
        make_mamba_wheel(wheels, "cu12torch2.6cxx11abiFALSE", py)
        make_mamba_wheel(wheels, "cu13torch2.14cxx11abiTRUE", py)
    make_mamba_wheel(wheels, "cu12torch2.6cxx11abiTRUE", "cp311")
    make_mamba_wheel(wheels, "hip62torch2.5cxx11abiFALSE", "cp311")
    make_mamba_wheel(wheels, "cputorch2.13cxx11abiTRUE", "cp312")
    make_mamba_wheel(wheels, "cu13torchstable", "cp310")
    build_index(wheels, tmp_path / "www" / "index")

    with serve(tmp_path / "www") as url:
        page = f"{url}/index/"
        dom = _chromium(tmp_path, page, "--dump-dom")
        shot = tmp_path / "coverage.png"
        shooter = _chromium(tmp_path, page, f"--screenshot={shot}")
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert "mamba-ssm prebuilt wheels" in html
    # one row per torch x accelerator, the stable row included
    rows = re.findall(r'<tr data-torch="([^"]+)" data-accelerator="([^"]+)">', html)
    assert sorted(rows) == sorted(
        [("2.13", "cpu"), ("2.14", "cu13"), ("stable", "cu13"), ("2.6", "cu12"), ("2.5", "hip62")]
    )
    # the script filled in the absolute base: each cell carries a runnable, pinned command
    commands = re.findall(r'data-command="([^"]+)"', html)
    assert (
        f"pip install mamba-ssm=={V}+cu12torch2.6cxx11abiFALSE --extra-index-url {page}cu12-torch2.6-cxx11abiFALSE/"
        in commands
    )
    assert (
        f"pip install mamba-ssm=={V}+hip62torch2.5cxx11abiFALSE --extra-index-url {page}hip62-torch2.5-cxx11abiFALSE/"
        in commands
    )
    assert f"pip install mamba-ssm=={V}+cu13torchstable --extra-index-url {page}cu13-torchstable-abi3/" in commands
    assert all(f"=={V}+" in c for c in commands)
    # each cell links its wheel
    assert f'href="files/mamba_ssm-{V}+cu13torch2.14cxx11abiTRUE-cp312-cp312-linux_x86_64.whl"' in html
    assert shooter.returncode == 0 and shot.stat().st_size > 20_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (scripts/bootstrap-host.sh installs it)")
def test_coverage_page_shows_each_project_with_its_own_commands(tmp_path):
    from wheelmaker import CAUSAL_CONV1D, UPSTREAM_MAMBA, make_recipe_wheel

    wheels = tmp_path / "wheels"
    for py in ("cp311", "cp312"):
        make_recipe_wheel(wheels, "mamba-ssm", "2.3.2.post1", "cu13torch2.14cxx11abitrue", py, source=UPSTREAM_MAMBA)
        make_recipe_wheel(wheels, "causal-conv1d", "1.7.0", "cu13torch2.14cxx11abitrue", py, source=CAUSAL_CONV1D)
    make_recipe_wheel(wheels, "causal-conv1d", "1.7.0", "cu12torch2.6cxx11abifalse", "cp310", source=CAUSAL_CONV1D)
    build_index(wheels, tmp_path / "www" / "index")

    with serve(tmp_path / "www") as url:
        page = f"{url}/index/"
        dom = _chromium(tmp_path, page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert "mamba-ssm, causal-conv1d prebuilt wheels" in html
    sections = re.findall(r'<section class="project" id="([^"]+)" data-project="\1">(.*?)</section>', html, re.DOTALL)
    assert [name for name, _ in sections] == ["mamba-ssm", "causal-conv1d"]
    body = dict(sections)
    # each project's own rows, Pythons and pinned commands (the script filled in the absolute base)
    rows = {n: re.findall(r'<tr data-torch="([^"]+)" data-accelerator="([^"]+)">', b) for n, b in body.items()}
    assert rows == {"mamba-ssm": [("2.14", "cu13")], "causal-conv1d": [("2.14", "cu13"), ("2.6", "cu12")]}
    commands = {n: re.findall(r'data-command="([^"]+)"', b) for n, b in body.items()}
    key = "cu13-torch2.14-cxx11abiTRUE"
    assert (
        commands["mamba-ssm"]
        == [f"pip install mamba-ssm==2.3.2.post1+cu13torch2.14cxx11abiTRUE --extra-index-url {page}{key}/"] * 2
    )
    assert (
        f"pip install causal-conv1d==1.7.0+cu13torch2.14cxx11abiTRUE --extra-index-url {page}{key}/"
        in commands["causal-conv1d"]
    )
    assert (
        f"pip install causal-conv1d==1.7.0+cu12torch2.6cxx11abiFALSE --extra-index-url {page}cu12-torch2.6-cxx11abiFALSE/"
        in commands["causal-conv1d"]
    )
    assert "Python 3.10" in body["causal-conv1d"] and "Python 3.10" not in body["mamba-ssm"]
    assert "upstream's published sdist" in body["causal-conv1d"] and CAUSAL_CONV1D in body["causal-conv1d"]
    assert 'href="files/causal_conv1d-1.7.0+cu13torch2.14cxx11abitrue-cp312-cp312-manylinux_2_28_x86_64.whl"' in html
    assert re.search(r'<nav class="projects">.*href="#causal-conv1d"', html)


def test_the_rows_name_their_gpu_code_and_the_gpus_it_is_for(tmp_path):
    """The aarch64 CUDA row says which GPUs its wheel has code for (its sidecar's archs, named from
    toolkits.toml: GB10 for sm_121), and keeps saying so when the index is rebuilt from its manifest."""
    import json

    from builder.errors import UsageError

    wheels = tmp_path / "wheels"
    arm = make_mamba_wheel(wheels, "cu13torchstable", "cp310", platform="manylinux_2_28_aarch64")
    sidecar = {"serves": ["cu13-torch2.14-cxx11abiTRUE"], "archs": ["sm_90", "sm_121"], "source": "checkout"}
    Path(str(arm) + ".spec.json").write_text(json.dumps(sidecar))
    make_mamba_wheel(wheels, "cu13torch2.14cxx11abiTRUE", "cp311")  # no sidecar: no archs shown
    out = tmp_path / "www" / "index"
    for _ in range(2):  # the second run reads the first one's manifest
        build_index(wheels, out)
        html = (out / "index.html").read_text()
        arm_row = html.split('data-machine="aarch64">', 1)[1].split("</tr>", 1)[0]
        assert '<span data-arch="sm_90" title="H100, H200, GH200">sm_90 (H100, H200, GH200)</span>' in arm_row
        assert '<span data-arch="sm_121" title="DGX Spark (GB10)">sm_121 (DGX Spark (GB10))</span>' in arm_row
        assert html.count('class="archs"') == 1
        # each cell states the glibc its wheel's tag needs; a wheel with no manylinux tag states none
        assert "glibc ≥ 2.28</span>" in arm_row and 'class="glibc"' in arm_row
        assert html.count('class="glibc"') == arm_row.count('class="glibc"')  # the linux_x86_64 wheel: none
    # a sidecar's archs are names checked before use, never markup
    sidecar["archs"] = ["sm_90", "<script>alert(1)</script>"]
    Path(str(arm) + ".spec.json").write_text(json.dumps(sidecar))
    with pytest.raises(UsageError, match="'archs' is not a list of GPU architectures"):
        build_index(wheels, tmp_path / "www2" / "index")
