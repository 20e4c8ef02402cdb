"""recipes/*.toml, builder/planning/recipes.py and builder/sourcing/prepare.py: validation, --explain, and every patch on the real sdists.

The sdists are the real ones (fetched through the host's pip settings into a temporary cache).
What the patched setup.py would build is read by running it (tests/recipekit.py): with the
machine's torch 2.14.1 venv and nvcc 13.0 where they exist, else with stand-ins that answer only
the version questions setup.py asks.
"""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest
from recipekit import CAUSAL, MAMBA, UPSTREAM_SMS, fetched_cache, gencode_targets, setup_py_flags

from builder.errors import PatchError, RecipeError
from builder.facts.spec import SdistPin
from builder.planning.recipes import (
    RECIPES_DIR,
    CellFacts,
    build_env_vars,
    explain,
    inputs,
    load_recipe,
    load_recipes,
    recipe_for,
)
from builder.sourcing.prepare import prepare
from builder.sourcing.sources import SourceCache

TORCH_VENV = Path.home() / ".cache" / "mamba-farm" / "venv-torch2.14.1-cp311"
CUDA13 = Path("/usr/local/cuda-13.0")
EXTENSION = {"mamba-ssm": "selective_scan_cuda", "causal-conv1d": "causal_conv1d_cuda"}

CELL_2_14 = CellFacts("2.14.1", "cuda", "13.0", True, ("sm_80",), "cu13torch2.14cxx11abiTRUE")
CELL_2_11 = CellFacts(
    "2.11.0", "cuda", "12.8", True, ("sm_80", "sm_90", "sm_100", "sm_120"), "cu12torch2.11cxx11abiTRUE"
)
# The patches of a trimmed build (a profile's trim), in recipe order.
TRIM = {
    "mamba-ssm": ("trim-sources", "trim-dispatch"),
    "causal-conv1d": ("trim-dispatch", "trim-fwd", "trim-bwd", "trim-update"),
}
# The patches of a canary build (a profile with source = "canary") alone, last in each recipe.
CANARY = {
    "mamba-ssm": ("canary-version", "canary-tvm-ffi-pyproject", "canary-tvm-ffi-setup"),
    "causal-conv1d": ("canary-version",),
}
CELL_ROCM = CellFacts("2.14.1", "rocm", "6.4", True, ("gfx90a", "gfx942"), "hip64torch2.14cxx11abiTRUE")
# The patches for older releases alone (when.release), after the canary's in each recipe: never the default release's.
OLDER = {
    "mamba-ssm": ("cxx20-1.0.1", "cuda-archs-1.0.1", "cuda-archs-1.2.1", "cuda-archs-2.1.0", "cuda-archs-2.2.5",
                  "cuda-archs-2.2.6.post3"),
    "causal-conv1d": ("cxx20-1.0.0", "cuda-archs-1.0.0", "cuda-archs-1.2.1", "cuda-archs-1.3.0.post1",
                      "cuda-archs-1.5.1", "cuda-archs-1.5.3.post1"),
}  # fmt: skip


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> SourceCache:
    return fetched_cache(tmp_path_factory.mktemp("sdists"))


def test_the_recipes_load_and_pin_the_published_sdists():
    recipes = load_recipes()
    assert sorted(recipes) == ["causal-conv1d", "fast-hadamard-transform", "mamba-ssm"]
    assert recipes["mamba-ssm"].source == MAMBA and recipes["causal-conv1d"].source == CAUSAL
    assert recipes["mamba-ssm"].extensions == ("selective_scan_cuda*.so",)
    assert recipes["causal-conv1d"].extensions == ("causal_conv1d_cuda*.so",)
    assert "selective_scan_cuda" in recipes["mamba-ssm"].imports
    assert "causal_conv1d_cuda" in recipes["causal-conv1d"].imports
    assert recipe_for("Mamba_SSM").name == "mamba-ssm"


# ---------------------------------------------------------------------------
# Every patch on the real sdists, for the cells it applies to.


