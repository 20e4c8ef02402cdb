"""Wheel variants (PEP 825, builder/verifying/variants.py): the farm's stable-ABI wheels in variant form, served
from ``<index>/variants/`` on 127.0.0.1 and installed by real installers.

uv's variant preview picks the cu13 build or the CPU null variant from what its NVIDIA provider reports; pip
takes the plain CPU wheel; variantlib 0.2.2 accepts every variant.json; the verifier refuses a form that lies.
The wheels are built by ``builder build --profile ci-stable --executor host``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import cudakit
import pytest
from filelock import FileLock
from indexkit import isolated_env, make_venv, pip, serve, uv_bin
from wheelmaker import V, make_mamba_wheel, make_wheel

from builder.errors import VerificationError
from builder.verifying import variants
from mamba_ssm import variant as _variant

variantlib = pytest.importorskip("variantlib")
from conftest import REPO
from variantlib.variant_dist_info import VariantDistInfo
from variantlib.variants_json import VariantsJson

TORCH_CPU = "2.13.0"


# --------------------------------------------------------------------------- the format, on small wheels


def _elf_so() -> bytes:
    """A real ELF shared object without GPU code (the interpreter's libpython or any system library)."""
    for cand in (Path(sys.executable).resolve().parent.parent / "lib", Path("/usr/lib/x86_64-linux-gnu")):
        for so in sorted(cand.glob("libz.so*")) + sorted(cand.glob("libpython3*.so*")):
            if so.is_file():
                return so.read_bytes()
    pytest.skip("no ELF shared object found")


def test_variant_form_changes_only_the_dist_info(tmp_path):
    so = _elf_so()
    src = make_wheel(tmp_path, "mamba-ssm", f"{V}+cputorchstable", "cp310-abi3-linux_x86_64",
                     requires=("torch>=2.10",), files={"mamba_ssm/__init__.py": b"", "mamba_ssm/_C.abi3.so": so})
    out = variants.to_variant(src, tmp_path / "out")
    plain = variants.to_plain(src, tmp_path / "out")
    assert out.name == f"mamba_ssm-{V}-cp310-abi3-linux_x86_64-null.whl"
    assert plain.name == f"mamba_ssm-{V}-cp310-abi3-linux_x86_64.whl"
    assert variants.to_variant(src, tmp_path / "again").read_bytes() == out.read_bytes()  # deterministic
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(out) as b:
        assert a.read("mamba_ssm/_C.abi3.so") == b.read("mamba_ssm/_C.abi3.so") == so
        assert f"Version: {V}\n" in b.read(f"mamba_ssm-{V}.dist-info/METADATA").decode()
        raw = b.read(f"mamba_ssm-{V}.dist-info/variant.json")
        assert not [n for n in b.namelist() if "+cputorchstable" in n]
    info = VariantDistInfo(raw, expected_label="null")  # variantlib's own validation
    assert info.variant_desc.is_null_variant()
    with pytest.raises(variantlib.errors.ValidationError):
        VariantDistInfo(raw, expected_label="cu13")
    # pip installs the rewritten wheel's RECORD as consistent (it checks every hash)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                    str(tmp_path / "t"), str(tmp_path / "out" / out.name.replace("-null", ""))], check=True,
                   env=isolated_env(tmp_path))


def test_form_of_names_what_each_build_needs():
    cu13 = variants.form_of(_variant.Variant.from_label("cu13torchstable"), ["sm_80", "sm_90a"], ["compute_90"])
    assert cu13.label == "cu13"
    assert cu13.lines() == ["nvidia :: cuda_version_lower_bound :: 13.0", "nvidia :: sm_arch :: 80_real",
                            "nvidia :: sm_arch :: 90_virtual", "nvidia :: sm_arch :: 90a_real"]
    assert variants.form_of(_variant.Variant.from_label("cputorchstable")) == variants.Form("null", {})
    for label, archs, why in [("cu13torchstable", (), "no GPU code"),
                              ("cu12torch2.6cxx11abiFALSE", ("sm_80",), "classic per-torch wheel"),
                              ("hip62torch2.5cxx11abiFALSE", (), "no variant form")]:
        with pytest.raises(VerificationError, match=why):
            variants.form_of(_variant.Variant.from_label(label), archs)
    doc = variants.metadata([cu13, variants.Form("null", {})])
    parsed = VariantsJson(doc)  # variantlib validates the -variants.json layout
    assert set(parsed.variants) == {"cu13", "null"} and parsed.namespace_priorities == ["nvidia"]


