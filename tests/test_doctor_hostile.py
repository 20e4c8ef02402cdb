"""The doctor against hostile input: pasted text that backtracks, outside values that become words of
a printed command, escape sequences meant to draw over the report, and indexes that lie, trickle or flood.

The worst-case texts are built from the rule patterns themselves (each pattern walked to the longest text it
almost matches), so a rule added later is tested the same way. Times are ratios against plain text of the
same size measured in the same run, never wall-clock limits.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import hostilekit
import pytest
from hostilekit import FAKE_LINE, raw_hidden

from mamba_ssm import guard
from mamba_ssm import prebuilt as _prebuilt
from mamba_ssm import variant as _variant
from mamba_ssm.doctor import classify, report
from mamba_ssm.doctor.classify import _COMPILED, _UNDEFINED_RE, SCAN_HEAD, SCAN_TAIL, Context, install_line, scan_window

try:  # 3.11+; 3.10 calls it sre_parse
    import re._constants as sre_constants
    import re._parser as sre_parse
except ImportError:  # pragma: no cover
    import sre_constants
    import sre_parse

from conftest import REPO
from wheelmaker import V


def doctor(*args: str, stdin=None, input_bytes: bytes | None = None, env: dict | None = None, timeout: float = 60):
    e = {k: v for k, v in os.environ.items() if k != "MAMBA_WHEEL_INDEX"}
    e.update(env or {})
    e["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "mamba_ssm.doctor", *args], stdin=stdin, input=input_bytes, env=e, capture_output=True,
        timeout=timeout, check=False,
    )  # fmt: skip


# --------------------------------------------------------------------------- 1. a linear classifier


def _patterns() -> list[str]:
    out = [_UNDEFINED_RE.pattern]
    for _rule, groups in _COMPILED:
        out += [rx.pattern for group in groups for rx in group]
    return out


def _repeats(parsed) -> list[tuple[int, int]]:
    """(min, max) of every repeat in a parsed pattern, however deep."""
    found = []
    for op, av in parsed:
        if op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, getattr(sre_constants, "POSSESSIVE_REPEAT", None)):
            found.append((av[0], av[1]))
            found += _repeats(av[2])
        elif op == sre_constants.SUBPATTERN:
            found += _repeats(av[3])
        elif op == sre_constants.BRANCH:
            for alt in av[1]:
                found += _repeats(alt)
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            found += _repeats(av[1])
    return found


def test_every_repeat_in_the_rules_is_bounded():
    """No `*`, `+` or `.*?` can scan the whole text from each start: each repeat has a fixed maximum."""
    for pattern in _patterns():
        unbounded = [r for r in _repeats(sre_parse.parse(pattern)) if r[1] == sre_constants.MAXREPEAT]
        assert not unbounded, f"an unbounded repeat in {pattern!r}"


_CLASS_CHAR = {sre_constants.CATEGORY_DIGIT: "1", sre_constants.CATEGORY_WORD: "a", sre_constants.CATEGORY_SPACE: " "}


def _near(parsed) -> str:
    """The longest text ``parsed`` matches, taking the first branch and the most repeats: without its last
    character, it is the text that makes the pattern work hardest before failing."""
    out = []
    for op, av in parsed:
        if op == sre_constants.LITERAL:
            out.append(chr(av))
        elif op == sre_constants.SUBPATTERN:
            out.append(_near(av[3]))
        elif op == sre_constants.BRANCH:
            out.append(_near(av[1][0]))
        elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT):
            out.append(_near(av[2]) * min(av[1], 64))
        elif op == sre_constants.IN:
            out.append(_class_char(av))
        elif op == sre_constants.NOT_LITERAL:
            out.append("a" if av != ord("a") else "b")
        elif op == sre_constants.ANY:
            out.append("a")
    return "".join(out)


def _class_char(items) -> str:
    for op, av in items:
        if op == sre_constants.NEGATE:
            return "a"
        if op == sre_constants.LITERAL:
            return chr(av)
        if op == sre_constants.RANGE:
            return chr(av[0])
        if op == sre_constants.CATEGORY:
            return _CLASS_CHAR.get(av, "a")
    return "a"


def adversarial_units() -> dict[str, str]:
    """Per pattern, its near-miss (the match less its last character), and one text holding all of them."""
    units = {p: _near(sre_parse.parse(p))[:-1] for p in _patterns()}
    units["all"] = "".join(units.values())
    return units


def _fill(unit: str, size: int) -> str:
    return (unit * (size // max(1, len(unit)) + 1))[:size]


PLAIN_LINE = "  Building wheel for example (pyproject.toml) ... compiling src/kernels/scan_{}.cpp with -O3 -fPIC\n"


def _plain(size: int) -> str:
    return "".join(PLAIN_LINE.format(i) for i in range(size // len(PLAIN_LINE) + 1))[:size]


def _best_of(text: str, runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        classify(text)
        best = min(best, time.perf_counter() - t0)
    return best


def test_the_near_misses_really_are_near():
    """The generator is honest: each near-miss completed by its last character matches its own pattern."""
    for pattern in _patterns():
        full = _near(sre_parse.parse(pattern))
        assert re.search(pattern, full, re.IGNORECASE), (pattern, full)


@pytest.mark.parametrize("size", [1 << 20, 10 << 20], ids=["1MB", "10MB"])
def test_adversarial_text_costs_what_plain_text_costs(size):
    """1 MB and 10 MB of each pattern's worst case classify within 5x of 1 MB of plain build log (the old
    `.*?` rules took 19 s for 100 KB of `pip-build-env`, 34 s for 100 KB of `No module named torch`)."""
    baseline = _best_of(_plain(1 << 20))
    worst = {}
    for pattern, unit in adversarial_units().items():
        worst[pattern] = _best_of(_fill(unit, size), runs=1)
    slowest = max(worst, key=worst.get)
    if worst[slowest] > 5 * baseline:  # a loaded machine: measure that one again before judging
        worst[slowest] = _best_of(_fill(adversarial_units()[slowest], size))
    assert worst[slowest] <= 5 * baseline, (slowest, worst[slowest], baseline)
    print(f"\nplain 1 MB {baseline * 1000:.0f} ms; slowest adversarial {size >> 20} MB {worst[slowest] * 1000:.0f} ms ({slowest!r})")


def test_a_long_log_is_searched_at_both_ends_and_the_report_says_so():
    head_error = "ERROR: nvcc was not found\n"
    tail_error = "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory\n"
    text = head_error + _plain(2 << 20) + tail_error
    window, note = scan_window(text)
    assert len(window) <= SCAN_HEAD + SCAN_TAIL + 1 and note and str(len(text)) in note
    kinds = {d.kind for d in classify(text)}
    assert {"nvcc-missing", "cuda-runtime-major"} <= kinds
    p = doctor("--explain", "-", input_bytes=text.encode())
    out = p.stdout.decode()
    assert p.returncode == 1 and out.startswith("note: the text has") and "cuda-runtime-major" in out, out[:500]
    p = doctor("--explain", "-", "--json", input_bytes=text.encode())
    assert "searched the first 64 KiB" in json.loads(p.stdout)["note"]


# --------------------------------------------------------------------------- 2. every printed command quoted


HOSTILE_INDEXES = [
    "https://x.example/my wheels",
    "https://x.example/w; touch MARK|sh",
    "https://x.example/$(touch MARK)",
    "https://x.example/`touch MARK`",
    "https://x.example/it's\"; touch MARK #",
    "/srv/wheel index/$HOME/&& touch MARK",
]


@pytest.fixture
def recorder(tmp_path) -> Path:
    """A stand-in for the interpreter (its path hostile too): writes the words and the environment it got."""
    folder = tmp_path / "py $(touch MARK) `x` dir"
    folder.mkdir()
    py = folder / "python"
    py.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do printf "%s\\0" "$a"; done > "$(dirname "$0")/argv"\n'
        'printf "%s" "${MAMBA_CUDA_ARCHS-unset}" > "$(dirname "$0")/arch"\n'
    )
    py.chmod(0o755)
    return py


def _run_pasted(command: str, cwd: Path) -> None:
    subprocess.run(["sh", "-c", command], cwd=cwd, check=True, timeout=30, env={"PATH": os.environ["PATH"], "HOME": str(cwd)})


def _marks(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*MARK*") if not p.is_dir()]


@pytest.mark.parametrize("index", HOSTILE_INDEXES)
def test_the_reinstall_line_gives_back_the_exact_words_and_runs_nothing_else(tmp_path, recorder, index):
    variant = _variant.from_values("2.6.0", cuda="12.4", cxx11abi=False)
    ctx = Context(variant_key=variant.key, variant_label=variant.label, mamba_version=V, index_url=index,
                  python=str(recorder))  # fmt: skip
    line = install_line(ctx)
    url = _prebuilt.normalize_root(index).rstrip("/") + f"/{variant.key}/"
    want = [str(recorder), "-m", "pip", "install", "--force-reinstall", "--no-deps", f"mamba-ssm=={V}+{variant.label}",
            "--extra-index-url", url]  # fmt: skip
    assert shlex.split(line) == want
    work = tmp_path / "work"
    work.mkdir()
    _run_pasted(line, work)
    assert (recorder.parent / "argv").read_bytes().split(b"\0")[:-1] == [w.encode() for w in want[1:]]
    assert not _marks(tmp_path), "the pasted line ran something else"


def test_a_source_build_line_keeps_its_assignments_and_quotes_their_values(tmp_path, recorder):
    from mamba_ssm.doctor.classify import _fix

    cap = "8.6;touch MARK $(touch MARK2)"
    ctx = Context(python=str(recorder), gpus=[{"name": "x", "capability": cap}], line="checkout",
                  variant_key="cu12-torch2.6-cxx11abiFALSE", variant_label="cu12torch2.6cxx11abiFALSE")  # fmt: skip
    fix = _fix("gpu-arch", ctx, {})
    command, _, aside = fix.rpartition("build for this GPU: ")[2].partition("  (")
    assert aside.startswith("the build needs GCC >= 9"), aside  # the compiler floor, beside every source build
    uninstall, _, build = command.partition(" && ")  # the package uninstalled, then built beside the torch kept
    assert shlex.split(uninstall)[-3:] == ["uninstall", "-y", "mamba-ssm"], uninstall
    assert shlex.split(build)[:2] == [f"MAMBA_CUDA_ARCHS={cap}", "MAMBA_FORCE_BUILD=TRUE"]
    assert "torch==<torch>" in shlex.split(build) and "--no-deps" not in build, build
    _run_pasted(command, tmp_path)
    assert (recorder.parent / "arch").read_text() == cap  # an assignment, not a command named 'MAMBA_CUDA...'
    assert not _marks(tmp_path)


def test_the_cli_quotes_the_index_in_the_fix(tmp_path):
    index = "https://x.example/w; touch MARK|sh $(touch MARK2)"
    symbol = "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
    for env, args in (({}, ["--index", index]), ({"MAMBA_WHEEL_INDEX": index}, [])):
        p = doctor("--explain", f"ImportError: .../mamba_ssm/_C.abi3.so: undefined symbol: {symbol}", *args, env=env)
        out = p.stdout.decode()
        command = re.search(r"fix: (.*?)  \(<torch> is the torch", out).group(1)
        words = shlex.split(command)
        assert words[-1] == index + "/<variant>/", words
        command = command.replace(words[0], "true")  # the interpreter, each time: only the words matter
        _run_pasted(command, tmp_path)
        assert not _marks(tmp_path), out


@pytest.mark.parametrize("where", ["--index", "MAMBA_WHEEL_INDEX"])
@pytest.mark.parametrize("value", ["https://x.example/a\ntouch MARK", "https://x.example/\r\x1b[2Kok", "https://x.example/\u202eabc"])
def test_an_index_holding_control_characters_is_refused_before_anything_is_printed(where, value):
    args, env = (["--index", value], {}) if where == "--index" else ([], {"MAMBA_WHEEL_INDEX": value})
    p = doctor("--explain", "nvcc was not found", *args, env=env)
    err = p.stderr.decode()
    assert p.returncode == 2 and err.startswith(f"error: {where} ") and "control characters" in err, err
    assert not p.stdout and not raw_hidden(err.rstrip("\n")) and "Traceback" not in err


def test_a_bad_argument_is_shown_escaped():
    p = doctor(f"--bogus={FAKE_LINE}")
    err = p.stderr.decode()
    assert p.returncode == 2 and "error: unrecognized arguments: --bogus=\\x1b[2K" in err, err
    assert not raw_hidden(err)


def test_the_live_checks_quote_every_command(tmp_path, recorder):
    """run_checks' fixes (the reinstall, the torch repair, the source build for a GPU) with hostile facts."""
    from mamba_ssm.doctor.checks import run_checks

    hostile_version = "2.14.1'; touch MARK #"
    facts = {
        "torch": {"installed": True, "import_error": "ImportError: x", "version": hostile_version},
        "mamba_ssm": {"public_version": V, "installed_version": V, "location": "/x", "extensions": []},
        "cuda_toolkit": {}, "compiler": {},
    }  # fmt: skip
    findings, _ = run_checks(facts, index_url="https://x.example/$(touch MARK)", offline=True)
    torch_fix = next(f.fix for f in findings if f.check == "torch")
    command = re.search(r"repair torch first \((.*), from the index", torch_fix).group(1)
    assert shlex.split(command)[-1] == f"torch=={hostile_version}"
    _run_pasted(command.replace(shlex.split(command)[0], "true", 1), tmp_path)
    assert not _marks(tmp_path)