@pytest.mark.parametrize("project", ["mamba-ssm", "causal-conv1d"])
def test_torch_2_14_cuda_13_sm80_gets_cxx20_and_exactly_its_arch(cache, tmp_path, project):
    recipe = recipe_for(project)
    prep = prepare(recipe, CELL_2_14, tmp_path / "w", cache)
    assert prep.applied == ("cxx20", "cuda-archs") and prep.skipped == (
        "rocm-archs", *TRIM[project], *CANARY[project], *OLDER[project])  # fmt: skip
    text = (prep.tree / "setup.py").read_text()
    assert '"-std=c++17"' not in text
    assert not re.findall(r"compute_(?:75|87|90|100|103|110|120|121)\b", text), "a target of the old list is left"
    real = TORCH_VENV / ".mamba-ready"
    if real.is_file() and (CUDA13 / "bin" / "nvcc").is_file():  # torch 2.14.1's own cpp_extension and nvcc 13.0
        got = setup_py_flags(
            prep.tree, prep.env, tmp_path, torch_python=TORCH_VENV / "bin" / "python", cuda_home=CUDA13
        )
    else:
        got = setup_py_flags(prep.tree, prep.env, tmp_path, torch="2.14.1", cuda="13.0")
    (ext,) = got["ext_modules"]
    assert ext["name"] == EXTENSION[project]
    assert "-std=c++20" in ext["extra_compile_args"]["cxx"] and "-std=c++20" in ext["extra_compile_args"]["nvcc"]
    assert not [f for f in ext["extra_compile_args"]["nvcc"] + ext["extra_compile_args"]["cxx"] if "c++17" in f]
    assert gencode_targets(ext["extra_compile_args"]["nvcc"]) == ["sm_80"]
    assert got["version"].endswith("+cu13torch2.14cxx11abiTRUE")


@pytest.mark.parametrize("project", ["mamba-ssm", "causal-conv1d"])
def test_torch_2_11_cuda_12_8_several_archs(cache, tmp_path, project):
    recipe = recipe_for(project)
    prep = prepare(recipe, CELL_2_11, tmp_path / "w", cache)
    assert prep.applied == ("cuda-archs",) and prep.skipped == (
        "cxx20", "rocm-archs", *TRIM[project], *CANARY[project], *OLDER[project])  # fmt: skip
    got = setup_py_flags(prep.tree, prep.env, tmp_path, torch="2.11.0", cuda="12.8")
    (ext,) = got["ext_modules"]
    assert gencode_targets(ext["extra_compile_args"]["nvcc"]) == ["sm_80", "sm_90", "sm_100", "sm_120"]
    assert "-std=c++20" not in ext["extra_compile_args"]["nvcc"]  # torch 2.11 keeps upstream's standard
    assert got["version"] == f"{recipe.source.version}+cu12torch2.11cxx11abiTRUE"
    if project == "mamba-ssm":  # nvcc 12 vs torch cu12: setup.py leaves TORCH_CUDA_ARCH_LIST alone
        assert got["TORCH_CUDA_ARCH_LIST"] is None


# What a kernel source instantiates (`template void f<input_t, weight_t>(...)`) and what the bindings dispatch to.
INSTANTIATION_RE = re.compile(r"^template void \w+<([^>]+)>\(", re.MULTILINE)
DISPATCH_RE = re.compile(r"\b(DISPATCH_[A-Z0-9_]+)\(")


def _kernel_types(tree: Path, sources: list[str]) -> set[str]:
    return {t for s in sources if s.endswith(".cu") for t in INSTANTIATION_RE.findall((tree / s).read_text())}