@pytest.mark.parametrize("name,base,label", [
    (f"mamba_ssm-{V}-cp310-abi3-linux_x86_64-cu13.whl", f"mamba_ssm-{V}-cp310-abi3-linux_x86_64.whl", "cu13"),
    (f"mamba_ssm-{V}-1-cp310-abi3-linux_x86_64-null.whl", f"mamba_ssm-{V}-1-cp310-abi3-linux_x86_64.whl", "null"),
    (f"mamba_ssm-{V}-1-cp310-abi3-linux_x86_64.whl", None, None),  # a build tag, not a variant label
    (f"mamba_ssm-{V}+cu13torchstable-cp310-abi3-linux_x86_64.whl", None, None),
    (f"mamba_ssm-{V}-cp310-abi3-linux_x86_64-CU13.whl", None, None),  # labels are lower case
])
def test_split_label(name, base, label):
    assert variants.split_label(name) == (base or name, label)


def test_an_extension_that_is_no_elf_has_no_variant_form(tmp_path):
    src = make_wheel(tmp_path, "mamba-ssm", f"{V}+cu13torchstable", "cp310-abi3-linux_x86_64",
                     files={"mamba_ssm/_C.abi3.so": b"not an ELF"})
    with pytest.raises(VerificationError, match="_C.abi3.so: .*not an ELF"):
        variants.form_of_wheel(src)


def test_a_variant_json_that_names_another_label_is_refused(tmp_path):
    src = make_mamba_wheel(tmp_path, "cputorchstable", "cp310")
    out = variants.to_variant(src, tmp_path / "out")
    lying = out.with_name(out.name.replace("-null.whl", "-cu13.whl"))
    out.rename(lying)
    with pytest.raises(VerificationError, match="exactly the variant 'cu13'"):
        variants.read_form(lying)