# --------------------------------------------------------------------------- 3. neutralised output


def test_a_fake_install_line_drawn_over_the_report_is_printed_escaped():
    text = f"error: [Errno 2] No such file or directory: '{FAKE_LINE}/bin/nvcc'"
    p = doctor("--explain", text)
    out = p.stdout.decode()
    assert p.returncode == 1 and "nvcc-missing" in out
    assert not raw_hidden(out), raw_hidden(out)
    assert "\\x1b[2K\\r\\x1b[1A" in out and "\\u202e" in out  # visible, not obeyed
    p = doctor("--explain", text, "--json")
    raw = p.stdout.decode()
    assert not raw_hidden(raw) and "\x1b" not in raw
    assert FAKE_LINE in json.loads(raw)["diagnoses"][0]["evidence"]  # the data is kept, escaped


def test_the_environment_report_shows_outside_text_escaped():
    """An import error, a path, a compiler banner, a GPU name and an index answer, each drawing over the report."""
    from mamba_ssm.doctor.checks import run_checks

    facts = {
        "python": {"version": "3.11", "tag": "cp311", "executable": f"/x/{FAKE_LINE}/python"},
        "platform": {"platform": "Linux", "glibc": "2.36"},
        "torch": {"installed": True, "import_error": f"ImportError: {FAKE_LINE}", "version": f"2.6.0{FAKE_LINE}"},
        "mamba_ssm": {"public_version": V, "installed_version": V, "location": f"/site/{FAKE_LINE}",
                      "extensions": [{"module": "mamba_ssm._C", "path": f"/site/{FAKE_LINE}/_C.so", "abi": FAKE_LINE,
                                      "archs": {"sass": [FAKE_LINE]},
                                      "import": {"ok": False, "error": FAKE_LINE, "traceback": FAKE_LINE}}]},
        "cuda_toolkit": {"nvcc_on_path": f"/bin/{FAKE_LINE}", "cuda_home": FAKE_LINE},
        "compiler": {"version": FAKE_LINE},
    }  # fmt: skip
    findings, extra = run_checks(facts, offline=True)
    extra["wheel_lookup"] = FAKE_LINE
    text = report.render_text(facts, findings, extra)
    assert not raw_hidden(text), raw_hidden(text)
    assert text.count("\\x1b[2K") >= 5
    doc = report.render_json(facts, findings, extra, 1)
    assert not raw_hidden(doc.replace("\n", "")) and json.loads(doc)["facts"]["compiler"]["version"] == FAKE_LINE


