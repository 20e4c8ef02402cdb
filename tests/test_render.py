"""Dockerfiles render for every toolchain image of the default matrix and pass hadolint."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
from conftest import REPO

from builder.building.images.base_image import local_name
from builder.building.images.images import DEBIAN_ARCH
from builder.building.images.render import DOCKER_DIR, environment, fallback_suite, load_packages, os_table, render
from builder.environments import interpreters
from builder.errors import InterpreterUnavailable, UsageError
from builder.facts.compat import machine_of
from builder.facts.hostenv import host_machine
from builder.facts.spec import ImageSpec
from builder.planning.plan import load_plan

HADOLINT = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
PLAN = load_plan()
IMAGES = sorted(PLAN.images.values(), key=lambda i: i.id)


def _hadolint(path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [HADOLINT, "--no-color", "--config", str(DOCKER_DIR / "hadolint.yaml"), *extra, str(path)],
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("local", [True, False], ids=["farm-base", "configured-base"])
@pytest.mark.parametrize("image", IMAGES, ids=[i.id for i in IMAGES])
def test_every_image_renders_and_passes_hadolint(image: ImageSpec, local: bool, tmp_path: Path) -> None:
    machine = machine_of(image.platform)
    base = local_name(fallback_suite(image), machine) if local else None
    if local and machine != host_machine():
        # another machine's image on the farm's base takes Debian's own Python (bookworm 3.11, trixie 3.13)
        # and the farm's own interpreters (builder/environments/interpreters.py) for the others it provides
        have = os_table(base, load_packages())[1]["system_python"]
        others = [v for v in image.pythons if v != have and not interpreters.known(v, machine)]
        if others:
            with pytest.raises(InterpreterUnavailable, match=f"needs Python {', '.join(others)}: the host's pyenv"):
                render(image, base=base)
            image = dataclasses.replace(image, pythons=tuple(v for v in image.pythons if v not in others))
    r = render(image, base=base)
    text = r.dockerfile
    (main,) = [line for line in text.splitlines() if line.startswith("FROM ") and " AS " not in line]
    if r.cross:  # the image's own stage names its platform: a cross stage of the build host's comes first
        assert main == f"FROM --platform={r.cross['target_platform']} {base or image.base}"
        assert text.splitlines()[6].startswith(f"FROM --platform={r.cross['host_platform']} ")
    else:
        assert text.splitlines()[0] == main and main.startswith(f"FROM {base or image.base}")
    # every Python the image's builds need, manylinux-style, plus cibuildwheel's helper
    for v in image.pythons:
        tag = "cp" + v.replace(".", "")
        assert f"/opt/python/{tag}-{tag}" in text
    if "manylinux" not in r.base:  # manylinux images have their own cp39
        assert "/opt/python/cp39-cp39" in text
    assert "COPY ca-bundle.crt" in text and "PIP_CERT=" in text
    if image.kind == "cuda":
        assert "CUDA_HOME=" in text
    if local and image.kind == "cuda" and image.toolkit == "13.0":
        assert '"nvidia-cuda-nvcc==13.0.*"' in text and "libcudart.so.13" in text
    # an emulated CUDA 13 image compiles device code with this host's nvcc/cicc/ptxas (measured: 4.3 s
    # natively against 115 s emulated for one kernel), run by the cross compiler's loader where it has one, else
    # Debian multiarch's; a native one, or a base without a multiarch loader, keeps its own
    overlay = local and image.kind == "cuda" and image.toolkit == "13.0" and machine != host_machine()
    assert ("dpkg --add-architecture" in text) == (overlay and not r.cross)
    assert ("AS cuda-fetch" in text) == bool(overlay and r.cross)
    if overlay:
        assert f"--platform manylinux_2_17_{host_machine()}" in text
        assert (f"libc6:{DEBIAN_ARCH[host_machine()]}" in text) != bool(r.cross)
        assert '"nvidia-cuda-nvcc==13.0.*" "nvidia-nvvm==13.0.*"' in text
        assert "nvvm/bin/. /opt/cuda-pypi/nvidia/cu13/nvvm/bin/" in text
    if local and image.kind == "rocm":
        assert "hipcc" in text and "trixie" in r.base
    if local and machine != host_machine():
        tag = "cp" + have.replace(".", "")
        assert r.base.endswith("-arm64") and f"python{have} -m venv /opt/python/{tag}-{tag}" in text and not r.staged
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    # matrix.toml names some release bases without a tag (its data, not the template's)
    lint = _hadolint(path, *([] if local else ["--ignore", "DL3006"]))
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_tags_are_content_hashes() -> None:
    image = next(i for i in IMAGES if machine_of(i.platform) == host_machine())
    a = render(image, base=local_name("bookworm"))
    b = render(image, base=local_name("bookworm"))
    c = render(image, base=local_name("trixie"))
    assert a.tag == b.tag and a.tag != c.tag


def test_hip_toolchain_image_renders_and_passes_hadolint(tmp_path: Path) -> None:
    from builder.building import hip

    text = hip.dockerfile(local_name("trixie"))
    assert text.splitlines()[0] == "FROM mamba-farm/debian:trixie"
    assert f"apt-get install -y --no-install-recommends {' '.join(hip.PACKAGES)} " in text
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    lint = _hadolint(path)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    with pytest.raises(jinja2.UndefinedError):  # rendered strictly, like the toolchain images
        environment().get_template("hip-toolchain.Dockerfile.j2").render(base="x")


def test_templates_are_strict() -> None:
    with pytest.raises(jinja2.UndefinedError):
        environment().from_string("FROM {{ base }}").render()


def test_unknown_base_os_is_a_clear_error() -> None:
    image = ImageSpec(
        id="cpu-x",
        kind="cpu",
        base="example.com/some/alpine:3",
        platform="linux_x86_64",
        toolkit=None,
        toolkit_source="none",
        pythons=("3.11",),
        template="cpu",
    )
    with pytest.raises(UsageError, match="alpine.*does not know its operating system"):
        render(image)


def test_render_command_writes_every_dockerfile(tmp_path: Path, cli) -> None:
    out = tmp_path / "docker"
    proc = cli("render", "--out", out, "--profile", "ci")
    assert proc.returncode == 0, proc.stderr
    ci = load_plan(profile="ci")
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{i}.Dockerfile" for i in ci.images)
    assert all(_hadolint(p).returncode == 0 for p in out.iterdir())


def test_amd_rocm_image_stages_the_header_patch_and_its_bytes_make_the_tag(tmp_path: Path, monkeypatch) -> None:
    import builder.building.images.render as render_mod

    amd = ImageSpec(
        id="rocm6.0-x86_64-test", kind="rocm", base="rocm/dev-ubuntu-22.04:6.0.2-complete", platform="linux_x86_64",
        toolkit="6.0", toolkit_source="base", pythons=("3.11",), template="docker/rocm.Dockerfile.j2",
    )  # fmt: skip
    r = render(amd, host_pythons={})
    assert r.files == {"rocm_patch": REPO / "rocm_patch"} and (REPO / "rocm_patch" / "apply.sh").is_file()
    assert "COPY rocm_patch/" in r.dockerfile and "libamdhip64-dev" not in r.dockerfile
    # the farm's Debian stand-in (HIP 5.7 from apt) gets neither the patch step nor extra files
    local = render(amd, base=local_name("trixie"), host_pythons={})
    assert local.files == {} and "apply.sh" not in local.dockerfile and "libamdhip64-dev" in local.dockerfile
    # a changed patch byte is a new image
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "rocm_patch", copy / "rocm_patch")
    monkeypatch.setattr(render_mod, "REPO", copy)
    assert render(amd, host_pythons={}).tag == r.tag
    (copy / "rocm_patch" / "rocm6_0.patch").write_text((copy / "rocm_patch" / "rocm6_0.patch").read_text() + "\n")
    assert render(amd, host_pythons={}).tag != r.tag


def test_an_emulated_image_compiles_with_the_build_hosts_cross_compiler_and_a_native_one_does_not() -> None:
    """aarch64 on x86_64: Debian's x86_64-hosted cross g++ from packages.toml's exact list, unpacked under
    /opt/cross, each program pointed at the loader there; CC/CXX name it, in the CPU and the CUDA image (nvcc's
    host compiler), neither of which installs the suite's own compilers. The native image has no trace of it."""
    if host_machine() != "x86_64":
        pytest.skip("the cross compiler is the x86_64 build host's")
    images = load_plan(profile="ci-aarch64").images.values()
    (cpu,) = [i for i in images if i.kind == "cpu"]
    (cuda,) = [i for i in images if i.kind == "cuda"]
    r = render(cpu, base=local_name("bookworm", "aarch64"))
    assert r.cross and (r.cross["host"], r.cross["target"]) == ("x86_64", "aarch64")
    pins = load_packages()["os"]["bookworm"]["cross"]["aarch64"]["packages"]
    assert f"apt-get download {' '.join(pins)} " in r.dockerfile and "g++-aarch64-linux-gnu" in pins
    assert "FROM --platform=linux/amd64 mamba-farm/debian:bookworm AS cross" in r.dockerfile
    assert "--set-interpreter /opt/cross/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" in r.dockerfile
    assert "COPY --from=cross /opt/cross /opt/cross" in r.dockerfile
    assert "CXX=/opt/cross/usr/bin/aarch64-linux-gnu-g++" in r.dockerfile
    # the cross stage comes after nothing of the image's own: its layers (its packages, its Pythons) stay as they were
    own = r.dockerfile.rsplit("FROM --platform=linux/arm64 ", 1)[1]
    assert own.index("COPY --from=cross") > own.index("auditwheel")
    rc = render(cuda, base=local_name("bookworm", "aarch64"))
    assert rc.cross == r.cross and "CXX=/opt/cross/usr/bin/aarch64-linux-gnu-g++" in rc.dockerfile
    for dockerfile in (r.dockerfile, rc.dockerfile):
        installs = [line for line in dockerfile.splitlines() if "install -y --no-install-recommends" in line]
        assert installs and not any("build-essential" in line for line in installs), installs
    # the CUDA toolkit is fetched by the cross stage's pip for the target (natively), not by the emulated image
    fetch, final = rc.dockerfile.rsplit("FROM --platform=linux/arm64 ", 1)
    assert "FROM --platform=linux/amd64 cross AS cuda-fetch" in fetch and "--platform manylinux_2_27_aarch64" in fetch
    assert '"nvidia-cuda-nvcc==13.0.*"' in fetch and "nvidia-" not in final and "dpkg --add-architecture" not in final
    assert "COPY --from=cuda-fetch /opt/cuda-pypi /opt/cuda-pypi" in final
    # both images' own layers are the same up to their labels: the engine makes them once (apt under emulation)
    own_cuda = rc.dockerfile.rsplit("FROM --platform=linux/arm64 ", 1)[1]
    assert own.split("\nLABEL ", 1)[0] == own_cuda.split("\nLABEL ", 1)[0]
    native = [i for i in load_plan(profile="ci").images.values() if i.kind == "cpu"]
    assert native and all(render(i, base=local_name("bookworm")).cross is None for i in native)
    assert all("/opt/cross" not in render(i, base=local_name("bookworm")).dockerfile for i in native)


