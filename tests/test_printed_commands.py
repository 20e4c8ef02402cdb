"""Every install command a user is shown, checked against what the release builds.

The commands of README.md, docs/, both lines' coverage pages and the doctor's fixes: each pin must be a wheel
of ``python -m builder plan --profile release`` and each index URL a page of the published layout that lists
it (builder/publishing/pins.py). A planted wrong pin fails.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import REPO
from test_explain import CASES, UPSTREAM_ERRORS
from wheelmaker import V, make_wheel

from builder.publishing import pins
from docs.hooks import refgen
from mamba_ssm.doctor.classify import Context, classify

PAGES = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md"))]


@pytest.fixture(scope="module")
def release():
    return pins.release_wheels()


@pytest.fixture(scope="module")
def page_commands() -> dict[str, list[str]]:
    """page -> its install commands, the generated blocks rendered as the site renders them."""
    return {page: pins.commands_in(refgen.render((REPO / page).read_text(), page)) for page in PAGES}


def _pinned(commands) -> list[str]:
    return [c for c in commands if any(label for _n, _v, label in pins.parse(c)[0])]


def test_every_command_on_the_pages_installs_what_the_release_builds(page_commands, release):
    bad = {f"{page}: {cmd}": pins.check(cmd, release) for page, cmds in page_commands.items() for cmd in cmds}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, "\n".join(f"{k}\n    {'; '.join(v)}" for k, v in bad.items())
    pinned = [c for cmds in page_commands.values() for c in _pinned(cmds)]
    # the front door's two lines, the guides' examples, uv's form, the publishing guide's resolve output
    assert len(pinned) >= 8, pinned
    for page in ("README.md", "docs/index.md", "docs/user/install-prebuilt.md", "docs/user/troubleshooting.md"):
        assert _pinned(page_commands[page]), f"{page} shows no pinned command"


@pytest.mark.parametrize(
    ("good", "bad", "says"),
    [
        # a label no release builds: torch >= 2.10 on CPU is the stable wheel's
        (
            f"mamba-ssm=={V}+cputorchstable",
            f"mamba-ssm=={V}+cputorch2.13cxx11abiTRUE",
            "no wheel of the release has the label",
        ),
        # a version the release does not build
        (f"mamba-ssm=={V}+cputorchstable", "mamba-ssm==2.3.1+cputorchstable", "not 2.3.1"),
        # upstream's wheel on this line's root
        ("wheels/upstream/cu13-torch2.14", "wheels/cu13-torch2.14", "upstream line's"),
        # a torch no release builds
        ("wheels/upstream/cu13-torch2.14", "wheels/upstream/cu13-torch2.16", "no variant page"),
    ],
)
def test_a_planted_wrong_pin_fails(page_commands, release, good, bad, says):
    """The dead pin the entry pages once printed, and others like it, planted in the real pages' text."""
    planted = []
    for page in PAGES:
        text = refgen.render((REPO / page).read_text(), page)
        if good in text:
            planted += [(page, c) for c in pins.commands_in(text.replace(good, bad)) if bad in c]
    assert planted, f"no page shows {good!r} to plant {bad!r} in"
    for page, cmd in planted:
        problems = pins.check(cmd, release)
        assert any(says in p for p in problems), f"{page}: {cmd!r} passed: {problems}"