# --------------------------------------------------------------------------- 4. no traceback, within a deadline


def test_bad_utf8_on_stdin_is_read_not_refused():
    p = doctor("--explain", "-", input_bytes=b"\xff\xfe nvcc was not found \xc3\x28 \x1b[2K")
    out, err = p.stdout.decode(), p.stderr.decode()
    assert p.returncode == 1 and "nvcc-missing" in out and "Traceback" not in err and not raw_hidden(out)


def test_bad_utf8_in_the_argument_is_shown_escaped():
    p = subprocess.run([sys.executable, "-m", "mamba_ssm.doctor", "--explain", b"No such file or directory: '\xff\x1b/bin/nvcc'"],
                       env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, timeout=60, check=False)  # fmt: skip
    out = p.stdout.decode("utf-8", "replace")
    assert p.returncode == 1 and "nvcc-missing" in out and "Traceback" not in p.stderr.decode() and not raw_hidden(out)


def test_more_than_the_cap_on_stdin_is_a_clear_error():
    from mamba_ssm.doctor.cli import EXPLAIN_CAP

    p = doctor("--explain", "-", input_bytes=b"a" * (EXPLAIN_CAP + 1))
    err = p.stderr.decode()
    assert p.returncode == 3 and err.startswith("error: --explain -:") and "more than 64 MiB" in err, err