@pytest.mark.parametrize("project", ["mamba-ssm", "causal-conv1d"])
def test_a_trimmed_build_compiles_float32_kernels_alone_and_dispatches_nothing_else(cache, tmp_path, project):
    """A profile's trim (the CI set's build): the same cell's patches plus the trim ones; the extension compiles
    float32's kernels alone and its bindings dispatch float32 alone, so no call reaches a kernel not built."""
    recipe = recipe_for(project)
    full = prepare(recipe, CELL_2_14, tmp_path / "full", cache)
    trim = prepare(recipe, replace(CELL_2_14, trim=True), tmp_path / "trim", cache)
    assert trim.applied == ("cxx20", "cuda-archs", *TRIM[project]) and trim.skipped == (
        "rocm-archs", *CANARY[project], *OLDER[project])  # fmt: skip
    assert trim.inputs["patches"] != full.inputs["patches"]  # a different build: its inputs hash differs
    exts = {}
    for name, prep in (("full", full), ("trim", trim)):
        (ext,) = setup_py_flags(prep.tree, prep.env, tmp_path / name, torch="2.14.1", cuda="13.0")["ext_modules"]
        assert gencode_targets(ext["extra_compile_args"]["nvcc"]) == ["sm_80"]  # the cell's other patches hold
        exts[name] = ext
    full_types = _kernel_types(full.tree, exts["full"]["sources"])
    trim_types = _kernel_types(trim.tree, exts["trim"]["sources"])
    assert any("Half" in t for t in full_types) and any("BFloat16" in t for t in full_types), full_types
    assert trim_types and {t.replace(" ", "") for t in trim_types} <= {"float,float", "float,complex_t"}, trim_types
    # the bindings (the .cpp sources) dispatch through float32-only macros, which refuse every other dtype
    for name, prep in (("full", full), ("trim", trim)):
        used = set()
        for src in (s for s in exts[name]["sources"] if s.endswith(".cpp")):
            text = (prep.tree / src).read_text()
            used |= set(DISPATCH_RE.findall(re.sub(r"^#define .*$", "", text, flags=re.MULTILINE)))
        half = {m for m in used if "HALF" in m}
        assert half if name == "full" else not half, (name, used)
    assert "is built for float32 alone" in (trim.tree / exts["trim"]["sources"][0]).read_text()


def test_unpatched_upstream_builds_every_target_it_lists(cache, tmp_path):
    """The baseline the patches change: upstream's own flags for CUDA 13 (what the tests above must not see)."""
    tree = cache.unpack(CAUSAL, tmp_path / "plain")
    got = setup_py_flags(tree, {"CAUSAL_CONV1D_FORCE_BUILD": "TRUE"}, tmp_path, torch="2.14.1", cuda="13.0")
    (ext,) = got["ext_modules"]
    assert gencode_targets(ext["extra_compile_args"]["nvcc"]) == [f"sm_{sm}" for sm in UPSTREAM_SMS]


def test_mamba_arch_list_is_the_specs_when_nvcc_and_torch_majors_differ(cache, tmp_path):
    prep = prepare(recipe_for("mamba-ssm"), CELL_2_11, tmp_path / "w", cache)
    got = setup_py_flags(prep.tree, prep.env, tmp_path, torch="2.11.0", cuda="12.8")
    assert got["TORCH_CUDA_ARCH_LIST"] is None
    # the branch upstream uses to clear it now sets the spec's list
    text = (prep.tree / "setup.py").read_text()
    assert 'os.environ["TORCH_CUDA_ARCH_LIST"] = "8.0;9.0;10.0;12.0"' in text
    assert 'os.environ["TORCH_CUDA_ARCH_LIST"] = ""' not in text


@pytest.mark.parametrize("project", ["mamba-ssm", "causal-conv1d"])
def test_rocm_cells_offload_to_exactly_the_specs_archs(cache, tmp_path, project):
    prep = prepare(recipe_for(project), CELL_ROCM, tmp_path / "w", cache)
    assert prep.applied == ("cxx20", "rocm-archs") and prep.skipped == (
        "cuda-archs", *TRIM[project], *CANARY[project], *OLDER[project])  # fmt: skip
    got = setup_py_flags(prep.tree, prep.env, tmp_path, torch="2.14.1", rocm="6.4")
    (ext,) = got["ext_modules"]
    nvcc = ext["extra_compile_args"]["nvcc"]
    assert [f for f in nvcc if f.startswith("--offload-arch")] == ["--offload-arch=gfx90a", "--offload-arch=gfx942"]
    assert "-std=c++20" in nvcc and "-std=c++20" in ext["extra_compile_args"]["cxx"]
    assert got["version"].endswith("+hip64torch2.14cxx11abiTRUE")