def test_an_emulated_image_gets_its_packages_from_the_build_hosts_apt_and_dpkg_and_runs_no_apt_itself() -> None:
    """aarch64 on x86_64: a native stage's apt (APT::Architecture arm64) and dpkg (--root) install the image's Debian
    packages into a copy of its root, and the image takes what changed: it runs no apt or dpkg of its own, the CUDA
    image's kind packages (ccache) come the same way, and a native image keeps its plain apt-get."""
    if host_machine() != "x86_64":
        pytest.skip("the native stage is the x86_64 build host's")
    images = load_plan(profile="ci-aarch64").images.values()
    (cpu,) = [i for i in images if i.kind == "cpu"]
    (cuda,) = [i for i in images if i.kind == "cuda"]
    base = local_name("bookworm", "aarch64")
    for image, kind_packages in ((cpu, False), (cuda, True)):
        r = render(image, base=base)
        stages, final = r.dockerfile.rsplit("FROM --platform=linux/arm64 ", 1)
        assert f"FROM --platform=linux/arm64 {base} AS target-base" in stages
        assert "FROM --platform=linux/amd64 mamba-farm/debian:bookworm AS target-apt" in stages
        assert "COPY --from=target-base / /opt/target" in stages
        assert "apt-get -o Dir=/opt/target -o APT::Architecture=arm64 -o APT::Architectures::=arm64 update" in stages
        assert "-o DPkg::Options::=--root=/opt/target" in stages
        assert re.search(r"install -y --no-install-recommends .*\bpython3\.11-dev\b.*\bpatchelf\b|"
                         r"install -y --no-install-recommends .*\bpatchelf\b.*\bpython3\.11-dev\b", stages)  # fmt: skip
        assert "COPY --from=target-apt /opt/target-os/ /" in final
        assert "apt-get" not in final and "dpkg " not in final, final
        assert ("COPY --from=target-apt-kind /opt/target-kind/ /" in final) == kind_packages
        assert ("install -y --no-install-recommends ccache" in stages) == kind_packages
    native = [i for i in load_plan(profile="ci").images.values() if i.kind == "cpu"]
    for image in native:
        text = render(image, base=local_name("bookworm")).dockerfile
        assert "AS target-apt" not in text and "apt-get install -y --no-install-recommends" in text