def test_wrong_line_and_wrong_page_fail(release):
    site = pins.SITE
    ok = f"pip install causal-conv1d==1.7.0+cu12torch2.6cxx11abiFALSE --extra-index-url {site}upstream/cu12-torch2.6-cxx11abiFALSE/"
    assert pins.check(ok, release) == []
    assert pins.check(ok, release, python="cp312", platform="linux_x86_64") == []
    # upstream's package from this line's root
    problems = pins.check(ok.replace("upstream/", ""), release)
    assert any("upstream line's" in p for p in problems), problems
    # a page that does not list the pinned wheel
    problems = pins.check(ok.replace("cu12-torch2.6-cxx11abiFALSE/", "cu12-torch2.7-cxx11abiTRUE/"), release)
    assert any("not listed on" in p for p in problems), problems
    # a Python the release builds no wheel for, a folder the site does not have
    assert any("for cp39" in p for p in pins.check(ok, release, python="cp39"))
    assert any("not a page" in p for p in pins.check(ok.replace("upstream/", "upstreams/"), release))
    # a farm label with no farm index: pip looks on PyPI, which has no such wheel
    assert any("no index" in p for p in pins.check(f"pip install mamba-ssm=={V}+cputorchstable", release))
    # the stable wheel from its own page and from a page it serves; not from a torch it does not serve
    stable = f"pip install mamba-ssm=={V}+cputorchstable --extra-index-url {site}"
    assert pins.check(stable + "cpu-torchstable-abi3/", release) == []
    assert pins.check(stable + "cpu-torch2.13-cxx11abiTRUE/", release, python="cp314", platform="linux_aarch64") == []
    assert any("not listed on" in p for p in pins.check(stable + "cpu-torch2.9-cxx11abiTRUE/", release))


def test_commands_are_read_as_a_reader_copies_them():
    text = (
        f"Run `pip install mamba-ssm=={V}+cputorchstable --extra-index-url https://x/y/`; then\n"
        "```bash\npip install causal-conv1d==1.7.0+cu13torch2.14cxx11abiTRUE \\\n  --extra-index-url https://x/z/   # a note\n```\n"
        f"fix: '/usr/bin/python3' -m pip install --force-reinstall 'mamba-ssm=={V}+<label>' --extra-index-url "
        "https://x/<variant>/  (if the index has your variant; else build: ...)\n"
    )
    got = pins.commands_in(text)
    assert got == [
        f"pip install mamba-ssm=={V}+cputorchstable --extra-index-url https://x/y/",
        "pip install causal-conv1d==1.7.0+cu13torch2.14cxx11abiTRUE  --extra-index-url https://x/z/",
        f"'/usr/bin/python3' -m pip install --force-reinstall 'mamba-ssm=={V}+<label>' --extra-index-url https://x/<variant>/",
    ], got
    assert pins.parse(got[2]) == ([("mamba-ssm", V, "<label>")], ["https://x/<variant>/"])


# --------------------------------------------------------------------------- the coverage pages


@pytest.fixture(scope="module")
def coverage_pages(tmp_path_factory, release):
    """Both lines' indexes as the release workflow publishes them (--base-url the site, and its upstream/), from
    one wheel per build of the release plan: name, version, label, Python tag and platform as the build's."""
    from builder.publishing.index import build_index

    root = tmp_path_factory.mktemp("release-index")
    for w in release:
        folder = root / "wheels" / w.line
        py = w.python
        # a recipe's wheel as the farm's repair tags it (its floor): upstream's own release wheels are linux_*
        plat = w.platform if w.line == "checkout" else f"manylinux_{w.glibc.replace('.', '_')}_{w.platform[6:]}"
        whl = make_wheel(folder, w.project, f"{w.version}+{w.label}", f"{py}-{'abi3' if w.abi3 else py}-{plat}")
        spec = {"serves": sorted(w.pages)} if w.abi3 else {}
        if w.line == "upstream":
            spec |= {"project": w.project, "source": f"sdist:{w.project}=={w.version}@sha256:{'0' * 64}"}
        Path(f"{whl}.spec.json").write_text(json.dumps(spec))
    out = {}
    for line, folder in pins.LINE_FOLDERS.items():
        build_index(root / "wheels" / line, root / line, base_url=pins.SITE + folder)
        out[line] = (root / line / "index.html").read_text()
    return out


CELL = re.compile(
    r'<a href="[^"]*" title="(?P<fn>[^"]+)">.*?<code class="cmd" data-command="(?P<cmd>[^"]+)">', re.DOTALL
)