def test_patches_go_onto_a_fresh_copy_never_the_cache(cache, tmp_path):
    recipe = recipe_for("causal-conv1d")
    a = prepare(recipe, CELL_2_14, tmp_path / "a", cache)
    b = prepare(recipe, CELL_2_11, tmp_path / "b", cache)
    assert a.tree != b.tree
    assert "-std=c++20" in (a.tree / "setup.py").read_text() and "-std=c++20" not in (b.tree / "setup.py").read_text()
    assert hashlib.sha256(cache.path(CAUSAL).read_bytes()).hexdigest() == CAUSAL.sha256
    assert [p.name for p in cache.path(CAUSAL).parent.iterdir() if not p.name.startswith(".")] == [CAUSAL.filename]
    assert a.inputs["source"] == CAUSAL.identity and a.inputs["patches"] == ["cxx20", "cuda-archs"]
    assert a.inputs == inputs(recipe, CELL_2_14) != inputs(recipe, CELL_2_11)  # the plan hashes it without fetching


def test_env_names_the_abi_and_label_and_unsets_what_steers_setup_py(cache, tmp_path):
    cell = CellFacts("2.5.1", "cuda", "12.4", False, ("sm_80",), "cu12torch2.5cxx11abiFALSE")
    prep = prepare(recipe_for("mamba-ssm"), cell, tmp_path / "w", cache)
    assert prep.env["MAMBA_FORCE_BUILD"] == "TRUE"
    assert prep.env["MAMBA_FORCE_CXX11_ABI"] == "FALSE"
    assert prep.env["MAMBA_LOCAL_VERSION"] == "cu12torch2.5cxx11abiFALSE"
    env = prep.build_env({"NVIDIA_PRODUCT_NAME": "PyTorch", "TORCH_CUDA_ARCH_LIST": "7.0", "HOME": "/root"})
    assert "NVIDIA_PRODUCT_NAME" not in env and "TORCH_CUDA_ARCH_LIST" not in env and env["HOME"] == "/root"


# ---------------------------------------------------------------------------
# A patch that no longer applies fails that build, naming the patch and the file.


def _modified_sdist(cache: SourceCache, pin: SdistPin, tmp_path: Path, edit) -> SdistPin:
    """A copy of the real sdist with setup.py edited, placed in the cache under its own hash."""
    with tarfile.open(cache.path(pin)) as src:
        members = [(m, src.extractfile(m).read() if m.isfile() else None) for m in src.getmembers()]
    out = tmp_path / pin.filename
    with tarfile.open(out, "w:gz") as dst:
        for m, data in members:
            if m.name.endswith("/setup.py") and m.name.count("/") == 1:
                data = edit(data.decode()).encode()
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    new = SdistPin(pin.name, pin.version, hashlib.sha256(out.read_bytes()).hexdigest())
    cache.path(new).parent.mkdir(parents=True)
    out.rename(cache.path(new))
    return new


def test_a_patch_that_no_longer_applies_fails_naming_patch_and_file(cache, tmp_path):
    recipe = recipe_for("causal-conv1d")
    # upstream swaps one arch: the hard-coded block the cuda-archs patch replaces is not there any more
    changed = _modified_sdist(cache, CAUSAL, tmp_path, lambda t: t.replace(
        'cc_flag.append("arch=compute_87,code=sm_87")', 'cc_flag.append("arch=compute_89,code=sm_89")'))  # fmt: skip
    from dataclasses import replace

    moved = replace(recipe, source=changed)
    with pytest.raises(PatchError) as err:
        prepare(moved, CELL_2_14, tmp_path / "w", cache)
    msg = str(err.value)
    line = recipe.patches[1].line
    assert msg.startswith(f"{recipe.path}:{line}: patch 'cuda-archs' no longer applies to setup.py: edit #1")
    assert "occurs 0 times in causal_conv1d-1.7.0/setup.py, the patch expects 1" in msg
    assert err.value.exit_code == 10 and "only this build fails" in err.value.hint
    # the same sdist for a cell that patch does not concern still prepares
    assert prepare(moved, CELL_ROCM, tmp_path / "rocm", cache).applied == ("cxx20", "rocm-archs")


def test_a_search_text_found_more_often_than_expected_fails_too(cache, tmp_path):
    from dataclasses import replace

    recipe = recipe_for("mamba-ssm")
    changed = _modified_sdist(cache, MAMBA, tmp_path, lambda t: t + '\n# "-std=c++17"\n')
    with pytest.raises(PatchError, match=r"patch 'cxx20' no longer applies to setup.py: edit #1's search text .* "
                                         r"occurs 5 times .*, the patch expects 4"):  # fmt: skip
        prepare(replace(recipe, source=changed), CELL_2_14, tmp_path / "w", cache)