def test_the_provenance_of_a_cross_compiled_build_says_cross(tmp_path: Path) -> None:
    """What DockerExecutor.ran records of a build in the emulated CPU image: compiler ``cross``, with the host,
    the target and the packages of the cross compiler the image's render put in it; a native image says ``image``."""
    if host_machine() != "x86_64":
        pytest.skip("the cross compiler is the x86_64 build host's")
    from builder.building.executors.docker import DockerExecutor
    from builder.verifying.provenance import summary

    ex = object.__new__(DockerExecutor)  # no engine: ran() reads only what prepare() recorded
    ex.images, ex.bases, ex.crosses = {}, {}, {}
    for profile, machine in (("ci-aarch64", "aarch64"), ("ci", host_machine())):
        (image,) = [i for i in load_plan(profile=profile).images.values() if i.kind == "cpu"]
        r = render(image, base=local_name("bookworm", machine))
        ex.images[image.id], ex.bases[image.id] = image, r.base
        if r.cross:
            ex.crosses[image.id] = r.cross
    spec = type("Spec", (), {"python": "3.11", "from_recipe": False})
    records = {}
    for image_id, image in ex.images.items():
        spec.image = image_id
        records[machine_of(image.platform)] = ex.ran(spec)
    tc = records["aarch64"]["toolchain"]
    assert tc["compiler"] == "cross" and (tc["cross"]["host"], tc["cross"]["target"]) == ("x86_64", "aarch64")
    table = load_packages()["os"]["bookworm"]["cross"]["aarch64"]
    assert tc["cross"]["packages"] == [*table["packages"], *table["python_packages"]]
    assert records["x86_64"]["toolchain"] == {"compiler": "image", "toolkit": None}
    # the checkout's own build ran pip and setup.py on the x86_64 twin of the image's Python 3.11; a recipe's did not
    assert tc["cross"]["python"] == "x86_64 CPython 3.11", tc
    line = summary({**records["aarch64"], "source": {"kind": "checkout", "commit": "0" * 40}, "id": "x"})
    assert "cross compiler x86_64 -> aarch64, pip and setup.py on x86_64 CPython 3.11" in line
    spec.from_recipe = True
    (aarch64,) = [i for i in ex.images if i in ex.crosses]
    spec.image = aarch64
    assert "python" not in ex.ran(spec)["toolchain"]["cross"]


def test_a_pip_fetching_for_another_machine_is_given_every_manylinux_tag_its_glibc_runs() -> None:
    """pip --platform matches tags exactly: PyPI's aarch64 cuDNN/cuBLAS wheels say manylinux_2_27, its CUDA toolkit
    wheels manylinux2014; both run on a manylinux_2_28 target, a manylinux_2_34 wheel does not."""
    from builder.facts.compat import manylinux_platforms

    aarch64 = manylinux_platforms("manylinux_2_28_aarch64")
    assert aarch64[0] == "manylinux_2_28_aarch64" and {"manylinux_2_27_aarch64", "manylinux2014_aarch64"} <= set(
        aarch64
    )
    assert "manylinux_2_34_aarch64" not in aarch64 and not any("2010" in t or "manylinux1" in t for t in aarch64)
    assert {"manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"} <= set(
        manylinux_platforms("manylinux_2_17_x86_64")
    )
    assert "manylinux2014_x86_64" not in manylinux_platforms("manylinux_2_12_x86_64")
    with pytest.raises(ValueError, match="manylinux2014_x86_64"):
        manylinux_platforms("manylinux2014_x86_64")