@pytest.mark.parametrize("line", list(pins.LINE_FOLDERS))
def test_every_cell_of_the_coverage_pages_installs_a_wheel_the_release_builds(coverage_pages, release, line):
    cells = [(html.unescape(m["fn"]), html.unescape(m["cmd"])) for m in CELL.finditer(coverage_pages[line])]
    # a cell shows one wheel (the newest release of it): count the line's wheel kinds, every release as one
    n = len({(w.project, w.label, w.python, w.platform) for w in release if w.line == line})
    assert len(cells) >= n // 3, f"{len(cells)} cells on the {line} page for {n} kinds of wheel"
    bad = []
    for fn, cmd in cells:
        py, _abi, plat = fn.removesuffix(".whl").split("-")[-3:]
        plat = re.sub(r"^manylinux_\d+_\d+_", "linux_", plat)  # a repaired wheel's tag: the build's platform
        problems = pins.check(cmd, release, python=py, platform=plat)
        if problems or not cmd.startswith("pip install "):
            bad.append(f"{fn}: {cmd}: {problems}")
    assert not bad, "\n".join(bad[:20])


# --------------------------------------------------------------------------- the doctor's fixes

CU12 = {"torch_version": "2.6.0+cu124", "torch_cxx11abi": False, "variant_key": "cu12-torch2.6-cxx11abiFALSE",
        "variant_label": "cu12torch2.6cxx11abiFALSE", "python": "python"}  # fmt: skip
# The contexts the doctor classifies in: --explain's (nothing known; the line read from the message), and the
# live doctor's, which knows the cell and the installed line (checks.context_for).
KNOWN = {
    "explain": Context(),
    "explain-cu12-torch2.6": Context(**CU12),
    "checkout-cu12-torch2.6": Context(**CU12, mamba_version=V, line="checkout"),
    "upstream-cu12-torch2.6": Context(**CU12, mamba_version="2.3.2.post1", line="upstream", source="mamba-ssm==2.3.2.post1"),
    "checkout-cpu-torch2.13": Context(
        torch_version="2.13.0+cpu", torch_cxx11abi=True, variant_key="cpu-torch2.13-cxx11abiTRUE",
        variant_label="cputorch2.13cxx11abiTRUE", mamba_version=V, python="python", line="checkout",
        wheel=(f"mamba_ssm-{V}+cputorchstable-cp310-abi3-linux_x86_64.whl", "cpu-torch2.13-cxx11abiTRUE"),
    ),
}  # fmt: skip


@pytest.mark.parametrize("ctx", KNOWN.values(), ids=list(KNOWN))
def test_every_fix_the_classifier_prints_installs_what_the_release_builds(release, ctx):
    bad, checked = [], 0
    for source, message, *_ in [*CASES, *UPSTREAM_ERRORS]:
        for d in classify(message, ctx):
            for cmd in pins.commands_in(d.fix):
                checked += 1
                problems = pins.check(cmd, release)
                if problems:
                    bad.append(f"{source} ({d.kind}): {cmd}: {problems}")
    assert checked >= 10 and not bad, "\n".join(bad)


def test_the_doctors_lines_are_the_release_plans():
    """The doctor pins these versions where the installed one is unknown: mamba_ssm/doctor/lines.py is generated
    from the plan (`python -m builder doctor-dist --write-lines`), so a recipe's new version moves it."""
    from mamba_ssm.doctor.lines import LINES

    assert (REPO / pins.LINES_MODULE).read_text() == pins.doctor_lines_source(), (
        f"{pins.LINES_MODULE} is behind the release plan: run `python -m builder doctor-dist --write-lines`"
    )
    assert LINES["upstream"]["projects"] == {"causal-conv1d": "1.7.0", "mamba-ssm": "2.3.2.post1"}
    # a recipe pinned to a newer sdist: the generated text follows it
    moved = [w if w.project != "causal-conv1d" else replace(w, version="1.8.0") for w in pins.release_wheels()]
    assert '"causal-conv1d": "1.8.0"' in pins.doctor_lines_source(moved)


def test_free_threaded_python_is_listed_as_not_supported_and_the_release_serves_none(release):
    """The support page says what a user of 3.14t meets (builder/data/support.toml): true while no wheel of the
    release is free-threaded."""
    page = refgen.support_markdown()
    assert "**free-threaded CPython (3.14t, 3.15t)**" in page and "cp314t" in page
    assert not [w for w in release if w.python.endswith("t")]
