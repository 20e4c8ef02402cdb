"""The documentation: README and the site in docs/ (mkdocs.yml).

The site builds with ``mkdocs build --strict``; the first screen gives the install commands; every command of
the user guides runs (or names the test that runs it); the generated references cover the code (CLI flags,
environment variables, exit codes); docs/architecture.md names every module and top-level path.
"""

from __future__ import annotations

import ast
import html
import importlib.util
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import zipfile
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest
from conftest import REPO
from indexkit import find_python, isolated_env, make_venv, pip, serve, uv_pip
from wheelmaker import (
    CAUSAL_CONV1D,
    STANDIN_SDIST_MARK,
    STANDIN_TORCH,
    UPSTREAM_MAMBA,
    V,
    make_fake_torch,
    make_mamba_wheel,
    make_recipe_wheel,
    make_standin_sdist,
    make_wheel,
)

from builder.publishing import doctor_dist, pins
from docs.hooks import refgen

DOCS = REPO / "docs"
INDEX_URL = "https://mamba-ssm.github.io/wheels/"
# Upstream's packages for PyPI's torch 2.14 (CUDA 13, CXX11 ABI), pinned: the install page's example.
UPSTREAM_PIN = "causal-conv1d==1.7.0+cu13torch2.14cxx11abiTRUE mamba-ssm==2.3.2.post1+cu13torch2.14cxx11abiTRUE"
# The front door: the standalone doctor writes the pins of the torch already installed (and holds that torch).
FRONT_DOOR = "mamba-doctor --requirements upstream > mamba.txt && pip install -r mamba.txt"
# The install page's lead: the user's own requirements file, answered for the torch installed (doctor/pins.py).
OWN_PINS = "mamba-doctor --requirements requirements.txt > fixed.txt && pip install -r fixed.txt"
FIRST_SCREEN = (f"pip install mamba-doctor --index-url {INDEX_URL}doctor/", OWN_PINS)
# What PyPI holds under the two names today: upstream's sdists, newer than this repository's 0.3.0.
PYPI_SDISTS = {"mamba-ssm": "2.3.2.post1", "causal-conv1d": "1.7.0"}


def block_commands(block: str) -> list[str]:
    """The commands of a ```bash block: backslash-continued lines joined, `  # comments` dropped."""
    cmds, cur = [], ""
    for line in block.splitlines():
        line = re.split(r"\s+#\s", line, maxsplit=1)[0].rstrip()
        cur = f"{cur} {line.strip()}".strip() if cur else line.strip()
        if cur.endswith("\\"):
            cur = cur[:-1].rstrip()
            continue
        if cur:
            cmds.append(cur)
        cur = ""
    return cmds


def _first_block_lines(page: str) -> list[str]:
    """The visible lines of a page's first command block, as a reader sees them (for the fold)."""
    block = re.search(r"```bash\n(.*?)```", (REPO / page).read_text(), re.S).group(1)
    return [re.split(r"\s+#\s", ln, maxsplit=1)[0].rstrip().rstrip("\\").strip() for ln in block.splitlines()]


# --------------------------------------------------------------------------- the site


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    return out


def test_the_site_builds_strict_with_every_page_in_the_nav(site):
    config = (REPO / "mkdocs.yml").read_text()
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    for page in pages:  # mkdocs only reports pages left out of the nav at INFO level
        assert f" {page}" in config, f"docs/{page} is not in mkdocs.yml's nav"
    assert (site / "index.html").is_file() and (site / "reference" / "cli" / "index.html").is_file()
    assert "<!-- generated:" not in (site / "reference" / "cli" / "index.html").read_text()


def test_the_site_carries_the_changelog_and_the_faq_in_its_nav(site):
    """The changelog page is CHANGELOG.md itself (included, not copied), and the FAQ's answers are linked from
    the pages that would otherwise repeat them."""
    config = (REPO / "mkdocs.yml").read_text()
    assert " changelog.md" in config and " user/faq.md" in config
    page = (site / "changelog" / "index.html").read_text()
    for heading in re.findall(r"^## \[([^\]]+)\]", (REPO / "CHANGELOG.md").read_text(), re.M):
        assert heading in page, f"CHANGELOG.md's {heading} is not on the site's changelog page"
    for linked in ("README.md", "docs/index.md", "docs/user/install-prebuilt.md"):
        assert "faq.md#pin" in (REPO / linked).read_text(), f"{linked} should link the FAQ's answer on pins"
    faq = (site / "user" / "faq" / "index.html").read_text()
    assert 'id="pin"' in faq and 'id="build-isolation"' in faq


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


# Injected into a copy of the home page: where each install command and the coverage link sit in the viewport.
_FOLD_PROBE = """<script>
window.addEventListener("load", () => {
  const wanted = %s, out = {height: window.innerHeight, width: window.innerWidth, found: {}};
  // The page's text as one string, and which text node each character is in (highlighting splits commands).
  const nodes = [], walker = document.createTreeWalker(document.querySelector("article") || document.body, NodeFilter.SHOW_TEXT);
  let text = "";
  for (let n; (n = walker.nextNode()); ) { nodes.push([text.length, n]); text += n.textContent; }
  const at = (i) => { let k = nodes.length - 1; while (nodes[k][0] > i) k--; return [nodes[k][1], i - nodes[k][0]]; };
  for (const want of wanted) {
    const i = text.indexOf(want);
    if (i < 0) continue;
    const r = document.createRange(), [a, ao] = at(i), [b, bo] = at(i + want.length - 1);
    r.setStart(a, ao); r.setEnd(b, bo + 1);
    const box = r.getBoundingClientRect(), clip = a.parentElement.closest("pre, p, li, td") || document.body;
    const c = clip.getBoundingClientRect();
    out.found[want] = {top: box.top, bottom: box.bottom, left: box.left, right: box.right, clip_right: c.right};
  }
  const pre = document.createElement("pre"); pre.id = "fold-probe"; pre.hidden = true;
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script>"""


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