# ---------------------------------------------------------------------------
# --explain


def test_explain_lists_each_patch_with_its_reason():
    lines = explain(recipe_for("mamba-ssm"), CELL_2_11)
    text = "\n".join(lines)
    assert "patch cxx20 (setup.py, 1 edit): skipped: torch 2.11.0 does not match >=2.14" in text
    assert "patch cuda-archs (setup.py, 2 edits): applies: accelerator cuda is cuda" in text
    assert "patch rocm-archs (setup.py, 1 edit): skipped: accelerator cuda is not rocm" in text
    assert "MAMBA_LOCAL_VERSION=cu12torch2.11cxx11abiTRUE" in text
    cpu = "\n".join(explain(recipe_for("mamba-ssm"), CellFacts("2.14.1", "cpu", None, True)))
    assert "refused: mamba-ssm 2.3.2.post1 cannot be built for it: accelerator cpu is not cuda/rocm" in cpu
    old = "\n".join(explain(recipe_for("causal-conv1d"), CellFacts("2.1.0", "cuda", "11.4", False, ("sm_80",))))
    assert "cuda 11.4 does not match >=11.6" in old


def test_explain_cli(cli):
    proc = cli(
        "recipe", "explain", "causal-conv1d", "--torch", "2.14.1", "--accelerator", "cuda-13.0", "--archs", "sm_80"
    )
    assert proc.returncode == 0, proc.stderr
    assert "patch cxx20 (setup.py, 3 edits): applies: torch 2.14.1 matches >=2.14" in proc.stdout
    assert "CAUSAL_CONV1D_LOCAL_VERSION=cu13torch2.14cxx11abiTRUE" in proc.stdout


# ---------------------------------------------------------------------------
# Validation: file:line: key: message.


def _bad(tmp_path: Path, project: str, old: str, new: str, count: int = 1) -> Path:
    text = (RECIPES_DIR / f"{project}.toml").read_text()
    assert text.count(old) >= count, old
    path = tmp_path / f"{project}.toml"
    path.write_text(text.replace(old, new, count))
    return path


def _line_of(path: Path, needle: str, nth: int = 1) -> int:
    hits = [i for i, ln in enumerate(path.read_text().splitlines(), 1) if needle in ln]
    return hits[nth - 1]