def _explain_fifo(fifo: Path, first_s: float, total_s: float, write: bytes = b"", every: float = 0):
    """--explain - on a FIFO (opened read-write here, so the open itself never blocks), with short deadlines; a
    writer thread sends ``write`` a byte every ``every`` seconds."""
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR)

    stop = threading.Event()

    def trickle():
        for i in range(len(write)):
            if stop.wait(every):  # the doctor has answered: never write to a descriptor number reused since
                return
            os.write(fd, write[i : i + 1])

    writer = threading.Thread(target=trickle, daemon=True)
    writer.start()
    code = (f"import sys; from mamba_ssm.doctor import cli; cli.EXPLAIN_FIRST_S = {first_s}; "
            f"cli.EXPLAIN_DEADLINE_S = {total_s}; sys.exit(cli.main())")  # fmt: skip
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-c", code, "--explain", "-"], stdin=fd, capture_output=True, timeout=30,
                           env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)  # fmt: skip
    finally:
        stop.set()
        writer.join()
        os.close(fd)
    return p, time.monotonic() - t0


def test_a_silent_fifo_on_stdin_ends_at_the_first_deadline(tmp_path):
    p, took = _explain_fifo(tmp_path / "log", 1.5, 60)
    err = p.stderr.decode()
    assert p.returncode == 3 and "stdin sent nothing within 1.5 s" in err and "Traceback" not in err, err
    assert took < 15