def test_stable_wheels_without_a_variant_form_are_left_out_with_their_reason(tmp_path):
    """An index of placeholder wheels (no extension): the CUDA one has no GPU code to declare, so the variant
    root lists the CPU null variant and the plain fallback only, and the manifest says why."""
    from builder.publishing.index import build_index

    wheels = tmp_path / "wheels"
    make_mamba_wheel(wheels, "cputorchstable", "cp310")
    cu = make_mamba_wheel(wheels, "cu13torchstable", "cp310")
    build_index(wheels, tmp_path / "index")
    manifest = json.loads((tmp_path / "index" / "manifest.json").read_text())
    record = manifest["wheel_variants"]
    assert sorted(record["files"]) == [f"mamba_ssm-{V}-cp310-abi3-linux_x86_64-null.whl",
                                       f"mamba_ssm-{V}-cp310-abi3-linux_x86_64.whl"]
    assert "no GPU code" in record["skipped"][cu.name]
    page = (tmp_path / "index" / "variants" / "mamba-ssm" / "index.html").read_text()
    assert f"mamba_ssm-{V}-variants.json#sha256=" in page and "-cu13.whl" not in page
    # the coverage page and `builder resolve` show the variant line
    cover = (tmp_path / "index" / "index.html").read_text()
    assert ('uv pip install --preview-features wheel-variants mamba-ssm --index <span class="base">./</span>'
            "variants/</code>") in cover
    assert f"takes <code>mamba_ssm-{V}-cp310-abi3-linux_x86_64.whl</code> there, the CPU build" in cover
    out = subprocess.run([sys.executable, "-m", "builder", "resolve", "--index", str(tmp_path / "index"), "--torch",
                          "2.13", "--python", "3.11"], check=False, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    url = (tmp_path / "index").absolute().as_uri()
    assert f"variant-aware: uv pip install --preview-features wheel-variants mamba-ssm --index {url}/variants/" in (
        out.stdout.splitlines())


def _placeholder_index(tmp_path, **kw) -> Path:
    from builder.publishing.index import build_index

    wheels = tmp_path / "wheels"
    make_mamba_wheel(wheels, "cputorchstable", "cp310")
    build_index(wheels, tmp_path / "index", **kw)
    return tmp_path / "index"


def test_uv_reads_the_variant_roots_metadata_files_not_the_wheels(tmp_path):
    """PEP 658 on the variant root, as the other pages: each variant file is linked with its ``.metadata``
    (data-dist-info-metadata / data-core-metadata), so real uv (the preview) resolves mamba-ssm's dependencies
    from 127.0.0.1 without downloading a wheel, and installs what it resolved; the .metadata is the variant wheel's own METADATA."""
    index = _placeholder_index(tmp_path)
    page = (index / variants.ROOT / "mamba-ssm" / "index.html").read_text()
    record = json.loads((index / "manifest.json").read_text())["wheel_variants"]["files"]
    for name, f in record.items():
        md = f"sha256={f['metadata_sha256']}"
        assert f'{name}#sha256={f["sha256"]}" data-requires-python="&gt;=3.10" data-dist-info-metadata="{md}" ' \
               f'data-core-metadata="{md}">' in page
        with zipfile.ZipFile(index / "files" / name) as zf:
            assert (index / "files" / (name + ".metadata")).read_bytes() == zf.read(f"mamba_ssm-{V}.dist-info/METADATA")
    env = isolated_env(tmp_path)
    vpy = make_venv(tmp_path / "venv", sys.executable, env)
    torch = make_wheel(tmp_path / "deps", "torch", "2.13.0")  # (resolving needs mamba-ssm's Requires-Dist)
    log: list[str] = []
    with serve(index, log=log) as url:
        cmd = [uv_bin(), "pip", "install", "--python", str(vpy), "--preview-features", "wheel-variants",
               "--index-url", f"{url}/{variants.ROOT}/", "--find-links", str(torch.parent), "mamba-ssm"]
        dry = subprocess.run([*cmd, "--dry-run"], check=False, capture_output=True, text=True, env=env)
        assert dry.returncode == 0, dry.stderr
        assert f"mamba-ssm=={V}" in dry.stderr, dry.stderr
        fetched = [p.rsplit("/", 1)[-1] for p in log]
        assert f"mamba_ssm-{V}-cp310-abi3-linux_x86_64-null.whl.metadata" in fetched, log
        assert not [p for p in fetched if p.endswith(".whl")], log  # no whole wheel for a resolution
        real = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)
        assert real.returncode == 0, real.stderr
    assert f"mamba_ssm-{V}-cp310-abi3-linux_x86_64-null.whl" in [p.rsplit("/", 1)[-1] for p in log]
    assert installed_version(vpy) == V