@pytest.mark.parametrize(
    ("old", "new", "needle", "nth", "key", "message"),
    [
        ('sha256 = "3202', 'sha256 = "XY02', 'sha256 = "XY02', 1, "source.sha256", "is not a sha256"),
        ('version = "1.7.0"', 'version = "1.7.0 beta"', "version =", 1, "source.version", "is not a version"),
        (
            'when = { torch = ">=2.14", release = ">=1.3.0" }',
            'when = { torch = ">=2.x", release = ">=1.3.0" }',
            "when = {",
            1,
            "patch#1.when.torch",
            "is not a version specifier",
        ),
        (
            'when = { torch = ">=2.14", release = ">=1.3.0" }',
            'whenn = { torch = ">=2.14", release = ">=1.3.0" }',
            "whenn",
            1,
            "patch#1.whenn",
            'unknown key "whenn"; did you mean "when"?',
        ),
        (
            "cc_flag += ${gencode}",
            "cc_flag += ${gencodes}",
            "replace =",
            4,
            "patch#2.edit#1.replace",
            'unknown placeholder ${gencodes}; did you mean "${gencode}"?',
        ),
        (
            'when = { accelerator = ["cuda"], release = ">1.6.1.post4" }',
            'when = { release = ">1.6.1.post4" }',
            "replace =",
            4,
            "patch#2.edit#1.replace",
            "${gencode} only has a value for cuda cells, but this can apply to cuda/rocm cells",
        ),
        ("count = 2  #", "count = 0  #", "count = 0", 1, "patch#1.edit#1.count", "must be a positive integer"),
        ('name = "cuda-archs"', 'name = "cxx20"', 'name = "cxx20"', 2, "patch#2.name", 'patch "cxx20" is named twice'),
        (
            'CAUSAL_CONV1D_LOCAL_VERSION = "${label}"',
            'CAUSAL_CONV1D_LOCAL_VERSION = "${labl}"',
            "${labl}",
            1,
            "build.env.CAUSAL_CONV1D_LOCAL_VERSION",
            "unknown placeholder ${labl}",
        ),
        ('imports = ["torch"', 'imports = ["torch-x"', "imports =", 1, "test.imports#1", "is not a module name"),
        (
            'api = ["causal_conv1d.causal_conv1d_fn"',
            'api = ["causal_conv1d_fn"',
            "api =",
            1,
            "test.api#1",
            "is not a public name as module.Name",
        ),
        (
            'imports = ["torch"',
            'deps = "yes"\nimports = ["torch"',
            "deps =",
            1,
            "test.deps",
            'must be true or false, got a string "yes"',
        ),
        (
            'extensions = ["causal_conv1d_cuda*.so"]',
            'extensions = ["../x.so"]',
            "extensions =",
            1,
            "verify.extensions#1",
            "is not a glob inside the wheel",
        ),
        ('rocm = ">=6.0"', 'rocm = ">=6.0"\ncpu = true', "cpu = true", 1, "requires.cpu", 'unknown key "cpu"'),
        ('rocm = ">=6.0"', 'rocm = ">=6.0"\ntrim = true', "trim = true", 1, "requires.trim", 'unknown key "trim"'),
        (
            "when = { trim = true }",
            'when = { trim = "yes" }',
            'trim = "yes"',
            1,
            "patch#4.when.trim",
            'must be true or false, got a string "yes"',
        ),
    ],
)
def test_validation_errors_name_file_line_and_key(tmp_path, old, new, needle, nth, key, message):
    path = _bad(tmp_path, "causal-conv1d", old, new)
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert str(err.value).startswith(f"{path}:{_line_of(path, needle, nth)}: {key}: "), str(err.value)
    assert message in str(err.value)
    assert err.value.exit_code == 2


def test_second_edit_of_a_patch_is_located_exactly(tmp_path):
    # [[patch.edit]] tables are numbered per patch in the message, and found on their own line
    path = _bad(tmp_path, "mamba-ssm", "cc_flag += ${gencode}", "cc_flag += ${gencodez}")
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert str(err.value).startswith(f"{path}:{_line_of(path, 'replace =', 3)}: patch#2.edit#2.replace: ")


def test_name_must_match_the_file_and_toml_errors_have_a_line(tmp_path):
    path = tmp_path / "causal_conv1d.toml"
    path.write_text((RECIPES_DIR / "causal-conv1d.toml").read_text())
    with pytest.raises(RecipeError, match=r"causal_conv1d\.toml:\d+: project\.name: \"causal-conv1d\" must match"):
        load_recipe(path)
    broken = _bad(tmp_path, "causal-conv1d", "[source]", "[source")
    with pytest.raises(
        RecipeError, match=rf"{re.escape(str(broken))}:{_line_of(broken, '[source')}: TOML syntax error"
    ):
        load_recipe(broken)


def test_a_recipe_for_an_unknown_project_says_which_exist():
    with pytest.raises(RecipeError, match=r'no recipe for "mamba_sm"; did you mean "mamba-ssm"\?'):
        recipe_for("mamba_sm")


# --- hostile recipes -------------------------------------------------------------------------------

_BASE_RECIPE = """\
[project]
name = "causal-conv1d"

[source]
name = "causal_conv1d"
version = "1.7.0"
sha256 = "3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b"

[build]
{unset}

[build.env]
CAUSAL_CONV1D_FORCE_BUILD = "TRUE"
{env}

[test]
imports = ["causal_conv1d"]

[verify]
extensions = ["causal_conv1d_cuda*.so"]
"""