def test_a_trickling_fifo_on_stdin_ends_at_the_overall_deadline(tmp_path):
    p, took = _explain_fifo(tmp_path / "log", 5, 3, write=b"nvcc was not found" * 10, every=0.2)
    err = p.stderr.decode()
    assert p.returncode == 3 and "stdin did not end within 3 s" in err and "Traceback" not in err, err
    assert took < 15


@pytest.fixture(scope="module")
def hostile_index():
    with hostilekit.hostile_index() as url:
        yield url


CPU = _variant.from_values("2.13.0", cuda=None, cxx11abi=True)


@pytest.mark.parametrize(
    ("kind", "status", "says"),
    [
        ("trickle", "unreachable", "no answer within 2 s"),
        ("huge", "unreachable", "more than 16 MiB"),
        ("json", "no-match", "no prebuilt wheel"),
        ("deep", "no-match", "no prebuilt wheel"),
        ("nested", "no-match", "no prebuilt wheel"),
        ("evil", "no-match", "no prebuilt wheel"),
        ("nothttp", "unreachable", "cannot reach the wheel index"),
    ],
)
def test_a_hostile_index_ends_the_lookup_with_a_reason(hostile_index, kind, status, says):
    t0 = time.monotonic()
    out = _prebuilt.lookup(CPU, V, index_url=f"{hostile_index}/{kind}", env={}, machine="x86_64", glibc=(2, 36), timeout=2)
    took = time.monotonic() - t0
    assert out.status == status and says in out.line, out.line
    assert took < 2 * 2 + 3, took  # two pages at most, each within its deadline


@pytest.mark.parametrize("index", ["http://127.0.0.1:1/a b", "http://127.0.0.1:1/a\r\nX-Evil: 1", "https://[::1/", "http://\x1b[2J/"])
def test_an_index_url_urllib_will_not_send_is_a_reason_not_a_traceback(index):
    out = _prebuilt.lookup(CPU, V, index_url=index, env={}, machine="x86_64", glibc=(2, 36), timeout=2)
    assert out.status in {"unreachable", "refused", "no-match"}, out


def test_a_fifo_for_an_index_page_is_refused_not_opened(tmp_path):
    page = tmp_path / CPU.key / "index.html"
    page.parent.mkdir()
    os.mkfifo(page)
    out = _prebuilt.lookup(CPU, V, index_url=str(tmp_path), env={}, machine="x86_64", glibc=(2, 36), timeout=2)
    assert out.status == "unreachable" and "is not a regular file" in out.line, out.line
    assert stat.S_ISFIFO(os.lstat(page).st_mode)


# --- the printed requirements file, as pip's own parser reads it

# (torch.__version__, the distribution's version pip sees, torch.version.cuda): the kinds of torch people have
TORCHES = [("2.9.1+cu128", "2.9.1", "12.8"), ("2.13.0+cpu", "2.13.0+cpu", None), ("2.6.0+cu126", "2.6.0+cu126", "12.6"),
           ("2.5.0a0+e000cf0ad9.nv24.08", "2.5.0a0+e000cf0ad9.nv24.08", "12.6"), ("2.10.0a0+git5c48869", "2.10.0a0+git5c48869", "12.8")]  # fmt: skip
