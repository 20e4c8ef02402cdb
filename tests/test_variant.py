"""mamba_ssm.variant: the one definition of an environment's build variant."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import REPO
from wheelmaker import V as OURS

from mamba_ssm import variant as V


@pytest.mark.parametrize(
    ("version", "cuda", "hip", "abi", "key", "label"),
    [
        ("2.6.0+cu124", "12.4", None, False, "cu12-torch2.6-cxx11abiFALSE", "cu12torch2.6cxx11abiFALSE"),
        ("2.14.1", "13.0", None, True, "cu13-torch2.14-cxx11abiTRUE", "cu13torch2.14cxx11abiTRUE"),
        ("2.13.0+cpu", None, None, True, "cpu-torch2.13-cxx11abiTRUE", "cputorch2.13cxx11abiTRUE"),
        ("2.5.1+rocm6.2", None, "6.2.41133-dd7f95766", False, "hip62-torch2.5-cxx11abiFALSE", "hip62torch2.5cxx11abiFALSE"),
        ("2.5.0a0+e000cf0ad9.nv24.10", "12.6", None, True, "cu12-torch2.5-cxx11abiTRUE", "cu12torch2.5cxx11abiTRUE"),
    ],
)
def test_key_and_label(version, cuda, hip, abi, key, label):
    v = V.from_values(version, cuda=cuda, hip=hip, cxx11abi=abi, python="cp311", platform="linux_x86_64")
    assert (v.key, v.label) == (key, label)
    assert V.parse_key(key) == V.parse_label(label) == {"accelerator": v.accelerator, "torch": v.torch, "cxx11abi": abi}


def test_abi_defaults_follow_what_torch_ships():
    assert V.from_values("2.6.0+cu124", cuda="12.4").cxx11abi is False
    assert V.from_values("2.7.1+cu128", cuda="12.8").cxx11abi is True
    # NGC builds torch with the CXX11 ABI even for old releases.
    assert V.from_values("2.5.0a0+e000cf0ad9.nv24.10", cuda="12.6").cxx11abi is True


def test_stable_variant_serves_both_abis():
    v = V.from_values("2.14.1", cuda="13.0", cxx11abi=True).as_stable()
    assert v.key == "cu13-torchstable-abi3" and v.label == "cu13torchstable"
    assert V.parse_label("cu13torchstable") == {"accelerator": "cu13", "torch": "stable", "cxx11abi": None}


def test_detect_reads_a_torch_module():
    fake = SimpleNamespace(
        __version__="2.4.1+cu121", version=SimpleNamespace(cuda="12.1", hip=None), _C=SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=False)
    )
    assert V.detect(fake).key == "cu12-torch2.4-cxx11abiFALSE"


@pytest.mark.parametrize("bad", ["cu12torch2.6", "cu12-torch2.6-cxx11abiMAYBE", "gpu-torch2.6-cxx11abiTRUE", "x; rm -rf /"])
def test_bad_labels_and_keys_are_refused_with_a_message(bad):
    with pytest.raises(V.VariantError, match="expected e.g."):
        V.parse_key(bad)
    with pytest.raises(V.VariantError, match="expected e.g."):
        V.parse_label(bad.replace("-", ""))


def test_imports_without_torch_or_the_package():
    # setup.py loads the file by path before anything is installed.
    code = (
        "import importlib.util, sys\n"
        f"s = importlib.util.spec_from_file_location('v', {str(REPO / 'mamba_ssm' / 'variant.py')!r})\n"
        "m = importlib.util.module_from_spec(s); sys.modules['v'] = m; s.loader.exec_module(m)\n"
        "assert 'torch' not in sys.modules and 'mamba_ssm' not in sys.modules\n"
        "print(m.from_values('2.6.0', cuda='12.4').label)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().startswith("cu12torch2.6cxx11abiFALSE")


def test_labels_survive_pep440_normalisation():
    # setuptools writes 2.3.0+cu12torch2.6cxx11abifalse into filenames and METADATA
    assert V.parse_label("cu12torch2.6cxx11abifalse") == V.parse_label("cu12torch2.6cxx11abiFALSE")


# ---- reading torch's files instead of importing it (setup.py runs three times per pip install) ----

_PROBE = (
    "import sys; from mamba_ssm import variant as V; "
    "print(V.detect_installed().key, 'torch' in sys.modules, V.detect().key)"
)


def _torch_pythons() -> list[str]:
    """This suite's torch (2.13.0+cpu in CI), and torch 2.14.1 CUDA 13 where its venv exists."""
    import cudakit

    pythons = [sys.executable]
    if (cudakit.VENV / ".mamba-ready").is_file():
        pythons.append(str(cudakit.VENV / "bin" / "python"))
    return pythons


@pytest.mark.parametrize("python", _torch_pythons(), ids=lambda p: Path(p).parts[-3])
def test_the_files_of_a_real_torch_give_the_variant_importing_it_gives(python):
    pytest.importorskip("torch")
    p = subprocess.run([python, "-c", _PROBE], cwd=REPO, capture_output=True, text=True, timeout=300)
    from_files, imported_first, from_import = p.stdout.split()
    assert p.returncode == 0, p.stderr
    assert imported_first == "False"  # reading the files did not import torch
    assert from_files == from_import