@pytest.mark.parametrize(
    "name",
    ["BASH_ENV", "ENV", "PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "PIP_INDEX_URL", "PYTHONPATH", "PYTHONSTARTUP",
     "FARM_TORCH_PIP_ARGS", "FARM_TORCH_REQ", "MAMBA_KERNEL_CACHE", "CCACHE_PREFIX", "UV_INDEX_URL", "HOME",
     "NVCC_APPEND_FLAGS", "SSL_CERT_FILE", "HTTPS_PROXY", "PROMPT_COMMAND"],
)  # fmt: skip
def test_a_recipe_may_not_set_or_unset_what_steers_the_farm(tmp_path, name):
    for env, unset in ((f'{name} = "/tmp/x"', ""), ("", f'unset = ["{name}"]')):
        path = tmp_path / "causal-conv1d.toml"
        path.write_text(_BASE_RECIPE.format(env=env, unset=unset))
        line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if name in t)
        with pytest.raises(RecipeError) as err:
            load_recipe(path)
        assert str(err.value).startswith(f"{path}:{line}: build.") and "may not set or unset" in str(err.value)
    path.write_text(_BASE_RECIPE.format(env='CAUSAL_CONV1D_LOCAL_VERSION = "${label}"', unset=""))
    assert load_recipe(path).env["CAUSAL_CONV1D_LOCAL_VERSION"][0].template == "${label}"  # the project's own: still fine


_BOTH_KINDS = _BASE_RECIPE.replace('[build]', '[requires]\naccelerator = ["cpu", "cuda"]\n\n[build]')


def test_an_env_value_is_chosen_by_the_cells_accelerator_with_the_patches_when(tmp_path):
    path = tmp_path / "causal-conv1d.toml"
    env = """TORCH_CUDA_ARCH_LIST = [{ when = { accelerator = ["cuda"] }, value = "${cuda_arch_list}" }]
FORCE_CUDA = [{ when = { accelerator = ["cuda"], torch = ">=2.14" }, value = "1" }, { value = "0" }]"""
    path.write_text(_BOTH_KINDS.format(env=env, unset=""))
    recipe = load_recipe(path)
    cuda = CellFacts("2.14.1", "cuda", "13.0", True, ("sm_80", "sm_90"), "cu13torch2.14cxx11abiTRUE")
    old_cuda = CellFacts("2.13.0", "cuda", "13.0", True, ("sm_80",), "cu13torch2.13cxx11abiTRUE")
    cpu = CellFacts("2.14.1", "cpu", None, True, (), "cputorch2.14cxx11abiTRUE")
    assert build_env_vars(recipe, cuda) == {"CAUSAL_CONV1D_FORCE_BUILD": "TRUE", "TORCH_CUDA_ARCH_LIST": "8.0;9.0",
                                            "FORCE_CUDA": "1"}  # fmt: skip
    assert build_env_vars(recipe, old_cuda)["FORCE_CUDA"] == "0"  # the first entry it meets
    assert build_env_vars(recipe, cpu) == {"CAUSAL_CONV1D_FORCE_BUILD": "TRUE", "FORCE_CUDA": "0"}  # none met: unset
    assert "  env: CAUSAL_CONV1D_FORCE_BUILD=TRUE FORCE_CUDA=0" in explain(recipe, cpu)


@pytest.mark.parametrize(
    ("env", "key", "says", "hint"),
    [
        # a CUDA-only placeholder in a value for every cell: the hint is the env's own `when`, not a patch's
        ('TORCH_CUDA_ARCH_LIST = "${cuda_arch_list}"', "build.env.TORCH_CUDA_ARCH_LIST",
         "${cuda_arch_list} only has a value for cuda cells, but this can apply to cpu/cuda cells",
         'restrict the value: TORCH_CUDA_ARCH_LIST = [{ when = { accelerator = ["cuda"] }, value = "${cuda_arch_list}" }]'),
        ('TORCH_CUDA_ARCH_LIST = [{ value = "${cuda_arch_list}" }]', "build.env.TORCH_CUDA_ARCH_LIST#1.value",
         "only has a value for cuda cells", 'narrow this entry: when = { accelerator = ["cuda"] }'),
        ('X = [{ when = { accelerator = ["rocm"] }, value = "1" }]', "build.env.X#1.when",
         "can never apply: [requires] allows only cpu/cuda cells", None),
        ('X = [{ when = { acelerator = ["cuda"] }, value = "1" }]', "build.env.X#1.when.acelerator",
         'unknown key "acelerator"; did you mean "accelerator"?', None),
        ('X = []', "build.env.X", "is empty", None),
        # errors state their rule by its number
        ('X = "' + "a" * 444 + '"', "build.env.X", "one line of text of at most 300 characters", None),
    ],
)
def test_a_bad_env_value_names_its_key_and_the_hint_that_applies_there(tmp_path, env, key, says, hint):
    path = tmp_path / "causal-conv1d.toml"
    path.write_text(_BOTH_KINDS.format(env=env, unset=""))
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert f": {key}: " in str(err.value) and says in str(err.value), str(err.value)
    assert err.value.hint == hint or hint is None and "when = {" not in (err.value.hint or ""), err.value.hint