OPTION_INDEXES = [
    "https://x.example/w --index-url http://evil.example/simple/",
    "https://x.example/w -r /outside/evil.txt",
    "https://x.example/w --trusted-host evil.example --extra-index-url http://evil.example/",
    "https://x.example/${HOME}/w",
    "https://x.example/w\\",
    "https://x.example/w #comment",
    "-r/outside/evil.txt",
    "/a/local/folder",
]


def _torch_facts(module: str, dist: str | None, cuda: str | None) -> dict:
    v = _variant.from_values(module, cuda=cuda, cxx11abi=not module.startswith("2.6"))
    return {
        "python": {"tag": "cp311", "executable": "/venv/bin/python"},
        "platform": {"system": "Linux", "machine": "x86_64", "glibc": "2.35"},
        "torch": {"installed": True, "version": module, "dist_version": dist, "cuda": cuda, "hip": None,
                  "cxx11abi": v.cxx11abi, "gpus": []},
    }  # fmt: skip


def pip_reads(text: str) -> list[tuple[str, dict]]:
    """Each logical line of a requirements file as pip's own parser reads it: (its requirement, the options it sets)."""
    from pip._internal.req.req_file import get_line_parser, preprocess

    parse = get_line_parser(None)
    blank = vars(parse("")[1])
    out = []
    for _n, line in preprocess(text):
        args, opts = parse(line)
        out.append((args, {k: v for k, v in vars(opts).items() if v != blank[k]}))
    return out


@pytest.mark.parametrize("line", ["upstream", "checkout"])
@pytest.mark.parametrize(("module", "dist", "cuda"), TORCHES)
def test_pip_reads_only_the_options_the_doctor_meant(line, module, dist, cuda):
    """Every printed file, fed to pip's requirements parser: one option (--extra-index-url, the cell's page under the
    index given), the installed torch pinned as pip sees it, the line's wheels; nothing else."""
    from mamba_ssm.doctor.requirements import NoCell, requirements

    try:
        text = requirements(line, _torch_facts(module, dist, cuda), "https://x.example/w")
    except NoCell as e:
        assert str(e).startswith("no wheel of"), e  # this line builds no cell for that torch: said, nothing printed
        return
    read = pip_reads(text)
    options = [opts for args, opts in read if not args]
    assert len(options) == 1 and list(options[0]) == ["extra_index_urls"], read
    [page] = options[0]["extra_index_urls"]
    assert page.startswith("https://x.example/w/") and guard.is_web_url(page), page
    reqs = [args for args, opts in read if args]
    assert not [opts for args, opts in read if args and opts], read  # no per-requirement options either
    assert reqs[0] == f"torch=={dist}" and len(reqs) >= 2, reqs


@pytest.mark.parametrize("value", OPTION_INDEXES)
@pytest.mark.parametrize("where", ["--index", "MAMBA_WHEEL_INDEX"])
def test_an_index_that_is_not_one_url_is_refused_naming_it(where, value, monkeypatch):
    from mamba_ssm.doctor.requirements import BadIndex, requirements

    facts = _torch_facts("2.14.1+cu130", "2.14.1", "13.0")
    if where == "--index":
        index = value
    else:
        index = None
        monkeypatch.setenv("MAMBA_WHEEL_INDEX", value)
    with pytest.raises(BadIndex) as err:
        requirements("upstream", facts, index)
    assert where in str(err.value) and "not one http(s) URL" in str(err.value), err.value


@pytest.mark.parametrize("version", ["2.8.0+cpu\u0661\u0662", "2.8.0+\u212apu", "2.8.0 ", "2.8.0+cpu\n--index-url http://e/"])
def test_a_torch_version_that_is_not_ascii_pep440_is_refused(version):
    from mamba_ssm.doctor.requirements import NoCell, requirements

    for facts in (_torch_facts("2.8.0+cpu", "2.8.0+cpu", None), ):
        bad_module = {**facts, "torch": {**facts["torch"], "version": version}}
        bad_dist = {**facts, "torch": {**facts["torch"], "dist_version": version}}
        for bad in (bad_module, bad_dist):
            with pytest.raises(NoCell) as err:
                requirements("checkout", bad)
            assert "is not a version" in str(err.value), err.value