@pytest.mark.parametrize("abi", [0, 1])
def test_the_cxx_abi_is_read_from_libc10_without_importing_torch(tmp_path, abi):
    """A libc10.so compiled for real with each libstdc++ string ABI, in a torch that must not be imported."""
    torch_dir = tmp_path / "site" / "torch"
    (torch_dir / "lib").mkdir(parents=True)
    (torch_dir / "__init__.py").write_text("raise ImportError('torch must not be imported')\n")
    (torch_dir / "version.py").write_text(
        "from typing import Optional\n\n__version__ = '2.5.1+cu124'\ndebug = False\n"
        "cuda: Optional[str] = '12.4'\nhip: Optional[str] = None\n"
    )
    src = tmp_path / "c10.cpp"
    src.write_text('#include <string>\nnamespace c10 { std::string describe(const std::string& w) { return "c10: " + w; } }\n')
    # and, compiled with the other ABI, a function of no c10 namespace, as torch's pre-CXX11 builds (PyPI's 2.4-2.6)
    # carry libstdc++'s own new-ABI exception constructors: only c10's own names say which ABI torch was built with
    other = tmp_path / "std.cpp"
    other.write_text('#include <string>\nnamespace bundled { std::string copy(const std::string& w) { return w; } }\n')
    objects = []
    for cpp, flag in ((src, abi), (other, 1 - abi)):
        obj = cpp.with_suffix(".o")
        subprocess.run(["c++", "-c", "-fPIC", f"-D_GLIBCXX_USE_CXX11_ABI={flag}", str(cpp), "-o", str(obj)], check=True)
        objects.append(str(obj))
    subprocess.run(["c++", "-shared", *objects, "-o", str(torch_dir / "lib" / "libc10.so")], check=True)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path / 'site'}:{REPO}"}
    code = "from mamba_ssm import variant as V; print(V.detect_installed().key)"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"cu12-torch2.5-cxx11abi{'TRUE' if abi else 'FALSE'}"


def test_no_torch_installed_is_none(tmp_path):
    code = "from mamba_ssm import variant as V; print(V.installed_torch(), V.detect_installed())"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.split() == ["None", "None"], p.stderr


@pytest.mark.parametrize(
    ("label", "key", "backend", "backend_version", "torch", "abi"),
    [
        ("cu12torch2.6cxx11abiFALSE", "cu12-torch2.6-cxx11abiFALSE", "cuda", "12", "2.6", False),
        ("cu13torch2.14cxx11abiTRUE", "cu13-torch2.14-cxx11abiTRUE", "cuda", "13", "2.14", True),
        ("hip62torch2.5cxx11abiFALSE", "hip62-torch2.5-cxx11abiFALSE", "rocm", "6.2", "2.5", False),
        ("hip610torch2.9cxx11abiTRUE", "hip610-torch2.9-cxx11abiTRUE", "rocm", "6.10", "2.9", True),
        ("cputorch2.13cxx11abiTRUE", "cpu-torch2.13-cxx11abiTRUE", "cpu", None, "2.13", True),
        ("cu13torchstable", "cu13-torchstable-abi3", "cuda", "13", "stable", None),
        ("cputorchstable", "cpu-torchstable-abi3", "cpu", None, "stable", None),
    ],
)
def test_from_label_and_from_key_round_trip_every_kind(label, key, backend, backend_version, torch, abi):
    v = V.Variant.from_label(label, python="cp312")
    assert (v.backend, v.backend_version, v.torch, v.cxx11abi) == (backend, backend_version, torch, abi)
    assert v.python == "cp312"
    assert (v.label, v.key) == (label, key)
    assert V.Variant.from_key(key, python="cp312") == v
    # setuptools lowercases the local label in filenames and METADATA: the same variant, the farm's spelling back
    assert V.Variant.from_label(label.lower(), python="cp312") == v
    assert V.Variant.from_label(label.lower()).label == label


@pytest.mark.parametrize("bad", ["cu12torch2.6", "hip6torch2.5cxx11abiFALSE", "cu012torch2.6cxx11abiTRUE", "gpu"])
def test_from_label_refuses_what_does_not_name_a_variant(bad):
    with pytest.raises(V.VariantError, match=bad):
        V.Variant.from_label(bad)


def test_a_free_threaded_interpreter_is_named_by_its_own_tag(monkeypatch):
    """CPython without the GIL (3.14t) has an ABI of its own: its tag is cp314t, never cp314, and no abi3 wheel
    serves it. No free-threaded interpreter runs here: this one's build flag is replaced for the second half."""
    import sysconfig

    from mamba_ssm import prebuilt as _prebuilt

    assert V.python_tag((3, 14), free_threaded=True) == "cp314t"
    assert V.python_tag((3, 15), free_threaded=False) == "cp315"
    here = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    assert V.python_tag() == f"cp{sys.version_info[0]}{sys.version_info[1]}" + ("t" if here else "")
    real = sysconfig.get_config_var
    monkeypatch.setattr(sysconfig, "get_config_var", lambda name: 1 if name == "Py_GIL_DISABLED" else real(name))
    assert V.python_tag((3, 14)) == "cp314t"
    stable = _prebuilt.parse_wheel_name(f"mamba_ssm-{OURS}+cputorchstable-cp310-abi3-linux_x86_64.whl")
    assert _prebuilt.python_ok(stable, "cp314") == (True, True)
    assert _prebuilt.python_ok(stable, "cp314t") == (False, False)
    classic = _prebuilt.parse_wheel_name(f"mamba_ssm-{OURS}+cu12torch2.6cxx11abiFALSE-cp314-cp314-linux_x86_64.whl")
    assert _prebuilt.python_ok(classic, "cp314t") == (False, False)
