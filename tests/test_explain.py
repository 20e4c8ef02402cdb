"""``python -m mamba_ssm.doctor --explain``: real error messages users reported, classified.

Each row is the error as it was reported in the cited GitHub issue (user paths shortened to
``.../``); ``kind`` is what the doctor must call it. At least one row per failure kind.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from wheelmaker import V

from builder.publishing import pins
from mamba_ssm.doctor import Context, classify, served

SS_SYMBOL = "_ZN3c107WarningC1ESt7variantIJNS0_11UserWarningENS0_18DeprecationWarningEEERKNS_14SourceLocationESsb"
CXX11_SYMBOL = "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"

CASES = [
    # --- C++ ABI mismatch, both directions
    (
        "state-spaces/mamba#704",
        f"    import selective_scan_cuda\nImportError: .../site-packages/selective_scan_cuda.cpython-310-x86_64-linux-gnu.so: "
        f"undefined symbol: {SS_SYMBOL}",
        "cxx11-abi-mismatch",
        "cxx11abiTRUE",
    ),
    (
        "Dao-AILab/flash-attention#1832",
        f"import flash_attn_2_cuda as flash_attn_cuda\nImportError: /opt/lib/python3.12/site-packages/"
        f"flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so: undefined symbol: {CXX11_SYMBOL}",
        "cxx11-abi-mismatch",
        "cxx11abiFALSE",
    ),
    (
        "Dao-AILab/flash-attention#1691",
        "ImportError: .../flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: "
        "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
        "cxx11-abi-mismatch",
        "cxx11abiFALSE",
    ),
    # --- built for another torch
    (
        "state-spaces/mamba#317",
        "ImportError: .../site-packages/selective_scan_cuda.cpython-312-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",
        "built-for-other-torch",
        None,
    ),
    (
        "state-spaces/mamba#788",
        "ImportError: .../selective_scan_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEab",
        "built-for-other-torch",
        None,
    ),
    (
        "ali-vilab/VACE#67",
        "ImportError: .../flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: "
        "_ZNK3c1011StorageImpl27throw_data_ptr_access_errorEv",
        "built-for-other-torch",
        None,
    ),
    (
        "state-spaces/mamba#149",
        "ImportError: .../causal_conv1d_cuda.cpython-311-x86_64-linux-gnu.so: undefined symbol: "
        "_ZN2at4_ops10zeros_like4callERKNS_6TensorEN3c108optionalINS5_10ScalarTypeEEENS6_INS5_6LayoutEEENS6_INS5_6DeviceEEENS6_IbEENS6_INS5_12MemoryFormatEEE",
        "built-for-other-torch",
        None,
    ),
    # --- wrong CUDA major
    (
        "state-spaces/mamba#450",
        "    import selective_scan_cuda\nImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory",
        "cuda-runtime-major",
        None,
    ),
    (
        "state-spaces/mamba#706",
        "    import selective_scan_cuda\nImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
        "cuda-runtime-major",
        None,
    ),
    # --- glibc / libstdc++ too old
    (
        "Dao-AILab/flash-attention#1708",
        "ImportError: /lib64/libc.so.6: version `GLIBC_2.32' not found (required by .../flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so)",
        "glibc-too-old",
        None,
    ),
    (
        "state-spaces/mamba#254",
        "ImportError: /lib64/libstdc++.so.6: version `GLIBCXX_3.4.26' not found (required by .../selective_scan_cuda.cpython-39-x86_64-linux-gnu.so)",
        "libstdcxx-too-old",
        None,
    ),
    (
        "sophgo/LLM-TPU#166",
        "ImportError: /lib/libstdc++.so.6: version `GLIBCXX_3.4.32' not found (required by /usr/local/lib64/python3.11/site-packages/torch/lib/libtorch_python.so)",
        "libstdcxx-too-old",
        None,
    ),
    (
        "LostRuins/koboldcpp#888",
        "gdb: /tmp/_MEI1NGty2/libstdc++.so.6: version `CXXABI_1.3.15' not found (required by /usr/lib/libicui18n.so.75)",
        "libstdcxx-too-old",
        None,
    ),
    (
        "MzeroMiko/VMamba#83",
        "E   ImportError: .../selective_scan_cuda_oflex.cpython-38-x86_64-linux-gnu.so: undefined symbol: _ZNSt15__exception_ptr13exception_ptr9_M_addrefEv",
        "libstdcxx-too-old",
        None,
    ),
    # --- GPU arch not in the wheel
    (
        "state-spaces/mamba#267",
        "CUDA error: no kernel image is available for execution on the device CUDA kernel errors might be asynchronously "
        "reported at some other API call, so the stacktrace below might be incorrect.",
        "no-kernel-image",
        None,
    ),
    (
        "JiarunLiu/Swin-UMamba#20",
        "    out, x, *rest = selective_scan_cuda.fwd(u, delta, A, B, C, D, z, delta_bias, delta_softplus)\n"
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
        "no-kernel-image",
        None,
    ),
    # --- source builds
    (
        "state-spaces/mamba#481",
        "Collecting mamba_ssm\n  Using cached mamba_ssm-2.2.2.tar.gz (85 kB)\n  Installing build dependencies ... done\n"
        "  Getting requirements to build wheel ... error\n  error: subprocess-exited-with-error\n"
        "  File \".../pip-build-env-buvggkdk/overlay/Lib/site-packages/setuptools/build_meta.py\", line 327, in get_requires_for_build_wheel\n"
        "  ModuleNotFoundError: No module named 'torch'",
        "torch-not-visible",
        None,
    ),
    (
        "state-spaces/mamba#104",
        "pip install --no-build-isolation mamba-ssm\n...\nNameError: name 'bare_metal_version' is not defined",
        "nvcc-missing",
        None,
    ),
    (
        "bowang-lab/U-Mamba#76",
        "<string>:118: UserWarning: mamba_ssm was requested, but nvcc was not found.  Are you sure your environment has nvcc available?",
        "nvcc-missing",
        None,
    ),
    (
        "OpenBMB/CPM-Live#244",
        "    raise EnvironmentError('CUDA_HOME environment variable is not set. '\n"
        "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.",
        "nvcc-missing",
        None,
    ),
    (
        "hhhhpaaa/Mamba-ssm#2",
        "RuntimeError:\n      The detected CUDA version (11.8) mismatches the version that was used to compile\n"
        "      PyTorch (12.1). Please make sure to use the same CUDA versions.",
        "cuda-version-mismatch",
        None,
    ),
    (
        "mit-han-lab/Block-Sparse-Attention#15",
        "nvcc fatal   : Unsupported gpu architecture 'compute_120'",
        "nvcc-unsupported-arch",
        None,
    ),
    (
        "Dao-AILab/flash-attention#2863",
        "#error C++20 or later compatible compiler is required to use ATen",
        "cxx20-required",
        None,
    ),
    (
        "vllm-project/vllm#49260",
        ".../torch/include/ATen/ATen.h:5:2: error: #error C++20 or later compatible compiler is required to use ATen.",
        "cxx20-required",
        None,
    ),
    (
        "Eyeline-Labs/FlashDepth#2",
        "/usr/local/cuda/include/crt/host_config.h:143:2: error: #error -- unsupported GNU version! gcc versions later "
        "than 12 are not supported! The nvcc flag '-allow-unsupported-compiler' can be used to override this version check",
        "gcc-too-new-for-nvcc",
        None,
    ),
    (
        "MzeroMiko/VMamba#313",
        "import selective_scan_cuda\n-> ModuleNotFoundError: No module named 'selective_scan_cuda'",
        "extension-missing",
        None,
    ),
]


def test_the_table_covers_at_least_ten_kinds():
    assert len({kind for _, _, kind, _ in CASES}) >= 10


@pytest.mark.parametrize(("source", "message", "kind", "fix_has"), CASES, ids=[c[0] for c in CASES])
def test_real_messages_are_classified(source, message, kind, fix_has):
    diags = classify(message)
    assert diags, f"{source}: not recognised"
    assert diags[0].kind == kind, f"{source}: {[d.kind for d in diags]}"
    assert diags[0].fix and diags[0].why
    if fix_has:
        assert fix_has in diags[0].why


def test_abi_fix_names_the_exact_wheel_when_the_environment_is_known():
    ctx = Context(
        torch_version="2.6.0+cu124",
        torch_cxx11abi=False,
        variant_key="cu12-torch2.6-cxx11abiFALSE",
        variant_label="cu12torch2.6cxx11abiFALSE",
        mamba_version=V,
        index_url="https://example.org/idx",
        python="python",
    )
    (d, *_) = classify(f"undefined symbol: {CXX11_SYMBOL}", ctx)
    assert d.kind == "cxx11-abi-mismatch"
    assert d.fix == (
        f'python -m pip install --force-reinstall --no-deps mamba-ssm=={V}+cu12torch2.6cxx11abiFALSE '
        "--extra-index-url https://example.org/idx/cu12-torch2.6-cxx11abiFALSE/"
    )


def test_a_cxx11_symbol_against_a_cxx11_torch_is_another_torch_not_the_abi():
    # torch itself is CXX11, so a __cxx11 symbol missing from it means a different torch release.
    (d, *_) = classify(f"undefined symbol: {CXX11_SYMBOL}", Context(torch_cxx11abi=True))
    assert d.kind == "built-for-other-torch"


def test_build_isolation_beats_plain_missing_torch():
    kinds = [d.kind for d in classify(CASES[16][1])]
    assert kinds == ["torch-not-visible"]
    assert [d.kind for d in classify("ModuleNotFoundError: No module named 'torch'")] == ["torch-missing"]
    assert classify("ModuleNotFoundError: No module named 'torch._C'") == []


def test_cli_explain_reads_stdin_and_prints_json():
    msg = CASES[7][1]
    p = subprocess.run(
        [sys.executable, "-m", "mamba_ssm.doctor", "--explain", "-", "--json"], input=msg, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    assert doc["recognised"] and doc["diagnoses"][0]["kind"] == "cuda-runtime-major"


def test_cli_explain_text_and_unrecognised():
    p = subprocess.run([sys.executable, "-m", "mamba_ssm.doctor", "--explain", CASES[22][1]], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "cxx20-required" in p.stdout and "fix:" in p.stdout
    p = subprocess.run([sys.executable, "-m", "mamba_ssm.doctor", "--explain", "all good"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "Not recognised" in p.stdout
    p = subprocess.run([sys.executable, "-m", "mamba_ssm.doctor", "--explain", "  "], capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and "empty" in p.stderr and "Traceback" not in p.stderr


def test_explain_fixes_keep_the_exact_pin():
    """--explain knows nothing of the machine, yet its reinstall line pins mamba-ssm==<this version>+<label>:
    a bare "mamba-ssm" lets pip take another mamba-ssm (upstream's newer sdist, tried: it fails without torch)."""
    from mamba_ssm import __version__

    p = subprocess.run(
        [sys.executable, "-m", "mamba_ssm.doctor", "--explain", f"undefined symbol: {CXX11_SYMBOL}", "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    fixes = [d["fix"] for d in json.loads(p.stdout)["diagnoses"]]
    installs = [f for f in fixes if "pip install 'torch==<torch>'" in f]
    assert installs, fixes
    for fix in installs:
        assert f"'mamba-ssm=={__version__.split('+')[0]}+<label>' --extra-index-url" in fix, fix
        assert '"mamba-ssm" ' not in fix
        # that machine's torch pinned (pip keeps it, or stops); nothing the wheel imports skipped
        assert "--no-deps" not in fix.split("; or build")[0] and "--force-reinstall" not in fix.split("; or build")[0], fix


# Upstream's packages failing as their users paste it: the module or file that failed names the package and line.
UPSTREAM_ERRORS = [
    (
        "selective_scan_cuda undefined symbol",
        (
            "  File \"/usr/lib/python3.10/site-packages/mamba_ssm/ops/selective_scan_interface.py\", line 20, in <module>\n"
            "    import selective_scan_cuda\nImportError: /usr/lib/python3.10/site-packages/selective_scan_cuda.cpython-310-"
            f"x86_64-linux-gnu.so: undefined symbol: {SS_SYMBOL}"
        ),
        "mamba-ssm",
        "cxx11-abi-mismatch",
    ),
    (
        "no causal_conv1d_cuda",
        (
            "  File \"/opt/venv/lib/python3.12/site-packages/mamba_ssm/ops/selective_scan_interface.py\", line 12, in <module>\n"
            "    import causal_conv1d_cuda\nModuleNotFoundError: No module named 'causal_conv1d_cuda'"
        ),
        "causal-conv1d",
        "extension-missing",
    ),
    (
        "CXXABI from causal_conv1d_cuda",
        (
            "ImportError: /usr/lib/x86_64-linux-gnu/libstdc++.so.6: version `CXXABI_1.3.15' not found (required by "
            "/opt/venv/lib/python3.12/site-packages/causal_conv1d_cuda.cpython-312-x86_64-linux-gnu.so)"
        ),
        "causal-conv1d",
        "libstdcxx-too-old",
    ),
    (
        "no kernel image",
        (
            "  File \"/opt/venv/lib/python3.11/site-packages/mamba_ssm/ops/triton/ssd_combined.py\", line 766, in forward\n"
            "RuntimeError: CUDA error: no kernel image is available for execution on the device"
        ),
        "mamba-ssm",
        "no-kernel-image",
    ),
]


@pytest.mark.parametrize(("case", "message", "project", "kind"), UPSTREAM_ERRORS, ids=[c[0] for c in UPSTREAM_ERRORS])
def test_an_upstream_error_gets_a_fix_for_upstreams_line(case, message, project, kind):
    """`mamba-doctor --explain`: the fix pins upstream's wheel of the package that failed, at the newest version the
    release builds (mamba_ssm/doctor/lines.py, generated from recipes/*.toml), from the site's upstream/; the
    only placeholders are the cell's, named as what the message cannot say, with the command that fills them in."""
    from builder.publishing import pins
    from mamba_ssm.doctor.lines import LINES

    p = subprocess.run([sys.executable, "-m", "mamba_ssm.doctor", "--explain", message, "--json"],
                       capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert p.returncode == 1, p.stdout + p.stderr
    (d, *_) = json.loads(p.stdout)["diagnoses"]
    assert d["kind"] == kind, d
    version = pins.newest(project, "upstream")
    assert LINES["upstream"]["projects"][project] == version
    pin = f"'{project}=={version}+<label>' --extra-index-url '{pins.SITE}upstream/<variant>/'"
    assert pin in d["fix"], d["fix"]
    assert "None" not in d["fix"] and V not in d["fix"] and "python -m mamba_ssm.doctor" not in d["fix"]
    assert "mamba-doctor" in d["fix"] and "the message does not say" in d["fix"]
    assert set(re.findall(r"<[^>]+>", d["fix"])) <= {"<torch>", "<label>", "<variant>", "<major.minor of your GPU>"}, d["fix"]
    commands = pins.commands_in(d["fix"])
    assert any(pin.replace("'", "") in c.replace("'", "") for c in commands), commands
    for c in commands:
        assert pins.check(c) == [], (c, pins.check(c))
    # the same text with this repository's extension in it is this line's
    ours = message.replace("selective_scan_cuda", "mamba_ssm._C").replace("causal_conv1d_cuda", "mamba_ssm._C")
    ours = ours.replace("ops/triton/ssd_combined.py", "_C.abi3.so")
    (d, *_) = classify(ours)
    assert f"mamba-ssm=={V}+<label>" in d.fix and "/upstream/" not in d.fix, d.fix


def test_a_message_naming_no_package_gets_both_lines_upstreams_first():
    """PyPI's mamba-ssm is upstream's: a text that names no line gets both fixes, upstream's first, how to tell the
    lines apart, and what breaks where one replaces the other."""
    (d, *_) = classify("RuntimeError: CUDA error: no kernel image is available for execution on the device")
    up, own = d.fix.index("mamba-ssm==2.3.2.post1+<label>"), d.fix.index(f"mamba-ssm=={V}+<label>")
    assert up < own and "/upstream/<variant>/" in d.fix
    assert "mamba_ssm/doctor/__init__.py" in d.fix and "Mamba2" in d.fix and "transformers" in d.fix
    for cmd in pins.commands_in(d.fix):
        assert pins.check(cmd) == [], (cmd, pins.check(cmd))


# Texts only upstream's build prints: its setup.py's own name, the C++ standard it hard-codes, PyPI's sdist built
# in isolation. Each pins upstream's line, never this repository's.
UPSTREAM_ONLY = [
    ("bare_metal_version", "pip install --no-build-isolation mamba-ssm\n...\nNameError: name 'bare_metal_version' is not defined",
     "mamba-ssm", "nvcc-missing"),
    ("-std=c++17 against torch 2.14", ("  c++ -O3 -std=c++17 -I.../torch/include -c csrc/selective_scan/selective_scan.cpp\n"
     ".../torch/include/ATen/ATen.h:5:2: error: #error C++20 or later compatible compiler is required to use ATen."),
     "mamba-ssm", "cxx20-required"),
    ("an isolated build of PyPI's sdist", ("Collecting mamba_ssm\n  Using cached mamba_ssm-2.2.2.tar.gz (85 kB)\n"
     "  Installing build dependencies ... done\n  Getting requirements to build wheel ... error\n"
     "  ModuleNotFoundError: No module named 'torch'"), "mamba-ssm", "torch-not-visible"),
    ("causal-conv1d's bare_metal_version", ("Building wheel for causal-conv1d (setup.py) ... error\n"
     "NameError: name 'bare_metal_version' is not defined"), "causal-conv1d", "nvcc-missing"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "message", "project", "kind"), UPSTREAM_ONLY, ids=[c[0] for c in UPSTREAM_ONLY])
def test_upstream_only_texts_pin_upstreams_line(case, message, project, kind):
    (d, *_) = classify(message)
    assert d.kind == kind, d
    assert V not in d.fix and "this repository's:" not in d.fix, d.fix
    if kind == "torch-not-visible":  # a wheel fits: the front door, which keeps torch, never a compile
        assert "mamba-doctor --requirements upstream > mamba.txt" in d.fix and "--no-build-isolation" not in d.fix, d.fix
        return
    version = pins.newest(project, "upstream")
    assert f"{project}=={version}" in d.fix, d.fix
    for cmd in pins.commands_in(d.fix):
        assert pins.check(cmd) == [], (cmd, pins.check(cmd))


PIP_NO_MATCH = "ERROR: Could not find a version that satisfies the requirement {req} (from versions: none)\nERROR: No matching distribution found for {req}"


@pytest.mark.parametrize(
    ("req", "ctx", "axis", "says"),
    [
        ("mamba-ssm==2.3.2.post1+cu12torch2.4cxx11abiFALSE", Context(system="Windows"), "platform", "WSL2"),
        ("mamba-ssm==2.3.2.post1+cu12torch2.4cxx11abiFALSE", Context(system="Darwin"), "platform", "macOS"),
        ("mamba-ssm==2.3.2.post1+cu13torch2.14cxx11abiTRUE", Context(system="Linux", python_tag="cp314t"), "Python", "free-threaded"),
        ("mamba-ssm==2.3.2.post1+cu12torch2.4cxx11abiFALSE", Context(system="Linux", python_tag="cp313", machine="x86_64"), "Python", "cp310"),
        ("mamba-ssm==2.3.2.post1+cu13torch2.14cxx11abiTRUE", Context(system="Linux", python_tag="cp311", machine="ppc64le"), "platform", "ppc64le"),
        ("mamba-ssm==2.3.2.post1+cu13torch2.14cxx11abiTRUE", Context(system="Linux", python_tag="cp311", machine="x86_64", glibc="2.17"), "glibc", "2.28"),
        ("mamba-ssm==2.3.2.post1+cputorch2.13cxx11abiTRUE", Context(), "accelerator", "cu13"),
        (f"mamba-ssm=={V}+cu13torch2.13cxx11abiTRUE", Context(), "torch", "cu13torchstable"),
        ("mamba-ssm==2.3.2.post1+cu12torch2.1cxx11abiFALSE", Context(), "torch", "2.4"),
        ("triton>=3.5.0", Context(), "dependency", "triton"),
    ],
)  # fmt: skip
def test_no_matching_distribution_names_its_axis(req, ctx, axis, says):
    (d, *_) = classify(PIP_NO_MATCH.format(req=req), ctx)
    assert d.kind == "no-matching-distribution" and f"(axis: {axis})" in d.title, d
    assert says in d.why + d.fix, d
    for cmd in pins.commands_in(d.fix):  # a pin it prints is one the release builds
        assert pins.check(cmd) == [], (cmd, pins.check(cmd))
    if axis in {"platform", "glibc"} or "free-threaded" in says:
        assert d.fix.startswith("not supported: ") and not pins.commands_in(d.fix), d.fix


def test_a_glibc_too_old_error_names_the_axis_and_the_floors():
    from builder.publishing import pins

    for line in ("checkout", "upstream"):  # the floors the doctor knows are the release's, machine by machine
        for machine in ("x86_64", "aarch64"):
            want: dict = {}
            for w in pins.release_wheels():
                if (w.line, w.platform) == (line, f"linux_{machine}"):
                    fam = served.family(w.label)
                    want[fam] = max(want.get(fam, w.glibc), w.glibc, key=served.vtuple)
            assert served.glibc_floors(line, machine) == want, (line, machine)
    (d, *_) = classify(UPSTREAM_ERRORS[0][1].replace(f"undefined symbol: {SS_SYMBOL}", "version `GLIBC_2.32' not found"))
    assert d.kind == "glibc-too-old" and "(axis: glibc)" in d.title
    # the pasted loader path names the machine: its own floors (x86_64's CUDA wheels need less than aarch64's)
    assert "x86_64" in UPSTREAM_ERRORS[0][1]
    floors = served.glibc_floors("upstream", "x86_64")
    assert all(f"{fam} wheels need glibc >= {floor}" in d.why for fam, floor in floors.items()), d.why
    assert floors["CUDA"] != served.glibc_floors("upstream", "aarch64")["CUDA"]
    assert f"CUDA wheels need glibc >= {served.glibc_floors('upstream', 'aarch64')['CUDA']}" not in d.why, d.why
    # a text that names no machine: each machine's floor
    (d, *_) = classify("ImportError: /lib64/libc.so.6: version `GLIBC_2.32' not found (required by selective_scan_cuda.so)")
    each = ", ".join(f"{served.glibc_floors('upstream', m)['CUDA']} on {m}" for m in ("aarch64", "x86_64"))
    assert f"CUDA wheels need glibc >= {each}" in d.why, d.why


def test_a_resolution_conflict_is_recognised_and_keeps_torch():
    text = (
        "ERROR: Cannot install mamba-ssm==2.3.2.post1+cu12torch2.6cxx11abiFALSE and torch==2.6.0 because these package "
        "versions have conflicting dependencies.\n\nThe conflict is caused by:\n    The user requested torch==2.6.0\n"
        "    mamba-ssm 2.3.2.post1+cu12torch2.6cxx11abiFALSE depends on triton>=3.5.0\n    torch 2.6.0 depends on triton==3.2.0\n"
        "\nERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/"
    )
    (d, *_) = classify(text)
    assert d.kind == "resolution-conflict", d
    assert "triton>=3.5.0" in d.why and "triton==3.2.0" in d.why and "torch==2.6.0" in d.why
    assert "do not let pip replace torch" in d.fix and not pins.commands_in(d.fix)
    # the farm resolved that cell before building (builder/data/installs.json, through lines.LEFT_OUT): it says so,
    # and what to do instead, as the record has it
    from mamba_ssm.doctor import served

    [row, *_] = served.left_out_any("mamba-ssm", "2.3.2.post1", "cu12torch2.6cxx11abiFALSE")
    assert f"the farm resolved it before building: {served.left_out_says(row)}" in d.fix
    # the newest release that installs beside this torch, never "upgrade torch" while one does
    assert "instead: mamba-ssm==2.3.1" in d.fix and "instead: torch >=" not in d.fix, d.fix


def test_no_fix_relies_on_a_variable_upstreams_setup_py_ignores():
    """Upstream's setup.py picks its -gencode list by nvcc's version and clears TORCH_CUDA_ARCH_LIST: no fix of its
    line names an arch variable; a build of this repository's line names MAMBA_CUDA_ARCHS, which its setup.py reads."""
    gpus = [{"index": 0, "name": "Tesla V100", "capability": "7.0"}, {"index": 1, "name": "RTX 5090", "capability": "12.0"}]
    for line in ("upstream", "checkout"):
        ctx = Context(line=line, gpus=gpus, project="mamba-ssm")
        for _source, message, *_ in [*CASES, *UPSTREAM_ERRORS, *UPSTREAM_ONLY]:
            for d in classify(message, ctx):
                assert "TORCH_CUDA_ARCH_LIST" not in d.fix and "PYTORCH_ROCM_ARCH" not in d.fix, (line, d.kind, d.fix)
                if line == "upstream":
                    assert "MAMBA_CUDA_ARCHS=" not in d.fix or "this repository's mamba-ssm" in d.fix, d.fix
    (d,) = classify(CASES[14][1], Context(line="upstream", gpus=gpus[:1]))
    assert d.fix.startswith("not supported: no wheel of upstream's line carries code for sm_70"), d.fix


@pytest.mark.parametrize(
    ("text", "kind", "says"),
    [
        (("ERROR: Could not find a version that satisfies the requirement torch==2.9.1+cu128 (from versions: none)\n"
          "ERROR: No matching distribution found for torch==2.9.1+cu128"), "torch-local-pin", "torch==2.9.1;"),
        ("RuntimeError: HIP error: hipErrorNoBinaryForGpu: Unable to find code object for all current devices!",
         "rocm-no-binary", "gfx942"),
        ("ImportError: libamdhip64.so.6: cannot open shared object file: No such file or directory", "rocm-runtime-missing",
         "--extra-index-url"),
    ],
)  # fmt: skip
def test_rocm_errors_and_a_local_label_torch_pin_are_recognised(text, kind, says):
    """The ROCm loader and runtime errors, and pip's error for a torch pinned as torch.__version__ says (PyPI's
    torch is the unlabelled 2.9.1): each its own cause, and a fix naming what keeps torch."""
    diags = classify(text)
    assert [d.kind for d in diags] == [kind], diags
    assert says in diags[0].fix, diags[0].fix
    if kind == "torch-local-pin":
        assert "no-matching-distribution" not in {d.kind for d in diags}
        assert "mamba-doctor --requirements upstream > mamba.txt" in diags[0].fix, diags[0].fix