def test_a_long_why_is_refused_by_its_length_not_as_not_one_line(tmp_path):
    path = _bad(tmp_path, "causal-conv1d", 'why = "torch 2.14', 'why = "' + "x" * 400 + ' torch 2.14')
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert "is not one line of text of at most 300 characters (" in str(err.value)
    assert "characters; at most 300)" in str(err.value), str(err.value)
    path = _bad(tmp_path, "causal-conv1d", 'why = "torch 2.14', 'why = "\ttorch 2.14')
    with pytest.raises(RecipeError, match=r"holds the control character '\\t'"):
        load_recipe(path)


def test_a_huge_or_non_regular_recipe_is_refused_at_once(tmp_path):
    import os
    import time

    path = tmp_path / "causal-conv1d.toml"
    path.write_text(_BASE_RECIPE.format(env="", unset="") + "#" * (20 << 20) + "\n")
    t0 = time.perf_counter()
    with pytest.raises(RecipeError, match="more than a recipe's cap"):
        load_recipe(path)
    assert time.perf_counter() - t0 < 1
    path.unlink()
    os.mkfifo(path)  # reading it would block forever
    with pytest.raises(RecipeError, match="not a regular file"):
        load_recipe(path)


def test_a_recipes_public_api_is_imported_name_by_name_from_its_module():
    from builder.verifying.smoke import api_imports

    conv = load_recipes()["causal-conv1d"]
    assert api_imports(conv.api) == [
        "from causal_conv1d import causal_conv1d_fn",
        "from causal_conv1d import causal_conv1d_update",
    ]


def test_a_recipe_with_deps_has_its_declared_dependencies_judged_for_the_smoke_python(tmp_path):
    """``deps = true``: the smoke test installs what the wheel declares, judged for its Python (markers and
    extras), torch left out (already there, held by pip check), sorted; the layer's name follows that set."""
    import sys
    import zipfile

    from builder.environments.layers import deps_layer
    from builder.environments.markers import marker_environment
    from builder.verifying.smoke import declared_requirements

    assert load_recipes()["mamba-ssm"].deps and not load_recipes()["causal-conv1d"].deps
    wheel = tmp_path / "up-1.0-py3-none-any.whl"
    meta = "\n".join([
        "Metadata-Version: 2.1", "Name: up", "Version: 1.0", "Requires-Dist: torch", "Requires-Dist: einops",
        "Requires-Dist: triton>=3.5.0; platform_system == 'Linux'", "Requires-Dist: winonly; sys_platform == 'win32'",
        "Requires-Dist: old; python_version < '3.8'", "Requires-Dist: pytest; extra == \"dev\"",
        "Requires-Dist: Torch==2.14.*", "",
    ])  # fmt: skip
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("up-1.0.dist-info/METADATA", meta)
    env = marker_environment(sys.executable)
    assert env["python_version"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert declared_requirements(wheel, env) == ["einops", "triton>=3.5.0"]
    assert declared_requirements(wheel, {**env, "platform_system": "Darwin"}) == ["einops"]
    # a layer already made is reused, found by the torch venv and the sorted set, in either order
    torch_venv = tmp_path / "torch-envs" / "py3.11.7-e0d771fde6"
    made = tmp_path / "deps" / "py3.11.7-e0d771fde6-e2cdf3db56f0"
    made.mkdir(parents=True)
    (made / ".complete").write_text("x\n")
    found = deps_layer(torch_venv, "torch==2.14.1", ["triton>=3.5.0", "einops"], tmp_path / "deps")
    assert found == deps_layer(torch_venv, "torch==2.14.1", ["einops", "triton>=3.5.0"], tmp_path / "deps")
    assert found == made