# Wider than Chromium's smallest window (500 px): --dump-dom lays a narrower one out at 500 px, unlike --screenshot.
@pytest.mark.parametrize("width,height", [(1280, 800), (768, 1024)], ids=["laptop", "tablet"])
def test_the_home_page_shows_the_install_commands_above_the_fold(site, tmp_path, width, height):
    browser = _browser()
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("no Chromium here (scripts/bootstrap-host.sh installs Debian's chromium)")
        pytest.skip("no Chromium on this machine")
    wanted = [*_first_block_lines("docs/index.md"), INDEX_URL]
    probe = site / "fold-probe.html"
    probe.write_text((site / "index.html").read_text().replace("</body>", _FOLD_PROBE % json.dumps(wanted) + "</body>"))
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync", "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},{height}",
    ]  # fmt: skip
    shots = Path(os.environ.get("DOCS_SCREENSHOT_DIR", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    png = shots / f"home-{width}x{height}.png"
    run = lambda *more: subprocess.run(
        [browser, *flags, *more, probe.as_uri()], capture_output=True, text=True, timeout=60
    )
    shot = run(f"--screenshot={png}")
    assert png.is_file(), shot.stderr[-2000:]
    assert _png_size(png) == (width, height) and png.stat().st_size > 20_000, "a blank screenshot"
    dom = run("--dump-dom", "--virtual-time-budget=5000").stdout
    m = re.search(r'<pre id="fold-probe" hidden="">(.*?)</pre>', dom, re.S)
    assert m, "the probe did not run: " + dom[-500:]
    got = json.loads(html.unescape(m.group(1)))  # --dump-dom escapes the pre's text: &gt; &amp; &quot;
    # --dump-dom's viewport is the window less the browser's own bars: a stricter fold than the screenshot's
    fold = got["height"]
    assert 0.6 * height < fold <= height and got["width"] == width, got
    for want in wanted:
        box = got["found"].get(want)
        assert box is not None, f"{want!r} is not on the home page"
        assert 0 <= box["top"] and box["bottom"] <= fold, f"{want!r} is below the fold at {width}x{height}: {box}"
        assert box["right"] <= min(width, box["clip_right"]), (
            f"{want!r} is cut off at the right at {width}x{height}: {box}"
        )


def test_the_readme_first_screen_is_for_users():
    lines = (REPO / "README.md").read_text().splitlines()
    first = "\n".join(lines[:24])  # what GitHub and PyPI show before any scrolling
    block = re.search(r"```bash\n(.*?)```", first, re.S)
    assert block, "no command block in the README's first screen"
    assert block_commands(block.group(1)) == list(FIRST_SCREEN)
    assert INDEX_URL in first and "docs/" in first
    for word in ("root", "Docker", "nox"):  # the maintainer set-up comes later
        assert word not in "\n".join(lines[:10]), f"{word!r} in the README's first lines"
    assert all(cmd in "\n".join(lines) for cmd in NEWCOMER) and "--run-slow" in "\n".join(lines)
    for target in re.findall(
        r"\]\(((?!https?://)[^)#]+)", "\n".join(lines)
    ):  # links into the tree (GitHub renders them)
        assert (REPO / target).exists(), f"README links to {target}, which does not exist"


# The README's maintainer section starts with these: the farm's main job, and the CI set (.ci/run's one command).
# tests/test_farm_docker.py::test_ci_profile_end_to_end runs the first as typed; CI runs the second.
NEWCOMER = ("bash scripts/build-ci.sh", "bash scripts/test-ci.sh")


def test_the_readme_maintainer_section_starts_with_the_two_commands_and_ci_runs_the_second():
    setup = (REPO / "README.md").read_text().split("## For maintainers", 1)[1]
    first = re.search(r"```bash\n(.*?)```", setup, re.S)
    assert first and block_commands(first.group(1)) == list(NEWCOMER)
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert [ln for ln in ci if ln and not ln.startswith(("#", "set ", "cd "))] == [NEWCOMER[1]]  # as the README types it
    # each does its own set-up: the host, then .venv with every tool (scripts/setup.sh), then its job
    jobs = {NEWCOMER[0]: ".venv/bin/nox -s build_matrix -- --profile ci", NEWCOMER[1]: ".venv/bin/nox -s tests"}
    for cmd, job in jobs.items():
        text = (REPO / cmd.split()[1]).read_text()
        assert ". scripts/setup.sh" in text and job in text, cmd
    shared = (REPO / "scripts" / "setup.sh").read_text()
    for step in ("bash scripts/bootstrap-host.sh", "python3.11 -m venv .venv", "--group dev"):
        assert step in shared, f"{step!r} is not in scripts/setup.sh"
    docker_test = (REPO / "tests" / "test_farm_docker.py").read_text()
    assert f'["bash", "{NEWCOMER[0].split()[1]}"' in docker_test


def _support_summary() -> str:
    """The README's and the home page's support sentence, made from the default plan."""
    from builder.planning.plan import load_plan

    plan = load_plan()
    vkey = lambda v: tuple(map(int, v.split(".")))
    torches = sorted({c.torch for c in plan.cells}, key=vkey)
    pythons = sorted({c.python for c in plan.cells}, key=vkey)
    accs = {c.accelerator for c in plan.cells}
    cuda = sorted({a.split("-")[1].split(".")[0] for a in accs if a.startswith("cuda-")}, key=int)
    rocm = sorted({a.split("-")[1] for a in accs if a.startswith("rocm-")}, key=vkey)
    plats = sorted({c.platform.removeprefix("linux_") for c in plan.cells}, key=lambda p: p != "x86_64")
    both = lambda xs: ", ".join(xs[:-1]) + " and " + xs[-1] if len(xs) > 1 else xs[0]
    return (f"Linux {both(plats)}; torch {torches[0]} to {torches[-1]}; Python {pythons[0]} to {pythons[-1]}; "
            f"CPU, CUDA {both(cuda)}, ROCm {both(rocm)}")  # fmt: skip


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_support_summary_matches_the_plan(page):
    text = " ".join((REPO / page).read_text().split())
    text = re.sub(r" \([^)]*\);", ";", text)  # "(glibc ...)" asides
    assert _support_summary() in text, f"{page} should say: {_support_summary()}"


FRONT_PAGES = ("README.md", "docs/index.md")


def _release_floors(machine: str, lines=("upstream", "checkout")) -> dict[str, str]:
    """{CPU|CUDA|ROCm: glibc} of the release's wheels on MACHINE: the plan's repair target raised to what each
    cell's install resolved at (builder/data/installs.json), every line's builds."""
    from builder.publishing import pins

    fam = {"cpu": "CPU", "cu": "CUDA", "hip": "ROCm"}
    out: dict[str, str] = {}
    for w in pins.release_wheels():
        if w.platform != f"linux_{machine}" or w.line not in lines:
            continue
        f = fam[re.match(r"cpu|cu|hip", w.accelerator).group(0)]
        out[f] = max(out.get(f, w.glibc), w.glibc, key=lambda v: tuple(map(int, v.split("."))))
    return out


@pytest.mark.parametrize("page", FRONT_PAGES)
def test_the_front_door_states_the_floors_the_data_holds(page):
    """The glibc floors (the plan's manylinux targets, the doctor's lines.py), the NVIDIA driver of each CUDA major
    the release builds (toolkits.toml [driver]) and the GPUs the CUDA wheels run on (their arch lists and
    toolkits.toml [gpus]; V100 served by neither line) are what the page says."""
    from builder.facts import compat
    from builder.planning.plan import load_plan
    from mamba_ssm.doctor import served

    text = " ".join((REPO / page).read_text().split())
    floors = _release_floors("x86_64")
    assert floors == {**served.glibc_floors("upstream", "x86_64"), **served.glibc_floors("checkout", "x86_64")}
    assert floors["CPU"] == floors["CUDA"]
    raised = [(line, m, f["CUDA"]) for line in ("upstream", "checkout") for m in ("aarch64",)
              if (f := _release_floors(m, (line,))).get("CUDA") not in (None, floors["CUDA"])]  # fmt: skip
    assert raised == [(line, m, served.glibc_floors(line, m)["CUDA"]) for line, m, _f in raised]
    said = f"glibc {floors['CUDA']} or newer" + "".join(
        f", {'upstream' if line == 'upstream' else 'this repository'}'s line on {m} {f} for its dependencies' wheels"
        for line, m, f in raised)  # fmt: skip
    assert f"{said}; ROCm wheels {floors['ROCm']}" in text, (page, said)
    majors = sorted({b.accelerator[2:] for b in load_plan(profile="release").builds if b.accelerator.startswith("cu")}, key=int)
    drivers = compat.load().drivers
    first, *rest = majors
    want = f"NVIDIA driver:** CUDA {first} wheels need {drivers[first]} or newer, " if page == "README.md" else \
        f"NVIDIA driver: CUDA {first} wheels need {drivers[first]} or newer, "  # fmt: skip
    want += ", ".join(f"CUDA {m} {drivers[m]}" for m in rest) + "."
    assert want in text, f"{page} should say: {want}"
    gpus = text.split("GPUs:", 1)[1].split("V100", 1)[0]
    named = re.findall(r"([A-Z][\w ]{1,20}?) \((sm_\d+)\)", gpus)
    assert len(named) >= 8, named
    for line in ("upstream", "checkout"):
        runs = {sm: names for sm, names, _via in served.gpus_served(line)}
        for name, sm in named:
            assert sm in runs and name.split(" and ")[-1] in runs[sm], (line, name, sm, runs.get(sm))
        assert not served.gpu_accelerators(line, "7.0") and "V100 (sm_70)" in text


def test_the_platforms_page_floors_are_computed_from_the_plan_and_the_data():
    from builder.facts import compat

    page = refgen.floors_markdown()
    ours, theirs = _release_floors("x86_64", ("checkout",)), _release_floors("x86_64", ("upstream",))
    assert f"| this repository's mamba-ssm | CPU | {ours['CPU']} or newer |" in page
    assert f"| upstream's mamba-ssm and causal-conv1d | ROCm | {theirs['ROCm']} or newer |" in page
    arm = _release_floors("aarch64", ("upstream",))["CUDA"]
    assert f"| upstream's mamba-ssm and causal-conv1d | cu13 | {theirs['CUDA']} or newer (aarch64: {arm}) |" in page
    assert all(f"{d} or newer" in page for d in compat.load().drivers.values())
    assert "V100 (sm_70)" in page.rsplit("\n\n", 1)[1] and "RTX 30 (sm_86)" in page
    assert "<!-- generated: floors -->" in (DOCS / "reference" / "platforms.md").read_text()


def _pinned_on(page: str) -> list[tuple[str, str]]:
    """(command, the text after it on its line) for each command of PAGE that pins a farm label."""
    text = re.sub(r"\\\n\s*", " ", (REPO / page).read_text())
    out = []
    for cmd in pins.commands_in(text):
        reqs, urls = pins.parse(cmd)
        if any(label for *_, label in reqs) and urls:
            at = text.index(cmd) + len(cmd)
            out.append((cmd, text[at : at + 200]))
    return out


@pytest.mark.parametrize("page", [*FRONT_PAGES, "docs/user/install-prebuilt.md"])
def test_every_pinned_command_shows_its_cells_tier_from_the_ledger(page):
    """Beside each command a person copies, the tier of the cells it installs on: computed from the evidence
    ledger and the release plan (builder.publishing.tiers.command_tier), never typed."""
    from builder.planning.plan import load_plan
    from builder.publishing import tiers

    plan, records = load_plan(profile="release"), tiers.load_ledger()
    found = _pinned_on(page)
    assert found, page
    for cmd, after in found:
        reqs, urls = pins.parse(cmd)
        folder, key = pins._page(urls[0])
        line = next(name for name, f in pins.LINE_FOLDERS.items() if f == folder)
        want = tiers.command_tier(plan, records, line, next(label for *_, label in reqs if label), key)
        note = re.search(r"tier: [^)\n]*", after)
        assert note and note.group(0).rstrip(" ;") == want, f"{page}: {cmd!r} should show ({want}), shows {after[:120]!r}"


# --------------------------------------------------------------------------- the user guides' commands

USER_PAGES = ["README.md", "docs/index.md", *sorted(str(p.relative_to(REPO)) for p in (DOCS / "user").glob("*.md"))]

# Commands of the user guides that this file cannot run, and the test that does run them.
ELSEWHERE = {
    "pip install --no-build-isolation -e .": "noxfile.py::tests",
    # not editable there: a pip wheel --no-build-isolation of this checkout with MAMBA_SKIP_CUDA_BUILD=TRUE
    "MAMBA_SKIP_CUDA_BUILD=TRUE pip install --no-build-isolation -e .": "tests/test_stable_abi.py::test_stable_cpu_wheel_is_abi3_and_references_only_the_c_shim",
    "MAMBA_STABLE_ABI=TRUE MAMBA_FORCE_BUILD=TRUE pip wheel --no-build-isolation --no-deps -w dist .": "tests/test_stable_abi.py::test_cuda_stable_wheel_builds_against_214_and_loads_without_gpu",
    "uv pip install --preview-features wheel-variants mamba-ssm --index https://mamba-ssm.github.io/wheels/variants/": "tests/test_variants.py::test_uv_with_the_preview_picks_the_build_by_itself",
    # needs upstream's packages installed in the venv it runs in, and runs the fix it prints
    "mamba-doctor": "tests/test_doctor_dist.py::test_in_a_venv_with_upstreams_packages_the_standalone_doctor_pins_upstreams_wheels",
    # run as typed, through a shell, in venvs holding another torch
    FRONT_DOOR: "tests/test_docs.py::test_the_front_door_keeps_the_users_torch",
    OWN_PINS: "tests/test_doctor_pins.py::test_the_install_pages_requirements_file_path_runs_as_typed_with_pip_and_uv",
}
# Commands that need a service no test can reach.
EXTERNAL = {
    "gh attestation verify": "GitHub's attestation API",
    "git clone https://github.com/": "GitHub",
    "pip install torch --index-url https://download.pytorch.org/": "PyTorch's own index",
}
# Named on the front door as what not to type; run here to show what it does against today's PyPI.
COUNTER_EXAMPLES = {"pip install mamba-ssm"}
# Pages whose inline `pip install ...` spans are commands too (the front door's prose gives some).
INLINE_PAGES = ("README.md", "docs/index.md")


def user_commands() -> dict[str, list[str]]:
    """command -> the pages that give it: every ```bash block of the user-facing pages, and the front door's
    inline `pip install ...` spans."""
    found: dict[str, list[str]] = {}
    for page in USER_PAGES:
        text = (REPO / page).read_text().split("\n## For maintainers", 1)[0]  # the README's set-up: .ci/run's steps
        for block in re.findall(r"```bash\n(.*?)```", text, re.S):
            for cmd in block_commands(block):
                found.setdefault(cmd, []).append(page)
        if page in INLINE_PAGES:
            for cmd in re.findall(r"`((?:uv )?pip install [^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S)):
                found.setdefault(cmd, []).append(page)
    return found


def _names_a_line_unpinned(cmd: str) -> bool:
    """Whether an install command asks for mamba-ssm or causal-conv1d without the farm's exact local version,
    with PyPI still one of its indexes (no --index-url; uv's --index is searched before PyPI)."""
    args = shlex.split(cmd.split("|", 1)[0])
    if "install" not in args or "--index-url" in args or ("uv" in args[:1] and "--index" in args):
        return False
    reqs = [a for a in args[args.index("install") + 1 :] if not a.startswith("-") and not a.startswith("http")]
    return any(re.match(rf"{n}([=<>!~ ;]|$)", r) and "+" not in r for r in reqs for n in PYPI_SDISTS)


def test_no_front_door_command_takes_pypis_mamba_ssm():
    """Against today's PyPI a bare mamba-ssm is upstream's newer sdist: every install command pins the farm's
    wheel, or leaves PyPI out; the only exceptions are named as what not to type, or pipe a failing build to
    the doctor on purpose."""
    bare = [c for c in user_commands() if _names_a_line_unpinned(c) and c not in COUNTER_EXAMPLES and "|" not in c]
    assert not bare, f"these would take PyPI's sdist of upstream's mamba-ssm or causal-conv1d: {bare}"
    assert _names_a_line_unpinned("pip install mamba-ssm") and _names_a_line_unpinned(
        "pip install causal-conv1d==1.7.0"
    )
    assert not _names_a_line_unpinned(f"pip install {UPSTREAM_PIN} --extra-index-url {INDEX_URL}upstream/x/")


def test_every_command_left_to_another_test_names_one_that_exists():
    for cmd, where in ELSEWHERE.items():
        path, _, name = where.partition("::")
        text = (REPO / path).read_text()
        assert not name or re.search(rf"def {re.escape(name)}\b", text), f"{cmd!r}: {where} does not exist"


PIN_RE = re.compile(
    r"^(?P<tool>pip|uv pip) install (?P<pins>(?:\S+==\S+\+\S+ )+)--(?P<how>extra-index-url|find-links) (?P<url>\S+)$"
)


@pytest.fixture(scope="module")
def loopback(tmp_path_factory):
    """The project's index and upstream's, and a stand-in PyPI with a torch, served on 127.0.0.1."""
    from builder.publishing.index import build_index

    root = tmp_path_factory.mktemp("loopback")
    www = root / "www"
    labels = set()
    for cmd in user_commands():
        m = PIN_RE.match(cmd)
        if m:
            labels.update(p.split("+", 1)[1] for p in m.group("pins").split())
    wheels, upstream = root / "wheels", root / "upstream-wheels"
    for label in sorted(labels):
        whl = make_mamba_wheel(wheels, label, "cp310" if label.endswith("torchstable") else "cp311")
        if label.endswith("torchstable"):  # the farm's sidecar: the variant pages the release lists it on
            serves = {k for w in pins.release_wheels() if w.label == label for k in w.pages}
            Path(f"{whl}.spec.json").write_text(json.dumps({"serves": sorted(serves)}))
        if "torchstable" not in label:
            make_recipe_wheel(upstream, "causal-conv1d", "1.7.0", label, source=CAUSAL_CONV1D)
            make_recipe_wheel(upstream, "mamba-ssm", "2.3.2.post1", label, source=UPSTREAM_MAMBA)
    build_index(wheels, www / "index")
    build_index(upstream, www / "upstream")
    doctor_dist.publish(www / "doctor")
    torches = root / "torches"
    for version in ("2.6.0", "2.13.0", "2.14.1"):
        make_fake_torch(torches, version)
    # The stand-in PyPI: torch (pip install torch), and under mamba-ssm and causal-conv1d what PyPI holds today,
    # upstream's newer sdists (stand-ins that refuse to build, saying so).
    files = www / "pypi-files"
    pypi = {"torch": [make_fake_torch(files, v) for v in ("2.13.0", "2.14.1")]}
    pypi |= {name: [make_standin_sdist(files, name, version)] for name, version in PYPI_SDISTS.items()}
    for name, dists in pypi.items():
        page = www / "pypi" / name / "index.html"
        page.parent.mkdir(parents=True)
        page.write_text("".join(f'<a href="../../pypi-files/{d.name}">{d.name}</a>\n' for d in dists))
    with serve(www) as url:
        yield url, torches


def _local(cmd: str, url: str) -> str:
    for folder in ("upstream/", "doctor/"):  # indexes of their own next to the root's
        cmd = cmd.replace(INDEX_URL + folder, f"{url}/{folder}")
    return cmd.replace(INDEX_URL, f"{url}/index/")


def _venv_with_torch(path: Path, torch: str | None, torches: Path, env: dict) -> Path:
    python = find_python("3.11")
    if python is None:
        pytest.skip("no Python 3.11 here")
    vpy = make_venv(path, python, env)
    if torch:
        uv_pip(vpy, ["install", "--no-index", "--find-links", str(torches), f"torch=={torch}"], env)
    return vpy


def _torch_for(pin: str) -> str:
    label = pin.split("+", 1)[1]
    minor = "2.13" if "torchstable" in label else label.split("torch")[1].split("cxx11abi")[0]
    return {"2.6": "2.6.0", "2.13": "2.13.0", "2.14": "2.14.1"}[minor]


def test_every_user_guide_command_runs_against_a_loopback_index(loopback, tmp_path):
    """Each command as a user types it, PyPI being the stand-in that holds upstream's newer sdists: each installs
    the wheel it pins, and none takes PyPI's sdist (it would fail, naming the stand-in)."""
    url, torches = loopback
    env = isolated_env(tmp_path)
    env["PIP_INDEX_URL"] = f"{url}/pypi/"  # what a bare `pip install` reaches: the stand-in PyPI
    env["UV_INDEX_URL"] = f"{url}/pypi/"
    env["MAMBA_WHEEL_INDEX"] = f"{url}/index"
    ran, unknown = [], []
    for n, (cmd, pages) in enumerate(user_commands().items()):
        where = f"{cmd!r} ({', '.join(sorted(set(pages)))})"
        if cmd in ELSEWHERE or any(cmd.startswith(p) for p in EXTERNAL):
            continue
        if cmd in COUNTER_EXAMPLES:  # what the front door says not to type does what it says: PyPI's sdist
            vpy = _venv_with_torch(tmp_path / f"v{n}", "2.14.1", torches, env)
            proc = pip(vpy, shlex.split(cmd)[1:], env, check=False)
            assert (
                proc.returncode != 0 and f"{STANDIN_SDIST_MARK} mamba-ssm==2.3.2.post1" in proc.stdout + proc.stderr
            ), where
        elif m := re.fullmatch(r"pip install (torch(?:==(\S+))?)", cmd):
            vpy = _venv_with_torch(tmp_path / f"v{n}", None, torches, env)
            pip(vpy, ["install", m.group(1)], env)
            want = m.group(2) or "*"
            assert fnmatch(installed_torch(vpy), want) and installed_torch(vpy) in ("2.13.0", "2.14.1"), where
        elif m := re.fullmatch(r"pip install mamba-doctor --index-url (\S+)", cmd):  # the standalone doctor
            vpy = _venv_with_torch(tmp_path / f"v{n}", None, torches, env)
            pip(vpy, shlex.split(_local(cmd, url))[1:], env)
            assert set(versions_all(vpy)) == {"mamba-doctor"}, where  # no dependency, no torch
        elif m := PIN_RE.match(cmd):
            args = shlex.split(_local(cmd, url))
            pins = m.group("pins").split()
            vpy = _venv_with_torch(tmp_path / f"v{n}", _torch_for(pins[0]), torches, env)
            tool, rest = (uv_pip, args[3:]) if m.group("tool") == "uv pip" else (pip, args[2:])
            proc = tool(vpy, ["install", *rest], env)
            assert STANDIN_SDIST_MARK not in proc.stdout + proc.stderr, where
            got = versions(vpy, [p.split("==")[0] for p in pins])
            for p in pins:
                name, version = p.split("==")
                assert got[name].lower() == version.lower(), f"{where}: got {got}"
        elif cmd.startswith("python -m mamba_ssm.doctor") or " | python -m mamba_ssm.doctor" in cmd:
            run_doctor(cmd, env, where)
        elif cmd.startswith("python -c "):
            if importlib.util.find_spec("torch") is None:  # the nox session has torch; a bare dev venv may not
                continue
            out = subprocess.run([sys.executable, *shlex.split(cmd)[1:]], capture_output=True, text=True, check=True)
            assert re.fullmatch(r"\S+ (\S+) (\S+) (True|False)\n", out.stdout), f"{where}: {out.stdout!r}"
        else:
            unknown.append(where)
            continue
        ran.append(cmd)
    assert not unknown, (
        "user-guide commands no test runs (run them here, or name their test in ELSEWHERE): " + "; ".join(unknown)
    )
    assert set(FIRST_SCREEN) - set(ELSEWHERE) <= set(ran) and COUNTER_EXAMPLES <= set(ran), ran
    assert len(ran) >= 8, ran


def test_the_coverage_pages_name_no_maintainer_command_and_say_what_a_wrong_row_does(loopback, tmp_path):
    """End users have no `builder`; the pages say that another row's wheel replaces your torch from your other
    indexes, or stops when none has that release, and that --no-deps keeps it: both tried here."""
    import urllib.request

    url, torches = loopback
    for page in ("index/", "upstream/"):
        text = urllib.request.urlopen(f"{url}/{page}", timeout=30).read().decode()
        assert "builder" not in re.sub(r"<[^>]+>", "", text), f"{page}: a maintainer command on the coverage page"
        assert "pip replaces your torch with that release from your other indexes" in " ".join(text.split())
    env = isolated_env(tmp_path)
    env["PIP_INDEX_URL"] = f"{url}/pypi/"  # the stand-in PyPI has torch 2.13 and 2.14, not 2.6
    vpy = _venv_with_torch(tmp_path / "v", "2.13.0", torches, env)
    wrong = ["install", f"mamba-ssm=={V}+cu12torch2.6cxx11abiFALSE", "--extra-index-url", f"{url}/index/cu12-torch2.6-cxx11abiFALSE/"]
    proc = pip(vpy, wrong, env, check=False)
    assert proc.returncode != 0 and "torch==2.6" in proc.stdout + proc.stderr and installed_torch(vpy) == "2.13.0"
    pip(vpy, [*wrong, "--no-deps"], env)
    assert installed_torch(vpy) == "2.13.0"



# PyPI's CUDA torch, as pip and Python see it: its distribution is unlabelled (`2.14.1`) while torch.__version__
# names the CUDA build (`2.14.1+cu130`). Stand-ins (the real wheels are 0.5 to 1 GB with 3 GB of CUDA libraries):
# each is this metadata version and this version.py, which test_the_pypi_torch_standin_is_what_pypi_ships compares
# with the real 2.14.1 wheel where pip can get it.
PYPI_TORCHES = {"2.14.1": ("2.14.1+cu130", "13.0", "cu13torch2.14cxx11abiTRUE"), "2.9.1": ("2.9.1+cu128", "12.8", "cu12torch2.9cxx11abiTRUE")}


def _pypi_standin(out: Path, dist: str) -> Path:
    module, cuda, _label = PYPI_TORCHES[dist]
    files = {**STANDIN_TORCH, "torch/version.py": f"__version__ = {module!r}\ncuda = {cuda!r}\nhip = None\n".encode()}
    return make_wheel(out, "torch", dist, "py3-none-any", files=files, requires_python=">=3.9")


@pytest.mark.slow  # a 0.5 GB download where pip fetches from PyPI itself
def test_the_pypi_torch_standin_is_what_pypi_ships(tmp_path):
    """The stand-in's two versions and CUDA release are the real PyPI wheel's (downloaded through pip's configured
    indexes, read, deleted); skipped where pip cannot get it."""
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--python-version",
                           "3.11", "--platform", "manylinux_2_28_x86_64", "torch==2.14.1", "-d", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    wheels = list(tmp_path.glob("torch-2.14.1-*.whl"))
    if proc.returncode or not wheels:
        pytest.skip(f"pip cannot get PyPI's torch 2.14.1 here: {proc.stderr.strip()[-300:]}")
    with zipfile.ZipFile(wheels[0]) as zf:
        meta = zf.read("torch-2.14.1.dist-info/METADATA").decode()
        version_py = zf.read("torch/version.py").decode()
    wheels[0].unlink()
    module, cuda, _label = PYPI_TORCHES["2.14.1"]
    assert re.search(r"^Version: 2\.14\.1$", meta, re.MULTILINE), meta[:300]
    assert f"__version__ = {module!r}" in version_py and f"cuda: Optional[str] = {cuda!r}" in version_py, version_py


def _front_door(vpy: Path, url: str, env: dict, cwd: Path, block: str | None = None) -> subprocess.CompletedProcess:
    """The README's first block (or BLOCK) as typed, through bash, in an activated venv: its `pip` (this test's
    pip, aimed at the venv: the test venvs hold none of their own) and its console scripts first on PATH."""
    if block is None:
        block = re.search(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL).group(1)
        assert block_commands(block) == list(FIRST_SCREEN)
    shims = cwd / f"shims-{vpy.parents[1].name}"
    shims.mkdir(exist_ok=True)
    (shims / "pip").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m pip --python "{vpy}" "$@"\n')
    (shims / "pip").chmod(0o755)
    script = "set -e\n" + block.replace(INDEX_URL, f"{url}/site/")
    shell_env = {**env, "PATH": os.pathsep.join([str(shims), str(vpy.parent), env["PATH"]]), "MAMBA_WHEEL_INDEX": f"{url}/site"}
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=shell_env, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip


def test_the_front_door_keeps_the_users_torch(tmp_path):
    """The README's first block, run as typed beside a model card's requirements file (a bare mamba-ssm and
    causal-conv1d) in a venv that already holds a torch, against the site served on
    127.0.0.1: with a CUDA 13 torch 2.14 (a stand-in of PyPI's build) it installs upstream's wheels of that cell
    and keeps that torch; with a real CPU torch 2.13 (a cell upstream's line does not build) it stops, saying why
    (the axis), and installs nothing. It never replaces the torch."""
    from sharedruns import python311, torch_venv

    from builder.publishing.index import build_index

    label = "cu13torch2.14cxx11abiTRUE"
    site, upstream = tmp_path / "www" / "site", tmp_path / "upstream-wheels"
    make_recipe_wheel(upstream, "causal-conv1d", "1.7.0", label, source=CAUSAL_CONV1D)
    make_recipe_wheel(upstream, "mamba-ssm", "2.3.2.post1", label, source=UPSTREAM_MAMBA)
    build_index(upstream, site / "upstream")
    doctor_dist.publish(site / "doctor")
    torches = tmp_path / "torches"
    make_wheel(torches, "torch", "2.14.1+cu130", files=STANDIN_TORCH, requires_python=">=3.9")
    env = isolated_env(tmp_path)
    env["PIP_INDEX_URL"] = "http://127.0.0.1:9/"  # no PyPI: the torch must come from nowhere but the venv
    (tmp_path / "requirements.txt").write_text("mamba-ssm\ncausal-conv1d\n")  # a model card's bare pair
    with serve(tmp_path / "www") as url:
        # a CUDA 13 torch 2.14: its cell's wheels, the torch kept
        cuda = make_venv(tmp_path / "cuda", find_python("3.11") or python311(), env)
        pip(cuda, ["install", "--no-index", "--find-links", str(torches), "torch==2.14.1+cu130"], env)
        proc = _front_door(cuda, url, env, tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        got = versions(cuda, ["torch", "mamba-ssm", "causal-conv1d"])
        assert got["torch"] == "2.14.1+cu130", got
        assert got["mamba-ssm"].lower() == f"2.3.2.post1+{label}".lower(), got
        assert got["causal-conv1d"].lower() == f"1.7.0+{label}".lower(), got
        assert "torch==2.14.1+cu130" in (tmp_path / "fixed.txt").read_text()
        # no requirements file: the README's other path, upstream's newest pair for this torch
        assert FRONT_DOOR in (REPO / "README.md").read_text()
        proc = _front_door(cuda, url, env, tmp_path, f"set -e\n{FRONT_DOOR}\n")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert versions(cuda, ["torch", "mamba-ssm"]) == {k: got[k] for k in ("torch", "mamba-ssm")}
        assert "torch==2.14.1+cu130" in (tmp_path / "mamba.txt").read_text()

        # PyPI's own torch (stand-ins: see PYPI_TORCHES): its unlabelled distribution kept, its cell installed
        for dist, (module, _cuda, want) in PYPI_TORCHES.items():
            if want != label:
                make_recipe_wheel(upstream, "causal-conv1d", "1.7.0", want, source=CAUSAL_CONV1D)
                make_recipe_wheel(upstream, "mamba-ssm", "2.3.2.post1", want, source=UPSTREAM_MAMBA)
                build_index(upstream, site / "upstream")
            pypi = make_venv(tmp_path / f"pypi-{dist}", find_python("3.11") or python311(), env)
            pip(pypi, ["install", "--no-index", str(_pypi_standin(tmp_path / f"pypi-torch-{dist}", dist))], env)
            proc = _front_door(pypi, url, env, tmp_path)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            got = versions(pypi, ["torch", "mamba-ssm", "causal-conv1d"])
            assert got["torch"] == dist, got
            assert got["mamba-ssm"].lower() == f"2.3.2.post1+{want}".lower(), got
            assert f"torch=={dist}  #" in (tmp_path / "fixed.txt").read_text()

        # a real CPU torch 2.13: no wheel of upstream's line, said so; nothing installed, the torch kept
        cpu = torch_venv(tmp_path / "cpu", python311(), "torch==2.13.0", env)
        before = versions_all(cpu)
        proc = _front_door(cpu, url, env, tmp_path)
        assert proc.returncode != 0, proc.stdout + proc.stderr
        assert "no wheel of upstream's line" in proc.stderr and "axis: accelerator" in proc.stderr, proc.stderr
        assert "--requirements checkout" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        after = versions_all(cpu)
        assert after.pop("mamba-doctor") and after == before, (before, after)
        assert after["torch"] == "2.13.0+cpu"


def versions_all(vpy: Path) -> dict[str, str]:
    code = "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    return json.loads(subprocess.run([str(vpy), "-I", "-c", code], capture_output=True, text=True, check=True).stdout)


def installed_torch(vpy: Path) -> str:
    return versions(vpy, ["torch"])["torch"]


def versions(vpy: Path, names: list[str]) -> dict[str, str]:
    code = f"import importlib.metadata as m, json; print(json.dumps({{d: m.version(d) for d in {names!r}}}))"
    return json.loads(subprocess.run([str(vpy), "-I", "-c", code], capture_output=True, text=True, check=True).stdout)


def run_doctor(cmd: str, env: dict, where: str) -> None:
    """The doctor as the guide gives it, with this checkout's mamba_ssm; a piped log is a real failure message."""
    stdin = None
    if "|" in cmd:
        stdin = "ERROR: ... ImportError: _C.so: undefined symbol: _ZN3c105ErrorC2ENS_14SourceLocationESs\n"
        cmd = cmd.split("|", 1)[1].strip()
    args = shlex.split(cmd)
    proc = subprocess.run([sys.executable, *args[1:]], input=stdin, capture_output=True, text=True, env={**env, "PYTHONPATH": str(REPO)}, cwd=REPO, timeout=120)  # fmt: skip
    assert proc.returncode in (0, 1), f"{where}: exit {proc.returncode}\n{proc.stderr}"
    if "--explain" in args:
        assert proc.returncode == 1 and "cxx11-abi-mismatch" in proc.stdout, f"{where}: {proc.stdout}"
    elif "--json" in args:
        assert json.loads(proc.stdout)["findings"], where
    else:
        assert "Checks" in proc.stdout and ("Verdict" in proc.stdout), f"{where}: {proc.stdout}"


def test_resolve_prints_what_the_publishing_guide_shows(loopback, cli):
    url, _torches = loopback
    text = (DOCS / "maintainer" / "publish-index.md").read_text()
    cmd = re.search(r"^\.venv/bin/python -m builder resolve (.*)$", text, re.M).group(1)
    shown = re.search(r"```text\n(project:.*?)```", text, re.S).group(1)
    args = shlex.split(cmd.replace(INDEX_URL, f"{url}/index"))
    proc = cli("resolve", *args)
    assert proc.returncode == 0, proc.stderr
    want = _local(shown, url)
    norm = lambda s: re.sub(
        r"sha256: +(<its sha256>|[0-9a-f]{64})",
        "sha256: HASH",
        re.sub(r"manylinux_2_28_x86_64|linux_x86_64", "PLATFORM", " ".join(s.split())),
    )
    assert norm(proc.stdout) == norm(want), proc.stdout


# --------------------------------------------------------------------------- generated references vs the code


def _parsers():
    return [("python -m builder", refgen.builder_parser()), ("python -m mamba_ssm.doctor", refgen.doctor_parser())]


def test_the_committed_reference_blocks_are_what_the_code_generates():
    # a maintainer reads the markdown as committed: every generated list is there, and the same as the code's
    stale = [str(p.relative_to(REPO)) for p in refgen.stale_pages()]
    assert not stale, f"generated blocks out of date in {stale}: run `python docs/hooks/refgen.py --write`"
    page = (DOCS / "reference" / "recipes.md").read_text()
    assert "<!-- end generated: recipe-placeholders -->" in page and "`${cuda_arch_list}`" in page
    assert "| 18 | `PreflightError`" in (DOCS / "reference" / "exit-codes.md").read_text()  # listed in source


def test_every_cli_command_and_flag_has_help_and_is_in_the_reference():
    page = refgen.render((DOCS / "reference" / "cli.md").read_text())
    missing = []
    for prefix, parser in _parsers():
        for path, helptext, p in refgen.walk(parser):
            title = prefix if path == parser.prog else f"{prefix} {path}"
            if path != parser.prog and not (helptext or p.description):
                missing.append(f"{title}: the command has no help")
            assert f"### `{title}`" in page, title
            section = page.split(f"### `{title}`", 1)[1].split("\n### ", 1)[0]
            for action in refgen.options(p):
                name = action.option_strings[0] if action.option_strings else (action.metavar or action.dest)
                if not action.help:  # argparse.SUPPRESS is a choice (hidden from --help), and the page says so
                    missing.append(f"{title} {name}: no help text")
                assert f"`{name}" in section, f"{title} {name} is not in the generated reference"
    assert not missing, "add help= to each: " + "; ".join(missing)


def test_every_environment_variable_the_code_reads_is_in_the_one_list():
    listed = {v["name"]: v for v in refgen.env_list()}
    reads = refgen.env_reads()
    missing = sorted(set(reads) - set(listed))
    assert not missing, (
        f"read by the code but not in mamba_build/envvars.toml: {', '.join(f'{n} ({sorted(reads[n])})' for n in missing)}"
    )
    for name, var in listed.items():
        assert var["section"] in refgen.SECTIONS, name
        assert var.get("effect"), f"{name}: no effect"
        assert sorted(var["read_by"]) == sorted(reads.get(name, ())), (
            f"{name}: envvars.toml says read_by {var['read_by']}, the code reads it in {sorted(reads.get(name, ()))}"
        )
    table = refgen.render((DOCS / "reference" / "environment.md").read_text())
    for name in listed:
        assert f"| `{name}` |" in table


def test_the_env_scan_finds_each_way_the_code_reads_a_variable():
    code = """
import os
ENV_X = "A_CONST"
def f(env, plan):
    os.environ.get("A_GET"); os.getenv("A_GETENV"); env["A_SUB"]; plan.env.get("A_ATTR")
    "A_IN" in env; env_bool(env, "A_BOOL"); env.get(ENV_X); _env_mib("A_MIB", 512)
    for var in ("A_LOOP1", "A_LOOP2"):
        env.get(var)
    env["NOT_A_READ"] = "1"
"""
    got = refgen._names_in_file(ast.parse(code))
    assert got == {"A_CONST", "A_GET", "A_GETENV", "A_SUB", "A_ATTR", "A_IN", "A_BOOL", "A_MIB", "A_LOOP1", "A_LOOP2"}


def test_every_exit_code_has_a_meaning_in_the_reference():
    from builder import errors
    from mamba_ssm.doctor import cli as doctor_cli

    page = refgen.render((DOCS / "reference" / "exit-codes.md").read_text())
    for cls in refgen.farm_errors():
        assert (cls.__doc__ or "").strip(), f"{cls.__name__} has no docstring: its meaning in the reference"
        assert f"`{cls.__name__}`" in page and re.search(rf"^\| {cls.exit_code} \|", page, re.M), cls.__name__
    constants = {v for k, v in vars(doctor_cli).items() if k.startswith("EXIT_") and isinstance(v, int)}
    assert constants == set(doctor_cli.EXIT_CODES), "every doctor EXIT_ constant needs its meaning in EXIT_CODES"
    # exit codes a command returns itself (`return 130`, `return DRIFT_EXIT if every else 0`) must be documented
    from builder.commands.cli import COMMANDS

    command_of = {command.module: name for name, command in COMMANDS.items()}
    for path in sorted((REPO / "builder").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for code, line in _returned_codes(ast.parse(path.read_text()), command=module.startswith("builder.commands.")):
            if code in refgen.OTHER_BUILDER_EXITS or (command_of.get(module), code) in refgen.COMMAND_EXITS:
                continue
            if path.name == "hipify_tus.py":  # a script hip.py runs, not a command: its codes are its own
                continue
            pytest.fail(f"{path.name}:{line}: exit {code} is in neither OTHER_BUILDER_EXITS nor COMMAND_EXITS "
                        "(docs/hooks/refgen.py): say what it means")  # fmt: skip
    assert errors.FarmError in refgen.farm_errors()


def _returned_codes(tree: ast.Module, command: bool = False) -> list[tuple[int, int]]:
    """(code, line) of each int a command function (main, _run*, a domain's run_* entry point, a COMMAND
    module's run) returns: a literal, a module-level int constant, or either branch of `a if c else b`."""
    consts = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
              and type(n.value.value) is int for t in n.targets if isinstance(t, ast.Name)}  # fmt: skip

    def ints(v):
        if isinstance(v, ast.Constant) and type(v.value) is int:
            return [v.value]
        if isinstance(v, ast.Name) and v.id in consts:
            return [consts[v.id]]
        if isinstance(v, ast.IfExp):
            return ints(v.body) + ints(v.orelse)
        return []

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and (
            node.name == "main" or node.name.startswith(("run_", "_run")) or (command and node.name == "run")
        ):
            out += [
                (c, r.lineno) for r in ast.walk(node) if isinstance(r, ast.Return) and r.value for c in ints(r.value)
            ]
    return out


def test_architecture_names_every_module_and_path_in_the_tree():
    text = (DOCS / "architecture.md").read_text()
    # the modules section: one entry per top-level bullet, its sub-bullets included
    modules = text.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    table = []
    for ln in modules.splitlines():
        if ln.startswith("- "):
            table.append(ln)
        elif ln.startswith("  ") and table:
            table[-1] += "\n" + ln
    rows = [ln for ln in text.splitlines() if ln.startswith("| `")] + [entry.replace("\n", " ") for entry in table]
    named = re.compile(r"`([^`\s]+)`")
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    tracked = [t for t in tracked if (REPO / t).exists()]
    # every path a table names exists (a folder, a file, or a glob)
    for row in rows:
        first = row.split(" | ")[0] if row.startswith("|") else row.split("`: ")[0] + "`"
        for token in named.findall(first):
            if "/" in token or "." in token:
                ok = (REPO / token.rstrip("/")).exists() or any(fnmatch(t, token) for t in tracked)
                assert ok, f"docs/architecture.md names {token}, which is not in the tree"
    # every top-level entry is in the layout table
    layout = text.split("## Repository layout", 1)[1].split("\n## ", 1)[0]
    for top in sorted({t.split("/")[0] + ("/" if "/" in t else "") for t in tracked}):
        if top in (".github/",):
            top = ".github/workflows/"
        assert f"`{top}`" in layout, f"{top} is not in docs/architecture.md's repository layout"
    # every module of the code is in the modules section: its path, a glob, or a folder's entry naming it
    exempt = {"builder/__init__.py", "mamba_ssm/__init__.py", "mamba_ssm/doctor/__main__.py"}

    def covered(t: str) -> bool:
        for row in table:
            if f"`{t}`" in row or any("*" in g and fnmatch(t, g) for g in named.findall(row)):
                return True
            for g in _parents(t):
                rest = t[len(g) :]
                if f"`{g}`" in row and (
                    f"`{rest}`" in row
                    or ("/" not in rest and f"`{Path(rest).stem}`" in row)
                    or any("/" in tok and t.endswith("/" + tok) for tok in named.findall(row))  # `standins/gh.py`
                ):
                    return True
        return False

    for t in tracked:
        if t.startswith(("builder/", "mamba_build/", "mamba_ssm/", "csrc/")) and t not in exempt:
            if t.endswith("/__init__.py") and t.count("/") > 1 and not covered(t):
                continue  # a subpackage's __init__: its folder's row covers it
            assert covered(t), f"{t} is not in docs/architecture.md's modules section"


def _parents(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) + "/" for i in range(len(parts))]


def test_every_benchmark_is_in_the_docs_with_its_command():
    text = (
        "\n".join(p.read_text() for p in (DOCS / "internals").glob("*.md"))
        + (DOCS / "maintainer" / "gpu-check.md").read_text()
    )
    for script in sorted((REPO / "benchmarks").glob("*.py")):
        assert f"benchmarks/{script.name}" in text, f"benchmarks/{script.name} is on no docs page"


def test_the_support_page_shows_tiers_gpu_architectures_and_the_served_pythons():
    """Generated from the release plan and the evidence ledger: both product lines, every Python the plan serves,
    GPUs named by architecture, each row's tiers exactly what builder.publishing.tiers computes from the ledger
    (ROCm, never built as a wheel here, only planned), and what to do on the platforms with no wheel."""
    from collections import Counter

    from builder.planning.plan import load_plan
    from builder.publishing import tiers

    plan = load_plan(profile="release")
    rows = refgen.support_tiers()
    assert {(r["kind"], r["platform"]) for r in rows if r["line"] == "checkout"} == {
        (refgen._kind(c.accelerator), c.platform) for c in load_plan().cells
    }
    assert {r["project"] for r in rows if r["line"] == "upstream"} == {"mamba-ssm", "causal-conv1d"}
    vkey = lambda v: tuple(map(int, v.split(".")))
    pythons = sorted({c.python for c in plan.cells}, key=vkey)
    page = refgen.render((DOCS / "reference" / "platforms.md").read_text())
    assert "<!-- generated" not in page
    assert pythons[0] in page and pythons[-1] in page
    archs = {a for b in plan.builds for a in b.archs}
    for arch, name in (("gfx942", "MI300"), ("sm_121", "GB10"), ("sm_90", "H100")):
        if arch in archs:
            assert re.search(rf"`{arch}` \([^)]*{name}", page), arch
    # each row's counts are the computation's, cell for cell
    computed = Counter()
    for _cell, b, tier, _rec in tiers.cell_tiers(plan, tiers.load_ledger()):
        computed[("upstream" if b.from_recipe else "checkout", b.project, refgen._kind(b.accelerator), b.platform, tier)] += 1
    shown = Counter()
    for r in rows:
        for t in r["tier_list"]:
            shown[(r["line"], r["project"], r["kind"], r["platform"], t)] += 1
    assert shown == computed
    # each row's glibc is what its records' repaired tags say, and the plan's floor only for cells with no record
    from builder.verifying.evidence import glibc_floor, tag_glibc

    floors = {}
    for _cell, b, _tier, rec in tiers.cell_tiers(plan, tiers.load_ledger()):
        key = ("upstream" if b.from_recipe else "checkout", b.project, refgen._kind(b.accelerator), b.platform)
        built, planned = floors.setdefault(key, (set(), set()))
        if glibc_floor(rec):
            built.add(glibc_floor(rec))
        else:
            planned.add(tag_glibc(b.manylinux))
    for r in rows:
        built, planned = floors[(r["line"], r["project"], r["kind"], r["platform"])]
        assert (set(r["glibc"]), set(r["glibc_planned"])) == (built, planned), r["glibc"]
        assert (f"≥ {r['glibc'][0]}" if r["glibc"] else f"planned ≥ {r['glibc_planned'][0]}") in page
    assert all(set(r["tier_list"]) == {"planned"} for r in rows if r["kind"] == "rocm"), "no ROCm wheel was built"
    assert "hip-compile" in next(r["stand_in"] for r in rows if r["kind"] == "rocm")
    assert "**Windows**: use WSL2" in page and "**macOS**: no" in page


def test_the_data_files_say_the_exit_code_drift_returns():
    from builder.upkeep import drift

    said = re.search(r"exit (\d+) on\n# drift", (REPO / "builder" / "data" / "torch.toml").read_text())
    assert said and int(said.group(1)) == drift.DRIFT_EXIT, "builder/data/torch.toml names another exit code"


def test_the_generated_platform_table_counts_every_cell():
    from builder.planning.plan import load_plan

    md = refgen.platform_markdown()
    plan = load_plan()
    assert md.startswith(f"{len(plan.cells)} cells") and f"served by {len(plan.builds)} builds" in md
    rows = [ln for ln in md.splitlines() if re.match(r"\| 2\.\d+ \|", ln)]
    assert {r.split(" | ")[0][2:] for r in rows} == {c.torch for c in plan.cells}


def test_the_release_publishes_the_site_next_to_the_index():
    import yaml

    wf = yaml.safe_load((REPO / ".github" / "workflows" / "release.yml").read_text())
    steps = wf["jobs"]["publish"]["steps"]
    names = [s.get("name", "") for s in steps]
    docs = next(i for i, s in enumerate(steps) if s.get("run", "").startswith("nox -s docs"))
    site_dir = re.search(r"--site-dir (\S+)", steps[docs]["run"]).group(1)
    stage = names.index("Stage the site for GitHub Pages")
    pages_path = steps[stage]["with"]["path"].rstrip("/")
    assert names.index("Assemble the site") < docs < stage, "build the docs after assembling, before staging"
    assert site_dir == f"{pages_path}/docs", f"the docs go to {site_dir}, the Pages artifact is {pages_path}"
    assert "if" not in steps[docs], "a dry run's site artifact keeps the docs too"
    assert "docs" in re.findall(r"^def (\w+)", (REPO / "noxfile.py").read_text(), re.M)


def test_the_docs_name_the_index_the_code_uses():
    import yaml

    from mamba_ssm import prebuilt as _prebuilt

    assert _prebuilt.DEFAULT_INDEX_URL.rstrip("/") + "/" == INDEX_URL, "the docs' index URL is not DEFAULT_INDEX_URL"
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert config["site_url"] == INDEX_URL + "docs/", "the site is published under docs/ of the index"
    for page in ["README.md", *(str(p.relative_to(REPO)) for p in DOCS.rglob("*.md"))]:
        text = (REPO / page).read_text()
        stale = re.findall(r"https://<index>|<owner>\.github\.io/<repo>", text)
        assert not stale, f"{page}: a placeholder for the index's address, {stale[0]!r}; give {INDEX_URL}"


def test_add_recipe_lists_every_placeholder_as_the_code_defines_them():
    """The newcomer's page holds the placeholder table itself (not a marker filled at site build): it is the
    generated table, line for line, so a placeholder added to builder/planning/recipes.py fails here."""
    page = (DOCS / "maintainer" / "add-recipe.md").read_text()
    table = [line.strip() for line in refgen.placeholders_markdown().splitlines() if line.strip()]
    lines = [line.strip() for line in page.splitlines()]
    start = lines.index(table[0])
    assert lines[start : start + len(table)] == table


# Words that tie a comment to the project's tracker or to files outside the repository rather than to the code.
_HISTORY = re.compile(r"(?<!act )\b(?:issue|Issue) #?\d+|\(#\d+\)|" + "DESIGN" + r"\.md")


def test_comments_describe_the_code_not_the_trackers_history():
    """No comment, docstring or page names one of this project's issue numbers or a design file a clone does not
    hold (act's own issue, named with its project, is a reference and stays)."""
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in tracked:
        if name == "CHANGELOG.md" or not name.endswith((".py", ".md", ".sh", ".toml", ".yml", ".j2", ".cu", ".cpp", ".h")):
            continue
        for n, line in enumerate((REPO / name).read_text(errors="replace").splitlines(), 1):
            if _HISTORY.search(line):
                found.append(f"{name}:{n}: {line.strip()[:100]}")
    assert not found, "\n".join(found)
    issue = "issue"
    assert _HISTORY.search(f"quoted in {issue} 2") and _HISTORY.search("see (" + "#12)")
    assert not _HISTORY.search(f"nektos/act {issue} 6021")