def installed_version(vpy: Path) -> str:
    code = "import importlib.metadata as m; print(m.version('mamba-ssm'))"
    return subprocess.run([str(vpy), "-I", "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def test_a_released_variant_root_links_the_release_assets(tmp_path):
    """A wheel linked to a release's assets (``--files-url``: a tag release's site has no files/) has its
    variant files linked beside it, among the same release's assets, which the publish job uploads; no PEP 658
    attribute there, as on the other pages (the asset host serves no .metadata)."""
    assets = f"https://github.com/o/r/releases/download/v{V}"
    index = _placeholder_index(tmp_path, files_url=assets, base_url="https://o.github.io/r")
    page = (index / variants.ROOT / "mamba-ssm" / "index.html").read_text()
    record = json.loads((index / "manifest.json").read_text())["wheel_variants"]["files"]
    assert sorted(record) == [f"mamba_ssm-{V}-cp310-abi3-linux_x86_64-null.whl",
                              f"mamba_ssm-{V}-cp310-abi3-linux_x86_64.whl"]
    for name, f in record.items():
        assert f'<a href="{assets}/{name}#sha256={f["sha256"]}" data-requires-python="&gt;=3.10">' in page
    assert "files/" not in page and "data-core-metadata" not in page
    # what the publish job uploads beside the release's wheels: exactly what those links name, and they exist
    def listed(wheels: Path) -> list[str]:
        out = subprocess.run([sys.executable, "-m", "builder", "release", "variant-files", "--index", str(index),
                              "--wheels", str(wheels)], check=True, capture_output=True, text=True, cwd=REPO).stdout
        return out.splitlines()

    uploads = listed(tmp_path / "wheels")
    assert [Path(u).name for u in uploads] == [*sorted(record), f"mamba_ssm-{V}-variants.json"]
    assert all(Path(u).is_file() for u in uploads)
    (tmp_path / "other").mkdir()
    assert listed(tmp_path / "other") == []  # another run's wheels: none of these


# --------------------------------------------------------------------------- the farm's wheels, real installers

def needs_farm(test):
    """The farm's CUDA build compiles with nvcc 13.0; the venvs are Python 3.11 (the local torch wheels')."""
    for mark in (
        pytest.mark.cuda_build,
        pytest.mark.skipif(not cudakit.NVCC.is_file(), reason="needs the CUDA 13.0 toolkit"),
        pytest.mark.skipif(cudakit.python311() is None, reason="needs python3.11"),
    ):
        test = mark(test)
    return test


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The farm builds ci-stable (CPU + CUDA 13 stable wheels) on the host and indexes them; served."""
    root = tmp_path_factory.mktemp("variants-site")
    dist = root / "dist"
    env = {**os.environ, "MAX_JOBS": os.environ.get("MAX_JOBS", "2")}
    proc = subprocess.run([sys.executable, "-m", "builder", "build", "--profile", "ci-stable", "--executor", "host",
                           "--dist", str(dist)], cwd=REPO, check=False, capture_output=True, text=True, env=env, timeout=3000)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    (root / "build.out").write_text(proc.stdout + proc.stderr)
    with serve(dist) as url:
        yield url, dist / "index"


def test_the_stable_wheels_carry_their_evidence(site):
    """Both stable wheels (CPU; CUDA 13, imported with torch's CUDA build and its CPU kernels run) were imported and
    their numerics checked on the CPU, as each one's record says (and no more than the ledger claims)."""
    from farmkit import checked_evidence

    dist = site[1].parent
    records = checked_evidence(dist, (dist.parent / "build.out").read_text(), numerics=True, modules=("mamba_ssm._C",))
    assert sorted(r["wheel"].split("+")[1].split("-")[0] for r in records) == ["cputorchstable", "cu13torchstable"]
    assert all(r["verified"]["tags"][0].startswith("cp310-abi3-") for r in records)


def _torch_dir(version: str) -> Path:
    """torch ``version`` (from this machine's wheelhouse, through pip's configuration) and its dependencies in
    one folder, made once and shared by the test venvs through a .pth line: a 900 MB install per venv would
    cost a minute each. pip sees it as installed; uv does not, so uv runs with --no-deps."""
    cache = cudakit.CACHE / f"torch-target-{version}"
    with FileLock(str(cache) + ".lock"):
        if not (cache / "torch").is_dir():
            tmp = cache.with_name(cache.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(tmp), f"torch=={version}"],
                           check=True)
            tmp.rename(cache)
    return cache


def _fresh_venv(path: Path, torch_site: Path, env: dict, python: str | None = None) -> Path:
    vpy = make_venv(path, python or cudakit.python311(), env)
    (next((path / "lib").glob("python3.*")) / "site-packages" / "torch-site.pth").write_text(f"{torch_site}\n")
    return vpy


_RUN = r"""
import importlib.metadata as m, json, torch
from mamba_ssm.ops import selective_scan_interface as ssi
d = m.distribution("mamba-ssm")
res = {"version": d.version, "files": sorted(str(f) for f in d.files if str(f).endswith(".so")),
       "variant": (d.read_text("variant.json") or None), "torch": torch.__version__,
       "extension": ssi.HAS_EXTENSION, "error": str(getattr(ssi, "_IMPORT_ERROR", ""))}
has = torch._C._dispatch_has_kernel_for_dispatch_key
res["kernels"] = {k: has("mamba_ssm::selective_scan_fwd", k) for k in ("CPU", "CUDA")} if ssi.HAS_EXTENSION else {}
if torch.version.cuda is None:
    torch.manual_seed(0)
    u = torch.randn(2, 4, 33); delta = torch.rand(2, 4, 33); A = -torch.rand(4, 8)
    B = torch.randn(2, 8, 33); C = torch.randn(2, 8, 33); D = torch.randn(4)
    out = ssi.selective_scan_fn(u, delta, A, B, C, D, None, None, True)
    ref = ssi.selective_scan_ref(*(t.double() for t in (u, delta, A, B, C, D)), None, None, True)
    res["max_err"] = (out.double() - ref).abs().max().item()
print("RESULT " + json.dumps(res))
"""


def _run(vpy: Path) -> dict:
    proc = subprocess.run([str(vpy), "-I", "-c", _RUN], check=False, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def _variant_label(res: dict) -> str | None:
    return next(iter(json.loads(res["variant"])["variants"])) if res["variant"] else None


@pytest.mark.parametrize("driver,sm,want", [
    ("13.0", "8.0", "cu13"),  # the CUDA 13 build: a 13.0 driver on an sm_80 GPU
    ("12.8", "8.0", "null"),  # its driver is too old for cuda_version_lower_bound 13.0
    ("13.0", "7.5", "null"),  # a second CUDA 13 property set: sm_75 is not among the build's sm_arch
    (None, None, "null"),  # no driver at all: the null variant, the CPU build
], ids=["driver13-sm80", "driver12.8", "driver13-sm75", "no-driver"])
@needs_farm
def test_uv_with_the_preview_picks_the_build_by_itself(site, tmp_path, driver, sm, want):
    url, _index = site
    env = isolated_env(tmp_path)
    for k in ("NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION", "NV_VARIANT_PROVIDER_FORCE_SM_ARCH"):
        env.pop(k, None)
    if driver:
        env.update(NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION=driver, NV_VARIANT_PROVIDER_FORCE_SM_ARCH=sm)
    torch_site = (next((cudakit.torch_cuda_venv() / "lib").glob("python3.*")) / "site-packages" if want != "null"
                  else _torch_dir(TORCH_CPU))
    vpy = _fresh_venv(tmp_path / "venv", torch_site, env)
    cmd = [uv_bin(), "pip", "install", "--python", str(vpy), "--preview-features", "wheel-variants",
           "--index", f"{url}/index/{variants.ROOT}/", "--no-deps", "mamba-ssm"]  # the command the docs give
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    res = _run(vpy)
    assert (res["version"], _variant_label(res)) == (V, want), (proc.stderr, res)
    assert res["extension"], res["error"]
    if want == "cu13":  # a CUDA torch imports it without a GPU: both kernels registered
        assert res["torch"].startswith("2.14") and res["kernels"] == {"CPU": True, "CUDA": True}
    else:  # the CPU build: the op runs
        assert res["torch"].startswith("2.13") and res["kernels"]["CPU"] and res["max_err"] < 1e-4


@needs_farm
def test_pip_without_variant_support_takes_the_plain_cpu_wheel(site, tmp_path):
    """pip skips the variant file names (an invalid wheel name to it: 6 parts, the 3rd not a build number) and
    takes the one plain wheel of the root, the CPU build; a driver in the environment changes nothing."""
    url, index = site
    env = isolated_env(tmp_path)
    env.update(NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION="13.0", NV_VARIANT_PROVIDER_FORCE_SM_ARCH="8.0")
    plain = [n for n in json.loads((index / "manifest.json").read_text())["wheel_variants"]["files"]
             if variants.split_label(n)[1] is None]
    assert len(plain) == 1
    for which in ("current", "23"):
        vpy = _fresh_venv(tmp_path / which, _torch_dir(TORCH_CPU), env)
        if which == "23":  # the pip that Python 3.11.7's ensurepip seeds
            subprocess.run([str(vpy), "-m", "ensurepip"], check=True, env=env)
            version = subprocess.run([str(vpy), "-m", "pip", "--version"], check=False, capture_output=True, text=True).stdout
            assert version.startswith("pip 23."), version
            proc = subprocess.run([str(vpy), "-m", "pip", "install", "--index-url", f"{url}/index/{variants.ROOT}/",
                                   "mamba-ssm"], check=False, capture_output=True, text=True, env=env)
            assert proc.returncode == 0, proc.stdout + proc.stderr
        else:
            proc = pip(vpy, ["install", "--index-url", f"{url}/index/{variants.ROOT}/", "mamba-ssm"], env)
        res = _run(vpy)
        assert (which, res["version"], res["variant"]) == (which, V, None), proc.stdout
        assert plain[0] in proc.stdout, proc.stdout
        assert res["extension"] and res["kernels"] == {"CPU": True, "CUDA": False} and res["max_err"] < 1e-4


@needs_farm
def test_variantlib_and_the_verifier_accept_every_variant_wheel(site, tmp_path):
    from builder.planning.plan import load_plan
    from builder.verifying.wheels import verify_wheel

    _url, index = site
    files = index / "files"
    (vj,) = (index / variants.ROOT / "mamba-ssm").glob("*-variants.json")
    assert vj.name == f"mamba_ssm-{V}-variants.json"
    listing = VariantsJson(json.loads(vj.read_text()))
    made = sorted(p for p in files.glob("*.whl") if variants.split_label(p.name)[1])
    labels = {variants.split_label(p.name)[1]: p for p in made}
    assert sorted(labels) == sorted(listing.variants) == ["cu13", "null"]
    assert [p.to_str() for p in listing.variants["cu13"].properties] == [
        "nvidia :: cuda_version_lower_bound :: 13.0", "nvidia :: sm_arch :: 80_real"]
    plan = load_plan(profile="ci-stable")
    for label, wheel in labels.items():
        with zipfile.ZipFile(wheel) as zf:
            info = VariantDistInfo(zf.read(f"mamba_ssm-{V}.dist-info/variant.json"), expected_label=label)
            so = zf.read("mamba_ssm/_C.abi3.so")
        assert info.variant_desc == listing.variants[label]
        acc = "cpu" if label == "null" else label
        (src,) = files.glob(f"mamba_ssm-{V}+{acc}torchstable-*.whl")
        with zipfile.ZipFile(src) as zf:
            assert zf.read("mamba_ssm/_C.abi3.so") == so  # the extension's bytes unchanged
        spec = plan.build(f"{acc}-torchstable-abi3-cp311-linux_x86_64")
        assert verify_wheel(wheel, spec, workdir=tmp_path / label) .wheel == wheel
        other = plan.build(f"{'cu13' if acc == 'cpu' else 'cpu'}-torchstable-abi3-cp311-linux_x86_64")
        with pytest.raises(VerificationError, match="variant label is"):
            verify_wheel(wheel, other, workdir=tmp_path / label)


def test_the_doctor_names_the_build_of_an_installed_variant_wheel():
    from mamba_ssm.doctor import facts

    assert [facts._label_of_variant(v) for v in ("null", "cu13", "cu13_aarch64", "x86_64_v3", None)] == [
        "cputorchstable", "cu13torchstable", "cu13torchstable", "", ""]


# --------------------------------------------------------------------------- hostile wheels


def _tampered(tmp_path: Path, change) -> Path:
    """A farm stable wheel, rewritten member by member with ``change(name, info, data)`` -> [(info, data)]."""
    src = make_wheel(tmp_path / "src", "mamba-ssm", f"{V}+cputorchstable", "cp310-abi3-linux_x86_64",
                     requires=("torch>=2.10",), files={"mamba_ssm/__init__.py": b"", "mamba_ssm/_C.abi3.so": _elf_so()})  # fmt: skip
    out = tmp_path / src.name
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            for zi, data in change(info.filename, info, zin.read(info)):
                zout.writestr(zi, data)
    return out


def _extra(name: str, data: bytes = b"import os\n", link: bool = False):
    def change(n, info, data_):
        yield info, data_
        if n.endswith("/RECORD"):
            zi = zipfile.ZipInfo(name)
            if link:
                zi.external_attr = (0o120777) << 16
            yield zi, data

    return change


@pytest.mark.parametrize(
    "change,message",
    [
        (_extra("../x.pth"), "climbs out"),
        (_extra("/etc/x.pth"), "is absolute"),
        (_extra("mamba_ssm/evil", b"/etc/passwd", link=True), "is a symbolic link"),
        (lambda n, i, d: [(i, d + b"# tampered\n" if n == "mamba_ssm/__init__.py" else d)], "does not match its"),
        (_extra("mamba_ssm/unlisted.py"), "has no hash in"),
    ],
    ids=["dotdot", "absolute", "symlink", "record-lies", "not-in-record"],
)
def test_the_rewriter_refuses_what_the_index_refuses_elsewhere(tmp_path, change, message):
    """Before: the variant form republished these, and its fresh RECORD vouched for the tampered file."""
    wheel = _tampered(tmp_path, change)
    with pytest.raises(VerificationError, match=message):
        variants.to_variant(wheel, tmp_path / "out")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_a_member_is_capped_by_what_it_inflates_to_not_what_its_header_says(tmp_path, monkeypatch):
    from builder.verifying import relabel

    monkeypatch.setattr(relabel, "MAX_MEMBER_BYTES", 1 << 20)  # (the real cap is 1 GiB; same code path)
    big = b"\0" * (3 << 20)
    wheel = _tampered(tmp_path, lambda n, i, d: [(i, big if n == "mamba_ssm/__init__.py" else d)])
    with pytest.raises(VerificationError, match="unpacks to more than 1 MiB"):
        variants.to_variant(wheel, tmp_path / "out")


def test_a_variant_file_that_declares_another_variant_than_variants_json_is_made_again(tmp_path):
    """The store and the manifest are files on disk: a variant file whose own variant.json was rewritten (here to
    claim sm_120) with the manifest's record made to match it is not republished as it is. The next index run
    makes it again from its source wheel, so the file and -variants.json say the same variant."""
    import base64
    import hashlib

    from builder.publishing.index import build_index

    index = _placeholder_index(tmp_path)
    name = f"mamba_ssm-{V}-cp310-abi3-linux_x86_64-null.whl"
    path = index / "files" / name
    honest = variants.read_form(path)
    with zipfile.ZipFile(path) as zf:
        members = {i.filename: zf.read(i) for i in zf.infolist()}
    vj = f"mamba_ssm-{V}.dist-info/variant.json"
    doc = json.loads(members[vj])
    doc["variants"]["null"] = {"nvidia": {"sm_arch": ["120"]}}
    members[vj] = json.dumps(doc).encode()
    # a careful tamperer: RECORD vouches for the new variant.json (the rewriter checks RECORD, so it must)
    digest = base64.urlsafe_b64encode(hashlib.sha256(members[vj]).digest()).rstrip(b"=").decode()
    record = f"mamba_ssm-{V}.dist-info/RECORD"
    members[record] = "\n".join(
        f"{vj},sha256={digest},{len(members[vj])}" if ln.startswith(vj + ",") else ln
        for ln in members[record].decode().splitlines()
    ).encode() + b"\n"
    path.unlink()  # the store hard-links its files: a new inode, as a tampering writer would make
    with zipfile.ZipFile(path, "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)
    assert variants.read_form(path) != honest
    manifest_path = index / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    rec = manifest["wheel_variants"]["files"][name]
    rec["size"], rec["sha256"] = path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest()
    manifest_path.write_text(json.dumps(manifest))
    make_mamba_wheel(tmp_path / "wheels", "cputorch2.13cxx11abiTRUE", "cp311")  # the next run that publishes
    build_index(tmp_path / "wheels", index)
    again = index / "files" / name
    assert variants.read_form(again) == honest
    listed = json.loads((index / variants.ROOT / "mamba-ssm" / f"mamba_ssm-{V}-variants.json").read_text())
    assert listed["variants"]["null"] == honest.properties
